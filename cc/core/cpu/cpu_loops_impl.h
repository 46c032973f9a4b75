// Bodies of the CPU loops declared in cpu_loops.h. No include guard on purpose: each
// cpu_loops_<isa>.cc includes this file once, inside its own namespace and under its own
// `#pragma GCC target`, to compile one copy per instruction set. Standard headers must be
// included before it, outside the target region.

#include "cc/core/cpu/cpu_simd.h"
#include "cc/core/training_x_backprop.h"

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

// What a sums loop does with x_backprop: nothing (training writes it in a second sweep), or
// inference's dx = dy · scale_inv_std, stored normally or streamed (StoreStreaming).
enum class Dx { kNone, kStore, kStream };

template <Dx kDx, typename T>
FBN_INLINE void StoreDx(T* p, const Floats& v, int n) {
  if constexpr (kDx == Dx::kStream) {
    StoreStreaming(p, v, n);
  } else {
    StoreUpTo(p, v, n);
  }
}

// The terms of one vector of elements: dy, and dy · (x − mean).
struct Terms {
  Floats dy, dy_xc;
};
FBN_INLINE Terms operator+(const Terms& a, const Terms& b) {
  return {a.dy + b.dy, a.dy_xc + b.dy_xc};
}

// term(0) + ... + term(7) as a tree of depth 3 (kFastGroup terms), the same in every copy.
template <typename Term>
FBN_INLINE Terms Tree(const Term& term) {
  static_assert(kFastGroup == 8, "the tree adds kFastGroup terms");
  return ((term(0) + term(1)) + (term(2) + term(3))) + ((term(4) + term(5)) + (term(6) + term(7)));
}

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
// tiles of kVectors vectors (kTileVectors unless a loop keeps more per vector in registers),
// then one of the remaining vectors, the last of them `last` lanes wide. `vectors` and `whole`
// come as compile-time constants.
template <int kVectors = kTileVectors, typename Tile>
FBN_INLINE void ForEachTile(int64_t width, const Tile& tile) {
  constexpr int64_t kTileWidth = kVectors * kLanes;
  int64_t j = 0;
  for (; j + kTileWidth <= width; j += kTileWidth) {
    tile(j, kLanes, std::integral_constant<int, kVectors>{}, std::true_type{});
  }
  const int rest = static_cast<int>(width - j);
  if (rest == 0) return;
  const int vectors = (rest + kLanes - 1) / kLanes;
  CallWithVectors<kVectors>(vectors, j, rest - (vectors - 1) * kLanes, tile);
}

// One tile's means and, in inference, x_backprop factors, in registers.
template <int kVectors, bool kWhole, Dx kDx>
struct TileColumns {
  Floats mean[kVectors], scale_inv_std[kVectors];

  FBN_INLINE TileColumns(const float* m, const float* a, int last) {
    for (int v = 0; v < kVectors; ++v) {
      const int n = TileLanes<kVectors, kWhole>(v, last);
      mean[v] = LoadUpTo(m + v * kLanes, n);
      if constexpr (kDx != Dx::kNone) scale_inv_std[v] = LoadUpTo(a + v * kLanes, n);
    }
  }
};

// Rows [0, rows) of one tile starting at element `at` of row 0, at most kFastGroup of them: the
// terms added in float into the group sums, in registers; in inference also x_backprop.
template <typename T, int kVectors, bool kWhole, Dx kDx>
FBN_INLINE void SumGroupOfTile(const T* dy, const T* x, T* dx, int64_t at, int64_t stride,
                               int64_t rows, const TileColumns<kVectors, kWhole, kDx>& k,
                               int last, Floats* group_dy, Floats* group_dy_xc) {
  for (int64_t r = 0; r < rows; ++r, at += stride) {
    for (int v = 0; v < kVectors; ++v) {
      const int n = TileLanes<kVectors, kWhole>(v, last);
      Floats d = LoadUpTo(dy + at + v * kLanes, n);
      Pin(d);
      group_dy[v] += d;
      group_dy_xc[v] += d * (LoadUpTo(x + at + v * kLanes, n) - k.mean[v]);
      if constexpr (kDx != Dx::kNone) {
        StoreDx<kDx>(dx + at + v * kLanes, d * k.scale_inv_std[v], n);
      }
    }
  }
}

