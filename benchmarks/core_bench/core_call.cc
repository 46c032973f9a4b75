// One gradient call of the core this file is compiled against, behind a function whose types
// are the standard library's only: cores_interleaved links two commits' cores into one program,
// the old one with its namespace renamed (-Dfbn=fbn_old), each reached through its own copy of
// this file (CORE_CALL names it).
#include <cstdint>
#include <functional>

#include "cc/core/bn_grad.h"

using UnitRunner = std::function<void(int64_t, const std::function<void(int64_t, int64_t)>&)>;

void CORE_CALL(const float* dy, const float* x, const float* scale, const float* mean,
               const float* variance, float* dx, float* scale_backprop, float* offset_backprop,
               int64_t batch, int64_t spatial, int64_t channels, bool training,
               bool channels_last, const UnitRunner& run_units, int threads) {
  fbn::Params p;
  p.shape.batch = batch;
  p.shape.spatial = spatial;
  p.shape.channels = channels;
  p.shape.channels_last = channels_last;
  p.is_training = training;
  fbn::Tensors<float> t;
  t.y_backprop = dy;
  t.x = x;
  t.scale = scale;
  t.mean = mean;
  t.variance = variance;
  t.x_backprop = dx;
  t.scale_backprop = scale_backprop;
  t.offset_backprop = offset_backprop;
  const fbn::ParallelFor parallel_for{
      [&run_units](int64_t count, int64_t, const fbn::RangeFn& fn) { run_units(count, fn); },
      threads};
  fbn::BatchNormGradCpu(p, t, parallel_for);
}
