// A 16-lane float vector for the CPU loops, and the loads, stores and conversions around it.
// No include guard on purpose: each cpu_loops_<isa>.cc includes this file (through
// cpu_loops_impl.h) once, inside its own namespace and under its own `#pragma GCC target`.
//
// `Floats` is 16 float lanes made of the copy's native registers: one AVX-512 register, two
// AVX2 registers or four SSE2 registers (GCC keeps wider generic vectors in memory when the
// target lacks registers that wide, hence the explicit parts). Every lane is plain IEEE float
// arithmetic, so a computation has the same lanes, the same operations and the same order of
// operations in every copy, and every copy gives the same bits (no contraction into FMA: the
// build uses -ffp-contract=off). Only memory access and the 16-bit conversions differ per
// instruction set, and those are exact.
//
// Each copy defines, before including this file, FBN_SIMD_AVX512 or FBN_SIMD_AVX2 (AVX2 + F16C)
// or neither (the portable copy).

// Everything that takes or returns a vector is inlined into the loops: vectors never cross a
// function call, whose ABI would depend on the copy's instruction set. GCC still warns about
// that ABI where such a helper is declared (and at the end of the file, hence no pop).
// Sanitized builds leave inlining to the compiler: instrumenting the forced inlines took GCC
// minutes per copy, and the helpers (in this copy's namespace, under its target) compute the
// same either way.
#ifndef FBN_INLINE
#if defined(__SANITIZE_ADDRESS__)
#define FBN_INLINE inline
#else
#define FBN_INLINE inline __attribute__((always_inline))
#endif
#endif
#pragma GCC diagnostic ignored "-Wpsabi"

constexpr int kLanes = 16;
#if defined(FBN_SIMD_AVX512)
constexpr int kPartLanes = 16;
#elif defined(FBN_SIMD_AVX2)
constexpr int kPartLanes = 8;
#else
constexpr int kPartLanes = 4;
#endif
constexpr int kParts = kLanes / kPartLanes;

typedef float Part __attribute__((vector_size(kPartLanes * sizeof(float))));
typedef uint32_t PartBits __attribute__((vector_size(kPartLanes * sizeof(uint32_t))));
typedef uint16_t PartBits16 __attribute__((vector_size(kPartLanes * sizeof(uint16_t))));

struct Floats {
  Part part[kParts];
  float lane(int i) const { return part[i / kPartLanes][i % kPartLanes]; }
};

// a op b part by part, for Floats and Doubles.
template <typename Vector, typename Op>
FBN_INLINE Vector PartWise(const Vector& a, const Vector& b, Op op) {
  constexpr int kCount = sizeof(a.part) / sizeof(a.part[0]);
  Vector r;
  for (int i = 0; i < kCount; ++i) r.part[i] = op(a.part[i], b.part[i]);
  return r;
}
struct AddParts {
  template <typename P>
  FBN_INLINE P operator()(const P& x, const P& y) const { return x + y; }
};
struct SubtractParts {
  template <typename P>
  FBN_INLINE P operator()(const P& x, const P& y) const { return x - y; }
};
struct MultiplyParts {
  template <typename P>
  FBN_INLINE P operator()(const P& x, const P& y) const { return x * y; }
};
FBN_INLINE Floats operator+(const Floats& a, const Floats& b) { return PartWise(a, b, AddParts{}); }
FBN_INLINE Floats operator-(const Floats& a, const Floats& b) {
  return PartWise(a, b, SubtractParts{});
}
FBN_INLINE Floats operator*(const Floats& a, const Floats& b) {
  return PartWise(a, b, MultiplyParts{});
}
FBN_INLINE Floats& operator+=(Floats& a, const Floats& b) {
  for (int i = 0; i < kParts; ++i) a.part[i] += b.part[i];
  return a;
}

FBN_INLINE Floats Broadcast(float v) {
  Floats r;
#if defined(FBN_SIMD_AVX512)
  r.part[0] = reinterpret_cast<Part>(_mm512_set1_ps(v));
#elif defined(FBN_SIMD_AVX2)
  for (int i = 0; i < kParts; ++i) r.part[i] = reinterpret_cast<Part>(_mm256_set1_ps(v));
#elif defined(__SSE2__)
  for (int i = 0; i < kParts; ++i) r.part[i] = reinterpret_cast<Part>(_mm_set1_ps(v));
#else
  for (int l = 0; l < kLanes; ++l) r.part[l / kPartLanes][l % kPartLanes] = v;
#endif
  return r;
}