// Rows [0, rows) of one tile: the terms added in float, kFastGroup rows at a time, then into
// the double totals, all in registers while the tile lasts; then the totals into the sums.
template <typename T, int kVectors, bool kWhole, Dx kDx>
FBN_INLINE void SumTile(const T* dy, const T* x, T* dx, int64_t at, int64_t stride, int64_t rows,
                        const float* mean, const float* scale_inv_std, int last, double* sum_dy,
                        double* sum_dy_xc) {
  const TileColumns<kVectors, kWhole, kDx> k(mean, scale_inv_std, last);
  Doubles total_dy[kVectors] = {}, total_dy_xc[kVectors] = {};
  for (int64_t r0 = 0; r0 < rows; r0 += kFastGroup, at += kFastGroup * stride) {
    Floats group_dy[kVectors] = {}, group_dy_xc[kVectors] = {};
    SumGroupOfTile<T, kVectors, kWhole, kDx>(dy, x, dx, at, stride,
                                             std::min(kFastGroup, rows - r0), k, last,
                                             group_dy, group_dy_xc);
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

// SumTile's terms, in its order, for rows wider than one tile but at most kMaxDownRowsWidth:
// the rows a group at a time across every tile, so that memory is read in order (a tile at a
// time down the rows reads in jumps of a row: 2.5 times as slow on an AVX2 machine, whose
// tiles are 32 columns), the double totals waiting in L1 between groups.
template <typename T, Dx kDx>
void SumRowsByGroups(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                     int64_t width, const float* mean, const float* scale_inv_std,
                     double* sum_dy, double* sum_dy_xc) {
  alignas(64) double totals[2][kMaxDownRowsWidth] = {};
  for (int64_t r0 = 0; r0 < rows; r0 += kFastGroup) {
    ForEachTile(width, [&](int64_t j, int last, auto vectors, auto whole) {
      constexpr int kVectors = decltype(vectors)::value;
      constexpr bool kWhole = decltype(whole)::value;
      const TileColumns<kVectors, kWhole, kDx> k(mean + j, kDx != Dx::kNone ? scale_inv_std + j
                                                                            : nullptr, last);
      Floats group_dy[kVectors] = {}, group_dy_xc[kVectors] = {};
      SumGroupOfTile<T, kVectors, kWhole, kDx>(dy, x, dx, r0 * stride + j, stride,
                                               std::min(kFastGroup, rows - r0), k, last,
                                               group_dy, group_dy_xc);
      for (int v = 0; v < kVectors; ++v) {
        double* total[2] = {totals[0] + j + v * kLanes, totals[1] + j + v * kLanes};
        Doubles t_dy = LoadDoubles(total[0]), t_dy_xc = LoadDoubles(total[1]);
        Accumulate(&t_dy, group_dy[v]);
        Accumulate(&t_dy_xc, group_dy_xc[v]);
        StoreDoubles(total[0], t_dy);
        StoreDoubles(total[1], t_dy_xc);
      }
    });
  }
  for (int64_t j = 0; j < width; j += kLanes) {
    const int n = static_cast<int>(std::min<int64_t>(kLanes, width - j));
    AddDoublesTo(sum_dy + j, LoadDoubles(totals[0] + j), n);
    AddDoublesTo(sum_dy_xc + j, LoadDoubles(totals[1] + j), n);
  }
}

// One position of SumRowsStriped: row i of every stripe, columns [j, j + n) from element `at`
// on; stripe k is present only where kAll or k < stripes. Each stripe's x_backprop is stored
// after the stripe's loads, or with kHoldStores after every stripe's (LaterStripesLoadsAlias):
// x_backprop and x stand at one page offset as TensorFlow's default build places them, and a
// store before the load of x held the load up. On a Zen 4 (2026-12-03, cores_interleaved)
// storing after x's load took 0.93-1.00x the time at one thread and 0.81-0.96x at two on
// 160-320 channels' inference at those offsets, 0.88-0.98x where nothing aliases.
template <typename T, Dx kDx, bool kAll, bool kHoldStores>
FBN_INLINE void SumStripedPosition(const T* dy, const T* x, T* dx, int64_t at,
                                   int64_t stripe_stride, int stripes, int n, const float* mean,
                                   const float* scale_inv_std, double* sum_dy,
                                   double* sum_dy_xc) {
  Floats m = LoadUpTo(mean, n);
  Pin(m);
  Floats a = kDx != Dx::kNone ? LoadUpTo(scale_inv_std, n) : Floats{};
  Pin(a);
  Floats held[kHoldStores ? kFastGroup : 1];
  const Terms sum = Tree([&](int k) {
    if (!kAll && k >= stripes) return Terms{};
    const int64_t e = at + k * stripe_stride;
    Floats d = LoadUpTo(dy + e, n);
    Pin(d);
    const Terms terms{d, d * (LoadUpTo(x + e, n) - m)};
    if constexpr (kDx != Dx::kNone && kHoldStores) {
      held[k] = d;
    } else if constexpr (kDx != Dx::kNone) {
      StoreDx<kDx>(dx + e, d * a, n);
    }
    return terms;
  });
  if constexpr (kDx != Dx::kNone && kHoldStores) {
    for (int k = 0; k < (kAll ? kFastGroup : stripes); ++k) {
      StoreDx<kDx>(dx + at + k * stripe_stride, held[k] * a, n);
    }
  }
  AddTo(sum_dy, sum.dy, n);
  AddTo(sum_dy_xc, sum.dy_xc, n);
}

// Rows wider than kMaxDownRowsWidth: the rows split into kFastGroup stripes walked side by side,
// so that memory is read as kFastGroup long sequential streams; a column's terms from the
// stripes are added as a tree in registers (depth 3: within the fast family's error bound),
// then into its double sums. The last stripe may be shorter.
FBN_INLINE int64_t StripeRows(int64_t rows) { return CeilDiv(rows, kFastGroup); }

template <typename T, Dx kDx, bool kHoldStores = false>
void SumRowsStriped(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows, int64_t width,
                    const float* mean, const float* scale_inv_std, double* sum_dy,
                    double* sum_dy_xc) {
  const int64_t stripe = StripeRows(rows);
  const int64_t full = rows - (kFastGroup - 1) * stripe;  // rows where every stripe has one
  for (int64_t i = 0; i < stripe; ++i) {
    const int stripes =
        static_cast<int>(std::min<int64_t>(kFastGroup, (rows - i + stripe - 1) / stripe));
    for (int64_t j = 0; j < width; j += kLanes) {
      const int n = static_cast<int>(std::min<int64_t>(kLanes, width - j));
      const float* a = kDx != Dx::kNone ? scale_inv_std + j : nullptr;
      if (i < full) {
        SumStripedPosition<T, kDx, true, kHoldStores>(dy, x, dx, i * stride + j, stripe * stride,
                                                      stripes, n, mean + j, a, sum_dy + j,
                                                      sum_dy_xc + j);
      } else {
        SumStripedPosition<T, kDx, false, kHoldStores>(dy, x, dx, i * stride + j,
                                                       stripe * stride, stripes, n, mean + j, a,
                                                       sum_dy + j, sum_dy_xc + j);
      }
    }
  }
}

// Rows of at most kMaxDownRowsWidth columns add each column's terms down the rows, in groups of
// kFastGroup: in one register tile where the row fits one (with AVX-512 every such row), else
// a group of rows at a time across the tiles, which adds the same terms in the same order.
// Wider rows go in stripes (a tile going down the rows would read memory in jumps of a row,
// which the hardware prefetchers follow badly). The choice between columns and stripes depends
// on the width only, never on the copy, since the two add the terms in different orders.
template <typename T, Dx kDx>
void SumRowsImpl(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows, int64_t width,
                 const float* mean, const float* scale_inv_std, double* sum_dy,
                 double* sum_dy_xc) {
  if (width > kMaxDownRowsWidth) {
    return SumRowsStriped<T, kDx>(dy, x, dx, stride, rows, width, mean, scale_inv_std,
                                         sum_dy, sum_dy_xc);
  }
  if (width > kTileVectors * kLanes) {
    return SumRowsByGroups<T, kDx>(dy, x, dx, stride, rows, width, mean, scale_inv_std, sum_dy,
                                   sum_dy_xc);
  }
  ForEachTile(width, [&](int64_t j, int last, auto vectors, auto whole) {
    SumTile<T, decltype(vectors)::value, decltype(whole)::value, kDx>(
        dy, x, dx, j, stride, rows, mean + j, kDx != Dx::kNone ? scale_inv_std + j : nullptr, last,
        sum_dy + j, sum_dy_xc + j);
  });
}

template <typename T>
void SumRows(const T* dy, const T* x, int64_t stride, int64_t rows, int64_t width,
             const float* mean, double* sum_dy, double* sum_dy_xc) {
  SumRowsImpl<T, Dx::kNone>(dy, x, nullptr, stride, rows, width, mean, nullptr, sum_dy,
                            sum_dy_xc);
}

// Whether a column vector's streamed store is one instruction that writes a whole cache line
// (the AVX-512 copy's float). Streamed stores of several rows at once then each complete a
// line; where a line takes two or more stores (the AVX2 and portable copies, 16-bit types),
// lines of several rows stay open at once.
template <typename T>
constexpr bool kStreamedStoreFillsLine =
    kParts == 1 && kLanes * static_cast<int64_t>(sizeof(T)) == kCacheLineBytes;

// Inference's x_backprop of a window row after row, dx = dy · scale_inv_std (SumStripedPosition's
// product), streamed.
template <typename T>
void StreamInferenceDxInOrder(const T* dy, T* dx, int64_t stride, int64_t rows, int64_t width,
                              const float* scale_inv_std) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = r * stride;
    for (int64_t j = 0; j < width; j += kLanes) {
      const int n = static_cast<int>(std::min<int64_t>(kLanes, width - j));
      StoreDx<Dx::kStream>(dx + row + j, LoadUpTo(dy + row + j, n) * LoadUpTo(scale_inv_std + j, n),
                           n);
    }
  }
}

// Whether a stripe's x_backprop stores share their low 12 address bits with the loads that
// follow them at the same position, the later stripes' y_backprop or x (k stripes on, 0 < k <
// kFastGroup): stripes a multiple of 2 or 4 KiB apart and the tensors at one page offset, as
// TensorFlow's default build places them. Where rows are also at least kHeldStripeRowBytes
// long, SumStripedPosition holds the position's x_backprop until its loads are done. Measured
// on a Zen 4 (2026-12-03, cores_interleaved, all three tensors 64 bytes into their pages,
// held against stored as read): 512-2048 channels' inference 0.62-0.83x the time at one and
// two threads (calls that stream x_backprop); 160-320 channels' 0.81-1.08x, within that host's
// noise, so narrower rows store each stripe after its own loads. At page offsets that alias
// nothing nothing is held, and the same calls measured 0.95-1.05x.
constexpr int64_t kHeldStripeRowBytes = 2048;

template <typename T>
bool LaterStripesLoadsAlias(const T* dy, const T* x, const T* dx, int64_t stripe_bytes) {
  for (int64_t k = 1; k < kFastGroup; ++k) {
    if (StoresAliasLoads(dx, BytesOn(dy, k * stripe_bytes), stripe_bytes, 1) ||
        StoresAliasLoads(dx, BytesOn(x, k * stripe_bytes), stripe_bytes, 1)) {
      return true;
    }
  }
  return false;
}

