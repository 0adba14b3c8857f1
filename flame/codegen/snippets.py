"""The CUDA text of every elementwise op and every reduction, in ONE place (STYLE.md).

SNIPPETS[op][variant] is a CUDA expression over compute-typed operands {0}, {1}, ... Variants are
keyed by the compute kind of the op's operands ("f32" also serves f16/bf16, "f64", "int", "bool",
"*" for all) and may be refined by a string attribute ("f32/tanh" for gelu approximate="tanh").
Other attributes appear by name ({negative_slope}); they are formatted as literals of the compute
type. Extra fields the renderer provides: {ctype} (the compute C type), and for index-dependent ops
{rows}/{cols}/{k}; `i` is the flat output index. An operand may appear more than once in a snippet,
so a fusing caller must bind operands to variables first (the kernels here always do).
Sources of truth: the NumPy `ref` of each op in flame/ir/ops/ — e.g. maximum propagates NaN,
round is half-to-even, sigmoid is 1/(1+exp(-x)), rsqrt is 1/sqrt (both IEEE-rounded)."""

from __future__ import annotations

from dataclasses import dataclass

from flame.codegen import cuda_c, user_source
from flame.ir.dtypes import FP8_DTYPES, DType, fp8_max
from flame.ir.graph import Op
from flame.ir.registry import get

_NAN_MAX = "((({0}) > ({1}) || ({0}) != ({0})) ? ({0}) : ({1}))"  # NaN-propagating, like np.maximum
_NAN_MIN = "((({0}) < ({1}) || ({0}) != ({0})) ? ({0}) : ({1}))"


def _f(f32: str, f64: str, int_: str | None = None) -> dict[str, str]:
    out = {"f32": f32, "f64": f64}
    if int_ is not None:
        out["int"] = int_
    return out


