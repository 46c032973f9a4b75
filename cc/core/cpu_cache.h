// The size of this machine's last-level cache, which decides how x_backprop is written.
#ifndef TF_FBN_OPS_CC_CORE_CPU_CACHE_H_
#define TF_FBN_OPS_CC_CORE_CPU_CACHE_H_

#include <cstdint>

namespace fbn {

// Bytes of the largest cache the calling CPU has (the L3 of its core complex on AMD, the
// shared L3 on Intel, the system cache or L2 on Arm), read once from Linux's sysfs, else from
// sysconf; kUnknownCacheBytes where neither says.
int64_t LastLevelCacheBytes();

constexpr int64_t kUnknownCacheBytes = int64_t{16} << 20;

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_CPU_CACHE_H_
