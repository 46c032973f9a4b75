// Bodies of the CPU loops declared in cpu_loops.h. No include guard on purpose: each
// cpu_loops_<isa>.cc includes this file once, inside its own namespace and under its own
// `#pragma GCC target`, to compile one copy per instruction set. Standard headers must be
// included before it, outside the target region.

#include "cc/core/cpu_simd.h"

// ======== Fast family: float arithmetic in 16-lane vectors, sums moved to double after at
// most kFastGroup terms per lane.

// Vectors per register tile of the rows loops: the tile's float group sums, means and
// coefficients stay in registers across a group of rows (as many as the copy's registers hold;
// tiles only split the columns, so they do not change any result).
#if defined(FBN_SIMD_AVX512)
constexpr int kTileVectors = 8;
#elif defined(FBN_SIMD_AVX2)
constexpr int kTileVectors = 2;
#else
constexpr int kTileVectors = 1;
#endif

// Lanes of vector v in a tile of kVectors vectors whose last vector has `last` lanes.
template <int kVectors, bool kWhole>
FBN_INLINE int TileLanes(int v, int last) {
  return kWhole || v < kVectors - 1 ? kLanes : last;
}

// Calls tile(column, last, vectors, false) with vectors == count as a compile-time constant.
template <int kVectors, typename Tile>
FBN_INLINE void CallWithVectors(int count, int64_t column, int last, const Tile& tile) {
  if constexpr (kVectors > 1) {
    if (count < kVectors) return CallWithVectors<kVectors - 1>(count, column, last, tile);
  }
  tile(column, last, std::integral_constant<int, kVectors>{}, std::false_type{});
}

// Calls tile(column, last, vectors, whole) for the register tiles across `width` columns: whole
// tiles of kTileVectors vectors, then one of the remaining vectors, the last of them `last`
// lanes wide. `vectors` and `whole` come as compile-time constants.
template <typename Tile>
FBN_INLINE void ForEachTile(int64_t width, const Tile& tile) {
  constexpr int64_t kTileWidth = kTileVectors * kLanes;
  int64_t j = 0;
  for (; j + kTileWidth <= width; j += kTileWidth) {
    tile(j, kLanes, std::integral_constant<int, kTileVectors>{}, std::true_type{});
  }
  const int rest = static_cast<int>(width - j);
  if (rest == 0) return;
  const int vectors = (rest + kLanes - 1) / kLanes;
  CallWithVectors<kTileVectors>(vectors, j, rest - (vectors - 1) * kLanes, tile);
}

// Rows [0, rows) of one tile starting at element `at` of row 0: the terms added in float, in
// registers, kFastGroup rows at a time, then into the double sums (also in registers while the
// tile lasts); in inference also x_backprop of the tile.
template <typename T, int kVectors, bool kWhole, bool kInference>
FBN_INLINE void SumTile(const T* dy, const T* x, T* dx, int64_t at, int64_t stride, int64_t rows,
                        const float* mean, const float* scale_inv_std, int last, double* sum_dy,
                        double* sum_dy_xc) {
  Floats m[kVectors], a[kVectors];
  Doubles total_dy[kVectors], total_dy_xc[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    const int n = TileLanes<kVectors, kWhole>(v, last);
    m[v] = LoadUpTo(mean + v * kLanes, n);
    if constexpr (kInference) a[v] = LoadUpTo(scale_inv_std + v * kLanes, n);
    total_dy[v] = Doubles{};
    total_dy_xc[v] = Doubles{};
  }
  for (int64_t r0 = 0; r0 < rows; r0 += kFastGroup) {
    Floats group_dy[kVectors] = {}, group_dy_xc[kVectors] = {};
    const int64_t r1 = std::min(rows, r0 + kFastGroup);
    for (int64_t r = r0; r < r1; ++r, at += stride) {
      for (int v = 0; v < kVectors; ++v) {
        const int n = TileLanes<kVectors, kWhole>(v, last);
        const Floats d = LoadUpTo(dy + at + v * kLanes, n);
        group_dy[v] += d;
        group_dy_xc[v] += d * (LoadUpTo(x + at + v * kLanes, n) - m[v]);
        if constexpr (kInference) StoreUpTo(dx + at + v * kLanes, d * a[v], n);
      }
    }
    for (int v = 0; v < kVectors; ++v) {
      Accumulate(&total_dy[v], group_dy[v]);
      Accumulate(&total_dy_xc[v], group_dy_xc[v]);
    }
  }
  for (int v = 0; v < kVectors; ++v) {
    const int n = TileLanes<kVectors, kWhole>(v, last);
    AddDoublesTo(sum_dy + v * kLanes, total_dy[v], n);
    AddDoublesTo(sum_dy_xc + v * kLanes, total_dy_xc[v], n);
  }
}

