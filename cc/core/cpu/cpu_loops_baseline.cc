// The portable copy of the CPU loops: SSE2 on any x86-64, the compiler's default elsewhere.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cc/core/cpu/cpu_loops.h"
#include "cc/core/cpu/forward_loops.h"
#include "cc/core/cpu/streaming_stores.h"
#include "cc/core/float16_convert.h"

namespace fbn {
namespace isa_baseline {
#include "cc/core/cpu/cpu_loops_impl.h"
#include "cc/core/cpu/forward_loops_impl.h"
}  // namespace isa_baseline
}  // namespace fbn
