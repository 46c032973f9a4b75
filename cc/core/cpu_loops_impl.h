// Bodies of the CPU loops declared in cpu_loops.h. No include guard on purpose: each
// cpu_loops_<isa>.cc includes this file once, inside its own namespace and under its own
// `#pragma GCC target`, to compile one copy per instruction set. Standard headers must be
// included before it, outside the target region.
//
// Every loop is templated on F, the type the arithmetic is done in: double for the exact
// family, float for the fast one (see cpu_loops.h). Sums are always accumulated in
// double.

// Channels of a channels-last row handled per pass over a block: the accumulators (2 x 2 KiB)
// stay in L1 while rows stream past.
constexpr int64_t kChannelTile = 256;

// Element conversions (float16_convert.h) for the exact family, written so the loops vectorize
// around them. The fast family widens whole pieces instead (below).
inline float Widen(float v) { return v; }
inline float Widen(Half v) { return ToFloat(v); }
inline float Widen(BFloat16 v) { return ToFloat(v); }

template <typename F, typename T>
inline F Load(const T& v) {
  return static_cast<F>(Widen(v));
}

// x_backprop rounded to T: once from double, or from the float result.
template <typename T>
inline T Store(double v) {
  return FromDouble<T>(v);
}
template <typename T>
inline T Store(float v) {
  return FromFloat<T>(v);
}

// Columns per register tile of the fast sums: two float accumulators of this width stay in
// vector registers across a group of rows (four AVX-512 registers each).
constexpr int64_t kRegisterTile = 64;

// The fast sums of one group of at most kFastGroup rows over columns [0, kRegisterTile): added
// in registers, then into the double accumulators. The fixed width lets the compiler keep the
// group sums in registers instead of reloading and storing them for every row.
template <typename T>
void SumRegisterTile(const T* dy, const T* x, int64_t stride, int64_t rows, const float* mean,
                     double* sum_dy, double* sum_dy_xc) {
  float gd[kRegisterTile] = {};
  float gx[kRegisterTile] = {};
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict d = dy + r * stride;
    const T* __restrict v = x + r * stride;
    for (int64_t j = 0; j < kRegisterTile; ++j) {
      const float d0 = Load<float>(d[j]);
      gd[j] += d0;
      gx[j] += d0 * (Load<float>(v[j]) - mean[j]);
    }
  }
  for (int64_t j = 0; j < kRegisterTile; ++j) {
    sum_dy[j] += static_cast<double>(gd[j]);
    sum_dy_xc[j] += static_cast<double>(gx[j]);
  }
}