SNIPPETS: dict[str, dict[str, str]] = {
    # unary, numeric
    "neg": {"*": "(-{0})"},
    "stop_gradient": {"*": "({0})"},
    "abs": _f("fabsf({0})", "fabs({0})", "({0} < 0 ? -{0} : {0})"),
    "relu": _f("({0} < 0.0f ? 0.0f : {0})", "({0} < 0.0 ? 0.0 : {0})", "({0} < 0 ? ({ctype})0 : {0})"),
    "floor": _f("floorf({0})", "floor({0})", "{0}"),
    "ceil": _f("ceilf({0})", "ceil({0})", "{0}"),
    "round": _f("rintf({0})", "rint({0})", "{0}"),  # half to even
    "sign": _f(
        "({0} > 0.0f ? 1.0f : ({0} < 0.0f ? -1.0f : 0.0f))",  # NaN and -0.0 give 0, as torch.sign
        "({0} > 0.0 ? 1.0 : ({0} < 0.0 ? -1.0 : 0.0))",
        "(({ctype})(({0} > 0) - ({0} < 0)))",
    ),
    # unary, float
    "exp": _f("expf({0})", "exp({0})"),
    "log": _f("logf({0})", "log({0})"),
    "sqrt": _f("sqrtf({0})", "sqrt({0})"),
    "rsqrt": _f("(1.0f / sqrtf({0}))", "(1.0 / sqrt({0}))"),
    "reciprocal": _f("(1.0f / {0})", "(1.0 / {0})"),
    "sin": _f("sinf({0})", "sin({0})"),
    "cos": _f("cosf({0})", "cos({0})"),
    "tanh": _f("tanhf({0})", "tanh({0})"),
    "sigmoid": _f("(1.0f / (1.0f + expf(-({0}))))", "(1.0 / (1.0 + exp(-({0}))))"),
    "erf": _f("erff({0})", "erf({0})"),
    "erfinv": _f("erfinvf({0})", "erfinv({0})"),
    "erfc": _f("erfcf({0})", "erfc({0})"),
    "asin": _f("asinf({0})", "asin({0})"),
    "acos": _f("acosf({0})", "acos({0})"),
    "atan": _f("atanf({0})", "atan({0})"),
    "asinh": _f("asinhf({0})", "asinh({0})"),
    "acosh": _f("acoshf({0})", "acosh({0})"),
    "atanh": _f("atanhf({0})", "atanh({0})"),
    "expm1": _f("expm1f({0})", "expm1({0})"),
    "tan": _f("tanf({0})", "tan({0})"),
    "sinh": _f("sinhf({0})", "sinh({0})"),
    "cosh": _f("coshf({0})", "cosh({0})"),
    "lgamma": _f("lgammaf({0})", "lgamma({0})"),
    "digamma": {"*": "flame_digamma({0})"},
    "polygamma": {"*": "flame_polygamma({n}, {0})"},
    "gelu": {
        "f32": "(0.5f * {0} * (1.0f + erff({0} * 0.70710678118654752f)))",
        "f64": "(0.5 * {0} * (1.0 + erf({0} * 0.70710678118654752)))",
        "f32/tanh": "(0.5f * {0} * (1.0f + tanhf(0.79788456080286536f * ({0} + 0.044715f * {0} * {0} * {0}))))",
        "f64/tanh": "(0.5 * {0} * (1.0 + tanh(0.79788456080286536 * ({0} + 0.044715 * {0} * {0} * {0}))))",
    },
    "silu": _f("({0} * (1.0f / (1.0f + expf(-({0})))))", "({0} * (1.0 / (1.0 + exp(-({0})))))"),
    "leaky_relu": {"*": "({0} > 0 ? {0} : {0} * {negative_slope})"},
    "logical_not": {"bool": "(!{0})"},
    # binary
    "add": {"*": "({0} + {1})"},
    "sub": {"*": "({0} - {1})"},
    "straight_through": {"*": "({1})"},
    "mul": {"*": "({0} * {1})"},
    "div": {"*": "({0} / {1})"},
    "pow": _f("powf({0}, {1})", "pow({0}, {1})", "flame_ipow({0}, {1})"),
    "floor_divide": {"*": "flame_floordiv({0}, {1})"},
    "bitwise": {"int/and": "({0} & {1})", "bool/and": "({0} && {1})", "int/or": "({0} | {1})",
                "bool/or": "({0} || {1})", "int/xor": "({0} ^ {1})", "bool/xor": "({0} != {1})",
                "int/lshift": "flame_lshift({0}, {1})", "int/rshift": "flame_rshift({0}, {1})"},
    "remainder": {"*": "flame_remainder({0}, {1})"},
    "fmod": _f("fmodf({0}, {1})", "fmod({0}, {1})", "flame_fmod({0}, {1})"),
    "atan2": _f("atan2f({0}, {1})", "atan2({0}, {1})"),
    "hypot": _f("hypotf({0}, {1})", "hypot({0}, {1})"),
    "maximum": {"*": _NAN_MAX},
    "minimum": {"*": _NAN_MIN},
    "eq": {"*": "({0} == {1})"},
    "ne": {"*": "({0} != {1})"},
    "lt": {"*": "({0} < {1})"},
    "le": {"*": "({0} <= {1})"},
    "gt": {"*": "({0} > {1})"},
    "ge": {"*": "({0} >= {1})"},
    "logical_and": {"bool": "({0} && {1})"},
    "logical_or": {"bool": "({0} || {1})"},
    "where": {"*": "({0} ? {1} : {2})"},
    # conversion and creation (the renderer picks the compute type of the expression, see render)
    "cast": {"*": "{0}"},
    # x * scale saturated to the FP8 format's range (NaN kept); the store rounds it once to FP8
    "scaled_cast": {"f32": "flame_saturate_{dtype}({0} * {1})"},
    "full": {"*": "{value}"},
    "arange": {"int": "({start} + {step} * ({ctype})i)", "*": "({start} + {step} * (double)i)"},
    "triu": {"*": "(((long long)(i % {cols}) - (long long)((i / {cols}) % {rows}) >= {k}) ? {0} : ({ctype})0)"},
    "tril": {"*": "(((long long)(i % {cols}) - (long long)((i / {cols}) % {rows}) <= {k}) ? {0} : ({ctype})0)"},
    # {bits}: the random bits of each uniform number (flame.ir.ops.random.unit_bits), 24 or 53
    "random_uniform": {"*": "flame_uniform_{bits}((unsigned long long){0}, (unsigned long long){1} + i)"},
    "random_normal": {"*": "flame_normal_{bits}((unsigned long long){0}, (unsigned long long){1} + i)"},
}

