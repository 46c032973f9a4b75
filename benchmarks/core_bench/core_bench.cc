// The CPU core alone (no TensorFlow), timed against the streaming kernel of the benchmark
// harness on the same spinning threads, interleaved round by round in one process; and, with
// --loops, each inner loop's time per element where its data sits in L1, L2, L3 or DRAM. Not a
// test: it is how the core's schedules and loops are measured (docs/performance.md).
//
//   make core-bench                                   # every harness shape, both layouts
//   build/core_bench --threads 2 --layouts L 32x7x7x1024
//   build/core_bench --isa avx2 --stores both 32x14x14x256
//   build/core_bench --exact-schedule both --layouts L --modes T 16x7x7x2048
//   build/core_bench --loops
//
// Options: --isa avx512|avx2|baseline (default: this CPU's), --threads 1,2 (default), --rounds
// N (7), --layouts LF (L: channels last, F: channels first), --modes TI (training, inference),
// --stores auto|both (both: also x_backprop, or the forward's y, always and never streamed),
// --exact-schedule auto|both (both: also the gradient's exact family by strips of columns
// wherever they fit, and by blocks of rows only; MemoryRules::exact_strips),
// --op gradient|forward (forward: the forward ops' kernel, timed alone), --page-offsets dy,x,dx
// (bytes into a page of the three large tensors; default 64,64,64, as TensorFlow's default
// build places them).
// Shapes are written channels-last (NxHxWxC or NxDxHxWxC).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "benchmarks/core_bench/interleaved_timing.h"
#include "benchmarks/core_bench/paged_floats.h"
#include "benchmarks/core_bench/spin_pool.h"
#include "cc/core/bn_forward.h"
#include "cc/core/bn_grad.h"
#include "cc/core/cpu/streaming_stores.h"
#include "cc/core/cpu/cpu_loops.h"
#include "cc/core/cpu/forward_loops.h"
#include "cc/tests/cache_line_vector.h"

extern "C" float fbn_stream_dot(const float* x, const float* dy, int64_t begin, int64_t end);
extern "C" void fbn_stream_axpby(const float* x, const float* dy, float* dx, int64_t begin,
                                 int64_t end, float a, float b);

