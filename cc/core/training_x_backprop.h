// Training's x_backprop, the one expression of every CPU and CUDA path. No include guard on
// purpose: each CPU copy includes it inside its own namespace and target region (through
// cpu_loops_impl.h), where its vectors' operators are, and the CUDA kernels inside theirs.
//
// a = scale · inv_std. TensorFlow's grouping, centred before scaling for accuracy, so infinities
// and NaNs propagate as in TensorFlow; on scalars or vectors of float or double, each path
// evaluating it alike, so the paths agree bit for bit.
#ifndef FBN_EXPRESSION
#ifdef __CUDACC__
#define FBN_EXPRESSION __host__ __device__ __forceinline__
#else
#define FBN_EXPRESSION inline __attribute__((always_inline))
#endif
#endif

template <typename V>
FBN_EXPRESSION V TrainingXBackprop(const V& a, const V& dy, const V& dy_mean, const V& x,
                                   const V& mean, const V& xc_coef) {
  return a * ((dy - dy_mean) - (x - mean) * xc_coef);
}
