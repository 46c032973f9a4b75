#include "cc/runtime/retained_cpu_allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <iterator>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/logging.h"

namespace tensorflow {
namespace fbn_kernels {
namespace {

// Below this, malloc's arenas serve requests without returning them to the system.
constexpr size_t kMinRetainedOutputBytes = size_t{1} << 20;
// Enough for the x_backprop of repeated calls on the largest shapes users train with; memory
// beyond it goes back to the system. TF_FBN_OPS_RETAINED_MIB overrides it, 0 turning it off.
constexpr size_t kDefaultRetainedMiB = 256;

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t RetainedCapBytes() {
  const char* setting = std::getenv("TF_FBN_OPS_RETAINED_MIB");
  char* end = nullptr;
  const unsigned long long mib =
      setting == nullptr || *setting == '\0' ? kDefaultRetainedMiB
                                             : std::strtoull(setting, &end, 10);
  if (setting != nullptr && *setting != '\0' && *end != '\0') {
    LOG(WARNING) << "tf-fbn-ops: TF_FBN_OPS_RETAINED_MIB=\"" << setting
                 << "\" is not a whole number of MiB; keeping the default, "
                 << kDefaultRetainedMiB;
    return kDefaultRetainedMiB << 20;
  }
  return static_cast<size_t>(mib) << 20;
}

}  // namespace

RetainedCpuAllocator* RetainedCpuAllocator::Get() {
  static RetainedCpuAllocator* const instance = [] {
    const size_t cap = RetainedCapBytes();
    return cap == 0 ? nullptr : new RetainedCpuAllocator(cap);
  }();
  return instance;
}

void* RetainedCpuAllocator::AllocateRaw(size_t alignment, size_t num_bytes) {
  const size_t page = PageSize();
  if (alignment > page || num_bytes == 0) return nullptr;  // never asked for by the kernels
  const size_t bytes = (num_bytes + page - 1) / page * page;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = freed_.rbegin(); it != freed_.rend(); ++it) {  // most recently freed first
      if (it->bytes != bytes) continue;
      void* ptr = it->ptr;
      freed_.erase(std::next(it).base());
      freed_bytes_ -= bytes;
      live_.emplace(ptr, bytes);
      return ptr;
    }
  }
  void* ptr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ptr == MAP_FAILED) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  live_.emplace(ptr, bytes);
  return ptr;
}

void RetainedCpuAllocator::DeallocateRaw(void* ptr) {
  if (ptr == nullptr) return;
  std::vector<Block> released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not ours: nothing we may free
    freed_.push_back({ptr, it->second});
    freed_bytes_ += it->second;
    live_.erase(it);
    size_t drop = 0;
    while (freed_bytes_ > cap_) {
      freed_bytes_ -= freed_[drop].bytes;
      released.push_back(freed_[drop++]);
    }
    freed_.erase(freed_.begin(), freed_.begin() + drop);
  }
  for (const Block& block : released) munmap(block.ptr, block.bytes);
}

bool TensorflowAllocatorReturnsBlocks(OpKernelContext* ctx) {
  return ctx->device()->GetAllocator(AllocatorAttributes())->Name() == "cpu";
}

Status AllocateRetainedOutput(OpKernelContext* ctx, int index, DataType dtype,
                              const TensorShape& shape, Tensor** output) {
  RetainedCpuAllocator* const allocator = RetainedCpuAllocator::Get();
  const size_t bytes = static_cast<size_t>(shape.num_elements()) * DataTypeSize(dtype);
  if (allocator != nullptr && bytes >= kMinRetainedOutputBytes &&
      TensorflowAllocatorReturnsBlocks(ctx)) {
    Tensor tensor(allocator, dtype, shape);
    if (tensor.IsInitialized()) {
      ctx->set_output(index, tensor);
      *output = ctx->mutable_output(index);
      return OkStatus();
    }
  }
  return ctx->allocate_output(index, shape, output);
}

}  // namespace fbn_kernels
}  // namespace tensorflow