// Striped rows hold each position's x_backprop until its loads are done where later stripes'
// loads alias its stores (LaterStripesLoadsAlias) and rows are wide enough for that to pay.
// Streamed, where the stripes' stores would hold up their loads (StoresAliasLoads) and a line
// takes two or more stores (!kStreamedStoreFillsLine), rows wide enough for stripes are summed
// first and their x_backprop written after, in order, from dy just read into the caches: on an
// AMD EPYC Zen 3 (AVX2) 1.6-2.2x as fast there, and up to 1.4x slower where nothing aliases,
// which keeps the one sweep (docs/performance.md). Where each store fills a line (AVX-512,
// float) the one sweep is faster even where the stores alias: on a Zen 5 the split took
// 1.31-1.50x its time at one thread, 1.16-1.18x at two (16x14x14x512, 32x14x14x256 and
// 8x16x16x1024 at TensorFlow's page offsets, both in one process). The same products, so the
// same bits.
template <typename T>
void SumRowsInference(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                      int64_t width, const float* mean, const float* scale_inv_std,
                      double* sum_dy, double* sum_dy_xc, bool stream_dx) {
  const int64_t stripe_bytes = StripeRows(rows) * stride * static_cast<int64_t>(sizeof(T));
  const bool striped = width > kMaxDownRowsWidth;
  const bool held = striped && width * static_cast<int64_t>(sizeof(T)) >= kHeldStripeRowBytes &&
                    LaterStripesLoadsAlias(dy, x, dx, stripe_bytes);
  if (!stream_dx) {
    if (held) {
      return SumRowsStriped<T, Dx::kStore, true>(dy, x, dx, stride, rows, width, mean,
                                                 scale_inv_std, sum_dy, sum_dy_xc);
    }
    return SumRowsImpl<T, Dx::kStore>(dy, x, dx, stride, rows, width, mean, scale_inv_std,
                                      sum_dy, sum_dy_xc);
  }
  if (held && kStreamedStoreFillsLine<T>) {
    SumRowsStriped<T, Dx::kStream, true>(dy, x, dx, stride, rows, width, mean, scale_inv_std,
                                         sum_dy, sum_dy_xc);
  } else if (striped && !kStreamedStoreFillsLine<T> &&
             (StoresAliasLoads(dx, dy, stripe_bytes, kFastGroup) ||
              StoresAliasLoads(dx, x, stripe_bytes, kFastGroup))) {
    SumRowsStriped<T, Dx::kNone>(dy, x, nullptr, stride, rows, width, mean, nullptr, sum_dy,
                                 sum_dy_xc);
    StreamInferenceDxInOrder(dy, dx, stride, rows, width, scale_inv_std);
  } else {
    SumRowsImpl<T, Dx::kStream>(dy, x, dx, stride, rows, width, mean, scale_inv_std, sum_dy,
                                sum_dy_xc);
  }
  FenceStreamingStores();
}

// A channel's (or column vector's) training coefficients in vectors.
struct DxVectors {
  Floats mean, scale_inv_std, dy_mean, xc_coef;
};

FBN_INLINE Floats TrainingDx(const Floats& dy, const Floats& x, const DxVectors& k) {
  return TrainingXBackprop(k.scale_inv_std, dy, k.dy_mean, x, k.mean, k.xc_coef);
}

// x_backprop of at most kFastGroup rows of one tile, its coefficients in registers.
template <typename T, int kVectors, bool kWhole, Dx kDx>
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
      StoreDx<kDx>(dx + e, TrainingDx(LoadUpTo(dy + e, n), LoadUpTo(x + e, n), kv[v]), n);
    }
  }
}

// Column vectors of a tile of training's x_backprop by groups in rows wider than one register
// tile: the four coefficient vectors of each stay in registers. AVX-512 only: the AVX2 copy's
// one-vector tiles measured 0.94-1.08x its rows in order on a Zen 5, so it keeps that order.
#if defined(FBN_SIMD_AVX512)
constexpr int kWideDxVectors = 4;
#else
constexpr int kWideDxVectors = 0;
#endif

// kFastGroup rows at a time across register tiles of kVectors vectors.
template <int kVectors, typename T, Dx kDx>
void TrainingDxRowsByGroups(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                            int64_t width, const DxCoefficients<float>& k) {
  for (int64_t r0 = 0; r0 < rows; r0 += kFastGroup) {
    const int64_t n = std::min(kFastGroup, rows - r0);
    ForEachTile<kVectors>(width, [&](int64_t j, int last, auto vectors, auto whole) {
      TrainingDxTile<T, decltype(vectors)::value, decltype(whole)::value, kDx>(
          dy, x, dx, r0 * stride + j, stride, n, k, j, last);
    });
  }
}

template <typename T, Dx kDx>
void TrainingDxRowsImpl(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                        int64_t width, const DxCoefficients<float>& k, RowOrder order) {
  if (width <= kTileVectors * kLanes) {  // one tile: its coefficients stay in registers
    return TrainingDxRowsByGroups<kTileVectors, T, kDx>(dy, x, dx, stride, rows, width, k);
  }
  if constexpr (kWideDxVectors > 0) {  // wider rows by groups of narrower tiles
    if (order == RowOrder::kByGroups) {
      return TrainingDxRowsByGroups<kWideDxVectors, T, kDx>(dy, x, dx, stride, rows, width, k);
    }
  }
  // In order (see SumRowsImpl), the coefficients from the cache.
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = r * stride;
    for (int64_t j = 0; j < width; j += kLanes) {
      const int n = static_cast<int>(std::min<int64_t>(kLanes, width - j));
      const DxVectors kj{LoadUpTo(k.mean + j, n), LoadUpTo(k.scale_inv_std + j, n),
                         LoadUpTo(k.dy_mean + j, n), LoadUpTo(k.xc_coef + j, n)};
      StoreDx<kDx>(dx + row + j,
                   TrainingDx(LoadUpTo(dy + row + j, n), LoadUpTo(x + row + j, n), kj), n);
    }
  }
}

template <typename T>
void TrainingDxRows(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows, int64_t width,
                    const DxCoefficients<float>& k, bool stream_dx, RowOrder order) {
  if (!stream_dx) {
    return TrainingDxRowsImpl<T, Dx::kStore>(dy, x, dx, stride, rows, width, k, order);
  }
  TrainingDxRowsImpl<T, Dx::kStream>(dy, x, dx, stride, rows, width, k, order);
  FenceStreamingStores();
}

// The mean to subtract in a run's vector of n elements (V: Floats or Doubles): its missing
// lanes must give zero terms, and 0 · (0 − mean) is a NaN where the mean is not finite; then
// the mean goes in the first n lanes only (rare: a finite mean, the usual case, is used as it
// is).
template <typename V, typename E>
FBN_INLINE V MeanForLanes(const V& m, E mean, int n) {
  if (n == kLanes || mean - mean == E{0}) return m;
  E staged[kLanes] = {};
  std::fill(staged, staged + n, mean);
  if constexpr (std::is_same_v<E, float>) {
    return Load(staged);
  } else {
    return LoadDoubles(staged);
  }
}

// Along a run: groups of kFastGroup vectors, element i of the run in lane i % kLanes, each
// group's float lane sums added into double lanes (registers), which are added together in a
// fixed order at the end of the run (ReduceLanes) and then into the channel's sums.
template <typename T, Dx kDx>
FBN_INLINE void SumRun(const T* dy, const T* x, T* dx, int64_t length, float mean,
                       float scale_inv_std, double* sum_dy, double* sum_dy_xc) {
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
      Floats d = LoadUpTo(dy + i, n);
      Pin(d);
      group_dy += d;
      group_dy_xc += d * (LoadUpTo(x + i, n) - MeanForLanes(m, mean, n));
      if constexpr (kDx != Dx::kNone) StoreDx<kDx>(dx + i, d * a, n);
    }
    Accumulate(&lanes_dy, group_dy);
    Accumulate(&lanes_dy_xc, group_dy_xc);
  }
  *sum_dy += ReduceLanes(lanes_dy);
  *sum_dy_xc += ReduceLanes(lanes_dy_xc);
}

// kRuns (at most kFastGroup) runs of one channel side by side, run k starting at element
// k * run_stride: at each vector position the runs' terms are added as a tree in registers
// (depth 3: within the fast family's error bound), the trees into double lanes, and the lanes
// at the end into the channel's sums (ReduceLanes). Memory is read as one stream per run.
template <typename T, int kRuns>
FBN_INLINE void SumRunStripes(const T* dy, const T* x, int64_t length, int64_t run_stride,
                              float mean, double* sum_dy, double* sum_dy_xc) {
  const Floats m = Broadcast(mean);
  Doubles lanes_dy = {};
  Doubles lanes_dy_xc = {};
  for (int64_t i = 0; i < length; i += kLanes) {
    const int n = static_cast<int>(std::min<int64_t>(kLanes, length - i));
    const Terms sum = Tree([&](int k) {
      if (k >= kRuns) return Terms{};
      const int64_t at = k * run_stride + i;
      Floats d = LoadUpTo(dy + at, n);
      Pin(d);
      return Terms{d, d * (LoadUpTo(x + at, n) - MeanForLanes(m, mean, n))};
    });
    Accumulate(&lanes_dy, sum.dy);
    Accumulate(&lanes_dy_xc, sum.dy_xc);
  }
  *sum_dy += ReduceLanes(lanes_dy);
  *sum_dy_xc += ReduceLanes(lanes_dy_xc);
}