// x_backprop of inference for `rows` rows in row order.
template <typename T>
FBN_INLINE void InferenceDxRowMajor(const T* dy, T* dx, int64_t at, int64_t stride, int64_t rows,
                                    int64_t width, const float* scale_inv_std) {
  for (int64_t r = 0; r < rows; ++r, at += stride) {
    for (int64_t j = 0; j < width; j += kLanes) {
      const int n = static_cast<int>(std::min<int64_t>(kLanes, width - j));
      StoreUpTo(dx + at + j, LoadUpTo(dy + at + j, n) * LoadUpTo(scale_inv_std + j, n), n);
    }
  }
}

// A row of one tile goes down all rows with the tile's sums in registers. Wider rows go in
// groups of kFastGroup rows, each group across the row tile by tile (a tile going down all rows
// would read memory by jumps of a row); inference then writes their x_backprop row after row
// (stores that jump between rows defeat the write prefetching).
template <typename T, bool kInference>
void SumRowsImpl(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows, int64_t width,
                 const float* mean, const float* scale_inv_std, double* sum_dy,
                 double* sum_dy_xc) {
  const bool one_tile = width <= kTileVectors * kLanes;
  const int64_t group_rows = one_tile ? rows : kFastGroup;
  for (int64_t r0 = 0; r0 < rows; r0 += group_rows) {
    const int64_t n = std::min(group_rows, rows - r0);
    ForEachTile(width, [&](int64_t j, int last, auto vectors, auto whole) {
      constexpr int kVectors = decltype(vectors)::value;
      constexpr bool kWhole = decltype(whole)::value;
      if (kInference && one_tile) {
        SumTile<T, kVectors, kWhole, true>(dy, x, dx, r0 * stride + j, stride, n, mean + j,
                                           scale_inv_std + j, last, sum_dy + j, sum_dy_xc + j);
      } else {
        SumTile<T, kVectors, kWhole, false>(dy, x, nullptr, r0 * stride + j, stride, n, mean + j,
                                            nullptr, last, sum_dy + j, sum_dy_xc + j);
      }
    });
    if (kInference && !one_tile) {
      InferenceDxRowMajor(dy, dx, r0 * stride, stride, n, width, scale_inv_std);
    }
  }
}

template <typename T>
void SumRows(const T* dy, const T* x, int64_t stride, int64_t rows, int64_t width,
             const float* mean, double* sum_dy, double* sum_dy_xc) {
  SumRowsImpl<T, false>(dy, x, nullptr, stride, rows, width, mean, nullptr, sum_dy, sum_dy_xc);
}

template <typename T>
void SumRowsInference(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                      int64_t width, const float* mean, const float* scale_inv_std,
                      double* sum_dy, double* sum_dy_xc) {
  SumRowsImpl<T, true>(dy, x, dx, stride, rows, width, mean, scale_inv_std, sum_dy, sum_dy_xc);
}

// A channel's (or column vector's) training coefficients in vectors.
struct DxVectors {
  Floats mean, scale_inv_std, dy_mean, xc_coef;
};

// TensorFlow's grouping of the training x_backprop.
FBN_INLINE Floats TrainingDx(const Floats& dy, const Floats& x, const DxVectors& k) {
  return k.scale_inv_std * ((dy - k.dy_mean) - (x - k.mean) * k.xc_coef);
}

// x_backprop of at most kFastGroup rows of one tile, its coefficients in registers.
template <typename T, int kVectors, bool kWhole>
FBN_INLINE void TrainingDxTile(const T* dy, const T* x, T* dx, int64_t at, int64_t stride,
                               int64_t rows, const DxCoefficients<float>& k, int64_t column,
                               int last) {
  DxVectors kv[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    const int n = TileLanes<kVectors, kWhole>(v, last);
    const int64_t j = column + v * kLanes;
    kv[v] = {LoadUpTo(k.mean + j, n), LoadUpTo(k.scale_inv_std + j, n),
             LoadUpTo(k.dy_mean + j, n), LoadUpTo(k.xc_coef + j, n)};
  }
  for (int64_t r = 0; r < rows; ++r, at += stride) {
    for (int v = 0; v < kVectors; ++v) {
      const int n = TileLanes<kVectors, kWhole>(v, last);
      const int64_t e = at + v * kLanes;
      StoreUpTo(dx + e, TrainingDx(LoadUpTo(dy + e, n), LoadUpTo(x + e, n), kv[v]), n);
    }
  }
}

