// The fake XLA FFI runtime: see xla_ffi_fake_api.h.
#include "cc/tests/xla_ffi_fake_api.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// The runtime's error object; c_api.h leaves it opaque. The handlers see it only through
// Error_Create, _GetMessage and _Destroy.
struct XLA_FFI_Error {
  XLA_FFI_Error_Code code;
  std::string message;
};

namespace fbn {
namespace testing {
namespace {

std::atomic<int> g_live_errors{0};

// A caller built against other headers than ours would fill in another size: stop there, the
// rest of its struct cannot be trusted.
template <typename Args>
void CheckSize(const Args* args, size_t expected, const char* name) {
  if (args->struct_size != expected) {
    std::fprintf(stderr, "fake XLA FFI: %s.struct_size is %zu, expected %zu\n", name,
                 args->struct_size, expected);
    std::abort();
  }
}
#define FBN_CHECK_SIZE(type, args) CheckSize(args, type##_STRUCT_SIZE, #type)

XLA_FFI_Error* NewError(XLA_FFI_Error_Code code, std::string message) {
  ++g_live_errors;
  return new XLA_FFI_Error{code, std::move(message)};
}

XLA_FFI_Error* ErrorCreate(XLA_FFI_Error_Create_Args* args) {
  FBN_CHECK_SIZE(XLA_FFI_Error_Create_Args, args);
  return NewError(args->errc, args->message != nullptr ? args->message : "");
}

void ErrorGetMessage(XLA_FFI_Error_GetMessage_Args* args) {
  FBN_CHECK_SIZE(XLA_FFI_Error_GetMessage_Args, args);
  args->message = args->error->message.c_str();
}

void ErrorDestroy(XLA_FFI_Error_Destroy_Args* args) {
  FBN_CHECK_SIZE(XLA_FFI_Error_Destroy_Args, args);
  --g_live_errors;
  delete args->error;
}

XLA_FFI_Error* StreamGet(XLA_FFI_Stream_Get_Args* args) {
  FBN_CHECK_SIZE(XLA_FFI_Stream_Get_Args, args);
  if (args->ctx->stream_fails) {
    return NewError(XLA_FFI_Error_Code_FAILED_PRECONDITION, "fake: no stream in this context");
  }
  args->stream = args->ctx->stream;
  return nullptr;
}

// The most XLA's DeviceMemory_Allocate grants.
constexpr size_t kMaxAlignment = 16;

bool IsPowerOfTwo(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

XLA_FFI_Error* DeviceMemoryAllocate(XLA_FFI_DeviceMemory_Allocate_Args* args) {
  FBN_CHECK_SIZE(XLA_FFI_DeviceMemory_Allocate_Args, args);
  XLA_FFI_ExecutionContext& ctx = *args->ctx;
  std::lock_guard<std::mutex> lock(ctx.mutex);
  ctx.last_size = args->size;
  ctx.last_alignment = args->alignment;
  if (ctx.allocation_fails) {
    return NewError(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                    "fake: out of device memory for " + std::to_string(args->size) + " bytes");
  }
  // XLA's own rule: a power of two no larger than 16 bytes (its allocator's promise), whatever
  // the allocator behind it would give.
  if (!IsPowerOfTwo(args->alignment) || args->alignment > kMaxAlignment) {
    return NewError(XLA_FFI_Error_Code_INVALID_ARGUMENT,
                    "fake: unsupported alignment " + std::to_string(args->alignment));
  }
  void* data = nullptr;
  if (ctx.memory.allocate != nullptr) {
    data = ctx.memory.allocate(args->size);
  } else {
    const size_t alignment = std::max<size_t>(args->alignment, alignof(std::max_align_t));
    data = std::aligned_alloc(alignment, (args->size + alignment - 1) / alignment * alignment +
                                             alignment);
  }
  if (data == nullptr) {
    return NewError(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "fake: allocation failed");
  }
  if (reinterpret_cast<uintptr_t>(data) % args->alignment != 0) {
    // The device allocator's own alignment is less than asked: XLA's would not return this.
    if (ctx.memory.release != nullptr) ctx.memory.release(data);
    return NewError(XLA_FFI_Error_Code_INVALID_ARGUMENT, "fake: alignment beyond the allocator's");
  }
  ++ctx.allocations;
  ctx.live[data] = args->size;
  args->data = data;
  return nullptr;
}

XLA_FFI_Error* DeviceMemoryFree(XLA_FFI_DeviceMemory_Free_Args* args) {
  FBN_CHECK_SIZE(XLA_FFI_DeviceMemory_Free_Args, args);
  XLA_FFI_ExecutionContext& ctx = *args->ctx;
  std::lock_guard<std::mutex> lock(ctx.mutex);
  const auto it = ctx.live.find(args->data);
  if (it == ctx.live.end() || it->second != args->size) {
    ++ctx.bad_frees;
    return NewError(XLA_FFI_Error_Code_INVALID_ARGUMENT, "fake: freeing memory it did not give");
  }
  ctx.live.erase(it);
  ++ctx.frees;
  if (ctx.memory.release != nullptr) {
    ctx.memory.release(args->data);
  } else {
    std::free(args->data);
  }
  return nullptr;
}

XLA_FFI_Error* ThreadPoolSchedule(XLA_FFI_ThreadPool_Schedule_Args* args) {
  FBN_CHECK_SIZE(XLA_FFI_ThreadPool_Schedule_Args, args);
  if (args->ctx->thread_pool == nullptr || args->ctx->schedule_fails) {
    return NewError(XLA_FFI_Error_Code_UNAVAILABLE, "fake: no thread pool takes tasks");
  }
  args->ctx->thread_pool->Schedule(args->task, args->data);
  return nullptr;
}

XLA_FFI_Error* ThreadPoolNumThreads(XLA_FFI_ThreadPool_NumThreads_Args* args) {
  FBN_CHECK_SIZE(XLA_FFI_ThreadPool_NumThreads_Args, args);
  if (args->ctx->thread_pool == nullptr) {
    return NewError(XLA_FFI_Error_Code_UNAVAILABLE, "fake: no thread pool");
  }
  *args->num_threads = args->ctx->thread_pool->threads();
  return nullptr;
}

// Every function the handlers have no business calling.
template <typename Args>
XLA_FFI_Error* Unimplemented(Args* /*args*/) {
  return NewError(XLA_FFI_Error_Code_UNIMPLEMENTED, "fake: API function not implemented");
}

XLA_FFI_Api MakeApi() {
  XLA_FFI_Api api{};
  api.struct_size = XLA_FFI_Api_STRUCT_SIZE;
  api.api_version = XLA_FFI_Api_Version{XLA_FFI_Api_Version_STRUCT_SIZE, nullptr,
                                        XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR};
  api.XLA_FFI_Error_Create = ErrorCreate;
  api.XLA_FFI_Error_GetMessage = ErrorGetMessage;
  api.XLA_FFI_Error_Destroy = ErrorDestroy;
  api.XLA_FFI_Handler_Register = Unimplemented<XLA_FFI_Handler_Register_Args>;
  api.XLA_FFI_Stream_Get = StreamGet;
  api.XLA_FFI_Type_Register = Unimplemented<XLA_FFI_Type_Register_Args>;
  api.XLA_FFI_ExecutionContext_Get = Unimplemented<XLA_FFI_ExecutionContext_Get_Args>;
  api.XLA_FFI_State_Set = Unimplemented<XLA_FFI_State_Set_Args>;
  api.XLA_FFI_State_Get = Unimplemented<XLA_FFI_State_Get_Args>;
  api.XLA_FFI_DeviceMemory_Allocate = DeviceMemoryAllocate;
  api.XLA_FFI_DeviceMemory_Free = DeviceMemoryFree;
  api.XLA_FFI_ThreadPool_Schedule = ThreadPoolSchedule;
  api.XLA_FFI_ThreadPool_NumThreads = ThreadPoolNumThreads;
  api.XLA_FFI_Future_Create = Unimplemented<XLA_FFI_Future_Create_Args>;
  api.XLA_FFI_Future_SetAvailable = Unimplemented<XLA_FFI_Future_SetAvailable_Args>;
  api.XLA_FFI_Future_SetError = Unimplemented<XLA_FFI_Future_SetError_Args>;
  api.XLA_FFI_RunId_Get = Unimplemented<XLA_FFI_RunId_Get_Args>;
  api.XLA_FFI_DeviceOrdinal_Get = Unimplemented<XLA_FFI_DeviceOrdinal_Get_Args>;
  return api;
}

}  // namespace

// ---- FakeThreadPool ----

FakeThreadPool::FakeThreadPool(int threads) {
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

FakeThreadPool::~FakeThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void FakeThreadPool::Schedule(XLA_FFI_Task* task, void* data) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(task, data);
    ++unfinished_;
    ++scheduled_;
  }
  work_ready_.notify_one();
}

void FakeThreadPool::WaitIdle() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return unfinished_ == 0; });
}