// SumRunStripes<T, kRuns> with kRuns == runs, a compile-time constant.
template <typename T, int kRuns = kFastGroup>
FBN_INLINE void SumRunStripesOf(int runs, const T* dy, const T* x, int64_t length,
                                int64_t run_stride, float mean, double* sum_dy,
                                double* sum_dy_xc) {
  if constexpr (kRuns > 2) {
    if (runs < kRuns) {
      return SumRunStripesOf<T, kRuns - 1>(runs, dy, x, length, run_stride, mean, sum_dy,
                                           sum_dy_xc);
    }
  }
  SumRunStripes<T, kRuns>(dy, x, length, run_stride, mean, sum_dy, sum_dy_xc);
}

template <typename T>
void SumRuns(const T* dy, const T* x, int64_t length, int64_t channels, int64_t runs,
             int64_t run_stride, const float* mean, double* sum_dy, double* sum_dy_xc) {
  for (int64_t c = 0; c < channels; ++c) {
    const int64_t at = c * length;
    if (runs == 1) {
      SumRun<T, Dx::kNone>(dy + at, x + at, nullptr, length, mean[c], 0.0f, &sum_dy[c],
                           &sum_dy_xc[c]);
    } else {
      SumRunStripesOf<T>(static_cast<int>(runs), dy + at, x + at, length, run_stride, mean[c],
                         &sum_dy[c], &sum_dy_xc[c]);
    }
  }
}

template <typename T, Dx kDx>
void SumRunsWithDx(const T* dy, const T* x, T* dx, int64_t length, int64_t channels,
                   const float* mean, const float* scale_inv_std, double* sum_dy,
                   double* sum_dy_xc) {
  for (int64_t c = 0; c < channels; ++c) {
    const int64_t at = c * length;
    SumRun<T, kDx>(dy + at, x + at, dx + at, length, mean[c], scale_inv_std[c], &sum_dy[c],
                   &sum_dy_xc[c]);
  }
}

template <typename T>
void SumRunsInference(const T* dy, const T* x, T* dx, int64_t length, int64_t channels,
                      const float* mean, const float* scale_inv_std, double* sum_dy,
                      double* sum_dy_xc, bool stream_dx) {
  if (!stream_dx) {
    return SumRunsWithDx<T, Dx::kStore>(dy, x, dx, length, channels, mean, scale_inv_std,
                                        sum_dy, sum_dy_xc);
  }
  SumRunsWithDx<T, Dx::kStream>(dy, x, dx, length, channels, mean, scale_inv_std, sum_dy,
                                sum_dy_xc);
  FenceStreamingStores();
}

template <typename T, Dx kDx>
void TrainingDxRunsImpl(const T* dy, const T* x, T* dx, int64_t length, int64_t count,
                        const DxCoefficients<float>& k) {
  for (int64_t r = 0; r < count; ++r) {
    const DxVectors kv{Broadcast(k.mean[r]), Broadcast(k.scale_inv_std[r]),
                       Broadcast(k.dy_mean[r]), Broadcast(k.xc_coef[r])};
    const int64_t at = r * length;
    for (int64_t i = 0; i < length; i += kLanes) {
      const int n = static_cast<int>(std::min<int64_t>(kLanes, length - i));
      StoreDx<kDx>(dx + at + i, TrainingDx(LoadUpTo(dy + at + i, n), LoadUpTo(x + at + i, n), kv),
                   n);
    }
  }
}

template <typename T>
void TrainingDxRuns(const T* dy, const T* x, T* dx, int64_t length, int64_t count,
                    const DxCoefficients<float>& k, bool stream_dx) {
  if (!stream_dx) return TrainingDxRunsImpl<T, Dx::kStore>(dy, x, dx, length, count, k);
  TrainingDxRunsImpl<T, Dx::kStream>(dy, x, dx, length, count, k);
  FenceStreamingStores();
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

// Compensated addition of 16 lanes at once: *sum += v, rounding errors into *error (as
// AddCompensated, lane by lane).
FBN_INLINE void AddCompensated(Doubles* sum, Doubles* error, const Doubles& v) {
  const Doubles t = *sum + v;
  const Doubles z = t - *sum;
  const Doubles e = (*sum - (t - z)) + (v - z);
  const Doubles finite = t - t;  // 0 where t is finite, NaN elsewhere
  for (int i = 0; i < kDoubleParts; ++i) {
    error->part[i] += finite.part[i] == 0.0 ? e.part[i] : DoublePart{};
  }
  *sum = t;
}

// Adds 16 compensated lanes as a tree, lane i + 8 into lane i, then i + 4, i + 2, i + 1, each
// addition's rounding error kept (TwoSum), and the result into *total.
FBN_INLINE void AddLanesInto(const Doubles& sum, const Doubles& error, CompensatedSum* total) {
  DoublePart s[kDoubleParts], e[kDoubleParts];
  for (int i = 0; i < kDoubleParts; ++i) {
    s[i] = sum.part[i];
    e[i] = error.part[i];
  }
  for (int parts = kDoubleParts / 2; parts >= 1; parts /= 2) {
    for (int i = 0; i < parts; ++i) {
      const DoublePart a = s[i], b = s[i + parts];
      const DoublePart t = a + b;
      const DoublePart z = t - a;
      const DoublePart rounding = (a - (t - z)) + (b - z);
      e[i] += e[i + parts] + (t - t == 0.0 ? rounding : DoublePart{});
      s[i] = t;
    }
  }
  double ls[kDoublePartLanes], le[kDoublePartLanes];
  StoreBytes(ls, s[0]);
  StoreBytes(le, e[0]);
  for (int width = kDoublePartLanes / 2; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) {
      const double a = ls[i], b = ls[i + width];
      const double t = a + b;
      const double z = t - a;
      le[i] += le[i + width] + (t - t == 0.0 ? (a - (t - z)) + (b - z) : 0.0);
      ls[i] = t;
    }
  }
  total->Add(ls[0]);
  total->error += le[0];
}

// AddCompensated without its special-value mask: once the sum or a term is infinite or NaN the
// error term becomes NaN where AddCompensated's would have stopped changing. The sum itself is
// the same, and non-finite from then on (in double, sums of float data never overflow), so a
// caller that zeroes the error of every non-finite sum (KeepSpecialSums) gets AddCompensated's
// Value() exactly: a finite error added to an infinite or NaN sum changes nothing. Three fewer
// operations per addition, on the exact family's hottest line.
template <typename V>  // Doubles or one DoublePart
FBN_INLINE void AddCompensatedFinite(V* sum, V* error, const V& v) {
  const V t = *sum + v;
  const V z = t - *sum;
  *error = *error + ((*sum - (t - z)) + (v - z));
  *sum = t;
}

// Zeroes the error term of every non-finite sum (see AddCompensatedFinite).
FBN_INLINE void KeepSpecialSums(const Doubles& sum, Doubles* error) {
  for (int i = 0; i < kDoubleParts; ++i) {
    const DoublePart finite = sum.part[i] - sum.part[i];  // 0 where finite, NaN elsewhere
    error->part[i] = finite == 0.0 ? error->part[i] : DoublePart{};
  }
}

// |v| lane by lane: the sign bit cleared (the same bits in every copy, NaN and -0 included).
FBN_INLINE DoublePart Abs(const DoublePart& v) {
  typedef int64_t Bits __attribute__((vector_size(sizeof(DoublePart))));
  return reinterpret_cast<DoublePart>(reinterpret_cast<Bits>(v) & INT64_MAX);
}
FBN_INLINE Doubles Abs(const Doubles& v) {
  Doubles r;
  for (int i = 0; i < kDoubleParts; ++i) r.part[i] = Abs(v.part[i]);
  return r;
}