template <typename T>
void TrainingDxRows(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows, int64_t width,
                    const DxCoefficients<float>& k) {
  if (width <= kTileVectors * kLanes) {  // one tile: its coefficients stay in registers
    for (int64_t r0 = 0; r0 < rows; r0 += kFastGroup) {
      const int64_t n = std::min(kFastGroup, rows - r0);
      ForEachTile(width, [&](int64_t j, int last, auto vectors, auto whole) {
        TrainingDxTile<T, decltype(vectors)::value, decltype(whole)::value>(
            dy, x, dx, r0 * stride + j, stride, n, k, j, last);
      });
    }
    return;
  }
  // Wider rows in row order (see SumRowsImpl), the coefficients from the cache.
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = r * stride;
    for (int64_t j = 0; j < width; j += kLanes) {
      const int n = static_cast<int>(std::min<int64_t>(kLanes, width - j));
      const DxVectors kj{LoadUpTo(k.mean + j, n), LoadUpTo(k.scale_inv_std + j, n),
                         LoadUpTo(k.dy_mean + j, n), LoadUpTo(k.xc_coef + j, n)};
      StoreUpTo(dx + row + j, TrainingDx(LoadUpTo(dy + row + j, n), LoadUpTo(x + row + j, n), kj),
                n);
    }
  }
}

// Along a run: groups of kFastGroup vectors, element i of the run in lane i % kLanes, each
// group's float lane sums added into double lanes (registers), which are added together in a
// fixed order at the end of the run (ReduceLanes) and then into the channel's sums.
template <typename T, bool kInference>
void SumRunImpl(const T* dy, const T* x, T* dx, float mean, float scale_inv_std, int64_t length,
                double* sum_dy, double* sum_dy_xc) {
  const Floats m = Broadcast(mean);
  const Floats a = Broadcast(scale_inv_std);
  Doubles lanes_dy = {};
  Doubles lanes_dy_xc = {};
  for (int64_t i = 0; i < length;) {
    const int64_t end = std::min(length, i + kFastGroup * kLanes);
    Floats group_dy = {};
    Floats group_dy_xc = {};
    for (; i < end; i += kLanes) {
      const int n = static_cast<int>(std::min<int64_t>(kLanes, end - i));
      const Floats d = LoadUpTo(dy + i, n);
      group_dy += d;
      group_dy_xc += d * (LoadUpTo(x + i, n) - m);
      if constexpr (kInference) StoreUpTo(dx + i, d * a, n);
    }
    Accumulate(&lanes_dy, group_dy);
    Accumulate(&lanes_dy_xc, group_dy_xc);
  }
  *sum_dy += ReduceLanes(lanes_dy);
  *sum_dy_xc += ReduceLanes(lanes_dy_xc);
}

template <typename T>
void SumRun(const T* dy, const T* x, float mean, int64_t length, double* sum_dy,
            double* sum_dy_xc) {
  SumRunImpl<T, false>(dy, x, nullptr, mean, 0.0f, length, sum_dy, sum_dy_xc);
}

template <typename T>
void SumRunInference(const T* dy, const T* x, T* dx, float mean, float scale_inv_std,
                     int64_t length, double* sum_dy, double* sum_dy_xc) {
  SumRunImpl<T, true>(dy, x, dx, mean, scale_inv_std, length, sum_dy, sum_dy_xc);
}

template <typename T>
void TrainingDxRun(const T* dy, const T* x, T* dx, int64_t length,
                   const RunCoefficients<float>& k) {
  const DxVectors kv{Broadcast(k.mean), Broadcast(k.scale_inv_std), Broadcast(k.dy_mean),
                     Broadcast(k.xc_coef)};
  for (int64_t i = 0; i < length; i += kLanes) {
    const int n = static_cast<int>(std::min<int64_t>(kLanes, length - i));
    StoreUpTo(dx + i, TrainingDx(LoadUpTo(dy + i, n), LoadUpTo(x + i, n), kv), n);
  }
}