// Keeps v in registers from here on. Without it GCC re-reads a value loaded from memory at each
// of its uses (a load folded into each instruction), which costs nothing in instructions but
// doubles the loads of the loops, and the load ports are what these loops run out of.
FBN_INLINE void Pin(Floats& v) {
#if defined(__x86_64__) || defined(__i386__)
  for (int i = 0; i < kParts; ++i) asm("" : "+v"(v.part[i]));
#else
  (void)v;
#endif
}

template <typename V, typename E>
FBN_INLINE V LoadBytes(const E* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <typename V, typename E>
FBN_INLINE void StoreBytes(E* p, const V& v) {
  std::memcpy(p, &v, sizeof(v));
}

#if defined(FBN_SIMD_AVX512)
FBN_INLINE __mmask16 FirstLanes(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
#elif defined(FBN_SIMD_AVX2)
// The AVX2 masked moves take a per-lane sign mask: lanes [0, n) of a part.
FBN_INLINE __m256i FirstLanes8(int n) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), index);
}
#endif

// ---- float: whole vectors, and the first n lanes (the rest read as zero, and are not stored).

FBN_INLINE Floats Load(const float* p) {
  Floats v;
  for (int i = 0; i < kParts; ++i) v.part[i] = LoadBytes<Part>(p + i * kPartLanes);
  return v;
}

FBN_INLINE void Store(float* p, const Floats& v) {
  for (int i = 0; i < kParts; ++i) StoreBytes(p + i * kPartLanes, v.part[i]);
}

FBN_INLINE Floats Load(const float* p, int n) {
  Floats v;
#if defined(FBN_SIMD_AVX512)
  v.part[0] = reinterpret_cast<Part>(_mm512_maskz_loadu_ps(FirstLanes(n), p));
#elif defined(FBN_SIMD_AVX2)
  for (int i = 0; i < kParts; ++i) {
    v.part[i] = reinterpret_cast<Part>(_mm256_maskload_ps(p + i * 8, FirstLanes8(n - i * 8)));
  }
#else
  float staged[kLanes] = {};
  std::memcpy(staged, p, n * sizeof(float));
  v = Load(staged);
#endif
  return v;
}

FBN_INLINE void Store(float* p, const Floats& v, int n) {
#if defined(FBN_SIMD_AVX512)
  _mm512_mask_storeu_ps(p, FirstLanes(n), reinterpret_cast<__m512>(v.part[0]));
#elif defined(FBN_SIMD_AVX2)
  for (int i = 0; i < kParts; ++i) {
    _mm256_maskstore_ps(p + i * 8, FirstLanes8(n - i * 8), reinterpret_cast<__m256>(v.part[i]));
  }
#else
  float staged[kLanes];
  Store(staged, v);
  std::memcpy(p, staged, n * sizeof(float));
#endif
}

// ---- half and bfloat16: widened exactly on load, rounded to nearest even on store, with the
// same bits as float16_convert.h (the F16C instructions implement exactly that rounding, quiet
// NaNs included).

FBN_INLINE Floats Widen(const uint16_t* p, const Half*) {
  Floats v;
#if defined(FBN_SIMD_AVX512)
  v.part[0] = reinterpret_cast<Part>(
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#elif defined(FBN_SIMD_AVX2)
  for (int i = 0; i < kParts; ++i) {
    v.part[i] = reinterpret_cast<Part>(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i * 8))));
  }
#else
  for (int l = 0; l < kLanes; ++l) v.part[l / kPartLanes][l % kPartLanes] = HalfBitsToFloat(p[l]);
#endif
  return v;
}

FBN_INLINE Floats Widen(const uint16_t* p, const BFloat16*) {
  Floats v;
#if defined(FBN_SIMD_AVX512)
  v.part[0] = reinterpret_cast<Part>(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
#elif defined(FBN_SIMD_AVX2)
  for (int i = 0; i < kParts; ++i) {
    v.part[i] = reinterpret_cast<Part>(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i * 8))), 16));
  }