# Device functions some snippets call, each guarded so that several kernels can share one module.
_PHILOX = r"""#ifndef FLAME_PHILOX
#define FLAME_PHILOX
// Philox4x32-10 of counter c under key `seed`, as flame/ir/ops/random.py (bit for bit).
__device__ __forceinline__ uint4 flame_philox(unsigned long long seed, unsigned long long c) {
  unsigned int c0 = (unsigned int)c, c1 = (unsigned int)(c >> 32), c2 = 0u, c3 = 0u;
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const unsigned long long p0 = (unsigned long long)0xD2511F53u * c0;
    const unsigned long long p1 = (unsigned long long)0xCD9E8D57u * c2;
    const unsigned int hi0 = (unsigned int)(p0 >> 32), lo0 = (unsigned int)p0;
    const unsigned int hi1 = (unsigned int)(p1 >> 32), lo1 = (unsigned int)p1;
    c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  return make_uint4(c0, c1, c2, c3);
}
// top 24 bits of w as a double in [0, 1) (exact)
__device__ __forceinline__ double flame_bits_to_unit(unsigned int w) {
  return (double)(w >> 8) * (1.0 / 16777216.0);
}
// 53 bits, exact: the top 24 of hi (flame_bits_to_unit(hi)'s) followed by the top 29 of lo
__device__ __forceinline__ double flame_bits_to_unit53(unsigned int hi, unsigned int lo) {
  return (double)(((unsigned long long)(hi >> 8) << 29) | (unsigned long long)(lo >> 3)) *
         (1.0 / 9007199254740992.0);
}
__device__ __forceinline__ double flame_uniform_24(unsigned long long seed, unsigned long long c) {
  return flame_bits_to_unit(flame_philox(seed, c).x);
}
__device__ __forceinline__ double flame_uniform_53(unsigned long long seed, unsigned long long c) {
  const uint4 w = flame_philox(seed, c);
  return flame_bits_to_unit53(w.x, w.y);
}
// Box-Muller in double, as the reference: u1 in (0, 1] so the log is finite
__device__ __forceinline__ double flame_normal_24(unsigned long long seed, unsigned long long c) {
  const uint4 w = flame_philox(seed, c);
  const double u1 = flame_bits_to_unit(w.x) + (1.0 / 16777216.0);
  const double u2 = flame_bits_to_unit(w.y);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
__device__ __forceinline__ double flame_normal_53(unsigned long long seed, unsigned long long c) {
  const uint4 w = flame_philox(seed, c);
  const double u1 = flame_bits_to_unit53(w.x, w.z) + (1.0 / 9007199254740992.0);
  const double u2 = flame_bits_to_unit53(w.y, w.w);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
#endif"""

