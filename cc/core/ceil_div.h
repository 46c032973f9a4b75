// Integer division rounded up, and rounding up to a multiple: how the CPU and GPU schedules
// size their units and blocks.
#ifndef TF_FBN_OPS_CC_CORE_CEIL_DIV_H_
#define TF_FBN_OPS_CC_CORE_CEIL_DIV_H_

#include <cstdint>

namespace fbn {

constexpr int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int64_t RoundUp(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_CEIL_DIV_H_
