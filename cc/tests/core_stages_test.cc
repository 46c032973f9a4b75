// Tests of the two stages of synchronized batch norm's backward (Stage, bn_grad.h):
//   - one replica: kSums then kDxFromSums with the sums as the global ones give the bits of
//     kWhole, in every schedule, type, instruction-set copy and split onto threads, in place too;
//   - several replicas (the batch cut along N, an empty part among them): the local sums added
//     in replica order, then each part's x_backprop, against the double reference of the whole
//     batch, to the same bounds as one call of the whole; each replica's scale and offset
//     gradients its own sums' (its share), the whole's those of the global sums;
//   - kSums reads neither scale nor variance.
// Prints one line per failure and a PASS/FAIL summary.
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cc/core/bn_grad.h"
#include "cc/core/cpu/cpu_loops.h"
#include "cc/tests/test_util.h"

namespace fbn {
namespace {

using namespace testing;  // NOLINT: the shared test vocabulary

// Ordinary stores, rows by groups, the exact family's strips where they fit, or only its
// blocks (the stages' bits depend on none of these).
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
constexpr MemoryRules kNeverStream{kNever, kNever, kNever, kNever, true};
constexpr MemoryRules kExactBlocks{kNever, kNever, kNever, kNever, false};

template <typename T>
struct StagedRun {
  std::vector<double> sum_dy, sum_dy_xc;
  Outputs<T> out;
  explicit StagedRun(const Shape& s) : sum_dy(s.channels), sum_dy_xc(s.channels), out(s) {}
};

// kSums of `in` into run->sum_dy and sum_dy_xc. scale and variance are left null: the stage
// must not read them.
template <typename T>
void Sums(const Params& whole, const Inputs<T>& in, const ParallelFor& pf, const CpuLoops<T>& loops,
          StagedRun<T>* run, const MemoryRules& rules = kNeverStream) {
  Params p = whole;
  p.stage = Stage::kSums;
  Tensors<T> t;
  t.y_backprop = in.dy.data();
  t.x = in.x.data();
  t.mean = in.mean.data();
  t.sum_dy = run->sum_dy.data();
  t.sum_dy_xc = run->sum_dy_xc.data();
  BatchNormGradCpuWithLoops(p, t, pf, loops, rules);
}

// kDxFromSums of `in` from the global sums and the replica's own (run->sum_dy, sum_dy_xc), into
// run->out (in place when asked).
template <typename T>
void DxFromSums(const Params& whole, const Inputs<T>& in, const std::vector<double>& sum_dy,
                const std::vector<double>& sum_dy_xc, int64_t global_count, const ParallelFor& pf,
                const CpuLoops<T>& loops, bool in_place, StagedRun<T>* run,
                const MemoryRules& rules = kNeverStream) {
  Params p = whole;
  p.stage = Stage::kDxFromSums;
  p.global_count = global_count;
  Tensors<T> t = in_place ? run->out.BindInPlace(in) : run->out.Bind(in);
  t.global_sum_dy = sum_dy.data();
  t.global_sum_dy_xc = sum_dy_xc.data();
  t.replica_sum_dy = run->sum_dy.data();
  t.replica_sum_dy_xc = run->sum_dy_xc.data();
  BatchNormGradCpuWithLoops(p, t, pf, loops, rules);
}

// The shapes of every schedule (bn_grad_cpu_*.cc), as TestIsaCopiesAgree lists them, and the
// awkward ones of TestCases().
std::vector<Shape> ScheduleShapes() {
  std::vector<Shape> shapes = {
      {3, 100, 400, true}, {40, 5, 30, true},   {2, 2048, 520, true}, {70, 13, 23, false},
      {20000, 3, 5, false}, {5, 6, 333, false}, {3, 2, 140001, false}, {4, 8, 4096, false},
      {7, 45, 9, true},    {2, 2048, 64, true}, {3, 20, 21, false},
  };
  for (const Case& k : TestCases()) shapes.push_back(k.shape);
  return shapes;
}

template <typename T>
void TestOneReplicaGivesWholeBits() {
  uint32_t seed = 100;
  for (const Shape& shape : ScheduleShapes()) {
    for (bool saved_inv_std : {false, true}) {
      const Case k{shape, /*is_training=*/true, shape.channels % 2 ? 0.0f : 50.0f, saved_inv_std};
      const Inputs<T> in(k, seed++);
      const Params p = ParamsOf(k);
      for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        if (isa > DetectedCpuIsa()) continue;
        const CpuLoops<T>& loops = LoopsFor<T>(isa);
        Outputs<T> whole(shape);
        BatchNormGradCpuWithLoops(p, whole.Bind(in), SerialFor(), loops, kNeverStream);
        for (int threads : {1, 2}) {
          const ParallelFor pf = threads == 1 ? SerialFor() : ThreadedFor(2, 64);
          for (bool in_place : {false, true}) {
            std::vector<double> first_sums;  // the double sums show any change of order
            for (const MemoryRules& rules : {kNeverStream, kExactBlocks}) {
              StagedRun<T> run(shape);
              Sums(p, in, pf, loops, &run, rules);
              std::vector<double> sums = run.sum_dy;
              sums.insert(sums.end(), run.sum_dy_xc.begin(), run.sum_dy_xc.end());
              if (first_sums.empty()) first_sums = sums;
              Check(std::memcmp(sums.data(), first_sums.data(), sums.size() * sizeof(double)) == 0,
                    Describe(k, TypeName<T>()) + ": " + CpuIsaName(isa) +
                        ": the exact family's strips and blocks give the same double sums");
              DxFromSums(p, in, run.sum_dy, run.sum_dy_xc, shape.rest(), pf, loops, in_place, &run,
                         rules);
              Check(run.out.BitEqual(whole),
                    Describe(k, TypeName<T>()) + ": " + CpuIsaName(isa) + ", " +
                        std::to_string(threads) + " thread(s)" + (in_place ? ", in place" : "") +
                        (rules.exact_strips ? "" : ", exact blocks only") +
                        ": the two stages give the bits of one call");
            }
          }
        }
      }
    }
  }
}

// Part [n0, n1) of a batch: channels last and channels first alike, N is outermost.
template <typename T>
Inputs<T> Part(const Case& k, const Inputs<T>& in, int64_t n0, int64_t n1) {
  Inputs<T> part = in;
  const int64_t per_image = k.shape.channels * k.shape.spatial;
  part.dy.assign(in.dy.begin() + n0 * per_image, in.dy.begin() + n1 * per_image);
  part.x.assign(in.x.begin() + n0 * per_image, in.x.begin() + n1 * per_image);
  return part;
}

template <typename T>
void TestReplicasMatchTheWholeBatch() {
  uint32_t seed = 500;
  const std::vector<Shape> shapes = {
      {6, 100, 40, true}, {9, 5, 300, true},   {7, 45, 9, true},     {8, 13, 23, false},
      {6, 6, 333, false}, {5, 20, 21, false},  {4, 3, 2000, false},  {12, 2048, 1, true},
      {10, 64, 130, true}, {300, 3, 5, false},
  };
  // Cuts of N into replicas' batches, an empty one among them; {0, N} is one replica.
  for (const Shape& shape : shapes) {
    const int64_t N = shape.batch;
    const std::vector<std::vector<int64_t>> cuts = {
        {0, N}, {0, N / 2, N}, {0, 1, N / 3, N}, {0, N / 2, N / 2, N}, {0, 0, N}};
    const Case k{shape, true, 3.0f};
    const Inputs<T> in(k, seed++);
    const Params p = ParamsOf(k);
    Outputs<T> ref(shape);
    BatchNormGradReference(p, ref.Bind(in));
    for (const auto& cut : cuts) {
      std::string name = Describe(k, TypeName<T>()) + ", replicas' batches";
      std::vector<double> sum_dy(shape.channels, 0.0), sum_dy_xc(shape.channels, 0.0);
      std::vector<Inputs<T>> parts;
      std::vector<StagedRun<T>> runs;
      std::vector<Params> local_params;
      for (size_t r = 0; r + 1 < cut.size(); ++r) {
        name += " " + std::to_string(cut[r + 1] - cut[r]);
        parts.push_back(Part(k, in, cut[r], cut[r + 1]));
        local_params.push_back(p);
        local_params.back().shape =
            Shape{cut[r + 1] - cut[r], shape.channels, shape.spatial, shape.channels_last};
        runs.emplace_back(local_params.back().shape);
        Sums(local_params.back(), parts.back(), ThreadedFor(2, 64), LoopsFor<T>(ActiveCpuIsa()),
             &runs.back());
        for (int64_t c = 0; c < shape.channels; ++c) {  // in replica order
          sum_dy[c] += runs.back().sum_dy[c];
          sum_dy_xc[c] += runs.back().sum_dy_xc[c];
        }
      }
      Outputs<T> staged(shape);
      const int64_t per_image = shape.channels * shape.spatial;
      bool shares = true;
      for (size_t r = 0; r < runs.size(); ++r) {
        StagedRun<T>& run = runs[r];
        DxFromSums(local_params[r], parts[r], sum_dy, sum_dy_xc, shape.rest(), ThreadedFor(2, 64),
                   LoopsFor<T>(ActiveCpuIsa()), false, &run);
        std::copy(run.out.dx.begin(), run.out.dx.end(), staged.dx.begin() + cut[r] * per_image);
        for (int64_t c = 0; c < shape.channels; ++c) {
          ChannelGradients own;
          ScaleOffsetFromSums(run.sum_dy[c], run.sum_dy_xc[c], p.InvStd(in.variance[c]), &own);
          shares &= std::memcmp(&run.out.dscale[c], &own.scale_backprop, sizeof(float)) == 0 &&
                    std::memcmp(&run.out.doffset[c], &own.offset_backprop, sizeof(float)) == 0;
        }
      }
      Check(shares, name + ": each replica's scale and offset gradients are its own sums'");
      // The whole batch's: a replica given the global sums as its own.
      StagedRun<T> whole(local_params[0].shape);
      whole.sum_dy = sum_dy;
      whole.sum_dy_xc = sum_dy_xc;
      DxFromSums(local_params[0], parts[0], sum_dy, sum_dy_xc, shape.rest(), SerialFor(),
                 LoopsFor<T>(ActiveCpuIsa()), false, &whole);
      staged.dscale = whole.out.dscale;
      staged.doffset = whole.out.doffset;
      Check(NormwiseError(staged.dx, ref.dx) <= DxTolerance<T>(), name + ": x_backprop vs reference");
      CheckSums(k, in, staged, ref, name);
    }
  }
}

template <typename T>
void TestEmptyReplica() {
  const Shape empty{0, 5, 7, true};
  const Case k{empty, true, 0.0f};
  const Inputs<T> in(k, 9);
  const Params p = ParamsOf(k);
  StagedRun<T> run(empty);
  run.sum_dy.assign(5, 1.0);
  run.sum_dy_xc.assign(5, 1.0);
  Sums(p, in, SerialFor(), LoopsFor<T>(ActiveCpuIsa()), &run);
  Check(std::vector<double>(5, 0.0) == run.sum_dy && std::vector<double>(5, 0.0) == run.sum_dy_xc,
        std::string(TypeName<T>()) + ": an empty batch's sums are zeros");
  const std::vector<double> global = {1.0, -2.0, 3.0, 0.5, 0.0};
  DxFromSums(p, in, global, global, 40, SerialFor(), LoopsFor<T>(ActiveCpuIsa()), false, &run);
  Check(std::vector<float>(5, 0.0f) == run.out.dscale &&
            std::vector<float>(5, 0.0f) == run.out.doffset,
        std::string(TypeName<T>()) + ": an empty batch's share of the gradients is zeros");
  run.sum_dy = run.sum_dy_xc = global;  // as the only replica that has data would see them
  DxFromSums(p, in, global, global, 40, SerialFor(), LoopsFor<T>(ActiveCpuIsa()), false, &run);
  bool ok = true;
  for (int c = 0; c < 5; ++c) {
    ok &= run.out.doffset[c] == static_cast<float>(global[c]) &&
          run.out.dscale[c] == static_cast<float>(global[c] * p.InvStd(in.variance[c]));
  }
  Check(ok, std::string(TypeName<T>()) +
                ": an empty batch still finishes the scale and offset gradients it is given");
}

template <typename T>
void RunAll() {
  TestOneReplicaGivesWholeBits<T>();
  TestReplicasMatchTheWholeBatch<T>();
  TestEmptyReplica<T>();
}

}  // namespace
}  // namespace fbn

int main() {
  fbn::RunAll<float>();
  fbn::RunAll<fbn::Half>();
  fbn::RunAll<fbn::BFloat16>();
  return fbn::testing::Summary("core_stages_test");
}