// ======== Exact family: plain loops in double (the compiler vectorizes them; without
// reassociation every copy computes the same thing), compensated sums.

// sum + v with its rounding error (Knuth's TwoSum) added to *error. Once the sum is infinite or
// NaN the error term is left alone, so special values propagate through the sum as in a plain one.
FBN_INLINE void AddCompensated(double* sum, double* error, double v) {
  const double t = *sum + v;
  const double z = t - *sum;
  const double e = (*sum - (t - z)) + (v - z);
  *error += t - t == 0.0 ? e : 0.0;
  *sum = t;
}

template <typename T>
void ExactSumRows(const T* dy, const T* x, int64_t stride, int64_t rows, int64_t width,
                  const double* mean, const CompensatedColumns& s) {
  double* __restrict sum_dy = s.dy;
  double* __restrict error_dy = s.dy_error;
  double* __restrict sum_dy_xc = s.dy_xc;
  double* __restrict error_dy_xc = s.dy_xc_error;
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict d = dy + r * stride;
    const T* __restrict v = x + r * stride;
    for (int64_t j = 0; j < width; ++j) {
      const double dj = ToFloat(d[j]);
      AddCompensated(&sum_dy[j], &error_dy[j], dj);
      AddCompensated(&sum_dy_xc[j], &error_dy_xc[j], dj * (ToFloat(v[j]) - mean[j]));
    }
  }
}

template <typename T>
void ExactSumRun(const T* dy, const T* x, double mean, int64_t length, CompensatedLanes* s) {
  int64_t i = 0;
  for (; i + kRunLanes <= length; i += kRunLanes) {
    for (int l = 0; l < kRunLanes; ++l) {
      const double d = ToFloat(dy[i + l]);
      AddCompensated(&s->dy[l], &s->dy_error[l], d);
      AddCompensated(&s->dy_xc[l], &s->dy_xc_error[l], d * (ToFloat(x[i + l]) - mean));
    }
  }
  for (int l = 0; i + l < length; ++l) {
    const double d = ToFloat(dy[i + l]);
    AddCompensated(&s->dy[l], &s->dy_error[l], d);
    AddCompensated(&s->dy_xc[l], &s->dy_xc_error[l], d * (ToFloat(x[i + l]) - mean));
  }
}

template <typename T>
void ExactDxRows(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows, int64_t width,
                 const DxCoefficients<double>& k) {
  const double* __restrict a = k.scale_inv_std;
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict d = dy + r * stride;
    const T* __restrict v = x + r * stride;
    T* __restrict out = dx + r * stride;
    if (k.dy_mean == nullptr) {
      for (int64_t j = 0; j < width; ++j) out[j] = FromDouble<T>(ToFloat(d[j]) * a[j]);
      continue;
    }
    const double* __restrict m = k.mean;
    const double* __restrict dm = k.dy_mean;
    const double* __restrict b = k.xc_coef;
    for (int64_t j = 0; j < width; ++j) {
      const double xc = ToFloat(v[j]) - m[j];
      out[j] = FromDouble<T>(a[j] * ((ToFloat(d[j]) - dm[j]) - xc * b[j]));
    }
  }
}

template <typename T>
void ExactDxRun(const T* dy, const T* x, T* dx, int64_t length, bool training,
                const RunCoefficients<double>& k) {
  const T* __restrict d = dy;
  const T* __restrict v = x;
  T* __restrict out = dx;
  const double a = k.scale_inv_std;
  if (!training) {
    for (int64_t i = 0; i < length; ++i) out[i] = FromDouble<T>(ToFloat(d[i]) * a);
    return;
  }
  const double m = k.mean, dm = k.dy_mean, b = k.xc_coef;
  for (int64_t i = 0; i < length; ++i) {
    out[i] = FromDouble<T>(a * ((ToFloat(d[i]) - dm) - (ToFloat(v[i]) - m) * b));
  }
}

template <typename T>
const CpuLoops<T>* Loops() {
  static const CpuLoops<T> loops = {
      SumRows<T>,      SumRowsInference<T>, TrainingDxRows<T>, SumRun<T>,
      SumRunInference<T>, TrainingDxRun<T>, ExactSumRows<T>,   ExactSumRun<T>,
      ExactDxRows<T>,  ExactDxRun<T>};
  return &loops;
}
FBN_INSTANTIATE_LOOPS()
