// When x_backprop is written with non-temporal (streaming) stores, which skip reading each
// cache line before it is written and leave the caches to x and y_backprop, but put
// x_backprop itself out of reach of whatever reads it next.
#ifndef TF_FBN_OPS_CC_CORE_CPU_STREAMING_STORES_H_
#define TF_FBN_OPS_CC_CORE_CPU_STREAMING_STORES_H_

#include <cstdint>

namespace fbn {

// Bytes of the largest cache the calling core shares (the L3 of its core complex on AMD, the
// shared L3 on Intel, the system cache or L2 on Arm), read once from Linux's sysfs, else from
// sysconf; kUnknownCacheBytes where neither says.
int64_t LastLevelCacheBytes();
constexpr int64_t kUnknownCacheBytes = int64_t{16} << 20;

// Bytes of the calling core's own L2 (a data or unified cache of level 2 in sysfs), 0 where
// Linux does not say.
int64_t SecondLevelCacheBytes();

// A unit of work whose x and y_backprop take at most this many bytes is meant to stay in a
// core's L2 between its reads (about half of a 1-2 MiB L2; the fused units of bn_grad_cpu_*.cc and
// the exact family's strips).
constexpr int64_t kFusedUnitBytes = int64_t{1} << 20;

// A call streams x_backprop once x, y_backprop and x_backprop together take more than this
// many bytes (and its stores fill whole lines, and x_backprop is not y_backprop's buffer: see
// bn_grad_cpu_call.h). Beyond the private caches an ordinary store first reads its line from
// the L3 or DRAM and later evicts x or y_backprop to make room; a streamed one leaves
// x_backprop in DRAM, where the next layer reads it. Beside a core complex's L3 (AMD):
// kStreamingBytes, or the last-level cache where it is smaller; measured through TensorFlow,
// where a call's x_backprop is a recycled buffer, 12 MiB was the faster rule on an AMD EPYC
// whose core complex shares a 32 MiB L3 (docs/performance.md). Beside a socket-wide L3 (Intel):
// kSocketWideStreamingBytes, chosen on calls fed the call before's x_backprop, as a network's
// layers are: on an Intel Xeon (480 MiB L3 as its guest sees it) 18-48 MiB of tensors stored
// took 0.72-1.03x the time of streamed chained, 0.91-1.04x on repeated calls, at one and two
// threads; at 73.5 MiB stored was up to 1.35x slower on repeated calls, at 147 MiB on both.
// TF_FBN_OPS_STREAMING_MIB=<MiB> sets the threshold instead (benchmarks; 0 streams always).
int64_t StreamingFootprintBytes();
constexpr int64_t kStreamingBytes = int64_t{12} << 20;
constexpr int64_t kSocketWideStreamingBytes = int64_t{64} << 20;

// Whether an output may go out with non-temporal stores at all: not in place (each of its lines
// was just read as the input's and is in the cache), and only where it starts a cache line and
// each of its rows (or planes) of row_bytes fills whole lines: only aligned vectors stream, and
// a line written partly by streaming stores and partly by ordinary ones costs more than either
// (measured: the gradient's channels-first 7x7 planes 10-18 % slower streamed). Whether it
// should is the footprint's to say (below).
constexpr int64_t kCacheLineBytes = 64;
inline bool CanStream(const void* output, const void* input, int64_t row_bytes) {
  return output != input && reinterpret_cast<uintptr_t>(output) % kCacheLineBytes == 0 &&
         row_bytes % kCacheLineBytes == 0;
}

// Whether stores at `out` could hold up the loads that follow them at `in` + m·step, |m| <
// streams (streams read side by side, `step` bytes apart): a load whose address agrees in its
// low 12 bits with a store not yet written waits for it (4 KiB aliasing), a streamed store
// longest. On an AMD EPYC (Zen 3) channels-last inference, whose eight stripes store
// x_backprop between their loads, ran at half speed streamed where x_backprop and y_backprop
// stood at one offset in their pages (core_bench --page-offsets 64,64,64 against
// 64,1408,2752), and the exact family's x_backprop by groups of four rows 1.3-1.6x as long
// with ordinary stores (cpu_loops_impl.h, kExactDxGroupWhereStoresAlias); on a Zen 4 its
// inference rows written as they sum 1.6-1.7x as long streamed (HoldExactDxRows).
inline bool StoresAliasLoads(const void* out, const void* in, int64_t step, int streams) {
  constexpr int64_t kPage = 4096, kNear = 2 * kCacheLineBytes;
  const int64_t offset = static_cast<int64_t>(reinterpret_cast<uintptr_t>(in) -
                                              reinterpret_cast<uintptr_t>(out));
  for (int64_t m = 1 - streams; m < streams; ++m) {
    const int64_t gap = (offset + m * step) & (kPage - 1);
    if (gap < kNear || gap > kPage - kNear) return true;
  }
  return false;
}

// The address `bytes` on from p, for StoresAliasLoads (it may lie past the end of p's array,
// so it is never dereferenced, and is computed as an integer).
inline const void* BytesOn(const void* p, int64_t bytes) {
  return reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) +
                                       static_cast<uintptr_t>(bytes));
}