// How the exact family adds its terms into a pair of accumulators per lane or column:
//   Compensated  the sum and its running rounding error (AddCompensatedFinite); the caller
//                zeroes the error of non-finite sums (Finish).
//   Bounded      the plain sum and Σ|term|, from which the caller bounds the plain sum's error
//                (cpu_loops.h, BoundedSumStands); the sum's bits are those of the compensated
//                sum's first accumulator. Four operations per term fewer; Σ|term| added on
//                the multiply-add units where the copy has them (AddOnFmaUnits).
// Add takes 16-lane accumulators or one register's part of them.
// Reduce adds a pair of 16-lane accumulators into one Sum, the lanes as a tree (lane i + 8
// into i, then i + 4, i + 2, i + 1).
struct Compensated {
  using Sum = CompensatedSum;
  template <typename V>
  static FBN_INLINE void Add(V* sum, V* error, const V& v) {
    AddCompensatedFinite(sum, error, v);
  }
  static FBN_INLINE void Finish(const Doubles& sum, Doubles* error) {
    KeepSpecialSums(sum, error);
  }
  static FBN_INLINE void Reduce(const Doubles& sum, const Doubles& error, Sum* total) {
    AddLanesInto(sum, error, total);
  }
};
struct Bounded {
  using Sum = BoundedSum;
  template <typename V>
  static FBN_INLINE void Add(V* sum, V* abs_sum, const V& v) {
    *sum = *sum + v;
    *abs_sum = AddOnFmaUnits(Abs(v), *abs_sum);
  }
  static FBN_INLINE void Finish(const Doubles&, Doubles*) {}
  // ReduceLanes's order is AddLanesInto's, and the sum is added to 0.0 as AddLanesInto adds it
  // to a fresh CompensatedSum (a sum of -0 becomes +0): the compensated sum's first accumulator.
  static FBN_INLINE void Reduce(const Doubles& sum, const Doubles& abs_sum, Sum* total) {
    *total = {0.0 + ReduceLanes(sum), ReduceLanes(abs_sum)};
  }
};

// Part `part` of the 16 elements at p as doubles (the first n of the 16 exist).
template <typename T, bool kWhole>
FBN_INLINE DoublePart LoadPartAsDoubles(const T* p, int part, int n) {
  if constexpr (kWhole) return LoadPartAsDoubles(p + part * kDoublePartLanes);
  return LoadWidened(p, n).part[part];
}

// LoadWidened(p, n) for n < 16: AVX-512 loads and converts only the register parts that hold any
// of the n floats.
template <typename T>
FBN_INLINE Doubles LoadWidenedParts(const T* p, int n) {
#if defined(FBN_SIMD_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    Doubles d{};
    for (int part = 0; part < kDoubleParts && part * kDoublePartLanes < n; ++part) {
      const int lanes = std::min(n - part * kDoublePartLanes, kDoublePartLanes);
      const __mmask8 mask = static_cast<__mmask8>((1u << lanes) - 1u);
      d.part[part] = reinterpret_cast<DoublePart>(
          _mm512_cvtps_pd(_mm256_maskz_loadu_ps(mask, p + part * kDoublePartLanes)));
    }
    return d;
  }
#endif
  return LoadWidened(p, n);
}

// Where a channel's runs are shorter than kExactRunsSideBySideBelowBytes, kExactRunImages images
// go side by side: each channel's run of one image after another, its lanes (eight AVX-512
// registers) loaded and stored once for them all rather than once per run, which on runs of one
// or two vectors cost more than the run. Longer runs go image by image, as memory lies: side by
// side on 8x8 planes (256 bytes) took 1.02-1.09x the time, the images' runs a power of two
// apart competing for the L1's sets. Measured on an Intel Xeon (2026-12-02, float32, both
// orders alternated in one process): 4x4 planes 0.70-0.79x the time at one and two threads,
// 5x5 0.91-1.02x, 6x6 0.90-0.96x, 7x7 0.92-1.00x (planes shorter than a vector go through the
// rows loops instead: RunExactPlanes, bn_grad_cpu_exact.cc). Either order adds each lane's terms in
// the same order: the same bits.
constexpr int64_t kExactRunImages = 4;
constexpr int64_t kExactRunsSideBySideBelowBytes = 256;

// Runs of up to kExactRunChannels consecutive channels, image by image or a few images side by
// side (above; a channel's own runs lie a whole image apart), each channel's lanes kept in L1
// between its runs. Every channel's lanes see its elements in the order of summing channel by
// channel, run after run, so the bits are those of that order. Each channel's lanes are then
// reduced into sums_dy[c] and sums_dy_xc[c]. A run's last, partial vector is added only in the
// register parts it fills (a 7x7 plane ends in one element): the other lanes would have added
// zeros, which change no sum. With kDx (inference) also x_backprop = dy · scale_inv_std[c], in
// double, rounded once, as it sums. Without kProducts only Σ dy (x, mean and sums_dy_xc
// untouched): its lanes see the same additions either way.
template <typename Policy, typename T, Dx kDx = Dx::kNone, bool kProducts = true>
void ExactSumRunsImpl(const T* dy, const T* x, T* dx, const double* mean,
                      const double* scale_inv_std, int64_t length, int64_t channels,
                      int64_t count, int64_t stride, typename Policy::Sum* sums_dy,
                      typename Policy::Sum* sums_dy_xc) {
  static_assert(kProducts || kDx == Dx::kNone, "x_backprop goes with both sums");
  struct Lanes {
    Doubles sum_dy, aux_dy, sum_dy_xc, aux_dy_xc;
  };
  Lanes lanes[kExactRunChannels] = {};
  const int64_t run_bytes = length * static_cast<int64_t>(sizeof(T));
  const int64_t images = run_bytes < kExactRunsSideBySideBelowBytes ? kExactRunImages : 1;
  for (int64_t k0 = 0; k0 < count; k0 += images) {
    const int64_t k1 = std::min(count, k0 + images);
    for (int64_t c = 0; c < channels; ++c) {
      const Doubles m = BroadcastDoubles(kProducts ? mean[c] : 0.0);
      Doubles a;
      if constexpr (kDx != Dx::kNone) a = BroadcastDoubles(scale_inv_std[c]);
      Lanes l = lanes[c];
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t at = c * length + k * stride;
        const T* d_run = dy + at;
        const T* x_run = x + at;
        int64_t i = 0;
        for (; i + kLanes <= length; i += kLanes) {
          Doubles d, v;
          for (int p = 0; p < kDoubleParts; ++p) {
            d.part[p] = LoadPartAsDoubles<T, true>(d_run + i, p, kLanes);
            if constexpr (kProducts) v.part[p] = LoadPartAsDoubles<T, true>(x_run + i, p, kLanes);
          }
          Policy::Add(&l.sum_dy, &l.aux_dy, d);
          if constexpr (kProducts) Policy::Add(&l.sum_dy_xc, &l.aux_dy_xc, d * (v - m));
          if constexpr (kDx != Dx::kNone) StoreRounded(dx + at + i, d * a, kLanes, false);
        }
        if (i < length) {
          // Missing lanes of the last vector are zeros (MeanForLanes).
          const int n = static_cast<int>(length - i);
          const Doubles d = LoadWidenedParts(d_run + i, n);
          Doubles v{}, mn{};
          if constexpr (kProducts) {
            v = LoadWidenedParts(x_run + i, n);
            mn = MeanForLanes(m, mean[c], n);
          }
          for (int p = 0; p < kDoubleParts && p * kDoublePartLanes < n; ++p) {
            Policy::Add(&l.sum_dy.part[p], &l.aux_dy.part[p], d.part[p]);
            if constexpr (kProducts) {
              Policy::Add(&l.sum_dy_xc.part[p], &l.aux_dy_xc.part[p],
                          d.part[p] * (v.part[p] - mn.part[p]));
            }
          }
          if constexpr (kDx != Dx::kNone) StoreRounded(dx + at + i, d * a, n, false);
        }
      }
      lanes[c] = l;
    }
  }
  for (int64_t c = 0; c < channels; ++c) {
    Lanes& l = lanes[c];
    Policy::Finish(l.sum_dy, &l.aux_dy);
    Policy::Reduce(l.sum_dy, l.aux_dy, &sums_dy[c]);
    if constexpr (kProducts) {
      Policy::Finish(l.sum_dy_xc, &l.aux_dy_xc);
      Policy::Reduce(l.sum_dy_xc, l.aux_dy_xc, &sums_dy_xc[c]);
    }
  }
}