# Python's // and % (NumPy's npy_divmod, which PyTorch's floor division and remainder follow): the
# quotient rounds toward -inf, the remainder takes the divisor's sign; and C's fmod of integers (the
# dividend's sign). Integer division by zero gives 0 here: unspecified, as in PyTorch's CUDA kernels (the
# reference executor raises, as PyTorch's CPU)
_DIVMOD = r"""#ifndef FLAME_DIVMOD
#define FLAME_DIVMOD
__device__ __forceinline__ float flame_floordiv(float a, float b) {
  if (b == 0.0f) return a / b;
  const float mod = fmodf(a, b);
  float div = (a - mod) / b;
  if (mod != 0.0f && ((b < 0.0f) != (mod < 0.0f))) div -= 1.0f;
  if (div == 0.0f) return copysignf(0.0f, a / b);
  float fl = floorf(div);
  if (div - fl > 0.5f) fl += 1.0f;
  return fl;
}
__device__ __forceinline__ double flame_floordiv(double a, double b) {
  if (b == 0.0) return a / b;
  const double mod = fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0.0 && ((b < 0.0) != (mod < 0.0))) div -= 1.0;
  if (div == 0.0) return copysign(0.0, a / b);
  double fl = floor(div);
  if (div - fl > 0.5) fl += 1.0;
  return fl;
}
__device__ __forceinline__ float flame_remainder(float a, float b) {
  float mod = fmodf(a, b);
  if (b == 0.0f) return mod;
  if (mod != 0.0f && (b < 0.0f) != (mod < 0.0f)) mod += b;  // a zero keeps fmod's sign, as torch's
  return mod;
}
__device__ __forceinline__ double flame_remainder(double a, double b) {
  double mod = fmod(a, b);
  if (b == 0.0) return mod;
  if (mod != 0.0 && (b < 0.0) != (mod < 0.0)) mod += b;  // a zero keeps fmod's sign, as torch's
  return mod;
}
template <typename T> __device__ __forceinline__ T flame_floordiv_int(T a, T b) {
  if (b == 0) return 0;
  const T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> __device__ __forceinline__ T flame_remainder_int(T a, T b) {
  if (b == 0) return 0;
  const T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> __device__ __forceinline__ T flame_fmod_int(T a, T b) {
  if (b == 0 || b == (T)-1) return 0;  // x % -1 is 0 (in C the minimum % -1 overflows)
  return a % b;
}
__device__ __forceinline__ int flame_fmod(int a, int b) { return flame_fmod_int(a, b); }
__device__ __forceinline__ long long flame_fmod(long long a, long long b) { return flame_fmod_int(a, b); }
__device__ __forceinline__ int flame_floordiv(int a, int b) { return flame_floordiv_int(a, b); }
__device__ __forceinline__ long long flame_floordiv(long long a, long long b) { return flame_floordiv_int(a, b); }
__device__ __forceinline__ int flame_remainder(int a, int b) { return flame_remainder_int(a, b); }
__device__ __forceinline__ long long flame_remainder(long long a, long long b) { return flame_remainder_int(a, b); }
#endif"""

# integer pow and shifts as PyTorch's CPU kernels: pow wraps (computed in unsigned 64-bit, then cut to T)
# and gives 0 for a negative exponent unless the base is 1 or -1; a shift by a negative count or by the
# width or more gives 0 (<<) or the sign (>>: -1 for a negative value, else 0)
_INTBITS = r"""#ifndef FLAME_INTBITS
#define FLAME_INTBITS
template <typename T> __device__ __forceinline__ T flame_ipow(T a, T b) {
  if (b < 0) return a == (T)1 ? (T)1 : (a == (T)-1 ? ((b % 2) ? (T)-1 : (T)1) : (T)0);
  unsigned long long r = 1ull, x = (unsigned long long)(long long)a, e = (unsigned long long)(long long)b;
  while (e) { if (e & 1ull) r *= x; x *= x; e >>= 1; }
  return (T)r;
}
template <typename T> __device__ __forceinline__ T flame_lshift(T a, T b) {
  const long long bits = (long long)(sizeof(T) * 8);
  if ((long long)b < 0 || (long long)b >= bits) return (T)0;
  return (T)((unsigned long long)(long long)a << (unsigned long long)(long long)b);
}
template <typename T> __device__ __forceinline__ T flame_rshift(T a, T b) {
  const long long bits = (long long)(sizeof(T) * 8);
  if ((long long)b < 0 || (long long)b >= bits) return (T)((long long)a < 0 ? -1 : 0);
  return (T)(a >> b);
}
#endif"""

