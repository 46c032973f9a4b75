#include "cc/core/cpu/streaming_stores.h"

#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fbn {
namespace {

// /sys/devices/system/cpu/cpu0/cache/index<i>/<name>, open for reading; null if absent.
std::FILE* OpenSysfsCacheFile(int index, const char* name) {
  const std::string path =
      "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/" + name;
  return std::fopen(path.c_str(), "r");
}

// /sys/devices/system/cpu/cpu0/cache/index<i>/size holds for example "32768K"; 0 if absent.
int64_t SysfsCacheBytes(int index) {
  std::FILE* file = OpenSysfsCacheFile(index, "size");
  if (file == nullptr) return 0;
  long long amount = 0;
  char unit = 0;
  const int read = std::fscanf(file, "%lld%c", &amount, &unit);
  std::fclose(file);
  if (read < 1 || amount <= 0) return 0;
  if (unit == 'K') return amount << 10;
  if (unit == 'M') return amount << 20;
  if (unit == 'G') return amount << 30;
  return amount;
}

// The word in index<i>/<name> ("2", "Unified"); "" if absent.
std::string SysfsCacheText(int index, const char* name) {
  std::FILE* file = OpenSysfsCacheFile(index, name);
  if (file == nullptr) return "";
  char text[32] = {};
  const int read = std::fscanf(file, "%31s", text);
  std::fclose(file);
  return read == 1 ? text : "";
}

int64_t DetectSecondLevelCacheBytes() {
  for (int index = 0; index < 16; ++index) {
    if (SysfsCacheText(index, "level") == "2" && SysfsCacheText(index, "type") != "Instruction") {
      return SysfsCacheBytes(index);
    }
  }
  return 0;
}

// sysfs first: it describes the cache the calling core shares. sysconf only where sysfs says
// nothing, because glibc derives it from CPUID, which on AMD gives the whole package's L3
// (256 MiB on an EPYC VM whose cores share 32 MiB), not the core complex's.
int64_t DetectLastLevelCacheBytes() {
  int64_t largest = 0;
  for (int index = 0; index < 16; ++index) {
    largest = std::max(largest, SysfsCacheBytes(index));
  }
#if defined(_SC_LEVEL3_CACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
  if (largest == 0) {
    for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
      largest = std::max<int64_t>(largest, sysconf(name));
    }
  }
#endif
  return largest > 0 ? largest : kUnknownCacheBytes;
}

// The threshold TF_FBN_OPS_STREAMING_MIB sets, or -1 where it is unset or not a valid value.
int64_t ReadStreamingBytesFromEnvironment() {
  if (const char* mib = std::getenv("TF_FBN_OPS_STREAMING_MIB")) {
    char* end = nullptr;
    const long long value = std::strtoll(mib, &end, 10);
    if (end != mib && *end == '\0' && value >= 0 && value <= (int64_t{1} << 40)) {
      return static_cast<int64_t>(value) << 20;
    }
    // The core has no logger; one line on stderr, once per process.
    std::fprintf(stderr,
                 "tf-fbn-ops: TF_FBN_OPS_STREAMING_MIB=\"%s\" is not a whole number of MiB "
                 "(0 to 2^40); ignored, the CPU's own threshold is used\n",
                 mib);
  }
  return -1;
}

// Read once, so that a bad value is reported once.
int64_t StreamingBytesFromEnvironment() {
  static const int64_t bytes = ReadStreamingBytesFromEnvironment();
  return bytes;
}

// TF_FBN_OPS_STREAMING_MIB's threshold where it is set, else `own`.
int64_t StreamingBytesOr(int64_t own) {
  const int64_t set = StreamingBytesFromEnvironment();
  return set >= 0 ? set : own;
}

}  // namespace

int64_t LastLevelCacheBytes() {
  static const int64_t bytes = DetectLastLevelCacheBytes();
  return bytes;
}

int64_t StreamingFootprintBytes() {
  static const int64_t bytes =
      StreamingBytesOr(LastLevelCacheIsSocketWide()
                           ? kSocketWideStreamingBytes
                           : std::min(kStreamingBytes, LastLevelCacheBytes()));
  return bytes;
}

int64_t ParallelStreamingFootprintBytes() {
  static const int64_t bytes = StreamingBytesOr(LastLevelCacheBytes() / 4 * 3);
  return bytes;
}

int64_t SecondLevelCacheBytes() {
  static const int64_t bytes = DetectSecondLevelCacheBytes();
  return bytes;
}

bool LastLevelCacheIsSocketWide() { return LastLevelCacheBytes() > kCoreComplexCacheBytes; }

int64_t ForwardStreamingFootprintBytes() {
  return LastLevelCacheIsSocketWide() ? ParallelStreamingFootprintBytes()
                                      : StreamingFootprintBytes();
}

bool ExactStripsPay() {
  return !LastLevelCacheIsSocketWide() && SecondLevelCacheBytes() >= kFusedUnitBytes;
}

MemoryRules KernelMemoryRules() {
  return {StreamingFootprintBytes(), LastLevelCacheBytes(), ForwardStreamingFootprintBytes(),
          ParallelStreamingFootprintBytes(), ExactStripsPay()};
}

void FenceStreamingStores() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace fbn
