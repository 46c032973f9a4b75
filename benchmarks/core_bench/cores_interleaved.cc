// Two commits' CPU cores in one process, their whole gradient calls alternated round by round
// (TimeInterleaved), on the same tensors and spinning threads: a speed change bisected commit by
// commit where processes alternated swing by 20 % (a shared host). Not a test. Built and run by
//
//   make cores-interleaved OLD=adaf5e3 CORES_ARGS="--threads 1 --rounds 15 16x7x7x2048:T"
//
// which builds OLD's cc/core with its namespace renamed beside this checkout's release objects.
// Cases are NxHxWxC:T (training) or :I (inference), channels last, or :TF and :IF channels first
// (the same shape, NxCxHxW in memory), float32, the three large tensors 64 bytes into their
// pages as TensorFlow's default build places them, or where --page-offsets dy,x,dx says. Prints
// each core's median time, new / old, and whether the two gave the same bits.
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/core_bench/interleaved_timing.h"
#include "benchmarks/core_bench/paged_floats.h"
#include "benchmarks/core_bench/spin_pool.h"

using UnitRunner = std::function<void(int64_t, const std::function<void(int64_t, int64_t)>&)>;
using CoreCall = void(const float*, const float*, const float*, const float*, const float*,
                      float*, float*, float*, int64_t, int64_t, int64_t, bool, bool,
                      const UnitRunner&, int);
CoreCall OldCoreCall, NewCoreCall;

namespace fbn {
namespace bench {
namespace {

struct Case {
  int64_t batch = 0, height = 0, width = 0, channels = 0;
  bool training = true;
  bool channels_last = true;
};

bool ParseCase(const char* text, Case* c) {
  char mode[3] = {};
  if (std::sscanf(text, "%ldx%ldx%ldx%ld:%2s", &c->batch, &c->height, &c->width, &c->channels,
                  mode) != 5 ||
      (mode[0] != 'T' && mode[0] != 'I') || (mode[1] != 0 && mode[1] != 'F') || c->batch < 1 ||
      c->height < 1 || c->width < 1 || c->channels < 1) {
    return false;
  }
  c->training = mode[0] == 'T';
  c->channels_last = mode[1] != 'F';
  return true;
}

// One core's outputs for a case.
struct Outputs {
  Outputs(int64_t n, int64_t channels, int64_t page_offset)
      : dx(n, page_offset), scale_backprop(channels), offset_backprop(channels) {}
  PagedFloats dx;
  std::vector<float> scale_backprop, offset_backprop;
};

void TimeCase(const char* text, const Case& c, SpinPool& pool, int rounds,
              const std::array<int64_t, 3>& page_offsets) {
  const int64_t spatial = c.height * c.width, n = c.batch * spatial * c.channels;
  PagedFloats dy(n, page_offsets[0]), x(n, page_offsets[1]);
  for (int64_t i = 0; i < n; ++i) {
    dy[i] = static_cast<float>(i * 7919 % 97) * 0.01f - 0.4f;
    x[i] = static_cast<float>(i * 104729 % 89) * 0.02f;
  }
  std::vector<float> scale(c.channels), mean(c.channels, 0.9f), variance(c.channels, 0.7f);
  for (int64_t ch = 0; ch < c.channels; ++ch) scale[ch] = 1.0f + static_cast<float>(ch % 3);
  const UnitRunner run_units = [&pool](int64_t count,
                                       const std::function<void(int64_t, int64_t)>& fn) {
    if (pool.threads() == 1 || count == 1) return fn(0, count);
    std::atomic<int64_t> next{0};
    pool.Run([&](int) {
      for (int64_t u = next++; u < count; u = next++) fn(u, u + 1);
    });
  };
  Outputs old_out(n, c.channels, page_offsets[2]), new_out(n, c.channels, page_offsets[2]);
  auto call = [&](CoreCall* core, Outputs* out) {
    return [&, core, out] {
      core(dy.data(), x.data(), scale.data(), mean.data(), variance.data(), out->dx.data(),
           out->scale_backprop.data(), out->offset_backprop.data(), c.batch, spatial,
           c.channels, c.training, c.channels_last, run_units, pool.threads());
    };
  };
  const std::vector<double> us =
      TimeInterleaved({call(OldCoreCall, &old_out), call(NewCoreCall, &new_out)}, rounds);
  const bool same = std::memcmp(old_out.dx.data(), new_out.dx.data(), n * sizeof(float)) == 0 &&
                    old_out.scale_backprop == new_out.scale_backprop &&
                    old_out.offset_backprop == new_out.offset_backprop;
  std::printf("%-20s %3d %10.1f %10.1f %8.3f  %s\n", text, pool.threads(), us[0], us[1],
              us[1] / us[0], same ? "same" : "DIFFERENT");
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int rounds = 11;
  std::array<int64_t, 3> page_offsets = kTensorFlowPageOffsets;
  std::vector<std::pair<const char*, Case>> cases;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    Case c;
    if (arg == "--threads" && i + 1 < argc) {
      threads = {std::atoi(argv[++i])};
    } else if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--page-offsets" && i + 1 < argc) {
      if (!ParsePageOffsets(argv[++i], &page_offsets)) {
        std::fprintf(stderr, "%s", kPageOffsetsUsage);
        return 2;
      }
    } else if (ParseCase(argv[i], &c)) {
      cases.emplace_back(argv[i], c);
    } else {
      std::fprintf(stderr, "unknown argument %s: cases are NxHxWxC:T or :I (:TF, :IF channels "
                           "first), options --threads N (default 1 and 2), --rounds R (11) and "
                           "--page-offsets dy,x,dx (64,64,64)\n",
                   argv[i]);
      return 2;
    }
  }
  if (cases.empty() || threads[0] < 1) {
    std::fprintf(stderr, "give at least one case, e.g. 16x7x7x2048:T, and --threads >= 1\n");
    return 2;
  }
  std::printf("%-20s %3s %10s %10s %8s  %s\n", "case", "thr", "old us", "new us", "new/old",
              "bits");
  for (int t : threads) {
    SpinPool pool(t);
    for (const auto& [text, c] : cases) TimeCase(text, c, pool, rounds, page_offsets);
  }
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace fbn

int main(int argc, char** argv) { return fbn::bench::Main(argc, argv); }
