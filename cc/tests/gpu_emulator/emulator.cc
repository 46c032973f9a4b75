// The host emulator's runtime: the block scheduler (threads as ucontext fibers), its barriers,
// launch checks and the memory calls. What it is for and what it is not: cuda_runtime.h.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "cuda_runtime.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define FBN_EMU_ASAN 1
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

// Bounds of the section that holds every __shared__ variable (see cuda_runtime.h); weak, so a
// program without any still links.
extern "C" char __start_fbn_emu_shared[] __attribute__((weak));
extern "C" char __stop_fbn_emu_shared[] __attribute__((weak));

#if defined(__x86_64__)
// fbn_emu_switch(&from, to): saves the callee-saved registers on the running stack, stores its
// stack pointer in *from, and resumes the stack `to` saved the same way. swapcontext does that
// plus the floating-point control words and a signal-mask system call, which made the
// emulated test many times slower; nothing here changes the control words.
extern "C" void fbn_emu_switch(void** from, void* to);
asm(R"(
  .text
  .globl fbn_emu_switch
  .type fbn_emu_switch, @function
fbn_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size fbn_emu_switch, .-fbn_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");
#endif

namespace fbn_emu {
namespace {

// CUDA's limits for the GPUs the library is built for (sm_75 and newer).
constexpr unsigned kMaxGridX = 2147483647u;
constexpr unsigned kMaxGridYZ = 65535u;
constexpr unsigned kMaxBlockXY = 1024u;
constexpr unsigned kMaxBlockZ = 64u;
constexpr unsigned kMaxThreadsPerBlock = 1024u;
constexpr size_t kMaxDynamicSharedBytes = 48 * 1024;
// The kernels' frames are small; ASan's redzones make them larger.
constexpr size_t kFiberStackBytes = 256 * 1024;
constexpr unsigned char kPoison = 0xff;  // NaN in float, double, half and bfloat16

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "gpu emulator: %s (block %u,%u,%u thread %u,%u,%u)\n", what, blockIdx.x,
               blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
  std::abort();
}

enum class State { kReady, kAtBlockBarrier, kAtWarpBarrier, kDone };

struct Site {
  const char* file = nullptr;
  int line = 0;
  bool operator==(const Site& o) const {
    return line == o.line && (file == o.file || std::strcmp(file, o.file) == 0);
  }
  bool operator!=(const Site& o) const { return !(*this == o); }
};

// A saved execution context: a stack pointer (x86-64) or a ucontext (elsewhere).
#if defined(__x86_64__)
using Context = void*;
void SwitchContext(Context* from, Context* to) { fbn_emu_switch(from, *to); }
#else
using Context = ucontext_t;
void SwitchContext(Context* from, Context* to) { swapcontext(from, to); }
#endif

struct Fiber {
  Context context;
  char* stack = nullptr;
  uint3 index;
  State state = State::kReady;
  Site site;
  // This lane's values in warp exchanges, alternating: a lane can write exchange k + 2 only
  // after every lane has reached exchange k + 1, so after every lane has read exchange k.
  uint64_t mailbox[2] = {0, 0};
  unsigned exchanges = 0;
};

// The block being run, and the scheduler's own context to return to.
struct Block {
  std::vector<Fiber> fibers;
  Context scheduler;
  const std::function<void()>* body = nullptr;
  size_t current = 0;
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_bytes = 0;
};

thread_local Block* g_block = nullptr;
// Fiber stacks, kept from launch to launch.
thread_local std::vector<std::unique_ptr<char[]>> g_stacks;
thread_local cudaError_t g_last_error = cudaSuccess;

Fiber& Current() { return g_block->fibers[g_block->current]; }

// Switches from the running fiber back to the scheduler; `leaving` when it will not resume.
void SwitchToScheduler(bool leaving) {
  Fiber& self = Current();
#ifdef FBN_EMU_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(leaving ? nullptr : &fake_stack, g_block->scheduler_stack,
                                 g_block->scheduler_stack_bytes);
#else
  (void)leaving;
#endif
  SwitchContext(&self.context, &g_block->scheduler);
#ifdef FBN_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
}

void FiberMain() {
#ifdef FBN_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_block->scheduler_stack,
                                  &g_block->scheduler_stack_bytes);
#endif
  (*g_block->body)();
  Current().state = State::kDone;
  SwitchToScheduler(/*leaving=*/true);
  Die("a finished thread was resumed");
}

