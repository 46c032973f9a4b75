// Per-call scratch of the CPU kernels, reused across calls on the same calling thread so that a
// call does not page-fault a fresh allocation (a megabyte of partial sums would come from mmap,
// fresh pages every call). One buffer per (element type, slot); a core call never runs inside
// another on one thread, and each keeps to its own slots. Contents are whatever the last call
// left: a call writes every entry it reads.
#ifndef TF_FBN_OPS_CC_CORE_CPU_CALL_SCRATCH_H_
#define TF_FBN_OPS_CC_CORE_CPU_CALL_SCRATCH_H_

#include <cstddef>
#include <vector>

namespace fbn {

enum ScratchSlot {
  // The gradient (bn_grad_cpu_*.cc).
  kPartialsSlot,
  kInvStdSlot,
  kChannelSlot,
  kColumnSlot,
  kSumsSlot,
  // The forward (bn_forward_cpu.cc).
  kForwardPartsSlot,
  kForwardColumnsSlot,
  kForwardChannelsSlot,
};

template <typename E, ScratchSlot kSlot>
E* CallScratch(size_t size) {
  thread_local std::vector<E> scratch;
  if (scratch.size() < size) scratch.resize(size);
  return scratch.data();
}

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_CORE_CPU_CALL_SCRATCH_H_