// Down the rows a tile of columns at a time (the caller passes windows that fit the cache). The
// exact family adds each term to the double accumulators; the fast one adds kFastGroup rows'
// terms in float first (in registers, SumRegisterTile, for whole tiles of kRegisterTile), then
// that partial sum to the double accumulators.
template <typename T, typename F>
void SumRows(const T* dy, const T* x, int64_t stride, int64_t rows, int64_t width, const F* mean,
             double* sum_dy, double* sum_dy_xc) {
  constexpr int64_t kGroup = std::is_same<F, float>::value ? kFastGroup : 1;
  int64_t first = 0;
  if constexpr (std::is_same<F, float>::value) {
    // Rows exactly one register tile wide (64 channels, or fewer folded into 64). Wider rows
    // measured slower with register tiles than with the L1 group arrays below, whether the
    // tiles went across a group of rows or down all of them.
    if (width == kRegisterTile) {
      first = width;
      for (int64_t r0 = 0; r0 < rows; r0 += kFastGroup) {
        SumRegisterTile(dy + r0 * stride, x + r0 * stride, stride,
                        std::min(kFastGroup, rows - r0), mean, sum_dy, sum_dy_xc);
      }
    }
  }
  for (int64_t c0 = first; c0 < width; c0 += kChannelTile) {    const int64_t tile = std::min(kChannelTile, width - c0);
    double* __restrict sd = sum_dy + c0;
    double* __restrict sx = sum_dy_xc + c0;
    const F* __restrict m = mean + c0;
    F group_dy[kChannelTile];
    F group_dy_xc[kChannelTile];
    for (int64_t r0 = 0; r0 < rows; r0 += kGroup) {
      const int64_t r1 = std::min(rows, r0 + kGroup);
      F* __restrict gd = group_dy;
      F* __restrict gx = group_dy_xc;
      for (int64_t r = r0; r < r1; ++r) {
        const T* __restrict d = dy + r * stride + c0;
        const T* __restrict v = x + r * stride + c0;
        if (kGroup == 1) {
          for (int64_t j = 0; j < tile; ++j) {
            const F d0 = Load<F>(d[j]);
            sd[j] += static_cast<double>(d0);
            sx[j] += static_cast<double>(d0 * (Load<F>(v[j]) - m[j]));
          }
        } else if (r == r0) {
          for (int64_t j = 0; j < tile; ++j) {
            const F d0 = Load<F>(d[j]);
            gd[j] = d0;
            gx[j] = d0 * (Load<F>(v[j]) - m[j]);
          }
        } else {
          for (int64_t j = 0; j < tile; ++j) {
            const F d0 = Load<F>(d[j]);
            gd[j] += d0;
            gx[j] += d0 * (Load<F>(v[j]) - m[j]);
          }
        }
      }
      if (kGroup == 1) continue;
      for (int64_t j = 0; j < tile; ++j) {
        sd[j] += static_cast<double>(gd[j]);
        sx[j] += static_cast<double>(gx[j]);
      }
    }
  }
}

// Along a run: kLanes double lanes; the fast family first adds the terms of four consecutive
// groups of kLanes elements pairwise in float.
template <typename T, typename F>
void SumRun(const T* dy, const T* x, F mean, int64_t length, LaneSums* sums) {
  double lane_dy[kLanes];
  double lane_dy_xc[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    lane_dy[j] = sums->dy[j];
    lane_dy_xc[j] = sums->dy_xc[j];
  }
  constexpr int kGroup = std::is_same<F, float>::value ? 4 : 1;  // fewer than kFastGroup
  constexpr int kStep = kGroup * kLanes;
  int64_t i = 0;
  for (; i + kStep <= length; i += kStep) {
    for (int j = 0; j < kLanes; ++j) {
      const T* d = dy + i + j;
      const T* v = x + i + j;
      if (kGroup == 4) {
        const F d0 = Load<F>(d[0]), d1 = Load<F>(d[kLanes]);
        const F d2 = Load<F>(d[2 * kLanes]), d3 = Load<F>(d[3 * kLanes]);
        lane_dy[j] += static_cast<double>((d0 + d1) + (d2 + d3));
        lane_dy_xc[j] += static_cast<double>(
            (d0 * (Load<F>(v[0]) - mean) + d1 * (Load<F>(v[kLanes]) - mean)) +
            (d2 * (Load<F>(v[2 * kLanes]) - mean) + d3 * (Load<F>(v[3 * kLanes]) - mean)));
      } else {
        const F d0 = Load<F>(d[0]);
        lane_dy[j] += static_cast<double>(d0);
        lane_dy_xc[j] += static_cast<double>(d0 * (Load<F>(v[0]) - mean));
      }
    }
  }
  for (int j = 0; i < length; ++i, j = (j + 1) % kLanes) {
    const F d0 = Load<F>(dy[i]);
    lane_dy[j] += static_cast<double>(d0);
    lane_dy_xc[j] += static_cast<double>(d0 * (Load<F>(x[i]) - mean));
  }
  for (int j = 0; j < kLanes; ++j) {
    sums->dy[j] = lane_dy[j];
    sums->dy_xc[j] = lane_dy_xc[j];
  }
}

template <typename T, typename F>
void InferenceDx(const T* dy, T* dx, const DxCoefficients<F>& k, int64_t count) {
  const T* __restrict d = dy;
  T* __restrict out = dx;
  const F* __restrict a = k.scale_inv_std;
  for (int64_t j = 0; j < count; ++j) out[j] = Store<T>(Load<F>(d[j]) * a[j]);
}

