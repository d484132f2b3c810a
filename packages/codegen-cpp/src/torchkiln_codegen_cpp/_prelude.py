"""The C++ prelude every generated library starts with: small self-contained helpers.

No ATen or c10 headers (they make each compile take seconds); half and bfloat16 are stored as
16-bit integers and computed in float through the conversions below.
"""

from ._status import STATUS_PRELUDE
from ._vector_math import VECTOR_FLOAT_BINARY, VECTOR_FLOAT_FUNCTIONS, template_name


def _math_templates() -> str:
    """``tk_<name>`` for each function ``_vector_math`` lists: libm's ``std::<name>``, which a
    library's float overloads (``_vector_math.declarations``) take over for float."""
    lines = [
        f"template <typename T> inline T {template_name(fn)}(T x) {{ return std::{fn[:-1]}(x); }}"
        for fn in VECTOR_FLOAT_FUNCTIONS
    ]
    lines += [
        f"template <typename A, typename B> inline auto {template_name(fn)}(A a, B b) "
        f"{{ return std::{fn[:-1]}(a, b); }}"
        for fn in VECTOR_FLOAT_BINARY
    ]
    return "\n".join(lines)


PRELUDE = (
    r"""
#include <cstdint>
#include <cstring>
#include <cmath>
#include <limits>
#include <algorithm>
#include <type_traits>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

// ---- half / bfloat16 storage: bits in uint16_t, arithmetic in float ----
inline float tk_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) { bits = sign; }
    else {  // subnormal half -> normal float
      int e = -1;
      do { e++; mant <<= 1; } while ((mant & 0x400u) == 0);
      mant &= 0x3FFu;
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  }
  float f; std::memcpy(&f, &bits, 4); return f;
}

inline uint16_t tk_float_to_half(float f) {
  uint32_t x; std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) {  // inf or nan
    return (uint16_t)(sign | 0x7C00u | (absx > 0x7F800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);  // rounds to inf
  if (absx < 0x38800000u) {  // subnormal half or zero: let float arithmetic round (RNE)
    float a; std::memcpy(&a, &absx, 4);
    uint32_t m = (uint32_t)std::nearbyint(a * 16777216.0f);  // units of 2^-24, ties to even
    return (uint16_t)(sign | m);
  }
  uint32_t mant_odd = (absx >> 13) & 1u;
  absx += 0xC8000FFFu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return (uint16_t)(sign | (absx >> 13));
}

inline float tk_bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16; float f; std::memcpy(&f, &bits, 4); return f;
}

inline uint16_t tk_float_to_bf16(float f) {
  uint32_t x; std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u);  // quiet nan
  x += 0x7FFFu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

inline float tk_round_half(float f) { return tk_half_to_float(tk_float_to_half(f)); }
inline float tk_round_bf16(float f) { return tk_bf16_to_float(tk_float_to_bf16(f)); }

template <typename To, typename From> inline To tk_bitcast(From v) {
  static_assert(sizeof(To) == sizeof(From), "bitcast between types of different size");
  To out; std::memcpy(&out, &v, sizeof(To)); return out;
}

// ---- a float to an integer type as x86's conversion does (eager's CPU kernels): NaN and values
// outside int32's (int64's) range give the "integer indefinite" INT32_MIN (INT64_MIN), and
// narrower integers take the int32 value's low bits. A plain static_cast is undefined there,
// and GCC folded (int64_t)(0.0 / 0.0) to 0 in a fused kernel where eager reads INT64_MIN (the
// variance of one value, cast: CPU fuzz seed 785281).
template <typename T, typename F> inline T tk_float_to_int(F v) {
  if constexpr (sizeof(T) == 8) {
    bool in = v >= static_cast<F>(-9223372036854775808.0) && v < static_cast<F>(9223372036854775808.0);
    return in ? static_cast<T>(v) : static_cast<T>(INT64_MIN);
  } else {
    bool in = v >= static_cast<F>(-2147483648.0) && v < static_cast<F>(2147483648.0);
    return static_cast<T>(in ? static_cast<int32_t>(v) : INT32_MIN);
  }
}

// ---- an integer to a float type, +0.0 for 0. Under -fno-trapping-math GCC 12 folds a round
// trip (float)(int64_t)x into truncf(x) (vrndscaless in a vector loop's scalar tail), which
// keeps the sign of a negative fraction's zero: x / (float)(int64_t)x was +inf for x = -0.15
// where eager divides by +0.0 (-inf; CPU fuzz seed 793588). An added +0.0 did not help (GCC
// drops it first: an integer's conversion is never -0.0). __builtin_assoc_barrier on the
// integer hides the round trip from the fold; the vector loop's conversions are unchanged.
template <typename F, typename T> inline F tk_int_to_float(T v) {
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
  return static_cast<F>(__builtin_assoc_barrier(v));
#else
  return static_cast<F>(v);
#endif
}

// ---- where(c, a, b) on floats as a bit blend, not `c ? a : b`: GCC keeps the ternary as a
// branch when a libmvec call (exp, log, ...) follows it, and then does not vectorize the loop at
// all (a masked softmax ran scalar). The blend is exact: the chosen operand's bits, NaN and -0.
template <typename T> inline T tk_where(bool c, T a, T b) { return c ? a : b; }
inline float tk_where(bool c, float a, float b) {
  uint32_t m = 0u - static_cast<uint32_t>(c);
  return tk_bitcast<float>((tk_bitcast<uint32_t>(a) & m) | (tk_bitcast<uint32_t>(b) & ~m));
}
inline double tk_where(bool c, double a, double b) {
  uint64_t m = 0ull - static_cast<uint64_t>(c);
  return tk_bitcast<double>((tk_bitcast<uint64_t>(a) & m) | (tk_bitcast<uint64_t>(b) & ~m));
}

// ---- float math: libm's functions through tk_<name> (one a function: _vector_math.py's
// templates below); a library's float overloads follow the prelude (_vector_math.declarations:
// libmvec's variants, one implementation for every lane, or scalar libm)
@MATH_TEMPLATES@

// ---- NaN-propagating extremes, like torch.maximum / amax ----
// Equal operands give the second one, as eager's vectorized kernels (max_ps): maximum(-0., 0.)
// is 0. (the lowering of clamp orders its operands for that)
template <typename T> inline T tk_max(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a > b ? a : b)); }
template <typename T> inline T tk_min(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a < b ? a : b)); }
template <typename T> inline T tk_relu(T a) { return a < T(0) ? T(0) : a; }
// sign(nan) is 0 in eager (both comparisons are false), and sign(-0.) is +0.
template <typename T> inline T tk_sign(T a) { return (T)((T(0) < a) - (a < T(0))); }

// Integer division by zero raises ZeroDivisionError in eager: the lane gives 0 and sets the
// ZERO_DIVISION bit (2, see _status.py) of the call's status word, which the launcher raises.

// ---- Python-style integer and float division ----
// Integer division by zero or of the minimum by -1 would raise SIGFPE and kill the process:
// those lanes give 0 / the wrapped result instead.
template <typename T> inline T tk_floordiv(T a, T b, int64_t* status = nullptr) {
  if constexpr (std::is_integral<T>::value) {
    if (b == 0) { if (status) __atomic_fetch_or(status, (int64_t)2, __ATOMIC_RELAXED); return 0; }
    if (std::is_signed<T>::value && b == T(-1)) return (T)(0ull - (unsigned long long)a);
    T q = a / b; T r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
  } else {
    if (b == T(0)) return a / b;
    T m = std::fmod(a, b); T d = (a - m) / b;
    if (m != T(0) && ((b < T(0)) != (m < T(0)))) d -= T(1);
    if (d == T(0)) return std::copysign(T(0), a / b);
    T fd = std::floor(d); if (d - fd > T(0.5)) fd += T(1);
    return fd;
  }
}
template <typename T> inline T tk_remainder(T a, T b, int64_t* status = nullptr) {
  if constexpr (std::is_integral<T>::value) {
    if (b == 0) { if (status) __atomic_fetch_or(status, (int64_t)2, __ATOMIC_RELAXED); return 0; }
    if (std::is_signed<T>::value && b == T(-1)) return 0;
    T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  } else {
    T r = std::fmod(a, b);
    return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? r + b : r;
  }
}
template <typename T> inline T tk_fmod(T a, T b, int64_t* status = nullptr) {
  if constexpr (std::is_integral<T>::value) {
    if (b == 0) { if (status) __atomic_fetch_or(status, (int64_t)2, __ATOMIC_RELAXED); return 0; }
    return (std::is_signed<T>::value && b == T(-1)) ? T(0) : T(a % b);
  } else { return std::fmod(a, b); }
}
template <typename T> inline T tk_ipow(T base, T exp) {
  if (exp < 0) { return base == 1 ? 1 : (base == -1 ? ((exp & 1) ? -1 : 1) : 0); }
  T result = 1;
  while (exp) { if (exp & 1) result *= base; exp >>= 1; base *= base; }
  return result;
}
template <typename T> inline T tk_shl(T a, T b) {
  return (b < 0 || b >= (T)(sizeof(T) * 8)) ? T(0) : (T)(a << b);
}
template <typename T> inline T tk_shr(T a, T b) {
  if (b < 0 || b >= (T)(sizeof(T) * 8)) return std::is_signed<T>::value && a < 0 ? T(-1) : T(0);
  return (T)(a >> b);
}

inline double tk_erfinv(double y) {
  if (y <= -1.0) return y == -1.0 ? -std::numeric_limits<double>::infinity() : std::nan("");
  if (y >= 1.0) return y == 1.0 ? std::numeric_limits<double>::infinity() : std::nan("");
  // Giles' single-precision approximation, then Newton steps on erf in double.
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 5.0) {
    w -= 2.5;
    x = 2.81022636e-08; x = 3.43273939e-07 + x * w; x = -3.5233877e-06 + x * w;
    x = -4.39150654e-06 + x * w; x = 0.00021858087 + x * w; x = -0.00125372503 + x * w;
    x = -0.00417768164 + x * w; x = 0.246640727 + x * w; x = 1.50140941 + x * w;
  } else {
    w = std::sqrt(w) - 3.0;
    x = -0.000200214257; x = 0.000100950558 + x * w; x = 0.00134934322 + x * w;
    x = -0.00367342844 + x * w; x = 0.00573950773 + x * w; x = -0.0076224613 + x * w;
    x = 0.00943887047 + x * w; x = 1.00167406 + x * w; x = 2.83297682 + x * w;
  }
  x *= y;
  for (int i = 0; i < 2; i++) {
    double err = std::erf(x) - y;
    x -= err / (1.1283791670955126 * std::exp(-x * x));
  }
  return x;
}
inline float tk_erfinv(float y) { return (float)tk_erfinv((double)y); }

// ---- counter-based random numbers: Philox4x32-10 keyed by the seed, counted by the offset ----
struct tk_u32x4 { uint32_t v[4]; };
inline tk_u32x4 tk_philox(uint64_t seed, uint64_t offset) {
  uint32_t c0 = (uint32_t)offset, c1 = (uint32_t)(offset >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int i = 0; i < 10; i++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1; c3 = (uint32_t)p0; c0 = n0; c2 = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  return tk_u32x4{{c0, c1, c2, c3}};
}
inline float tk_uniform(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }
inline float tk_rand(int64_t seed, int64_t offset) {
  return tk_uniform(tk_philox((uint64_t)seed, (uint64_t)offset).v[0]);
}
inline float tk_randn(int64_t seed, int64_t offset) {
  tk_u32x4 r = tk_philox((uint64_t)seed, (uint64_t)offset);
  double u1 = ((double)r.v[0] + 1.0) * (1.0 / 4294967296.0);  // (0, 1]: log is finite
  double u2 = (double)r.v[1] * (1.0 / 4294967296.0);
  return (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}
inline int64_t tk_randint64(int64_t seed, int64_t offset, int64_t low, int64_t high) {
  tk_u32x4 r = tk_philox((uint64_t)seed, (uint64_t)offset);
  uint64_t bits = ((uint64_t)r.v[0] << 32) | r.v[1];
  uint64_t span = (uint64_t)(high - low);
  return low + (int64_t)(span ? bits % span : 0);
}

}  // namespace

""".replace("@MATH_TEMPLATES@", _math_templates())
    + STATUS_PRELUDE
)