// Where a call may run on several threads, the forward streams y only once x and y together
// take more than three quarters of the last-level cache (or what TF_FBN_OPS_STREAMING_MIB
// sets). Below that, ordinary stores keep y in the L3 for its reader, and each core reads and
// writes its own lines there; streamed, every thread's y goes to DRAM, a bandwidth the cores
// share. On a Zen 5 with a 32 MiB L3 at two threads (core_bench, channels last and first), y
// stored was 1.2-1.7x as fast as streamed where x and y took 12.8-21 MB, even at 25.7 MB (last
// faster stored, first streamed) and 1.1-1.3x slower at 33.5 MB. At one thread streaming from
// kStreamingBytes stayed the faster rule (one core's traffic to the L3 is the limit there, and
// a store first reads its line), as it did for the gradient at one and two threads.
int64_t ParallelStreamingFootprintBytes();

// Whether the last-level cache is a whole socket's rather than a core complex's: larger than
// kCoreComplexCacheBytes, above every L3 of one core complex measured (AMD's 32 MiB). A
// socket-wide L3 (an Intel Xeon's: 105-480 MiB as its guests see it) is far larger than any
// call's tensors, and the next layer finds there what a call stored.
bool LastLevelCacheIsSocketWide();
constexpr int64_t kCoreComplexCacheBytes = int64_t{64} << 20;

// Where a call runs on one thread, the forward streams y once x and y together take more than
// this: StreamingFootprintBytes() beside a core complex's L3, ParallelStreamingFootprintBytes()
// beside a socket's. On an Intel Xeon with a 300 MiB L3 (one thread, TensorFlow's oneDNN
// forward alongside), y streamed from 12 MiB made repeated calls on one input faster but calls
// fed the call before's y slower, as a network's layers are: 0.67-0.94x oneDNN on the training
// of 6.4-16.8 MB tensors of 1024-2048 channels, against 1.06-1.41x with y stored
// (benchmarks/tf_kernels_interleaved.py --chain). Not yet measured that way on AMD.
int64_t ForwardStreamingFootprintBytes();

// What chooses how a call uses memory, never its bits: x_backprop (or y) is written with
// non-temporal stores where the call's tensors take more than streaming_footprint bytes (and
// its other conditions hold), and rows go RowOrder::kByGroups (cpu_loops.h) where the
// gradient's three tensors, or the forward's x, take at most grouped_bytes. (Measured on a Zen
// 5: the forward's y, evaluated in double, gains from groups up to x at the cache's size; the
// gradient's x_backprop, in float, gains less and lost where the call's bytes passed the
// cache.) exact_strips: the gradient's exact family (channels last, training) may read strips
// of columns, each element once at a stride, rather than blocks of rows twice in order
// (bn_grad_cpu_exact.cc, RunExactStrips). Strips pay where a strip stays in the core's L2 and the
// L3 is a core complex's: on a Zen 5 (1 MiB L2) strips took 0.79-1.03x the blocks' time; on a
// Zen 3 (512 KiB L2) 0.86-1.58x (about 1.2 in the median), and strips cut to fit that L2 up
// to 2.6x; beside an Intel Xeon's socket-wide L3 (2 MiB L2) 1.1-1.7x (core_bench
// --exact-schedule both).
struct MemoryRules {
  int64_t streaming_footprint;           // the gradient's x_backprop
  int64_t grouped_bytes;
  int64_t forward_streaming_footprint;   // the forward's y on one thread
  int64_t parallel_streaming_footprint;  // the forward's y on several threads
  bool exact_strips;
};
// The kernels' rules: {StreamingFootprintBytes(), LastLevelCacheBytes(),
// ForwardStreamingFootprintBytes(), ParallelStreamingFootprintBytes(),
// ExactStripsPay()}, streaming as above, groups where the reads fit the last-level cache as
// this machine reports its size, strips as above (tests and benchmarks pass others).
bool ExactStripsPay();
MemoryRules KernelMemoryRules();

// Orders the calling thread's non-temporal stores before its later stores, so that a thread
// that joins it sees them. Once per unit of work, never per row or run: a fence waits until the
// write-combining buffers have drained to memory (a fence after each 64-float run made the
// forward's channels-first inference on 8x8 planes four times as slow).
void FenceStreamingStores();

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_CPU_STREAMING_STORES_H_