int64_t FakeThreadPool::scheduled() {
  std::lock_guard<std::mutex> lock(mutex_);
  return scheduled_;
}

// Workers leave only with the queue empty, so no task is lost at destruction.
void FakeThreadPool::Work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    const std::pair<XLA_FFI_Task*, void*> next = queue_.front();
    queue_.pop_front();
    lock.unlock();
    next.first(next.second);
    lock.lock();
    if (--unfinished_ == 0) idle_.notify_all();
  }
}

// ---- The API ----

const XLA_FFI_Api* FakeApi() {
  static const XLA_FFI_Api api = MakeApi();
  return &api;
}

int LiveErrors() { return g_live_errors.load(); }

FfiStatus TakeError(XLA_FFI_Error* error) {
  FfiStatus status;
  if (error == nullptr) return status;
  XLA_FFI_Error_GetMessage_Args get{XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE, nullptr, error,
                                    nullptr};
  FakeApi()->XLA_FFI_Error_GetMessage(&get);
  status.ok = false;
  status.code = error->code;
  status.message = get.message;
  XLA_FFI_Error_Destroy_Args destroy{XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, nullptr, error};
  FakeApi()->XLA_FFI_Error_Destroy(&destroy);
  return status;
}

// ---- CallFrame ----

void CallFrame::AddBuffer(std::deque<Buffer>* list, XLA_FFI_DataType dtype, void* data,
                          std::vector<int64_t> dims) {
  Buffer& b = list->emplace_back();
  b.dims = std::move(dims);
  b.buffer.struct_size = XLA_FFI_Buffer_STRUCT_SIZE;
  b.buffer.extension_start = nullptr;
  b.buffer.dtype = dtype;
  b.buffer.data = data;
  b.buffer.rank = static_cast<int64_t>(b.dims.size());
  b.buffer.dims = b.dims.data();
}