void Resume(size_t i) {
  Block& b = *g_block;
  b.current = i;
  threadIdx = b.fibers[i].index;
#ifdef FBN_EMU_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, b.fibers[i].stack, kFiberStackBytes);
#endif
  SwitchContext(&b.scheduler, &b.fibers[i].context);
#ifdef FBN_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
}

// Parks the running thread at a barrier until the scheduler releases it.
void Wait(State state, Site site) {
  Fiber& self = Current();
  self.state = state;
  self.site = site;
  SwitchToScheduler(/*leaving=*/false);
}

// Releases every warp whose lanes all wait at the same shuffle; true if any was released.
bool ReleaseWarps() {
  std::vector<Fiber>& f = g_block->fibers;
  bool released = false;
  for (size_t first = 0; first < f.size(); first += warpSize) {
    const size_t last = std::min(first + warpSize, f.size());
    if (f[first].state != State::kAtWarpBarrier) {
      for (size_t i = first; i < last; ++i) {
        if (f[i].state == State::kAtWarpBarrier) {
          threadIdx = f[i].index;
          Die("a warp shuffle without all 32 lanes (a lane returned or waits elsewhere)");
        }
      }
      continue;
    }
    for (size_t i = first; i < last; ++i) {
      if (f[i].state != State::kAtWarpBarrier || f[i].site != f[first].site) {
        threadIdx = f[i].index;
        Die("lanes of a warp reached different warp shuffles, or one returned");
      }
    }
    for (size_t i = first; i < last; ++i) f[i].state = State::kReady;
    released = true;
  }
  return released;
}

// Poisons every __shared__ variable. Not through memset: ASan would check the whole section,
// redzones between its variables included.
__attribute__((no_sanitize("address"))) void PoisonSharedMemory() {
  if (__start_fbn_emu_shared == nullptr) return;
  for (volatile char* p = __start_fbn_emu_shared; p < __stop_fbn_emu_shared; ++p) {
    *p = static_cast<char>(kPoison);
  }
}

// Makes f start at FiberMain on its own stack when it is first resumed.
void StartFiber(Fiber& f) {
  f.state = State::kReady;
  f.exchanges = 0;
#if defined(__x86_64__)
  // The frame fbn_emu_switch pops: six registers, then FiberMain as the return address,
  // placed so that FiberMain starts with the stack alignment of a call.
  const uintptr_t top =
      reinterpret_cast<uintptr_t>(f.stack + kFiberStackBytes) & ~uintptr_t{15};
  uint64_t* frame = reinterpret_cast<uint64_t*>(top - 64);
  for (int i = 0; i < 6; ++i) frame[i] = 0;
  frame[6] = reinterpret_cast<uint64_t>(&FiberMain);
  frame[7] = 0;
  f.context = frame;
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = kFiberStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, FiberMain, 0);
#endif
}

// Runs the block's threads to the end; `backwards`: ready threads resume from the last to the
// first (see cuda_runtime.h).
void RunBlock(Block& b, bool backwards) {
  PoisonSharedMemory();
  for (Fiber& f : b.fibers) StartFiber(f);
  const size_t n = b.fibers.size();
  for (;;) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = backwards ? n - 1 - k : k;
      if (b.fibers[i].state == State::kReady) Resume(i);
    }
    if (ReleaseWarps()) continue;
    size_t done = 0;
    const Fiber* waiting = nullptr;
    for (const Fiber& f : b.fibers) {
      if (f.state == State::kDone) ++done;
      if (f.state == State::kAtBlockBarrier && waiting == nullptr) waiting = &f;
    }
    if (done == b.fibers.size()) return;
    for (const Fiber& f : b.fibers) {
      if (f.state != State::kAtBlockBarrier || f.site != waiting->site) {
        threadIdx = f.index;
        Die(f.state == State::kDone
                ? "__syncthreads not reached by every thread of the block (one returned)"
                : "threads of a block wait at different __syncthreads");
      }
    }
    for (Fiber& f : b.fibers) f.state = State::kReady;
  }
}

cudaError_t CheckLaunch(dim3 grid, dim3 block, size_t shared) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  const bool ok = grid.x >= 1 && grid.y >= 1 && grid.z >= 1 && grid.x <= kMaxGridX &&
                  grid.y <= kMaxGridYZ && grid.z <= kMaxGridYZ && block.x >= 1 &&
                  block.y >= 1 && block.z >= 1 && block.x <= kMaxBlockXY &&
                  block.y <= kMaxBlockXY && block.z <= kMaxBlockZ &&
                  threads <= kMaxThreadsPerBlock && shared <= kMaxDynamicSharedBytes;
  return ok ? cudaSuccess : cudaErrorInvalidConfiguration;
}

}  // namespace