namespace fbn {
namespace bench {
namespace {

using Floats = CacheLineVector<float>;  // small arrays, on a cache line as TensorFlow's

// The streaming kernel: training reads x and dy, then reads them again and writes dx; each
// thread keeps its half in both sweeps, as OpenMP's static schedule does.
void Stream(SpinPool* pool, const float* x, const float* dy, float* dx, int64_t n,
            bool training) {
  const int threads = pool->threads();
  auto part = [&](int t, int64_t* begin, int64_t* end) {
    *begin = n * t / threads;
    *end = n * (t + 1) / threads;
  };
  float a = 0.25f;
  if (training) {
    std::vector<float> dots(threads);
    pool->Run([&](int t) {
      int64_t begin, end;
      part(t, &begin, &end);
      dots[t] = fbn_stream_dot(x, dy, begin, end);
    });
    for (float d : dots) a += d / static_cast<float>(n);
  }
  pool->Run([&](int t) {
    int64_t begin, end;
    part(t, &begin, &end);
    fbn_stream_axpby(x, dy, dx, begin, end, a, 0.5f);
  });
}

struct Options {
  CpuIsa isa = DetectedCpuIsa();
  std::vector<int> threads = {1, 2};
  int rounds = 7;
  std::string layouts = "LF", modes = "TI";
  bool both_stores = false;
  bool both_exact_schedules = false;
  bool forward = false;
  bool loops = false;
  std::array<int64_t, 3> page_offsets = kTensorFlowPageOffsets;  // dy, x, dx
  std::vector<std::vector<int64_t>> shapes;
};

std::vector<int64_t> Split(const std::string& text, char separator) {
  std::vector<int64_t> values;
  for (size_t at = 0; at <= text.size();) {
    size_t next = text.find(separator, at);
    if (next == std::string::npos) next = text.size();
    values.push_back(std::atoll(text.substr(at, next - at).c_str()));
    at = next + 1;
  }
  return values;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : "";
    if (arg == "--loops") {
      o.loops = true;
    } else if (arg == "--isa") {
      for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        if (std::strcmp(value, CpuIsaName(isa)) == 0) o.isa = isa;
      }
      ++i;
    } else if (arg == "--threads") {
      o.threads.clear();
      for (int64_t t : Split(value, ',')) o.threads.push_back(static_cast<int>(t));
      ++i;
    } else if (arg == "--rounds") {
      o.rounds = std::max(1, std::atoi(value));
      ++i;
    } else if (arg == "--layouts") {
      o.layouts = value;
      ++i;
    } else if (arg == "--modes") {
      o.modes = value;
      ++i;
    } else if (arg == "--stores") {
      o.both_stores = std::strcmp(value, "both") == 0;
      ++i;
    } else if (arg == "--exact-schedule") {
      o.both_exact_schedules = std::strcmp(value, "both") == 0;
      ++i;
    } else if (arg == "--op") {
      o.forward = std::strcmp(value, "forward") == 0;
      ++i;
    } else if (arg == "--page-offsets") {
      if (!ParsePageOffsets(value, &o.page_offsets)) {
        std::fprintf(stderr, "%s", kPageOffsetsUsage);
        std::exit(2);
      }
      ++i;
    } else {
      o.shapes.push_back(Split(arg, 'x'));
    }
  }
  if (o.shapes.empty()) {
    o.shapes = {{32, 56, 56, 64},  {32, 28, 28, 128},   {32, 14, 14, 256}, {32, 7, 7, 2048},
                {8, 112, 112, 64}, {4, 16, 32, 32, 32}, {16, 14, 14, 512}, {32, 14, 14, 512},
                {32, 7, 7, 1024},  {64, 7, 7, 1024},    {16, 7, 7, 2048}};
  }
  return o;
}

void TimeCalls(const Options& o) {
  std::printf("isa %s, last-level cache %lld MiB, x_backprop streamed beyond %lld MiB (the "
              "forward's y beyond %lld MiB, on several threads %lld MiB), exact family by %s, "
              "tensors at page offsets %lld/%lld/%lld\n",
              CpuIsaName(o.isa), static_cast<long long>(LastLevelCacheBytes() >> 20),
              static_cast<long long>(StreamingFootprintBytes() >> 20),
              static_cast<long long>(ForwardStreamingFootprintBytes() >> 20),
              static_cast<long long>(ParallelStreamingFootprintBytes() >> 20),
              KernelMemoryRules().exact_strips ? "strips where they fit"
                                               : "blocks (strips where blocks < threads)",
              static_cast<long long>(o.page_offsets[0]), static_cast<long long>(o.page_offsets[1]),
              static_cast<long long>(o.page_offsets[2]));
  std::printf("%-16s %-4s %-5s %3s %10s %10s %7s%s%s\n", "shape", "fmt", "mode", "thr", "core us",
              "stream us", "%stream", o.both_stores ? "  streamed us  cached us" : "",
              o.both_exact_schedules ? "  strips us  blocks us" : "");
  const CpuLoops<float>& loops = LoopsFor<float>(o.isa);
  const CpuForwardLoops<float>& forward_loops = ForwardLoopsFor<float>(o.isa);
  for (const auto& dims : o.shapes) {
    int64_t spatial = 1;
    for (size_t d = 1; d + 1 < dims.size(); ++d) spatial *= dims[d];
    for (char layout : o.layouts) {
      for (char mode : o.modes) {
        const Shape shape{dims[0], dims.back(), spatial, layout == 'L'};
        const int64_t n = shape.elements(), C = shape.channels;
        PagedFloats dy(n, o.page_offsets[0]), x(n, o.page_offsets[1]), dx(n, o.page_offsets[2]);
        Floats scale(C), mean(C), variance(C), ds(C), doff(C);
        for (int64_t i = 0; i < n; ++i) {
          dy[i] = static_cast<float>(i * 7919 % 97) * 0.01f - 0.4f;
          x[i] = static_cast<float>(i * 104729 % 89) * 0.02f;
        }
        for (int64_t c = 0; c < C; ++c) {
          scale[c] = 1.0f + static_cast<float>(c % 3);
          mean[c] = 0.9f;
          variance[c] = 0.7f;
        }
        Params p;
        p.shape = shape;
        p.is_training = mode == 'T';
        const Tensors<float> t{dy.data(),       x.data(),  scale.data(), mean.data(),
                               variance.data(), dx.data(), ds.data(),    doff.data()};
        ForwardParams fp;
        fp.shape = shape;
        fp.is_training = p.is_training;
        Floats statistics(4 * C);  // the forward's batch and saved means and variances
        const ForwardTensors<float> ft{x.data(),          scale.data(),         mean.data(),
                                       mean.data(),       variance.data(),      dx.data(),
                                       statistics.data(), statistics.data() + C,
                                       statistics.data() + 2 * C, statistics.data() + 3 * C};
        std::string name;
        for (int64_t d : dims) name += (name.empty() ? "" : "x") + std::to_string(d);
        for (int threads : o.threads) {
          SpinPool pool(threads);
          const ParallelFor parallel_for = pool.AsParallelFor();
          std::printf("%-16s %-4s %-5s %3d", name.c_str(), layout == 'L' ? "last" : "first",
                      mode == 'T' ? "train" : "infer", threads);
          if (o.forward) {  // timed alone: the streaming kernel moves the gradient's bytes
            auto forward = [&](int64_t streaming_footprint) {
              MemoryRules rules = KernelMemoryRules();
              rules.streaming_footprint = rules.forward_streaming_footprint =
                  rules.parallel_streaming_footprint = streaming_footprint;
              return [&, rules] {
                BatchNormForwardCpuWithLoops(fp, ft, parallel_for, forward_loops, rules);
              };
            };
            std::vector<std::function<void()>> fns = {
                [&] { BatchNormForwardCpu(fp, ft, parallel_for); }};
            if (o.both_stores) {
              fns.push_back(forward(0));
              fns.push_back(forward(std::numeric_limits<int64_t>::max()));
            }
            const std::vector<double> us = TimeInterleaved(fns, o.rounds);
            std::printf(" %10.1f %10s %7s", us[0], "-", "-");
            if (o.both_stores) std::printf("  %11.1f %9.1f", us[1], us[2]);
            std::printf("\n");
            std::fflush(stdout);
            continue;
          }
          auto core = [&](int64_t streaming_footprint, bool exact_strips) {
            MemoryRules rules = KernelMemoryRules();
            rules.streaming_footprint = rules.forward_streaming_footprint =
                rules.parallel_streaming_footprint = streaming_footprint;
            rules.exact_strips = exact_strips;
            return [&, rules] { BatchNormGradCpuWithLoops(p, t, parallel_for, loops, rules); };
          };
          const bool strips = KernelMemoryRules().exact_strips;
          std::vector<std::function<void()>> fns = {
              core(StreamingFootprintBytes(), strips),
              [&] { Stream(&pool, x.data(), dy.data(), dx.data(), n, p.is_training); }};
          if (o.both_stores) {
            fns.push_back(core(0, strips));
            fns.push_back(core(std::numeric_limits<int64_t>::max(), strips));
          }
          if (o.both_exact_schedules) {
            fns.push_back(core(StreamingFootprintBytes(), true));
            fns.push_back(core(StreamingFootprintBytes(), false));
          }
          const std::vector<double> us = TimeInterleaved(fns, o.rounds);
          std::printf(" %10.1f %10.1f %6.0f%%", us[0], us[1], 100.0 * us[1] / us[0]);
          size_t next = 2;
          if (o.both_stores) std::printf("  %11.1f %9.1f", us[next], us[next + 1]), next += 2;
          if (o.both_exact_schedules) std::printf("  %9.1f %10.1f", us[next], us[next + 1]);
          std::printf("\n");
          std::fflush(stdout);
        }
      }
    }
  }
}

// Nanoseconds per element of one loop over `elements` elements per tensor (best of five medians).
template <typename Fn>
double NsPerElement(int64_t elements, const Fn& fn) {
  const int calls = static_cast<int>(std::max<int64_t>(3, (int64_t{1} << 26) / elements));
  std::vector<double> ns;
  for (int r = 0; r < 5; ++r) {
    const double start = NowUs();
    for (int c = 0; c < calls; ++c) fn();
    ns.push_back((NowUs() - start) * 1e3 / calls / static_cast<double>(elements));
  }
  std::sort(ns.begin(), ns.end());
  return ns[2];
}

// Each loop on one thread over windows the size of the kernel's blocks, at tensor sizes that
// sit in L1, L2, the last-level cache and DRAM on the development machines: where the loops'
// arithmetic shows (small sizes) and where memory hides it.
void TimeLoops(const Options& o) {
  const int64_t sizes[] = {int64_t{1} << 12, int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 23};
  std::printf("ns per element, one thread, isa %s, page offsets %lld/%lld/%lld; tensor sizes",
              CpuIsaName(o.isa), static_cast<long long>(o.page_offsets[0]),
              static_cast<long long>(o.page_offsets[1]), static_cast<long long>(o.page_offsets[2]));
  for (int64_t s : sizes) std::printf(" %lld KiB", static_cast<long long>(s * 4 >> 10));
  std::printf("\n");
  const CpuLoops<float>& L = LoopsFor<float>(o.isa);
  const int64_t max_columns = 4096;
  Floats k(4 * max_columns, 0.5f);
  std::vector<double> sums(2 * max_columns);
  const DxCoefficients<float> coefficients{k.data(), k.data() + max_columns,
                                           k.data() + 2 * max_columns, k.data() + 3 * max_columns};
  auto row = [&](const std::string& name, const std::function<double(int64_t)>& time) {
    std::printf("%-26s", name.c_str());
    for (int64_t s : sizes) std::printf(" %8.3f", time(s));
    std::printf("\n");
    std::fflush(stdout);
  };
  PagedFloats dy(sizes[3], o.page_offsets[0], 0.1f), x(sizes[3], o.page_offsets[1], 0.2f),
      dx(sizes[3], o.page_offsets[2]);
  for (int64_t width : {64, 128, 256, 1024, 2048}) {
    const std::string w = " width " + std::to_string(width);
    // Windows of about 32K elements and at least 128 rows, as the kernel's blocks.
    const int64_t window = std::max<int64_t>(128, (int64_t{1} << 15) / width);
    auto windows = [&](int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
      const int64_t rows = n / width;
      for (int64_t r = 0; r < rows; r += window) fn(r * width, std::min(window, rows - r));
    };
    row("rows sums" + w, [&](int64_t n) {
      return NsPerElement(n, [&] {
        windows(n, [&](int64_t at, int64_t rows) {
          L.sum_rows(dy.data() + at, x.data() + at, width, rows, width, k.data(), sums.data(),
                     sums.data() + max_columns);
        });
      });
    });
    row("rows inference" + w, [&](int64_t n) {
      return NsPerElement(n, [&] {
        windows(n, [&](int64_t at, int64_t rows) {
          L.sum_rows_inference(dy.data() + at, x.data() + at, dx.data() + at, width, rows, width,
                               k.data(), k.data(), sums.data(), sums.data() + max_columns,
                               false);
        });
      });
    });
    for (RowOrder order : {RowOrder::kInOrder, RowOrder::kByGroups}) {
      row((order == RowOrder::kInOrder ? "rows training dx" : "rows dx by groups") + w,
          [&](int64_t n) {
            return NsPerElement(n, [&] {
              windows(n, [&](int64_t at, int64_t rows) {
                L.training_dx_rows(dy.data() + at, x.data() + at, dx.data() + at, width, rows,
                                   width, coefficients, false, order);
              });
            });
          });
    }
  }
  // The exact family's rows loops (channels of fewer than kFastPathRest elements) on windows of
  // 128 rows, as bn_grad_cpu_exact.cc cuts wide rows into blocks.
  std::vector<double> exact_k(4 * max_columns, 0.5), exact_sums(4 * max_columns);
  const ExactColumns exact_columns{exact_sums.data(), exact_sums.data() + max_columns,
                                   exact_sums.data() + 2 * max_columns,
                                   exact_sums.data() + 3 * max_columns};
  const DxCoefficients<double> exact_coefficients{exact_k.data(), exact_k.data() + max_columns,
                                                  exact_k.data() + 2 * max_columns,
                                                  exact_k.data() + 3 * max_columns};
  const CpuLoops<Half>& half_loops = LoopsFor<Half>(o.isa);
  CacheLineVector<Half> half_dy(sizes[3], Half{0x2e66}), half_x(sizes[3], Half{0x3266});  // 0.1, 0.2
  for (int64_t width : {256, 1024, 2048}) {
    const std::string w = " width " + std::to_string(width);
    auto windows = [&](int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
      const int64_t rows = n / width;
      for (int64_t r = 0; r < rows; r += 128) fn(r * width, std::min<int64_t>(128, rows - r));
    };
    row("exact sums" + w, [&](int64_t n) {
      return NsPerElement(n, [&] {
        windows(n, [&](int64_t at, int64_t rows) {
          L.exact_bounded_sum_rows(dy.data() + at, x.data() + at, width, rows, width,
                                   exact_k.data(), exact_columns);
        });
      });
    });
    // 16-bit tensors widen each vector in parts where a pass holds one part (kExactPassParts).
    row("exact sums half" + w, [&](int64_t n) {
      return NsPerElement(n, [&] {
        windows(n, [&](int64_t at, int64_t rows) {
          half_loops.exact_bounded_sum_rows(half_dy.data() + at, half_x.data() + at, width, rows,
                                            width, exact_k.data(), exact_columns);
        });
      });
    });
    row("exact inference" + w, [&](int64_t n) {
      return NsPerElement(n, [&] {
        windows(n, [&](int64_t at, int64_t rows) {
          L.exact_bounded_sum_rows_inference(dy.data() + at, x.data() + at, dx.data() + at,
                                             width, rows, width, exact_k.data(), exact_k.data(),
                                             exact_columns, false);
        });
      });
    });
    for (RowOrder order : {RowOrder::kInOrder, RowOrder::kByGroups}) {
      row((order == RowOrder::kInOrder ? "exact training dx" : "exact dx by groups") + w,
          [&](int64_t n) {
            return NsPerElement(n, [&] {
              windows(n, [&](int64_t at, int64_t rows) {
                L.exact_dx_rows(dy.data() + at, x.data() + at, dx.data() + at, width, rows,
                                width, exact_coefficients, false, order);
              });
            });
          });
    }
  }
  // The forward's rows loops on tiles as bn_forward_cpu.cc cuts them (kMaxTileColumns 256,
  // kMinTileRows 64, kMomentsTileBytes 256 KiB).
  const CpuForwardLoops<float>& F = ForwardLoopsFor<float>(o.isa);
  std::vector<double> columns(3 * max_columns, 0.5);
  const NormalizeColumns normalize{columns.data(), columns.data() + max_columns,
                                   columns.data() + 2 * max_columns};
  for (int64_t width : {64, 256, 1024, 2048}) {
    const std::string w = " width " + std::to_string(width);
    const int64_t tile_columns = std::min<int64_t>(width, 256);
    const int64_t tile_rows = std::max<int64_t>(64, (int64_t{256} << 10) / (4 * tile_columns));
    auto tiles = [&](int64_t n, const std::function<void(int64_t, int64_t, int64_t)>& fn) {
      const int64_t rows = n / width;
      for (int64_t r = 0; r < rows; r += tile_rows) {
        for (int64_t j = 0; j < width; j += tile_columns) {
          fn(r * width + j, std::min(tile_rows, rows - r), std::min(tile_columns, width - j));
        }
      }
    };
    row("forward moments" + w, [&](int64_t n) {
      return NsPerElement(n, [&] {
        tiles(n, [&](int64_t at, int64_t rows, int64_t cols) {
          F.moments_rows(x.data() + at, width, rows, cols, sums.data(),
                         sums.data() + max_columns, nullptr);
        });
      });
    });
    // As the kernel runs where x takes more than a quarter of the last-level cache: each column
    // group's second pass prefetches the next group's lines, the tile's last the next tile's.
    row("forward moments, next" + w, [&](int64_t n) {
      return NsPerElement(n, [&] {
        tiles(n, [&](int64_t at, int64_t rows, int64_t cols) {
          const int64_t next = at % width + tile_columns < width
                                   ? at + tile_columns
                                   : (at / width + tile_rows) * width;
          F.moments_rows(x.data() + at, width, rows, cols, sums.data(),
                         sums.data() + max_columns, next < n ? x.data() + next : nullptr);
        });
      });
    });
    for (RowOrder order : {RowOrder::kInOrder, RowOrder::kByGroups}) {
      const char* label = order == RowOrder::kInOrder ? "forward normalize" : "forward by groups";
      row(label + w, [&](int64_t n) {
        return NsPerElement(n, [&] {
          tiles(n, [&](int64_t at, int64_t rows, int64_t cols) {
            F.normalize_rows(x.data() + at, dx.data() + at, width, rows, cols, normalize, false,
                             order);
          });
        });
      });
    }
  }
  for (int64_t length : {49, 196, 3136}) {
    const std::string l = " plane " + std::to_string(length);
    auto channels = [length](int64_t n) { return std::min<int64_t>(n / length, 4096); };
    row("runs sums" + l, [&](int64_t n) {
      return NsPerElement(channels(n) * length, [&] {
        L.sum_runs(dy.data(), x.data(), length, channels(n), 1, 0, k.data(), sums.data(),
                   sums.data() + max_columns);
      });
    });
    row("runs inference" + l, [&](int64_t n) {
      return NsPerElement(channels(n) * length, [&] {
        L.sum_runs_inference(dy.data(), x.data(), dx.data(), length, channels(n), k.data(),
                             k.data(), sums.data(), sums.data() + max_columns, false);
      });
    });
  }
  row("stream: sum of x*dy", [&](int64_t n) {
    volatile float keep = 0.0f;
    return NsPerElement(n, [&] { keep = fbn_stream_dot(x.data(), dy.data(), 0, n); });
  });
  row("stream: dx = a*x + b*dy", [&](int64_t n) {
    return NsPerElement(n, [&] { fbn_stream_axpby(x.data(), dy.data(), dx.data(), 0, n, 2, 3); });
  });
}

}  // namespace
}  // namespace bench
}  // namespace fbn

int main(int argc, char** argv) {
  const fbn::bench::Options options = fbn::bench::Parse(argc, argv);
  if (options.loops) {
    fbn::bench::TimeLoops(options);
  } else {
    fbn::bench::TimeCalls(options);
  }
  return 0;
}