template <typename T, typename F>
void TrainingDx(const T* dy, const T* x, T* dx, const DxCoefficients<F>& k, int64_t count) {
  const T* __restrict d = dy;
  const T* __restrict v = x;
  T* __restrict out = dx;
  const F* __restrict a = k.scale_inv_std;
  const F* __restrict dm = k.dy_mean;
  const F* __restrict m = k.mean;
  const F* __restrict b = k.xc_coef;
  for (int64_t j = 0; j < count; ++j) {
    out[j] = Store<T>(a[j] * ((Load<F>(d[j]) - dm[j]) - (Load<F>(v[j]) - m[j]) * b[j]));
  }
}

template <typename T, typename F>
void InferenceDxRun(const T* dy, T* dx, const DxCoefficients<F>& k, int64_t c, int64_t length) {
  const T* __restrict d = dy;
  T* __restrict out = dx;
  const F a = k.scale_inv_std[c];
  for (int64_t i = 0; i < length; ++i) out[i] = Store<T>(Load<F>(d[i]) * a);
}

template <typename T, typename F>
void TrainingDxRun(const T* dy, const T* x, T* dx, const DxCoefficients<F>& k, int64_t c,
                   int64_t length) {
  const T* __restrict d = dy;
  const T* __restrict v = x;
  T* __restrict out = dx;
  const F a = k.scale_inv_std[c], dm = k.dy_mean[c], m = k.mean[c], b = k.xc_coef[c];
  for (int64_t i = 0; i < length; ++i) {
    out[i] = Store<T>(a * ((Load<F>(d[i]) - dm) - (Load<F>(v[i]) - m) * b));
  }
}

// The fast family for half: pieces of the tensors are widened to float in L1, the float loops
// run on them, and x_backprop is narrowed back, with the F16C conversion instructions where the
// copy has them (GCC does not vectorize _Float16 conversions, and the portable conversions cost
// more than the arithmetic); float16_convert.h gives the same bits elsewhere. The pieces follow
// the float loops' own groups (rows of a tile, 4 * kLanes along a run), so the sums add in the
// same order as for a float tensor. bfloat16 widens with a shift, which the direct loops
// vectorize well: it measured faster without the pieces.
constexpr int64_t kPiece = 256;

inline void WidenPiece(const Half* src, int64_t n, float* dst) {
  int64_t i = 0;
#if defined(FBN_LOOPS_HAVE_AVX512)
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(
                                  reinterpret_cast<const __m256i*>(src + i))));
  }
#endif
#if defined(FBN_LOOPS_HAVE_F16C)
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
#endif
  for (; i < n; ++i) dst[i] = HalfBitsToFloat(src[i].bits);
}
inline void NarrowPiece(const float* src, int64_t n, Half* dst) {
  int64_t i = 0;
#if defined(FBN_LOOPS_HAVE_AVX512)
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
#endif
#if defined(FBN_LOOPS_HAVE_F16C)
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) dst[i].bits = FloatToHalfBits(src[i]);
}

template <typename T>
void WidenedSumRows(const T* dy, const T* x, int64_t stride, int64_t rows, int64_t width,
                    const float* mean, double* sum_dy, double* sum_dy_xc) {
  float d[kFastGroup * kPiece];
  float v[kFastGroup * kPiece];
  for (int64_t c0 = 0; c0 < width; c0 += kPiece) {
    const int64_t tile = std::min(kPiece, width - c0);
    for (int64_t r0 = 0; r0 < rows; r0 += kFastGroup) {
      const int64_t n = std::min(kFastGroup, rows - r0);
      for (int64_t i = 0; i < n; ++i) {
        WidenPiece(dy + (r0 + i) * stride + c0, tile, d + i * tile);
        WidenPiece(x + (r0 + i) * stride + c0, tile, v + i * tile);
      }
      SumRows<float, float>(d, v, tile, n, tile, mean + c0, sum_dy + c0, sum_dy_xc + c0);
    }
  }
}

