// The forward's loops on cpu_simd.h's vectors. No include guard on purpose: each
// cpu_loops_<isa>.cc includes this file once, after cpu_loops_impl.h, inside its own namespace
// and under its own target (see cpu_simd.h).

struct DivideParts {
  template <typename P>
  FBN_INLINE P operator()(const P& x, const P& y) const { return x / y; }
};

// d with lanes [n, kLanes) set to zero.
FBN_INLINE Doubles FirstLanesOf(Doubles d, int n) {
  for (int l = n; l < kLanes; ++l) d.part[l / kDoublePartLanes][l % kDoublePartLanes] = 0.0;
  return d;
}

FBN_INLINE void StoreDoublesUpTo(double* p, const Doubles& d, int n) {
  if (n == kLanes) return StoreDoubles(p, d);
  for (int l = 0; l < n; ++l) p[l] = d.part[l / kDoublePartLanes][l % kDoublePartLanes];
}

// Column vectors whose moments MomentsRows takes side by side: independent add chains (one
// vector alone waits on its sum's latency at every row) and each row read a few cache lines at
// a time (one line per row is a stride the prefetchers follow badly). A column's sums go down
// the rows in order whatever the count, so every copy gives the same bits; the count is what
// the copy's registers hold (sums, squares and means, two or four registers a vector).
#if defined(FBN_SIMD_AVX512)
constexpr int kMomentsVectors = 4;
#else
constexpr int kMomentsVectors = 1;
#endif

// Asks for the line of element `at` from p. The next tile can be shorter than the one whose
// offsets it is walked at, so the address may lie past the tensor: it is formed as an integer
// (no out-of-bounds pointer), and a prefetch never faults.
template <typename T>
FBN_INLINE void Prefetch(const T* p, int64_t at) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) +
                                                   static_cast<uintptr_t>(at) * sizeof(T)));
}

// Σ x and Σ (x − mean)² down `rows` rows of kVectors column vectors, mean = Σ x / rows; the
// last vector is n lanes wide. The second pass reads the columns from the cache and, with
// kPrefetch, asks for the lines at the same offsets from `ahead` (the columns whose first pass
// comes next): memory, idle while the pass computes, then has them coming.
template <int kVectors, bool kPrefetch, typename T>
FBN_INLINE void MomentsOfColumns(const T* x, int64_t stride, int64_t rows, int n,
                                 double* sum, double* m2, const T* ahead) {
  auto lanes = [n](int v) { return v == kVectors - 1 ? n : kLanes; };
  Doubles s[kVectors], q[kVectors], mean[kVectors];
  for (int v = 0; v < kVectors; ++v) s[v] = q[v] = BroadcastDoubles(0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int v = 0; v < kVectors; ++v) {
      s[v] = s[v] + LoadWidened(x + r * stride + v * kLanes, lanes(v));
    }
  }
  const Doubles count = BroadcastDoubles(static_cast<double>(rows));
  for (int v = 0; v < kVectors; ++v) mean[v] = PartWise(s[v], count, DivideParts{});
  for (int64_t r = 0; r < rows; ++r) {
    for (int v = 0; v < kVectors; ++v) {
      if constexpr (kPrefetch) Prefetch(ahead, r * stride + v * kLanes);
      const Doubles d = LoadWidened(x + r * stride + v * kLanes, lanes(v)) - mean[v];
      q[v] = q[v] + d * d;
    }
  }
  for (int v = 0; v < kVectors; ++v) {
    StoreDoublesUpTo(sum + v * kLanes, s[v], lanes(v));
    StoreDoublesUpTo(m2 + v * kLanes, q[v], lanes(v));
  }
}

template <typename T, bool kPrefetch>
void MomentsRowsWith(const T* x, int64_t stride, int64_t rows, int64_t width, double* sum,
                     double* m2, const T* next) {
  constexpr int64_t kStep = kMomentsVectors * kLanes;
  // The columns read after those from j on, `step` wide: the tile's next ones, else the next
  // tile's first.
  auto ahead = [&](int64_t j, int64_t step) { return j + step < width ? x + j + step : next; };
  int64_t j = 0;
  for (; j + kStep <= width; j += kStep) {
    MomentsOfColumns<kMomentsVectors, kPrefetch>(x + j, stride, rows, kLanes, sum + j, m2 + j,
                                                 ahead(j, kStep));
  }
  for (; j < width; j += kLanes) {
    const int n = static_cast<int>(std::min<int64_t>(kLanes, width - j));
    MomentsOfColumns<1, kPrefetch>(x + j, stride, rows, n, sum + j, m2 + j, ahead(j, kLanes));
  }
}

template <typename T>
void MomentsRows(const T* x, int64_t stride, int64_t rows, int64_t width, double* sum,
                 double* m2, const T* next) {
  if (next == nullptr) return MomentsRowsWith<T, false>(x, stride, rows, width, sum, m2, x);
  MomentsRowsWith<T, true>(x, stride, rows, width, sum, m2, next);
}