void CallFrame::Arg(XLA_FFI_DataType dtype, void* data, std::vector<int64_t> dims) {
  AddBuffer(&args_, dtype, data, std::move(dims));
}

void CallFrame::Ret(XLA_FFI_DataType dtype, void* data, std::vector<int64_t> dims) {
  AddBuffer(&rets_, dtype, data, std::move(dims));
}

CallFrame::Scalar& CallFrame::AddScalar(const std::string& name, XLA_FFI_DataType dtype) {
  Scalar& s = attrs_[name];
  const std::string& key = attrs_.find(name)->first;  // the map's copy lives as long as s
  s.name = XLA_FFI_ByteSpan{key.data(), key.size()};
  s.scalar = XLA_FFI_Scalar{dtype, s.value};
  std::memset(s.value, 0, sizeof(s.value));
  return s;
}

void CallFrame::Attr(const std::string& name, float value) {
  std::memcpy(AddScalar(name, XLA_FFI_DataType_F32).value, &value, sizeof(value));
}

void CallFrame::Attr(const std::string& name, bool value) {
  std::memcpy(AddScalar(name, XLA_FFI_DataType_PRED).value, &value, sizeof(value));
}

void CallFrame::Attr(const std::string& name, double value) {
  std::memcpy(AddScalar(name, XLA_FFI_DataType_F64).value, &value, sizeof(value));
}

XLA_FFI_CallFrame* CallFrame::Build(XLA_FFI_Extension_Base* extension) {
  arg_types_.assign(args_.size(), XLA_FFI_ArgType_BUFFER);
  ret_types_.assign(rets_.size(), XLA_FFI_RetType_BUFFER);
  attr_types_.assign(attrs_.size(), XLA_FFI_AttrType_SCALAR);
  arg_pointers_.clear();
  ret_pointers_.clear();
  attr_pointers_.clear();
  attr_names_.clear();
  for (Buffer& b : args_) arg_pointers_.push_back(&b.buffer);
  for (Buffer& b : rets_) ret_pointers_.push_back(&b.buffer);
  for (auto& [name, s] : attrs_) {
    attr_names_.push_back(&s.name);
    attr_pointers_.push_back(&s.scalar);
  }
  frame_ = XLA_FFI_CallFrame{};
  frame_.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame_.extension_start = extension;
  frame_.api = FakeApi();
  frame_.ctx = ctx_;
  frame_.stage = XLA_FFI_ExecutionStage_EXECUTE;
  frame_.args = XLA_FFI_Args{XLA_FFI_Args_STRUCT_SIZE, nullptr,
                             static_cast<int64_t>(args_.size()), arg_types_.data(),
                             arg_pointers_.data()};
  frame_.rets = XLA_FFI_Rets{XLA_FFI_Rets_STRUCT_SIZE, nullptr,
                             static_cast<int64_t>(rets_.size()), ret_types_.data(),
                             ret_pointers_.data()};
  frame_.attrs = XLA_FFI_Attrs{XLA_FFI_Attrs_STRUCT_SIZE, nullptr,
                               static_cast<int64_t>(attrs_.size()), attr_types_.data(),
                               attr_names_.data(), attr_pointers_.data()};
  frame_.future = nullptr;
  return &frame_;
}

FfiStatus CallFrame::Call(XLA_FFI_Handler* handler) {
  XLA_FFI_CallFrame* frame = Build(nullptr);
  FfiStatus status = TakeError(handler(frame));
  if (status.ok && frame->future != nullptr) {
    // The handlers are synchronous; a future would need an API the fake lacks.
    return FfiStatus{false, XLA_FFI_Error_Code_INTERNAL, "fake: handler returned a future"};
  }
  return status;
}

FfiStatus CallFrame::QueryMetadata(XLA_FFI_Handler* handler, XLA_FFI_Metadata* metadata) {
  *metadata = XLA_FFI_Metadata{};
  metadata->struct_size = XLA_FFI_Metadata_STRUCT_SIZE;
  XLA_FFI_Metadata_Extension extension{};
  extension.extension_base.struct_size = XLA_FFI_Metadata_Extension_STRUCT_SIZE;
  extension.extension_base.type = XLA_FFI_Extension_Metadata;
  extension.extension_base.next = nullptr;
  extension.metadata = metadata;
  return TakeError(handler(Build(&extension.extension_base)));
}

}  // namespace testing
}  // namespace fbn