template <typename Policy, typename T>
void ExactSumRuns(const T* dy, const T* x, const double* mean, int64_t length, int64_t channels,
                  int64_t count, int64_t stride, typename Policy::Sum* sums_dy,
                  typename Policy::Sum* sums_dy_xc) {
  ExactSumRunsImpl<Policy, T>(dy, x, nullptr, mean, nullptr, length, channels, count, stride,
                              sums_dy, sums_dy_xc);
}

template <typename T>
void ExactSumDyRuns(const T* dy, int64_t length, int64_t channels, int64_t count, int64_t stride,
                    CompensatedSum* sums_dy) {
  ExactSumRunsImpl<Compensated, T, Dx::kNone, false>(dy, nullptr, nullptr, nullptr, nullptr,
                                                     length, channels, count, stride, sums_dy,
                                                     nullptr);
}

template <typename T>
void ExactBoundedSumRunsInference(const T* dy, const T* x, T* dx, const double* mean,
                                  const double* scale_inv_std, int64_t length, int64_t channels,
                                  int64_t count, int64_t stride, BoundedSum* sums_dy,
                                  BoundedSum* sums_dy_xc) {
  ExactSumRunsImpl<Bounded, T, Dx::kStore>(dy, x, dx, mean, scale_inv_std, length, channels,
                                           count, stride, sums_dy, sums_dy_xc);
}

// Double parts (registers) of a vector of 16 columns that one pass down a group of rows sums:
// four accumulators per part, so the whole vector takes 8 AVX-512 registers but 16 AVX2 or 32
// SSE2 ones, every register those copies have. Each column adds its rows in order in any pass,
// so the passes change no bits. Measured on a Zen 5 (core_bench --loops, 256-2048 columns from
// L2): the AVX2 copy's sums 0.44 ns per element with the whole vector (spilled), 0.34 with two
// parts, 0.22-0.26 with one; the portable copy's 0.74, 0.45 with one or two; the AVX-512
// copy's the same with one part or both, its inference slower with one (x_backprop then needs
// a second walk).
#if defined(FBN_SIMD_AVX512)
constexpr int kExactPassParts = kDoubleParts;
#else
constexpr int kExactPassParts = 1;
#endif
// Inference writes x_backprop as it sums where a pass holds a whole vector (the element is in
// registers, in double, already); elsewhere in a second walk of the window, from the cache.
constexpr bool kExactDxAsItSums = kExactPassParts == kDoubleParts;

static_assert(kLanes == kColumnVector, "a rows loop's vector is its callers' column vector");

// The exact rows loops' rows a pass (ExactSumRowsImpl). Each pass loads and stores every
// column's four accumulators (64 KB on 2048 columns, more than an L1), so the AVX2 and AVX-512
// copies take eight rows a pass. Measured on an Intel Xeon (2026-12-02, whole calls, four and
// eight rows alternated in one process): eight 0.92-1.00x the time of four at one thread
// (16x7x7x512 inference 1.01-1.03x) and 0.79-1.00x at two, channels last with 256-4096
// channels, training and inference; channels-first 3x3 planes 0.95-1.01x; the portable copy
// 0.99-1.03x, so it keeps four. On a Zen 5 (2026-12-01) eight measured 0.93-1.10x, within that
// host's noise. Sixteen rows: 1.08-1.11x the time of four on 2048-4096 channels' inference at
// one thread.
#if defined(FBN_SIMD_AVX512) || defined(FBN_SIMD_AVX2)
constexpr int64_t kExactRowGroup = 8;
#else
constexpr int64_t kExactRowGroup = 4;
#endif

// Columns [j, j + kLanes) of rows [r0, r1): each column's rows in order into its pair of
// accumulators at `s` + j, which stay in registers across the rows, kExactPassParts parts at a
// time. With kDx (inference, kExactDxAsItSums) also x_backprop = dy · a, in double, rounded once,
// stored row by row, or with kHoldRows after the rows' last loads (HoldExactDxRows).
// Without kProducts only Σ dy, x unread: its accumulators see the same additions either way.
template <typename Policy, typename T, Dx kDx, bool kWhole, bool kProducts = true,
          bool kHoldRows = false>
FBN_INLINE void ExactSumRowsVector(const T* dy, const T* x, T* dx, int64_t stride, int64_t r0,
                                   int64_t r1, int64_t j, int n, const Doubles& m,
                                   const Doubles& a, const ExactColumns& s) {
  static_assert(kDx == Dx::kNone || kExactDxAsItSums, "x_backprop needs whole vectors");
  const int lanes = kWhole ? kLanes : n;
  for (int p0 = 0; p0 < kDoubleParts; p0 += kExactPassParts) {
    DoublePart sum_dy[kExactPassParts], aux_dy[kExactPassParts];
    DoublePart sum_dy_xc[kExactPassParts], aux_dy_xc[kExactPassParts];
    for (int i = 0; i < kExactPassParts; ++i) {
      const int64_t at = j + (p0 + i) * kDoublePartLanes;
      sum_dy[i] = LoadBytes<DoublePart>(s.dy + at);
      aux_dy[i] = LoadBytes<DoublePart>(s.dy_aux + at);
      if constexpr (kProducts) {
        sum_dy_xc[i] = LoadBytes<DoublePart>(s.dy_xc + at);
        aux_dy_xc[i] = LoadBytes<DoublePart>(s.dy_xc_aux + at);
      }
    }
    Floats held[kHoldRows ? kExactRowGroup : 1];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t at = r * stride + j;
      DoublePart d[kExactPassParts];
      for (int i = 0; i < kExactPassParts; ++i) {
        d[i] = LoadPartAsDoubles<T, kWhole>(dy + at, p0 + i, n);
        Policy::Add(&sum_dy[i], &aux_dy[i], d[i]);
        if constexpr (kProducts) {
          const DoublePart v = LoadPartAsDoubles<T, kWhole>(x + at, p0 + i, n);
          Policy::Add(&sum_dy_xc[i], &aux_dy_xc[i], d[i] * (v - m.part[p0 + i]));
        }
      }
      if constexpr (kDx != Dx::kNone) {
        Doubles whole;
        for (int i = 0; i < kDoubleParts; ++i) whole.part[i] = d[i];
        const Floats rounded = RoundedFloats<T>(whole * a);
        if constexpr (kHoldRows) {
          held[r - r0] = rounded;
        } else {
          StoreFloats(dx + at, rounded, lanes, kDx == Dx::kStream);
        }
      }
    }
    if constexpr (kDx != Dx::kNone && kHoldRows) {
      for (int64_t r = r0; r < r1; ++r) {
        StoreFloats(dx + r * stride + j, held[r - r0], lanes, kDx == Dx::kStream);
      }
    }
    for (int i = 0; i < kExactPassParts; ++i) {
      const int64_t at = j + (p0 + i) * kDoublePartLanes;
      StoreBytes(s.dy + at, sum_dy[i]);
      StoreBytes(s.dy_aux + at, aux_dy[i]);
      if constexpr (kProducts) {
        StoreBytes(s.dy_xc + at, sum_dy_xc[i]);
        StoreBytes(s.dy_xc_aux + at, aux_dy_xc[i]);
      }
    }
  }
}

// Whether inference's x_backprop, written as it sums, waits until a vector's rows are all
// loaded: where one row's stores share their low 12 address bits with the next row's loads of
// y_backprop or x (StoresAliasLoads one row on: rows a multiple of 4 KiB long and the tensors at
// one offset into their pages, as TensorFlow's default build places them), each load waited for
// the store before it, a streamed store longest. Measured on a Zen 4 (2026-12-03,
// cores_interleaved, all three tensors 64 bytes into their pages): streamed, 16x7x7x2048
// inference took 0.58x the time at one thread and 0.62x at two, 32x4x4x2048 and 8x7x7x1024
// 0.61x; with ordinary stores 0.90-0.93x. Where the alias lies two rows on (512 channels),
// holding the rows measured 1.06-1.09x as long, the stores' trip through the stack costing
// more than the alias, so only the next row counts here.
template <typename T>
bool HoldExactDxRows(const T* dy, const T* x, const T* dx, int64_t stride) {
  const int64_t row_bytes = stride * static_cast<int64_t>(sizeof(T));
  return StoresAliasLoads(dx, BytesOn(dy, row_bytes), row_bytes, 1) ||
         StoresAliasLoads(dx, BytesOn(x, row_bytes), row_bytes, 1);
}