#else
  for (int i = 0; i < kParts; ++i) {
    const PartBits16 bits = LoadBytes<PartBits16>(p + i * kPartLanes);
    v.part[i] = reinterpret_cast<Part>(__builtin_convertvector(bits, PartBits) << 16);
  }
#endif
  return v;
}

#if defined(FBN_SIMD_AVX512) || defined(FBN_SIMD_AVX2)
// The 16 lanes rounded to half or bfloat16, in one AVX register.
FBN_INLINE __m256i NarrowBits(const Floats& v, const Half*) {
#if defined(FBN_SIMD_AVX512)
  return _mm512_cvtps_ph(reinterpret_cast<__m512>(v.part[0]), _MM_FROUND_TO_NEAREST_INT);
#else
  return _mm256_set_m128i(
      _mm256_cvtps_ph(reinterpret_cast<__m256>(v.part[1]), _MM_FROUND_TO_NEAREST_INT),
      _mm256_cvtps_ph(reinterpret_cast<__m256>(v.part[0]), _MM_FROUND_TO_NEAREST_INT));
#endif
}
#endif

// FloatToBFloat16Bits on the lanes of one part, each result in the low half of its 32 bits:
// round to nearest even on the dropped 16 bits; a NaN becomes the quiet NaN of its sign.
FBN_INLINE PartBits RoundToBFloat16(const Part& v) {
  const PartBits u = reinterpret_cast<PartBits>(v);
  const PartBits rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const PartBits quiet_nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
  const PartBits is_nan = reinterpret_cast<PartBits>((u & 0x7fffffffu) > 0x7f800000u);
  return (rounded & ~is_nan) | (quiet_nan & is_nan);
}

#if defined(FBN_SIMD_AVX512) || defined(FBN_SIMD_AVX2)
FBN_INLINE __m256i NarrowBits(const Floats& v, const BFloat16*) {
#if defined(FBN_SIMD_AVX512)
  return _mm512_cvtepi32_epi16(reinterpret_cast<__m512i>(RoundToBFloat16(v.part[0])));
#else
  // The values fit 16 bits, so the saturating pack only interleaves; the permute restores order.
  const __m256i packed = _mm256_packus_epi32(reinterpret_cast<__m256i>(RoundToBFloat16(v.part[0])),
                                             reinterpret_cast<__m256i>(RoundToBFloat16(v.part[1])));
  return _mm256_permute4x64_epi64(packed, 0xd8);
#endif
}
#endif

template <typename T>
FBN_INLINE void Narrow(const Floats& v, uint16_t* p, const T* /*type*/) {
#if defined(FBN_SIMD_AVX512) || defined(FBN_SIMD_AVX2)
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), NarrowBits(v, static_cast<const T*>(nullptr)));
#else
  if constexpr (std::is_same<T, Half>::value) {
    for (int l = 0; l < kLanes; ++l) p[l] = FloatToHalfBits(v.lane(l));
  } else {
    for (int i = 0; i < kParts; ++i) {
      StoreBytes(p + i * kPartLanes, __builtin_convertvector(RoundToBFloat16(v.part[i]), PartBits16));
    }
  }
#endif
}

template <typename T>
FBN_INLINE Floats Load(const T* p) {
  return Widen(reinterpret_cast<const uint16_t*>(p), p);
}

template <typename T>
FBN_INLINE void Store(T* p, const Floats& v) {
  Narrow(v, reinterpret_cast<uint16_t*>(p), p);
}

template <typename T>
FBN_INLINE Floats Load(const T* p, int n) {
  uint16_t staged[kLanes] = {};
#if defined(FBN_SIMD_AVX512)
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(staged), _mm256_maskz_loadu_epi16(FirstLanes(n), p));
#else
  std::memcpy(staged, p, n * sizeof(uint16_t));
#endif
  return Widen(staged, p);
}

template <typename T>
FBN_INLINE void Store(T* p, const Floats& v, int n) {
  uint16_t staged[kLanes];
  Narrow(v, staged, p);
#if defined(FBN_SIMD_AVX512)
  _mm256_mask_storeu_epi16(p, FirstLanes(n), _mm256_loadu_si256(reinterpret_cast<__m256i*>(staged)));
#else
  std::memcpy(p, staged, n * sizeof(uint16_t));
#endif
}