_SPECIAL = r"""#ifndef FLAME_SPECIAL
#define FLAME_SPECIAL
#define FLAME_INF __longlong_as_double(0x7ff0000000000000ull)
#define FLAME_NAN __longlong_as_double(0x7ff8000000000000ull)
// digamma as torch.digamma: -+inf at +-0, NaN at the negative integers; reflection below 0
// (psi(x) = psi(1 - x) - pi / tan(pi x), with x's fractional part in the tangent), the recurrence
// psi(x) = psi(x + 1) - 1 / x up to 10, then log x - 1 / 2x - sum B_2k / (2k x^2k)
template <typename T> __device__ __forceinline__ T flame_digamma(T x) {
  const T pi = (T)3.14159265358979323846;
  if (x == (T)0) return copysign((T)FLAME_INF, -x);
  T acc = (T)0;
  if (x < (T)0) {
    if (x == trunc(x)) return (T)FLAME_NAN;
    acc = -pi / tan(pi * (x - trunc(x)));
    x = (T)1 - x;
  }
  while (x < (T)10) { acc -= (T)1 / x; x += (T)1; }
  const T z = (T)1 / (x * x);
  const T tail = z * ((T)(1.0 / 12) - z * ((T)(1.0 / 120) - z * ((T)(1.0 / 252) - z * ((T)(1.0 / 240)
      - z * ((T)(1.0 / 132) - z * ((T)(691.0 / 32760) - z * (T)(1.0 / 12)))))));
  return acc + log(x) - (T)0.5 / x - tail;
}
// trigamma: torch's reflection below 0.5, the recurrence up to 10, the asymptotic series to 1/x^15
// (flame/ir/ops/special.py's reference, term for term)
template <typename T> __device__ __forceinline__ T flame_trigamma(T x) {
  const T pi = (T)3.14159265358979323846;
  T sign = (T)1, acc = (T)0;
  if (x < (T)0.5) {
    sign = (T)-1;
    const T s = sin(pi * x);
    acc -= (pi * pi) / (s * s);
    x = (T)1 - x;
  }
  for (int i = 0; i < 10 && x < (T)10; ++i) { acc += (T)1 / (x * x); x += (T)1; }
  const T ixx = (T)1 / (x * x);
  const T series = (T)(1.0 / 42) - ixx * ((T)(1.0 / 30) - ixx * ((T)(5.0 / 66) - ixx * ((T)(691.0 / 2730)
      - ixx * (T)(7.0 / 6))));
  acc += ((T)1 + (T)1 / ((T)2 * x) + ixx * ((T)(1.0 / 6) - ixx * ((T)(1.0 / 30) - ixx * series))) / x;
  return sign * acc;
}
// Hurwitz zeta(s, q) by Euler-Maclaurin summation (Cephes' zeta): inf at q a non-positive integer
template <typename T> __device__ __forceinline__ T flame_zeta(T s, T q) {
  const double bern[12] = {12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1892437580.3183792,
                           74724249600.0, -2950130727918.164, 116467828143500.67, -4597978722407473.0,
                           1.8152105401943546e17, -7.166165256175667e18};  // (2k)! / B_2k
  const T eps = sizeof(T) == 4 ? (T)5.96e-8 : (T)1.11e-16;
  if (q <= (T)0 && q == floor(q)) return (T)FLAME_INF;
  T acc = pow(q, -s), a = q, b = (T)0;
  int i = 0;
  while (i < 9 || a <= (T)9) {
    ++i; a += (T)1; b = pow(a, -s); acc += b;
    if (fabs(b / acc) < eps) return acc;
  }
  const T w = a;
  acc += b * w / (s - (T)1) - (T)0.5 * b;
  T f = (T)1, k = (T)0;
  for (int j = 0; j < 12; ++j) {
    f *= s + k; b /= w;
    const T t = f * b / (T)bern[j];
    acc += t;
    if (fabs(t / acc) < eps) return acc;
    k += (T)1; f *= s + k; b /= w; k += (T)1;
  }
  return acc;
}
// polygamma(n, x), n >= 1: trigamma's series for n = 1, else (-1)^(n+1) n! zeta(n + 1, x)
template <typename T> __device__ __forceinline__ T flame_polygamma(T order, T x) {
  const int n = (int)order;
  if (n == 1) return flame_trigamma(x);
  T fact = (T)1;
  for (int i = 2; i <= n; ++i) fact *= (T)i;
  return ((n + 1) % 2 ? (T)-1 : (T)1) * fact * flame_zeta((T)(n + 1), x);
}
#endif"""