// Rows kExactRowGroup at a time in memory order, each column's accumulators in `s`, which
// the caller zeroes and sizes to whole vectors (RowsPitch(width) entries). Each column
// adds its rows in order, as a column walked down the rows would (the bits are those of
// adding down the column), but memory is read a few rows at a time, each row's piece
// contiguous: walking a column down a row-major tensor read a line per row and page, and left
// most of the call waiting on memory.
// Inference (kDx) also writes x_backprop as it sums: the element is in registers, in double,
// already. Without kProducts only Σ dy (x and mean unread, the dy_xc arrays untouched).
template <typename Policy, typename T, Dx kDx, bool kProducts = true>
void ExactSumRowsImpl(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                      int64_t width, const double* mean, const double* scale_inv_std,
                      const ExactColumns& s) {
  bool hold_rows = false;
  if constexpr (kDx != Dx::kNone) hold_rows = HoldExactDxRows(dy, x, dx, stride);
  for (int64_t r0 = 0; r0 < rows; r0 += kExactRowGroup) {
    const int64_t r1 = std::min(rows, r0 + kExactRowGroup);
    for (int64_t j = 0; j < width; j += kLanes) {
      // Missing lanes of the last vector are zeros, which change no sum.
      const int n = static_cast<int>(std::min<int64_t>(kLanes, width - j));
      Doubles a;
      if constexpr (kDx != Dx::kNone) a = LoadDoublesUpTo(scale_inv_std + j, n);
      Doubles m{};
      if constexpr (kProducts) m = LoadDoublesUpTo(mean + j, n);
      if (n == kLanes && hold_rows) {
        ExactSumRowsVector<Policy, T, kDx, true, kProducts, true>(dy, x, dx, stride, r0, r1, j,
                                                                  n, m, a, s);
      } else if (n == kLanes) {
        ExactSumRowsVector<Policy, T, kDx, true, kProducts>(dy, x, dx, stride, r0, r1, j, n, m,
                                                            a, s);
      } else {
        ExactSumRowsVector<Policy, T, kDx, false, kProducts>(dy, x, dx, stride, r0, r1, j, n, m,
                                                             a, s);
      }
    }
  }
  for (int64_t j = 0; j < width; j += kLanes) {  // the arrays hold whole vectors
    Doubles aux_dy = LoadDoubles(s.dy_aux + j);
    Policy::Finish(LoadDoubles(s.dy + j), &aux_dy);
    StoreDoubles(s.dy_aux + j, aux_dy);
    if constexpr (kProducts) {
      Doubles aux_dy_xc = LoadDoubles(s.dy_xc_aux + j);
      Policy::Finish(LoadDoubles(s.dy_xc + j), &aux_dy_xc);
      StoreDoubles(s.dy_xc_aux + j, aux_dy_xc);
    }
  }
}

template <typename Policy, typename T>
void ExactSumRows(const T* dy, const T* x, int64_t stride, int64_t rows, int64_t width,
                  const double* mean, const ExactColumns& s) {
  ExactSumRowsImpl<Policy, T, Dx::kNone>(dy, x, nullptr, stride, rows, width, mean, nullptr, s);
}

template <typename T>
void ExactSumDyRows(const T* dy, int64_t stride, int64_t rows, int64_t width,
                    const ExactColumns& s) {
  ExactSumRowsImpl<Compensated, T, Dx::kNone, false>(dy, nullptr, nullptr, stride, rows, width,
                                                     nullptr, nullptr, s);
}

// x_backprop by groups (RowOrder::kByGroups): kExactDxGroup rows at a time across register tiles
// of kExactDxVectors column vectors, whose four double coefficient vectors each stay in
// registers (eight AVX-512 registers per vector in training). Measured on a Zen 5 at 1024-2048
// columns: 4 rows of 2 vectors 1.1-1.4x as fast as the rows in order (coefficients reloaded
// from L2 at every element), as fast as 8 of 3 or 4 of 4, and faster than 8 of 2 or 16 of 1.
#if defined(FBN_SIMD_AVX512)
constexpr int kExactDxVectors = 2;
#else
constexpr int kExactDxVectors = 1;
#endif
constexpr int64_t kExactDxGroup = 4;

// x_backprop of rows [r0, r1) of kVectors column vectors from column j (the last one `last`
// lanes wide), in double, rounded once, the coefficients in registers. Training:
// TrainingXBackprop; inference: dx = dy · a; a = scale_inv_std.
template <typename T, int kVectors, bool kTraining, bool kStream>
FBN_INLINE void ExactDxTile(const T* dy, const T* x, T* dx, int64_t stride, int64_t r0,
                            int64_t r1, int64_t j, int last, const DxCoefficients<double>& k) {
  auto lanes = [last](int v) { return v < kVectors - 1 ? kLanes : last; };
  Doubles a[kVectors], m[kVectors], dm[kVectors], b[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    const int64_t c = j + v * kLanes;
    a[v] = LoadDoublesUpTo(k.scale_inv_std + c, lanes(v));
    if constexpr (kTraining) {
      m[v] = LoadDoublesUpTo(k.mean + c, lanes(v));
      dm[v] = LoadDoublesUpTo(k.dy_mean + c, lanes(v));
      b[v] = LoadDoublesUpTo(k.xc_coef + c, lanes(v));
    }
  }
  for (int64_t r = r0; r < r1; ++r) {
    for (int v = 0; v < kVectors; ++v) {
      const int64_t at = r * stride + j + v * kLanes;
      const Doubles d = LoadWidened(dy + at, lanes(v));
      if constexpr (kTraining) {
        const Doubles xv = LoadWidened(x + at, lanes(v));
        StoreRounded(dx + at, TrainingXBackprop(a[v], d, dm[v], xv, m[v], b[v]), lanes(v),
                     kStream);
      } else {
        StoreRounded(dx + at, d * a[v], lanes(v), kStream);
      }
    }
  }
}

// Whether training's float x_backprop goes one register part at a time, each part loaded,
// evaluated, rounded and stored before the next, as the sums go on the AVX2 copy, whose
// registers cannot hold a whole vector's terms (kExactPassParts): there the register tiles
// spilled their four coefficients and their parts, and filled them again for every tile.
// Measured on an AMD EPYC (Zen 3), 1024-2048 columns: by parts about 0.7x the tiles' time
// from L2, the calls 0.94-0.97x (both loops alternated in one process). Not inference (one
// coefficient, no spills: 0.98-1.06x by parts), nor the portable copy (its parts of two
// doubles store 8 bytes at a time: inference 1.12-1.14x as long). Each lane is evaluated and
// rounded as in ExactDxTile: the same bits.
template <typename T>
constexpr bool kExactDxByParts =
    kExactPassParts == 1 && kDoublePartLanes >= 4 && std::is_same_v<T, float>;

// Rows per group by parts where x_backprop's stores would alias the group's loads of
// y_backprop or x (StoresAliasLoads: rows a multiple of 4 KiB long and the tensors at one page
// offset, as TensorFlow often places them): four rows there hold each row's loads up behind
// the previous row's stores and fill an L1 set with twelve lines. Measured on the same Zen 3
// from L2: four rows 1.4-1.6x as long where the stores alias as elsewhere, two rows 1.05-1.4x
// as fast as four there.
constexpr int64_t kExactDxGroupWhereStoresAlias = 2;

// Training's rows by parts (kExactDxByParts), `group` at a time down each whole column vector,
// the vector's coefficients loaded once for the group (read from L1 at every part instead,
// the loads measured 1.3x as long); a last partial vector by ExactDxTile. Ordinary stores:
// streamed x_backprop goes in order, by the tiles (parts would stream 16 bytes at a time).
inline void ExactTrainingDxRowsByParts(const float* dy, const float* x, float* dx,
                                       int64_t stride, int64_t rows, int64_t width,
                                       const DxCoefficients<double>& k, int64_t group) {
  const int64_t whole = width / kLanes * kLanes;
  for (int64_t r0 = 0; r0 < rows; r0 += group) {
    const int64_t r1 = std::min(rows, r0 + group);
    for (int64_t j = 0; j < whole; j += kLanes) {
      const Doubles a = LoadDoubles(k.scale_inv_std + j), m = LoadDoubles(k.mean + j);
      const Doubles dm = LoadDoubles(k.dy_mean + j), b = LoadDoubles(k.xc_coef + j);
      for (int64_t r = r0; r < r1; ++r) {
        for (int p = 0; p < kDoubleParts; ++p) {
          const int64_t at = r * stride + j + p * kDoublePartLanes;
          const DoublePart d = LoadPartAsDoubles(dy + at), xv = LoadPartAsDoubles(x + at);
          StorePartRounded(dx + at, TrainingXBackprop(a.part[p], d, dm.part[p], xv, m.part[p],
                                                      b.part[p]));
        }
      }
    }
    if (whole < width) {
      ExactDxTile<float, 1, true, false>(dy, x, dx, stride, r0, r1, whole,
                                         static_cast<int>(width - whole), k);
    }
  }
}