// n <= kLanes elements: the whole-vector access where it can.
template <typename T>
FBN_INLINE Floats LoadUpTo(const T* p, int n) {
  return n == kLanes ? Load(p) : Load(p, n);
}
template <typename T>
FBN_INLINE void StoreUpTo(T* p, const Floats& v, int n) {
  if (n == kLanes) {
    Store(p, v);
  } else {
    Store(p, v, n);
  }
}

// ---- Non-temporal stores of float vectors: the cache line is written without being read first
// and without evicting what the caches hold (x and dy). Only whole, aligned vectors; anything
// else is stored normally. FenceStreamingStores() (streaming_stores.h) orders them before other
// threads look.

FBN_INLINE void StoreStreaming(float* p, const Floats& v, int n) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
#if defined(FBN_SIMD_AVX512)
  if (n == kLanes && address % 64 == 0) {
    return _mm512_stream_ps(p, reinterpret_cast<__m512>(v.part[0]));
  }
#elif defined(FBN_SIMD_AVX2)
  if (n == kLanes && address % 32 == 0) {
    for (int i = 0; i < kParts; ++i) _mm256_stream_ps(p + i * 8, reinterpret_cast<__m256>(v.part[i]));
    return;
  }
#elif defined(__SSE2__)
  if (n == kLanes && address % 16 == 0) {
    for (int i = 0; i < kParts; ++i) _mm_stream_ps(p + i * 4, reinterpret_cast<__m128>(v.part[i]));
    return;
  }
#else
  (void)address;
#endif
  StoreUpTo(p, v, n);
}

template <typename T>
FBN_INLINE void StoreStreaming(T* p, const Floats& v, int n) {
#if defined(FBN_SIMD_AVX512) || defined(FBN_SIMD_AVX2)
  if (n == kLanes && reinterpret_cast<uintptr_t>(p) % 32 == 0) {
    return _mm256_stream_si256(reinterpret_cast<__m256i*>(p), NarrowBits(v, p));
  }
#endif
  StoreUpTo(p, v, n);
}

// ---- Double accumulators: 16 double lanes in registers (twice as many parts as Floats).

constexpr int kDoubleParts = 2 * kParts;
constexpr int kDoublePartLanes = kPartLanes / 2;
typedef double DoublePart __attribute__((vector_size(kPartLanes * sizeof(float))));

struct Doubles {
  DoublePart part[kDoubleParts];
};

FBN_INLINE Doubles LoadDoubles(const double* p) {
  Doubles d;
  for (int i = 0; i < kDoubleParts; ++i) d.part[i] = LoadBytes<DoublePart>(p + i * kDoublePartLanes);
  return d;
}

FBN_INLINE void StoreDoubles(double* p, const Doubles& d) {
  for (int i = 0; i < kDoubleParts; ++i) StoreBytes(p + i * kDoublePartLanes, d.part[i]);
}

// a + b, on the multiply-add units in the AVX-512 copy: fma(a, 1, b) is a + b rounded once,
// so the same bits in every copy (an exact rewrite, not a contraction). On AMD's Zen 4 and
// Zen 5 the adds share two pipes with the conversions between float and double, while the
// two multiply-add pipes beside them wait: a probe of the exact bounded sums' body on a Zen 5
// took 0.87-0.91x the time with its Σ|term| adds so (benchmarks/RESULTS.md, 2026-12-01), and
// llvm-mca 16's Zen 4 model puts the exact rows loops at 0.81x (sums) and 0.86x (inference as
// it sums) their cycles. Intel runs both on the same ports (llvm-mca: the same cycles); whole
// calls of the exact family there 0.97-1.04x, unchanged code beside them 0.99-1.03x
// (benchmarks/RESULTS.md, 2026-12-02, evening).
FBN_INLINE DoublePart AddOnFmaUnits(const DoublePart& a, const DoublePart& b) {
#if defined(FBN_SIMD_AVX512)
  return reinterpret_cast<DoublePart>(_mm512_fmadd_pd(reinterpret_cast<__m512d>(a),
                                                      _mm512_set1_pd(1.0),
                                                      reinterpret_cast<__m512d>(b)));
#else
  return a + b;
#endif
}

