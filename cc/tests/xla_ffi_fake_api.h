// A stand-in for the runtime's side of XLA's FFI C API (xla/ffi/api/c_api.h), just enough to
// call the handlers in cc/xla_ffi/ directly, without XLA: errors, the stream, device memory, the
// intra-op thread pool, and call frames built by hand. The handlers then run in a plain test
// program under the sanitizers. What it cannot show is that XLA builds its frames the same way;
// the JAX check of `make test` runs the handlers in a real XLA for that.
//
// Every API function the fake implements checks the struct_size its caller filled in, so a
// handler compiled against other headers than the fake fails loudly instead of reading past a
// struct.
#ifndef TF_FBN_OPS_CC_TESTS_XLA_FFI_FAKE_API_H_
#define TF_FBN_OPS_CC_TESTS_XLA_FFI_FAKE_API_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "xla/ffi/api/c_api.h"

namespace fbn {
namespace testing {

// XLA's intra-op pool in miniature: `threads` workers taking tasks in order. A task may still
// be queued when the handler that scheduled it has returned (FfiParallelFor's late tasks);
// WaitIdle and the destructor run every task to its end.
class FakeThreadPool {
 public:
  explicit FakeThreadPool(int threads);
  ~FakeThreadPool();
  FakeThreadPool(const FakeThreadPool&) = delete;
  FakeThreadPool& operator=(const FakeThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()); }
  void Schedule(XLA_FFI_Task* task, void* data);
  // Returns once every task scheduled so far has finished.
  void WaitIdle();
  // Tasks scheduled since construction.
  int64_t scheduled();

 private:
  void Work();

  std::mutex mutex_;
  std::condition_variable work_ready_, idle_;
  std::deque<std::pair<XLA_FFI_Task*, void*>> queue_;
  int64_t unfinished_ = 0;
  int64_t scheduled_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// Device memory as the fake hands it out: through `allocate`/`release` when set (the GPU test
// passes the emulator's cudaMalloc/cudaFree), else aligned host memory.
struct FakeMemory {
  void* (*allocate)(size_t bytes) = nullptr;  // nullptr: failure
  void (*release)(void* pointer) = nullptr;
};

}  // namespace testing
}  // namespace fbn

// The per-call state a handler reaches through XLA_FFI_CallFrame::ctx. c_api.h leaves the type
// opaque for each runtime to define; this is the fake's.
struct XLA_FFI_ExecutionContext {
  // ThreadPool_NumThreads and _Schedule fail without a pool, as XLA's do off its CPU backend.
  fbn::testing::FakeThreadPool* thread_pool = nullptr;
  // A pool that reports its threads but refuses every task (the FFI then runs them inline).
  bool schedule_fails = false;

  void* stream = nullptr;     // what Stream_Get returns
  bool stream_fails = false;  // Stream_Get returns an error instead

  fbn::testing::FakeMemory memory;
  bool allocation_fails = false;  // DeviceMemory_Allocate returns RESOURCE_EXHAUSTED

  // What DeviceMemory_Allocate/_Free saw; guarded by `mutex`.
  std::mutex mutex;
  int allocations = 0;
  int frees = 0;
  int bad_frees = 0;  // a pointer not live, or a size other than the one allocated
  size_t last_size = 0;
  size_t last_alignment = 0;
  std::map<void*, size_t> live;  // pointer -> requested size
};

namespace fbn {
namespace testing {

// The fake API: the functions above, and an UNIMPLEMENTED error from every other one.
const XLA_FFI_Api* FakeApi();

// Errors created through FakeApi() and not yet destroyed: a handler that drops one leaks.
int LiveErrors();

// A handler's return value, read through the fake API (and destroyed).
struct FfiStatus {
  bool ok = true;
  XLA_FFI_Error_Code code = XLA_FFI_Error_Code_OK;
  std::string message;
};
FfiStatus TakeError(XLA_FFI_Error* error);

// A call frame built by hand, the way XLA lays one out for the execute stage: operands and
// results in order, attributes sorted by name whatever order they were added in. It owns every
// struct the frame points to, so it must outlive the call.
class CallFrame {
 public:
  explicit CallFrame(XLA_FFI_ExecutionContext* ctx) : ctx_(ctx) {}
  CallFrame(const CallFrame&) = delete;
  CallFrame& operator=(const CallFrame&) = delete;

  void Arg(XLA_FFI_DataType dtype, void* data, std::vector<int64_t> dims);
  void Ret(XLA_FFI_DataType dtype, void* data, std::vector<int64_t> dims);
  void Attr(const std::string& name, float value);
  void Attr(const std::string& name, bool value);
  void Attr(const std::string& name, double value);  // a type the handlers do not take

  // Calls `handler` with the frame, as XLA's execute stage does.
  FfiStatus Call(XLA_FFI_Handler* handler);
  // Calls it with the metadata extension, as XLA does when it registers a handler.
  FfiStatus QueryMetadata(XLA_FFI_Handler* handler, XLA_FFI_Metadata* metadata);

 private:
  struct Buffer {
    XLA_FFI_Buffer buffer;
    std::vector<int64_t> dims;
  };
  struct Scalar {
    XLA_FFI_ByteSpan name;
    XLA_FFI_Scalar scalar;
    alignas(8) unsigned char value[8];
  };
  void AddBuffer(std::deque<Buffer>* list, XLA_FFI_DataType dtype, void* data,
                 std::vector<int64_t> dims);
  Scalar& AddScalar(const std::string& name, XLA_FFI_DataType dtype);
  XLA_FFI_CallFrame* Build(XLA_FFI_Extension_Base* extension);

  XLA_FFI_ExecutionContext* ctx_;
  std::deque<Buffer> args_, rets_;             // deques: elements never move
  std::map<std::string, Scalar> attrs_;        // sorted by name
  std::vector<XLA_FFI_ArgType> arg_types_;
  std::vector<XLA_FFI_RetType> ret_types_;
  std::vector<XLA_FFI_AttrType> attr_types_;
  std::vector<void*> arg_pointers_, ret_pointers_, attr_pointers_;
  std::vector<XLA_FFI_ByteSpan*> attr_names_;
  XLA_FFI_CallFrame frame_{};
};

}  // namespace testing
}  // namespace fbn

#endif  // TF_FBN_OPS_CC_TESTS_XLA_FFI_FAKE_API_H_