template <typename T, bool kTraining, bool kStream>
void ExactDxRowsImpl(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                     int64_t width, const DxCoefficients<double>& k, RowOrder order) {
  if (order == RowOrder::kByGroups) {
    if constexpr (kTraining && !kStream && kExactDxByParts<T>) {
      const int64_t row_bytes = stride * static_cast<int64_t>(sizeof(T));
      const bool alias = StoresAliasLoads(dx, dy, row_bytes, kExactDxGroup) ||
                         StoresAliasLoads(dx, x, row_bytes, kExactDxGroup);
      return ExactTrainingDxRowsByParts(dy, x, dx, stride, rows, width, k,
                                        alias ? kExactDxGroupWhereStoresAlias : kExactDxGroup);
    }
    for (int64_t r0 = 0; r0 < rows; r0 += kExactDxGroup) {
      const int64_t r1 = std::min(rows, r0 + kExactDxGroup);
      ForEachTile<kExactDxVectors>(width, [&](int64_t j, int last, auto vectors, auto) {
        ExactDxTile<T, decltype(vectors)::value, kTraining, kStream>(dy, x, dx, stride, r0, r1,
                                                                     j, last, k);
      });
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {  // in order, the coefficients from the cache
    for (int64_t j = 0; j < width; j += kLanes) {
      const int n = static_cast<int>(std::min<int64_t>(kLanes, width - j));
      ExactDxTile<T, 1, kTraining, kStream>(dy, x, dx, stride, r, r + 1, j, n, k);
    }
  }
}

// dx may be dy's own buffer (x_backprop computed in place): each element is read before its
// own store, and no other. Streamed, the rows go in order whatever `order` says, unless each
// store fills a line (kStreamedStoreFillsLine): streamed stores to four rows at once ran 1.6-2.9
// times as long as ordinary stores on an AMD EPYC Zen 3 (AVX2, two stores a line; 16x7x7x2048
// and 32x4x4x2048, core_bench --stores both), as the fast family's stripes did
// (SumRowsInference); on a Zen 5 (AVX-512, a store a line) by groups took 0.80-0.99x the time
// of the rows in order at one thread, 0.93-1.03x at two (16x7x7x2048 training, both walks
// alternated in one process, at TensorFlow's page offsets and others).
template <typename T>
void ExactDxRows(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows, int64_t width,
                 const DxCoefficients<double>& k, bool stream_dx, RowOrder order) {
  const bool training = k.dy_mean != nullptr;
  if (stream_dx) {
    const RowOrder streamed = kStreamedStoreFillsLine<T> ? order : RowOrder::kInOrder;
    training ? ExactDxRowsImpl<T, true, true>(dy, x, dx, stride, rows, width, k, streamed)
             : ExactDxRowsImpl<T, false, true>(dy, x, dx, stride, rows, width, k, streamed);
    return FenceStreamingStores();
  }
  training ? ExactDxRowsImpl<T, true, false>(dy, x, dx, stride, rows, width, k, order)
           : ExactDxRowsImpl<T, false, false>(dy, x, dx, stride, rows, width, k, order);
}

template <typename T>
void ExactBoundedSumRowsInference(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                                  int64_t width, const double* mean,
                                  const double* scale_inv_std, const ExactColumns& s,
                                  bool stream_dx) {
  if constexpr (kExactDxAsItSums) {
    if (!stream_dx) {
      return ExactSumRowsImpl<Bounded, T, Dx::kStore>(dy, x, dx, stride, rows, width, mean,
                                                      scale_inv_std, s);
    }
    ExactSumRowsImpl<Bounded, T, Dx::kStream>(dy, x, dx, stride, rows, width, mean,
                                              scale_inv_std, s);
    FenceStreamingStores();
  } else {
    ExactSumRowsImpl<Bounded, T, Dx::kNone>(dy, x, nullptr, stride, rows, width, mean, nullptr,
                                            s);
    ExactDxRows(dy, x, dx, stride, rows, width, DxCoefficients<double>{nullptr, scale_inv_std},
                stream_dx, RowOrder::kByGroups);
  }
}

// Channels first with planes of at most kLanes elements, read as rows of planes: a column is
// one element of one channel's plane, summed down the images as a lane of ExactSumRunsImpl sums
// it (the plane's element i is lane i there, and a run is one vector or less), so reducing each
// channel's columns as its lanes gives ExactBoundedSumRuns's sums, bit for bit. The rows loops
// read a row of many channels' planes at a time where the runs loop took a channel's run of a
// vector or less, with its lanes, at a time.
template <typename T>
void ExactBoundedSumPlanes(const T* dy, const T* x, T* dx, int64_t stride, int64_t rows,
                           int64_t channels, int64_t plane, const double* mean,
                           const double* scale_inv_std, const ExactColumns& columns,
                           BoundedSum* sums_dy, BoundedSum* sums_dy_xc) {
  const int64_t width = channels * plane;
  for (double* array : {columns.dy, columns.dy_aux, columns.dy_xc, columns.dy_xc_aux}) {
    std::fill(array, array + RowsPitch(width), 0.0);
  }
  if (dx != nullptr) {
    ExactBoundedSumRowsInference(dy, x, dx, stride, rows, width, mean, scale_inv_std, columns,
                                 false);
  } else {
    ExactSumRowsImpl<Bounded, T, Dx::kNone>(dy, x, nullptr, stride, rows, width, mean, nullptr,
                                            columns);
  }
  const int n = static_cast<int>(plane);
  for (int64_t c = 0; c < channels; ++c) {
    const int64_t at = c * plane;  // the channel's columns, as its lanes (the others zero)
    Bounded::Reduce(LoadDoublesUpTo(columns.dy + at, n), LoadDoublesUpTo(columns.dy_aux + at, n),
                    &sums_dy[c]);
    Bounded::Reduce(LoadDoublesUpTo(columns.dy_xc + at, n),
                    LoadDoublesUpTo(columns.dy_xc_aux + at, n), &sums_dy_xc[c]);
  }
}

template <typename T>
void ExactDxRuns(const T* dy, const T* x, T* dx, int64_t length, int64_t channels,
                 int64_t count, int64_t stride, const DxCoefficients<double>& k) {
  for (int64_t r = 0; r < count; ++r) {
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t at = c * length + r * stride;
      const T* d = dy + at;  // may be dx's own buffer, as above
      const T* __restrict v = x + at;
      T* out = dx + at;
      const double a = k.scale_inv_std[c];
      if (k.dy_mean == nullptr) {
        for (int64_t i = 0; i < length; ++i) out[i] = FromDouble<T>(ToFloat(d[i]) * a);
        continue;
      }
      const double m = k.mean[c], dm = k.dy_mean[c], b = k.xc_coef[c];
      for (int64_t i = 0; i < length; ++i) {
        const double dyi = ToFloat(d[i]), xi = ToFloat(v[i]);
        out[i] = FromDouble<T>(TrainingXBackprop(a, dyi, dm, xi, m, b));
      }
    }
  }
}

template <typename T>
const CpuLoops<T>* Loops() {
  static const CpuLoops<T> loops = {
      SumRows<T>,          SumRowsInference<T>, TrainingDxRows<T>,
      SumRuns<T>,          SumRunsInference<T>, TrainingDxRuns<T>,
      ExactSumRows<Compensated, T>, ExactSumDyRows<T>, ExactSumRuns<Compensated, T>,
      ExactSumDyRuns<T>, ExactSumRows<Bounded, T>, ExactBoundedSumRowsInference<T>,
      ExactSumRuns<Bounded, T>, ExactBoundedSumRunsInference<T>, ExactBoundedSumPlanes<T>,
      ExactDxRows<T>, ExactDxRuns<T>};
  return &loops;
}
FBN_INSTANTIATE_LOOPS()