FBN_INLINE Doubles AddOnFmaUnits(const Doubles& a, const Doubles& b) {
  Doubles r;
  for (int i = 0; i < kDoubleParts; ++i) r.part[i] = AddOnFmaUnits(a.part[i], b.part[i]);
  return r;
}

FBN_INLINE Doubles BroadcastDoubles(double v) {
  Doubles r;
  for (int i = 0; i < kDoubleParts; ++i) {
    for (int l = 0; l < kDoublePartLanes; ++l) r.part[i][l] = v;
  }
  return r;
}

// The 16 float lanes of v as doubles (exactly).
FBN_INLINE Doubles ToDoubles(const Floats& v) {
  Doubles d;
#if defined(FBN_SIMD_AVX512)
  const __m512 w = reinterpret_cast<__m512>(v.part[0]);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(w), 1));
  d.part[0] = reinterpret_cast<DoublePart>(_mm512_cvtps_pd(_mm512_castps512_ps256(w)));
  d.part[1] = reinterpret_cast<DoublePart>(_mm512_cvtps_pd(hi));
#elif defined(FBN_SIMD_AVX2)
  for (int i = 0; i < kParts; ++i) {
    const __m256 w = reinterpret_cast<__m256>(v.part[i]);
    d.part[2 * i] = reinterpret_cast<DoublePart>(_mm256_cvtps_pd(_mm256_castps256_ps128(w)));
    d.part[2 * i + 1] = reinterpret_cast<DoublePart>(_mm256_cvtps_pd(_mm256_extractf128_ps(w, 1)));
  }
#elif defined(__SSE2__)
  for (int i = 0; i < kParts; ++i) {
    const __m128 w = reinterpret_cast<__m128>(v.part[i]);
    d.part[2 * i] = reinterpret_cast<DoublePart>(_mm_cvtps_pd(w));
    d.part[2 * i + 1] = reinterpret_cast<DoublePart>(_mm_cvtps_pd(_mm_movehl_ps(w, w)));
  }
#else
  for (int l = 0; l < kLanes; ++l) {
    d.part[l / kDoublePartLanes][l % kDoublePartLanes] = static_cast<double>(v.lane(l));
  }
#endif
  return d;
}

// The kDoublePartLanes elements at p as doubles (exactly): one double register's worth,
// converted alone. Loops that hold one part of a vector per pass use it, so that each element
// is converted once, not with the whole vector in every pass (for 16-bit types on the portable
// copy that was eight scalar conversions an element instead of one).
FBN_INLINE DoublePart LoadPartAsDoubles(const float* p) {
#if defined(FBN_SIMD_AVX512)
  return reinterpret_cast<DoublePart>(_mm512_cvtps_pd(_mm256_loadu_ps(p)));
#elif defined(FBN_SIMD_AVX2)
  return reinterpret_cast<DoublePart>(_mm256_cvtps_pd(_mm_loadu_ps(p)));
#elif defined(__SSE2__)
  return reinterpret_cast<DoublePart>(
      _mm_cvtps_pd(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
#else
  DoublePart d;
  for (int l = 0; l < kDoublePartLanes; ++l) d[l] = static_cast<double>(p[l]);
  return d;
#endif
}

FBN_INLINE DoublePart LoadPartAsDoubles(const Half* p) {
#if defined(FBN_SIMD_AVX512)
  return reinterpret_cast<DoublePart>(
      _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
#elif defined(FBN_SIMD_AVX2)
  return reinterpret_cast<DoublePart>(
      _mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
#else
  DoublePart d;
  for (int l = 0; l < kDoublePartLanes; ++l) d[l] = static_cast<double>(ToFloat(p[l]));
  return d;
#endif
}

FBN_INLINE DoublePart LoadPartAsDoubles(const BFloat16* p) {
#if defined(FBN_SIMD_AVX512)
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return reinterpret_cast<DoublePart>(
      _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16))));
#elif defined(FBN_SIMD_AVX2)
  const __m128i bits = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return reinterpret_cast<DoublePart>(
      _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(bits), 16))));
#else
  DoublePart d;
  for (int l = 0; l < kDoublePartLanes; ++l) d[l] = static_cast<double>(ToFloat(p[l]));
  return d;
#endif
}

