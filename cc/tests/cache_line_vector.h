// Element buffers that start on a cache line, as TensorFlow allocates tensors, for the core's
// tests and benchmarks. The kernels stream x_backprop (or y) only where it starts on a line, and
// a plain std::vector of megabytes starts 16 bytes into a page: its streamed stores would go
// untested, and every vector load of the benchmarks would straddle two lines.
#ifndef TF_FBN_OPS_CC_TESTS_CACHE_LINE_VECTOR_H_
#define TF_FBN_OPS_CC_TESTS_CACHE_LINE_VECTOR_H_

#include <cstddef>
#include <new>
#include <vector>

namespace fbn {

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64}));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  bool operator==(const CacheLineAllocator&) const { return true; }
  bool operator!=(const CacheLineAllocator&) const { return false; }
};

template <typename T>
using CacheLineVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace fbn

#endif  // TF_FBN_OPS_CC_TESTS_CACHE_LINE_VECTOR_H_