_SATURATE = (
    "#ifndef FLAME_FP8_SATURATE\n#define FLAME_FP8_SATURATE\n"
    + "".join(
        f"static __device__ __forceinline__ float flame_saturate_{d.name}(float v) {{\n"
        f"  return v != v ? v : fminf(fmaxf(v, -{fp8_max(d):.1f}f), {fp8_max(d):.1f}f);\n}}\n"
        for d in FP8_DTYPES
    )
    + "#endif\n"
)
PRELUDES: dict[str, str | dict[str, str]] = {
    "scaled_cast": _SATURATE, "random_uniform": _PHILOX, "random_normal": _PHILOX, "floor_divide": _DIVMOD,
    "remainder": _DIVMOD, "fmod": {"int": _DIVMOD}, "pow": {"int": _INTBITS}, "bitwise": _INTBITS,
    "digamma": _SPECIAL, "polygamma": _SPECIAL}


@dataclass(frozen=True)
class Reduction:
    """How a reduction combines two accumulators ({0}, {1}) and finishes ({0}: the total, {count}:
    the number of reduced elements). Where it starts is the op's trait (OpDef.reduction.identity)."""

    combine: str
    finalize: str = "{0}"


REDUCTIONS: dict[str, Reduction] = {
    "reduce_sum": Reduction("({0} + {1})"),
    "reduce_mean": Reduction("({0} + {1})", "({0} / ({ctype}){count})"),
    "reduce_max": Reduction(_NAN_MAX),
    "reduce_min": Reduction(_NAN_MIN),
    # argmax: the larger value wins, NaN beats everything (np.argmax), ties go to the lower index
    "argmax": Reduction(
        "((({0}.v > {1}.v || ({0}.v != {0}.v)) && !({1}.v != {1}.v)) || "
        "(({0}.v == {1}.v || (({0}.v != {0}.v) && ({1}.v != {1}.v))) && {0}.i < {1}.i))"
        " ? {0} : {1}",
    ),
}


@dataclass(frozen=True)
class Accumulator:
    """The CUDA text of one reduction op's fold, shared by every kernel that reduces: the accumulator
    dtype (f16/bf16 accumulate in f32), its starting literal, combine and the final value."""

    spec: Reduction
    dtype: DType
    identity: str

    def combine(self, a: str, b: str) -> str:
        return self.spec.combine.format(a, b)

    def total(self, a: str, count: str) -> str:
        """The result from accumulator `a` after `count` (a C expression) elements."""
        return self.spec.finalize.format(a, ctype=self.dtype.cuda_type, count=count)


def accumulator(op: Op) -> Accumulator:
    """How reduction `op` accumulates (KeyError for an op without a reduction snippet)."""
    acc = cuda_c.compute_dtype(op.inputs[0].dtype)
    return Accumulator(REDUCTIONS[op.name], acc, cuda_c.identity(get(op.name).reduction.identity, acc))


def snippet(op: str, kind: str, variant: str | None = None) -> str:
    """The expression template of `op` for compute kind `kind`; KeyError when there is none."""
    if op not in SNIPPETS and get(op).user is not None:  # flame.cuda.elementwise: the op's own expression
        return user_source.call(op, get(op).user)
    table = SNIPPETS[op]
    for key in ((f"{kind}/{variant}",) if variant else ()) + (kind, "*"):
        if key in table:
            return table[key]
    raise KeyError(f"no CUDA snippet for {op} on {kind} operands")


def prelude(op: str, dtype=None) -> str:
    """The device functions the snippet of `op` (with a result of `dtype`) calls ('' for none): PRELUDES'
    (per kind of dtype where the entry is a table: integer pow only), or a user elementwise op's own
    function (flame.cuda.elementwise)."""
    if op in PRELUDES:
        got = PRELUDES[op]
        return got if isinstance(got, str) else got.get(getattr(dtype, "kind", ""), "")
    code = get(op).user
    return user_source.device_function(op, code) if code is not None and code.form == "elementwise" else ""