// The 16 floats at p as doubles (exactly), converted from memory part by part: no shuffle of
// a loaded register, which costs the conversion's port a second micro-op per half on AVX-512.
FBN_INLINE Doubles LoadAsDoubles(const float* p) {
  Doubles d;
  for (int i = 0; i < kDoubleParts; ++i) d.part[i] = LoadPartAsDoubles(p + i * kDoublePartLanes);
  return d;
}

// The 16 double lanes of d rounded to float, to nearest-even: one rounding (the scalar
// static_cast<float>(double) lane by lane).
FBN_INLINE Floats ToFloats(const Doubles& d) {
  Floats v;
#if defined(FBN_SIMD_AVX512)
  const __m256 low = _mm512_cvtpd_ps(reinterpret_cast<__m512d>(d.part[0]));
  const __m256 high = _mm512_cvtpd_ps(reinterpret_cast<__m512d>(d.part[1]));
  v.part[0] = reinterpret_cast<Part>(_mm512_insertf32x8(_mm512_castps256_ps512(low), high, 1));
#elif defined(FBN_SIMD_AVX2)
  for (int i = 0; i < kParts; ++i) {
    const __m128 low = _mm256_cvtpd_ps(reinterpret_cast<__m256d>(d.part[2 * i]));
    const __m128 high = _mm256_cvtpd_ps(reinterpret_cast<__m256d>(d.part[2 * i + 1]));
    v.part[i] = reinterpret_cast<Part>(_mm256_set_m128(high, low));
  }
#elif defined(__SSE2__)
  for (int i = 0; i < kParts; ++i) {
    const __m128 low = _mm_cvtpd_ps(reinterpret_cast<__m128d>(d.part[2 * i]));
    const __m128 high = _mm_cvtpd_ps(reinterpret_cast<__m128d>(d.part[2 * i + 1]));
    v.part[i] = reinterpret_cast<Part>(_mm_movelh_ps(low, high));
  }
#else
  for (int l = 0; l < kLanes; ++l) {
    v.part[l / kPartLanes][l % kPartLanes] =
        static_cast<float>(d.part[l / kDoublePartLanes][l % kDoublePartLanes]);
  }
#endif
  return v;
}

FBN_INLINE Doubles operator+(const Doubles& a, const Doubles& b) {
  return PartWise(a, b, AddParts{});
}
FBN_INLINE Doubles operator-(const Doubles& a, const Doubles& b) {
  return PartWise(a, b, SubtractParts{});
}
FBN_INLINE Doubles operator*(const Doubles& a, const Doubles& b) {
  return PartWise(a, b, MultiplyParts{});
}

// acc += the 16 float lanes of v, each converted to double exactly.
FBN_INLINE void Accumulate(Doubles* acc, const Floats& v) { *acc = *acc + ToDoubles(v); }

// The 16 lanes added in a fixed order, the same in every copy: lane i + 8 into lane i, then
// i + 4 into i, i + 2 into i, and lane 1 into lane 0.
FBN_INLINE double ReduceLanes(const Doubles& d) {
  DoublePart p[kDoubleParts];
  for (int i = 0; i < kDoubleParts; ++i) p[i] = d.part[i];
  for (int parts = kDoubleParts / 2; parts >= 1; parts /= 2) {
    for (int i = 0; i < parts; ++i) p[i] += p[i + parts];
  }
  // Within the last part, in registers.
#if defined(FBN_SIMD_AVX512)
  const __m512d z = reinterpret_cast<__m512d>(p[0]);
  const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(z), _mm512_extractf64x4_pd(z, 1));
  const __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
#elif defined(FBN_SIMD_AVX2)
  const __m256d h = reinterpret_cast<__m256d>(p[0]);
  const __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
#else
  const DoublePart q = p[0];
#endif
  return q[0] + q[1];
}