template <typename T>
void MomentsRun(const T* x, int64_t length, double* sum, double* m2) {
  Doubles s = BroadcastDoubles(0.0);
  for (int64_t i = 0; i < length; i += kLanes) {
    s = s + LoadWidened(x + i, static_cast<int>(std::min<int64_t>(kLanes, length - i)));
  }
  const double total = ReduceLanes(s);
  const Doubles mean = BroadcastDoubles(total / static_cast<double>(length));
  Doubles q = BroadcastDoubles(0.0);
  for (int64_t i = 0; i < length; i += kLanes) {
    const int n = static_cast<int>(std::min<int64_t>(kLanes, length - i));
    const Doubles d = FirstLanesOf(LoadWidened(x + i, n) - mean, n);
    q = q + d * d;
  }
  *sum = total;
  *m2 = ReduceLanes(q);
}

// Column vectors whose coefficients RowOrder::kByGroups keeps in registers across a group
// of rows (three double registers or register pairs a vector): reloaded at every element (kRows),
// the loop waits on loads, six coefficient loads to one of x.
#if defined(FBN_SIMD_AVX512)
constexpr int kNormalizeVectors = 4;
#else
constexpr int kNormalizeVectors = 1;
#endif
// Rows of a group: the tile's rows are read a group at a time across the tiles, in memory order.
constexpr int64_t kNormalizeGroup = 8;

// y = (x − mean) · scale_inv_std + offset in double, rounded once, for kVectors vectors of
// columns from j on (the last one `last` lanes wide) of rows [r0, r1).
template <typename T, int kVectors, bool kStream>
FBN_INLINE void NormalizeTile(const T* x, T* y, int64_t stride, int64_t r0, int64_t r1,
                              int64_t j, int last, const NormalizeColumns& k) {
  auto lanes = [last](int v) { return v < kVectors - 1 ? kLanes : last; };
  Doubles mean[kVectors], scale[kVectors], offset[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    mean[v] = LoadDoubles(k.mean + j + v * kLanes);
    scale[v] = LoadDoubles(k.scale_inv_std + j + v * kLanes);
    offset[v] = LoadDoubles(k.offset + j + v * kLanes);
  }
  for (int64_t r = r0; r < r1; ++r) {
    for (int v = 0; v < kVectors; ++v) {
      const int64_t at = r * stride + j + v * kLanes;
      StoreRounded(y + at, (LoadWidened(x + at, lanes(v)) - mean[v]) * scale[v] + offset[v],
                   lanes(v), kStream);
    }
  }
}

// RowOrder::kByGroups: kNormalizeGroup rows at a time across the register tiles.
template <typename T, bool kStream>
void NormalizeRowsByGroups(const T* x, T* y, int64_t stride, int64_t rows, int64_t width,
                           const NormalizeColumns& k) {
  for (int64_t r0 = 0; r0 < rows; r0 += kNormalizeGroup) {
    const int64_t r1 = std::min(rows, r0 + kNormalizeGroup);
    ForEachTile<kNormalizeVectors>(width, [&](int64_t j, int last, auto vectors, auto) {
      NormalizeTile<T, decltype(vectors)::value, kStream>(x, y, stride, r0, r1, j, last, k);
    });
  }
}

// RowOrder::kInOrder: row after row, in memory order.
template <typename T, bool kStream>
void NormalizeRowsInOrder(const T* x, T* y, int64_t stride, int64_t rows, int64_t width,
                          const NormalizeColumns& k) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < width; j += kLanes) {
      const int n = static_cast<int>(std::min<int64_t>(kLanes, width - j));
      const Doubles v = (LoadWidened(x + r * stride + j, n) - LoadDoubles(k.mean + j)) *
                            LoadDoubles(k.scale_inv_std + j) +
                        LoadDoubles(k.offset + j);
      StoreRounded(y + r * stride + j, v, n, kStream);
    }
  }
}

template <typename T, bool kStream>
void NormalizeRowsWithStores(const T* x, T* y, int64_t stride, int64_t rows, int64_t width,
                             const NormalizeColumns& k, RowOrder order) {
  if (order == RowOrder::kInOrder) {
    return NormalizeRowsInOrder<T, kStream>(x, y, stride, rows, width, k);
  }
  NormalizeRowsByGroups<T, kStream>(x, y, stride, rows, width, k);
}

template <typename T>
void NormalizeRows(const T* x, T* y, int64_t stride, int64_t rows, int64_t width,
                   const NormalizeColumns& k, bool stream_y, RowOrder order) {
  if (!stream_y) return NormalizeRowsWithStores<T, false>(x, y, stride, rows, width, k, order);
  NormalizeRowsWithStores<T, true>(x, y, stride, rows, width, k, order);
  FenceStreamingStores();
}

template <typename T>
void NormalizeRun(const T* x, T* y, int64_t length, const NormalizeCoefficients& k,
                  bool stream_y) {
  const Doubles mean = BroadcastDoubles(k.mean);
  const Doubles scale_inv_std = BroadcastDoubles(k.scale_inv_std);
  const Doubles offset = BroadcastDoubles(k.offset);
  for (int64_t i = 0; i < length; i += kLanes) {
    const int n = static_cast<int>(std::min<int64_t>(kLanes, length - i));
    StoreRounded(y + i, (LoadWidened(x + i, n) - mean) * scale_inv_std + offset, n, stream_y);
  }
}

template <typename T>
const CpuForwardLoops<T>* ForwardLoops() {
  static const CpuForwardLoops<T> loops = {MomentsRows<T>, MomentsRun<T>, NormalizeRows<T>,
                                           NormalizeRun<T>};
  return &loops;
}
FBN_INSTANTIATE_FORWARD_LOOPS()