cudaError_t RunGrid(dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                    const std::function<void()>& thread_body) {
  if (g_block != nullptr) Die("a kernel launched a kernel (not supported)");
  const cudaError_t error = CheckLaunch(grid, block, dynamic_shared_bytes);
  if (error != cudaSuccess) return g_last_error = error;
  Block b;
  b.body = &thread_body;
  const size_t threads = size_t{block.x} * block.y * block.z;
  b.fibers.resize(threads);
  for (size_t i = 0; i < threads; ++i) {
    if (i == g_stacks.size()) g_stacks.emplace_back(new char[kFiberStackBytes]);
    b.fibers[i].stack = g_stacks[i].get();
    b.fibers[i].index = uint3{static_cast<unsigned>(i % block.x),
                              static_cast<unsigned>(i / block.x % block.y),
                              static_cast<unsigned>(i / block.x / block.y)};
  }
  g_block = &b;
  gridDim = grid;
  blockDim = block;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = uint3{x, y, z};
        RunBlock(b, (x + y + z) % 2 == 1);
      }
    }
  }
  g_block = nullptr;
  return cudaSuccess;
}

void BlockBarrier(const char* file, int line) {
  if (g_block == nullptr) Die("__syncthreads outside a kernel");
  Wait(State::kAtBlockBarrier, Site{file, line});
}

uint64_t WarpShuffle(unsigned mask, uint64_t bits, int source_lane, const char* file, int line) {
  if (g_block == nullptr) Die("warp shuffle outside a kernel");
  if (mask != 0xffffffffu) Die("warp shuffle with a partial mask (not emulated)");
  if (g_block->fibers.size() % warpSize != 0) Die("warp shuffle in a block of partial warps");
  if (source_lane < 0 || source_lane >= warpSize) Die("warp shuffle from a lane outside the warp");
  const size_t self = g_block->current;
  Fiber& source = g_block->fibers[self / warpSize * warpSize + source_lane];
  const unsigned slot = g_block->fibers[self].exchanges++ % 2;
  g_block->fibers[self].mailbox[slot] = bits;
  Wait(State::kAtWarpBarrier, Site{file, line});  // every lane has written
  return source.mailbox[slot];
}

}  // namespace fbn_emu

// ---- The runtime API: one emulated device, host memory, synchronous streams. ----

// FBN_EMU_MACHINE pretends this machine lacks what a GPU program needs, so that the way the GPU
// test decides to skip or fail is itself tested: "no-driver" (no NVIDIA driver at all),
// "no-device" (a driver but no GPU), "old-driver" (a driver older than this runtime).
static bool MachineIs(const char* what) {
  const char* set = std::getenv("FBN_EMU_MACHINE");
  return set != nullptr && std::strcmp(set, what) == 0;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 0;
  if (MachineIs("no-driver") || MachineIs("old-driver")) return cudaErrorInsufficientDriver;
  if (MachineIs("no-device")) return cudaErrorNoDevice;
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int /*device*/) {
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "host emulator");
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = MachineIs("no-driver") ? 0 : MachineIs("old-driver") ? 12040 : 13000;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  // 256-byte aligned, as cudaMalloc's memory is; a zero-byte request still gets a pointer.
  *pointer = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (*pointer == nullptr) return cudaErrorMemoryAllocation;
  std::memset(*pointer, fbn_emu::kPoison, bytes);
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = *total_bytes = size_t{1} << 32;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind /*kind*/) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t /*stream*/) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* pointer, int value, size_t bytes) {
  if (bytes != 0) std::memset(pointer, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t /*stream*/) {
  return cudaMemset(pointer, value, bytes);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned /*flags*/) {
  static char token;
  *stream = reinterpret_cast<cudaStream_t>(&token);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t /*stream*/) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t /*stream*/) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

struct CUevent_st {
  std::chrono::steady_clock::time_point recorded;
};

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st{std::chrono::steady_clock::now()};
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t /*stream*/) {
  event->recorded = std::chrono::steady_clock::now();
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t /*event*/) { return cudaSuccess; }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = std::chrono::duration<float, std::milli>(end->recorded - start->recorded).count();
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t error = fbn_emu::g_last_error;
  fbn_emu::g_last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() { return fbn_emu::g_last_error; }

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorNotReady: return "device not ready";
  }
  return "unknown error";
}