// The first n doubles at p, the other lanes zero (a partial vector at the end of an array).
FBN_INLINE Doubles LoadDoublesUpTo(const double* p, int n) {
  if (n == kLanes) return LoadDoubles(p);
#if defined(FBN_SIMD_AVX512)
  // Masked loads (AVX-512, AVX2): lanes staged on the stack one by one would be read back as
  // a vector the store buffer cannot forward, a stall per register.
  Doubles d;
  for (int part = 0; part < kDoubleParts; ++part) {
    const int lanes = std::clamp(n - part * kDoublePartLanes, 0, kDoublePartLanes);
    const __mmask8 mask = static_cast<__mmask8>((1u << lanes) - 1u);
    d.part[part] = reinterpret_cast<DoublePart>(
        _mm512_maskz_loadu_pd(mask, p + part * kDoublePartLanes));
  }
  return d;
#elif defined(FBN_SIMD_AVX2)
  static_assert(kDoublePartLanes == 4, "an AVX2 register holds four doubles");
  Doubles d;
  for (int part = 0; part < kDoubleParts; ++part) {
    const int64_t first = part * kDoublePartLanes;
    const __m256i mask = _mm256_set_epi64x(-(first + 3 < n), -(first + 2 < n), -(first + 1 < n),
                                           -(first < n));
    d.part[part] = reinterpret_cast<DoublePart>(_mm256_maskload_pd(p + first, mask));
  }
  return d;
#endif
  double staged[kLanes] = {};
  for (int l = 0; l < n; ++l) staged[l] = p[l];
  return LoadDoubles(staged);
}

// The first n elements at p as doubles (exactly), the other lanes zero.
template <typename T>
FBN_INLINE Doubles LoadWidened(const T* p, int n) {
  if constexpr (std::is_same_v<T, float>) {
    if (n == kLanes) return LoadAsDoubles(p);
  }
  return ToDoubles(LoadUpTo(p, n));
}

// The first n lanes of v rounded once to T and stored, with non-temporal stores if `stream`.
// 16-bit types go through float rounded to odd (float16_convert.h), so the second rounding
// gives the nearest T to the double.
// RoundedFloats<T> is the rounding, StoreFloats the store, for callers that hold a rounded vector
// before storing it.
template <typename T>
FBN_INLINE Floats RoundedFloats(const Doubles& v) {
  if constexpr (std::is_same_v<T, float>) {
    return ToFloats(v);
  } else {
    double lanes[kLanes];
    float odd[kLanes];
    StoreDoubles(lanes, v);
    for (int l = 0; l < kLanes; ++l) odd[l] = DoubleToFloatRoundToOdd(lanes[l]);
    return Load(odd);
  }
}

template <typename T>
FBN_INLINE void StoreFloats(T* p, const Floats& f, int n, bool stream) {
  if (stream) {
    StoreStreaming(p, f, n);
  } else {
    StoreUpTo(p, f, n);
  }
}

template <typename T>
FBN_INLINE void StoreRounded(T* p, const Doubles& v, int n, bool stream) {
  StoreFloats(p, RoundedFloats<T>(v), n, stream);
}

// One register part of doubles rounded to float and stored at p (kDoublePartLanes floats):
// the lanes of StoreRounded's whole vector, rounded the same way (to nearest-even, once).
FBN_INLINE void StorePartRounded(float* p, const DoublePart& v) {
#if defined(FBN_SIMD_AVX512)
  _mm256_storeu_ps(p, _mm512_cvtpd_ps(reinterpret_cast<__m512d>(v)));
#elif defined(FBN_SIMD_AVX2)
  _mm_storeu_ps(p, _mm256_cvtpd_ps(reinterpret_cast<__m256d>(v)));
#elif defined(__SSE2__)
  _mm_storel_pi(reinterpret_cast<__m64*>(p), _mm_cvtpd_ps(reinterpret_cast<__m128d>(v)));
#else
  for (int l = 0; l < kDoublePartLanes; ++l) p[l] = static_cast<float>(v[l]);
#endif
}

// acc[0..n) += the first n lanes of d.
FBN_INLINE void AddDoublesTo(double* acc, const Doubles& d, int n = kLanes) {
  if (n == kLanes) return StoreDoubles(acc, LoadDoubles(acc) + d);
  for (int l = 0; l < n; ++l) acc[l] += d.part[l / kDoublePartLanes][l % kDoublePartLanes];
}

// acc[0..n) += the first n lanes of v (the other accumulators are not touched).
FBN_INLINE void AddTo(double* acc, const Floats& v, int n = kLanes) {
  if (n == kLanes) {
    Doubles d = LoadDoubles(acc);
    Accumulate(&d, v);
    return StoreDoubles(acc, d);
  }
  for (int l = 0; l < n; ++l) acc[l] += static_cast<double>(v.lane(l));
}