template <typename T>
void WidenedSumRun(const T* dy, const T* x, float mean, int64_t length, LaneSums* sums) {
  float d[kPiece];
  float v[kPiece];
  for (int64_t p = 0; p < length; p += kPiece) {
    const int64_t n = std::min(kPiece, length - p);
    WidenPiece(dy + p, n, d);
    WidenPiece(x + p, n, v);
    SumRun<float, float>(d, v, mean, n, sums);
  }
}

// Calls fn(first, n) for the pieces of [0, count).
template <typename Fn>
inline void ForEachPiece(int64_t count, Fn&& fn) {
  for (int64_t p = 0; p < count; p += kPiece) fn(p, std::min(kPiece, count - p));
}

// The coefficients of columns [p, ...).
inline DxCoefficients<float> Shifted(const DxCoefficients<float>& k, int64_t p) {
  return {k.mean + p, k.scale_inv_std + p, k.dy_mean ? k.dy_mean + p : nullptr,
          k.xc_coef ? k.xc_coef + p : nullptr};
}

template <typename T>
void WidenedInferenceDx(const T* dy, T* dx, const DxCoefficients<float>& k, int64_t count) {
  float d[kPiece];
  float out[kPiece];
  ForEachPiece(count, [&](int64_t p, int64_t n) {
    WidenPiece(dy + p, n, d);
    InferenceDx<float, float>(d, out, Shifted(k, p), n);
    NarrowPiece(out, n, dx + p);
  });
}

template <typename T>
void WidenedTrainingDx(const T* dy, const T* x, T* dx, const DxCoefficients<float>& k,
                       int64_t count) {
  float d[kPiece];
  float v[kPiece];
  float out[kPiece];
  ForEachPiece(count, [&](int64_t p, int64_t n) {
    WidenPiece(dy + p, n, d);
    WidenPiece(x + p, n, v);
    TrainingDx<float, float>(d, v, out, Shifted(k, p), n);
    NarrowPiece(out, n, dx + p);
  });
}

template <typename T>
void WidenedInferenceDxRun(const T* dy, T* dx, const DxCoefficients<float>& k, int64_t c,
                           int64_t length) {
  float d[kPiece];
  float out[kPiece];
  ForEachPiece(length, [&](int64_t p, int64_t n) {
    WidenPiece(dy + p, n, d);
    InferenceDxRun<float, float>(d, out, k, c, n);
    NarrowPiece(out, n, dx + p);
  });
}

template <typename T>
void WidenedTrainingDxRun(const T* dy, const T* x, T* dx, const DxCoefficients<float>& k,
                          int64_t c, int64_t length) {
  float d[kPiece];
  float v[kPiece];
  float out[kPiece];
  ForEachPiece(length, [&](int64_t p, int64_t n) {
    WidenPiece(dy + p, n, d);
    WidenPiece(x + p, n, v);
    TrainingDxRun<float, float>(d, v, out, k, c, n);
    NarrowPiece(out, n, dx + p);
  });
}

template <typename T, typename F>
const CpuLoops<T, F>* Loops() {
  if constexpr (std::is_same<F, float>::value && std::is_same<T, Half>::value) {
    static const CpuLoops<T, F> widened = {
        WidenedSumRows<Half>,     WidenedSumRun<Half>,         WidenedInferenceDx<Half>,
        WidenedTrainingDx<Half>, WidenedInferenceDxRun<Half>, WidenedTrainingDxRun<Half>};
    return &widened;
  } else {
    static const CpuLoops<T, F> direct = {SumRows<T, F>,        SumRun<T, F>,
                                          InferenceDx<T, F>,    TrainingDx<T, F>,
                                          InferenceDxRun<T, F>, TrainingDxRun<T, F>};
    return &direct;
  }
}
FBN_INSTANTIATE_LOOPS(float)
FBN_INSTANTIATE_LOOPS(Half)
FBN_INSTANTIATE_LOOPS(BFloat16)
