// When x_backprop is written with non-temporal (streaming) stores, which skip reading each
// cache line before it is written and leave the caches to x and y_backprop, but put
// x_backprop itself out of reach of whatever reads it next.
#ifndef TF_FBN_OPS_CC_CORE_STREAMING_STORES_H_
#define TF_FBN_OPS_CC_CORE_STREAMING_STORES_H_

#include <cstdint>

namespace fbn {

// Bytes of the largest cache the calling CPU has (the L3 of its core complex on AMD, the
// shared L3 on Intel, the system cache or L2 on Arm), read once from Linux's sysfs, else from
// sysconf; kUnknownCacheBytes where neither says.
int64_t LastLevelCacheBytes();
constexpr int64_t kUnknownCacheBytes = int64_t{16} << 20;

// A call streams x_backprop once x, y_backprop and x_backprop together take more than this
// many bytes (and its stores fill whole lines, and x_backprop is not y_backprop's buffer: see
// bn_grad_cpu.cc). Measured through TensorFlow, where a call's x_backprop is a recycled buffer:
//   - AMD's L3 (per core complex) feeds a core at several times DRAM's speed, and x_backprop
//     written through it is still there for the next call: stream only beyond the L3;
//   - Intel's L3 feeds a core at about DRAM's speed, so each line read before it is written
//     costs what a DRAM read does: stream from kIntelStreamingBytes (x_backprop of 4 MiB) on,
//     as on other CPUs.
// TF_FBN_OPS_STREAMING_MIB=<MiB> sets the threshold instead (benchmarks; 0 streams always).
int64_t StreamingFootprintBytes();
constexpr int64_t kIntelStreamingBytes = int64_t{12} << 20;

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_STREAMING_STORES_H_
