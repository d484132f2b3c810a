"""Helper ``@triton.jit`` functions written into every kernel module.

The ``_tk_*`` math helpers stand in for libdevice under the interpreter (see ``_compat.py``);
they use only tl.exp/log/sqrt/where, in float32, accurate to a few ulp over normal ranges.
"""

from __future__ import annotations

PRELUDE = """
@triton.jit
def _tk_prod_combine(a, b):
    return a * b


@triton.jit
def _tk_max_combine(a, b):
    # max that propagates NaN (as eager): one tree over the lanes, not a max plus a NaN test
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _tk_min_combine(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _tk_round_bf16(x):
    # float32 -> the nearest bfloat16 value (ties to even), still float32; NaN stays NaN
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
    return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))


@triton.jit
def _tk_f32_to_bf16(x):
    # interpreter only: float32 -> bfloat16 through the bits (its own conversion flushes subnormals)
    bits = _tk_round_bf16(x).to(tl.uint32, bitcast=True)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _tk_bf16_to_f32(x):
    # interpreter only: bfloat16 -> float32 exactly, subnormals included
    return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _tk_rounded(x):
    # GPU only: a value rounded to 16 bits (bfloat16, float16), passed through an instruction
    # the compiler cannot see through before it is widened again, so that it keeps the
    # rounding: otherwise LLVM's NVPTX backend narrows the float32 product and sum around a
    # bfloat16 round trip into one fma.rn.bf16 (bf16(x * s + b) with the product unrounded,
    # where eager rounds it first). Each op on its own may still become one 16-bit op
    # (add.bf16x2, mul.bf16x2: rounded once, as eager's float32 op then its rounding, float32
    # having more than twice the bits). Two values a 32-bit copy (the conversions stay packed,
    # cvt.rn.bf16x2.f32); a block of an odd count one at a time
    if x.numel % 2 == 0:
        return tl.inline_asm_elementwise(
            "mov.b32 $0, $1;", "=r,r", [x], dtype=x.dtype, is_pure=True, pack=2
        )
    else:
        return tl.inline_asm_elementwise(
            "mov.b16 $0, $1;", "=h,h", [x], dtype=x.dtype, is_pure=True, pack=1
        )


@triton.jit
def _tk_ipow(a, b):
    # integer power by squaring: exact (wrapping on overflow, as torch), where exp2/log2 in
    # float loses the low digits of large results; b < 0 gives 0 unless |a| == 1, as torch
    r = a * 0 + 1
    base = a
    e = b
    for _ in tl.static_range(63):
        r = tl.where((e & 1) != 0, r * base, r)
        base = base * base
        e = e >> 1
    odd = (b & 1) != 0
    neg = tl.where(a == 1, a * 0 + 1, tl.where(a == -1, tl.where(odd, a * 0 - 1, a * 0 + 1), a * 0))
    return tl.where(b < 0, neg, r)


@triton.jit
def _tk_log1p(x):
    # log(u) * x / (u - 1) for u = 1 + x (Kahan): u - 1 is exact, and the quotient corrects the
    # rounding of 1 + x, so the result keeps x's low bits (log(1 + x) alone loses them: 6e-6
    # relative at x = 0.01)
    u = 1.0 + x
    d = u - 1.0
    r = tl.where(d == 0.0, x, tl.log(u) * (x / tl.where(d == 0.0, 1.0, d)))
    r = tl.where(u == float("inf"), u, r)
    return tl.where(x == 0, x, r)  # log1p(-0.) is -0.


@triton.jit
def _tk_expm1(x):
    # (u - 1) * x / log(u) for u = exp(x) (Kahan): u - 1 is exact near 1 and the quotient
    # corrects exp's rounding, a few ulps everywhere (exp(x) - 1 alone lost up to 1e-5 relative
    # for x near 0.01: the fuzzer's 1 / tanh(x) read 5e-6 off in float64, seed 780148)
    u = tl.exp(x)
    d = u - 1.0
    lu = tl.log(u)
    r = tl.where(d == 0.0, x, d * (x / tl.where(lu == 0.0, 1.0, lu)))
    r = tl.where(d == -1.0, -1.0, r)  # exp(x) is 0: log(0) is -inf
    r = tl.where(u == float("inf"), u, r)
    return tl.where(x == 0, x, r)  # expm1(-0.) is -0.


@triton.jit
def _tk_tanh(x):
    t = tl.exp(-2.0 * tl.abs(x))
    r = _tk_expm1(-2.0 * tl.abs(x))
    y = -r / (1.0 + t)
    return tl.where(x == 0, x, tl.where(x < 0, -y, y))  # tanh(+-0.) is +-0.


@triton.jit
def _tk_sinh(x):
    a = tl.abs(x)
    e = _tk_expm1(a)
    # past 20, e / (e + 1) is 1 to the last bit; exp(a - ln 2) reaches sinh's own overflow point
    y = tl.where(a > 20.0, tl.exp(a - 0.6931471805599453), 0.5 * (e + e / (e + 1.0)))
    return tl.where(x == 0, x, tl.where(x < 0, -y, y))


@triton.jit
def _tk_cosh(x):
    a = tl.abs(x)
    e = tl.exp(a)
    return tl.where(a > 20.0, tl.exp(a - 0.6931471805599453), 0.5 * (e + 1.0 / e))


@triton.jit
def _tk_asinh(x):
    a = tl.abs(x)
    big = a > 1e8  # a * a would overflow or swamp: asinh(a) = log(2a) to the last bit there
    ab = tl.where(big, 1.0, a)
    y = tl.where(big, tl.log(a) + 0.6931471805599453,
                 _tk_log1p(ab + ab * ab / (1.0 + tl.sqrt(1.0 + ab * ab))))
    return tl.where(x == 0, x, tl.where(x < 0, -y, y))


@triton.jit
def _tk_acosh(x):
    big = x > 1e8
    xs = tl.where(big, 2.0, x)
    y = tl.where(big, tl.log(x) + 0.6931471805599453, tl.log(xs + tl.sqrt((xs - 1.0) * (xs + 1.0))))
    return tl.where(x < 1.0, float("nan"), y)


@triton.jit
def _tk_atanh(x):
    return 0.5 * (_tk_log1p(x) - _tk_log1p(-x))


@triton.jit
def _tk_tan(x):
    return tl.sin(x) / tl.cos(x)


@triton.jit
def _tk_atan(x):
    # Cephes atanf: range reduction to |x| <= tan(pi/8), then a degree-9 odd polynomial.
    a = tl.abs(x)
    big = a > 2.414213562373095
    mid = (a > 0.4142135623730950) & (~big)
    base = tl.where(big, 1.5707963267948966, tl.where(mid, 0.7853981633974483, 0.0))
    t = tl.where(big, -1.0 / tl.where(big, a, 1.0), tl.where(mid, (a - 1.0) / (a + 1.0), a))
    z = t * t
    p = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z
         - 3.33329491539e-1) * z * t + t
    y = base + p
    return tl.where(x == 0, x, tl.where(x < 0, -y, y))  # atan(+-0.) is +-0.


@triton.jit
def _tk_atan2(y, x):
    # C's atan2, special values included: the sign of a zero y picks +-0 or +-pi, two infinities
    # give +-pi/4 or +-3pi/4, NaN propagates
    a = _tk_atan(y / tl.where(x == 0, 1.0, x))
    pi = 3.141592653589793
    y_neg = (y < 0) | ((y == 0) & (1.0 / y < 0))
    x_neg = (x < 0) | ((x == 0) & (1.0 / x < 0))
    r = tl.where(x > 0, a, tl.where(y_neg, a - pi, a + pi))
    on_axis = tl.where(x_neg, tl.where(y_neg, -pi, pi), y)
    r = tl.where(x == 0, tl.where(y > 0, pi / 2, tl.where(y < 0, -pi / 2, on_axis)), r)
    r = tl.where(y == 0, tl.where(x_neg, tl.where(y_neg, -pi, pi), y), r)
    inf = float("inf")
    both = (tl.abs(x) == inf) & (tl.abs(y) == inf)
    corner = tl.where(x > 0, pi / 4, 3 * pi / 4)
    r = tl.where(both, tl.where(y_neg, -corner, corner), r)
    return tl.where((x != x) | (y != y), x + y, r)


@triton.jit
def _tk_asin(x):
    return _tk_atan2(x, tl.sqrt((1.0 - x) * (1.0 + x)))


@triton.jit
def _tk_acos(x):
    return _tk_atan2(tl.sqrt((1.0 - x) * (1.0 + x)), x)


@triton.jit
def _tk_log10(x):
    return tl.log(x) * 0.4342944819032518


@triton.jit
def _tk_erfc(x):
    return 1.0 - tl.erf(x)


@triton.jit
def _tk_erf_two_ranges(x):
    # TritonOptions.erf_two_ranges: erf(x) = x + x * P(x^2) up to |x| = 0.921875, and
    # sign(x) * (1 - exp(Q(min(|x|, 4)))) above (Q fits log(erfc); erfc(4) is below half an
    # ulp of 1), both evaluated with their coefficients inline (fitted by
    # benchmarks/gpu_erf_probe.py, rounded to float32); Q(4) is above -19, so the exp as
    # ex2.approx.ftz flushes nothing. NaN takes the lower range and stays NaN; erf(-0.) is -0.
    t = tl.abs(x)
    s = x * x
    p = -0.0005990979261696339 * s + 0.004993210081011057
    p = p * s - 0.026766641065478325
    p = p * s + 0.1128181740641594
    p = p * s - 0.37612494826316833
    p = p * s + 0.12837915122509003
    low = x * p + x
    u = tl.minimum(t, 4.0)
    q = 1.6024941942305304e-06 * u - 4.5354670874075964e-05
    q = q * u + 0.0005907160229980946
    q = q * u - 0.004730285611003637
    q = q * u + 0.02633555233478546
    q = q * u - 0.10992520302534103
    q = q * u - 0.6319953203201294
    q = q * u - 1.130131483078003
    q = q * u + 0.00029427994741126895
    high = 1.0 - tl.exp2(q * 1.4426950408889634)
    high = tl.where(x < 0, -high, high)
    return tl.where(t > 0.921875, high, low)


@triton.jit
def _tk_erfinv(x):
    # M. Giles, "Approximating the erfinv function" (single precision).
    w = -tl.log((1.0 - x) * (1.0 + x))
    ws = w - 2.5
    p1 = 2.81022636e-08
    p1 = 3.43273939e-07 + p1 * ws
    p1 = -3.5233877e-06 + p1 * ws
    p1 = -4.39150654e-06 + p1 * ws
    p1 = 0.00021858087 + p1 * ws
    p1 = -0.00125372503 + p1 * ws
    p1 = -0.00417768164 + p1 * ws
    p1 = 0.246640727 + p1 * ws
    p1 = 1.50140941 + p1 * ws
    wl = tl.sqrt(tl.maximum(w, 5.0)) - 3.0
    p2 = -0.000200214257
    p2 = 0.000100950558 + p2 * wl
    p2 = 0.00134934322 + p2 * wl
    p2 = -0.00367342844 + p2 * wl
    p2 = 0.00573950773 + p2 * wl
    p2 = -0.0076224613 + p2 * wl
    p2 = 0.00943887047 + p2 * wl
    p2 = 1.00167406 + p2 * wl
    p2 = 2.83297682 + p2 * wl
    r = tl.where(w < 5.0, p1, p2) * x
    inf = float("inf")
    r = tl.where(tl.abs(x) == 1.0, tl.where(x > 0, inf, -inf), r)  # the poles, exactly
    return tl.where(tl.abs(x) > 1.0, float("nan"), tl.where(x == 0, x, r))


@triton.jit
def _tk_trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def _tk_rint(x):
    # round half to even, like torch.round; a zero result keeps x's sign (round(-0.3) is -0.)
    r = tl.floor(x + 0.5)
    odd = (r - 2.0 * tl.floor(r * 0.5)) != 0
    r = tl.where(((r - x) == 0.5) & odd, r - 1.0, r)
    r = tl.where(r == 0, tl.where(x < 0, -0.0 * r, r * 0.0), r)
    return tl.where(x == 0, x, r)


@triton.jit
def _tk_copysign(a, b):
    neg = (b < 0) | ((b == 0) & (1.0 / b < 0))
    return tl.where(neg, -tl.abs(a), tl.abs(a))


@triton.jit
def _tk_pow(a, b):
    # C's pow: odd integer exponents keep the sign of the base (-0. and -inf included), a
    # finite negative base with a non-integer exponent is nan, pow(x, 0) and pow(1, y) are 1,
    # pow(-1, +-inf) is 1
    mag = tl.exp2(b * tl.log2(tl.abs(a)))
    finite_b = tl.abs(b) != float("inf")
    bint = (tl.floor(b) == b) & finite_b
    odd = bint & ((b - 2.0 * tl.floor(b * 0.5)) != 0)
    negative = (a < 0) | ((a == 0) & (1.0 / a < 0))
    r = tl.where(negative & odd, -mag, mag)
    r = tl.where((a < 0) & (tl.abs(a) != float("inf")) & (~bint) & finite_b, float("nan"), r)
    one = (b == 0) | (a == 1) | ((a == -1) & (~finite_b))
    r = tl.where(b == 1, a, r)  # exp2(log2(a)) can round past the largest float
    return tl.where(one, 1.0, r)


@triton.jit
def _tk_floordiv(a, b):
    # Python's floor division of floats, as eager computes it: (a - fmod(a, b)) / b, corrected
    # when fmod's sign differs from b's, then rounded to the nearest integer; a zero quotient
    # keeps the sign of a / b; b == 0 gives a / b (inf or nan)
    q = a / b
    m = a % b
    d = (a - m) / b
    d = tl.where((m != 0) & ((b < 0) != (m < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    negative = (q < 0) | ((q == 0) & (1.0 / q < 0))
    zero = tl.where(negative, -tl.abs(d), tl.abs(d))
    r = tl.where(d == 0, zero, f)
    return tl.where(b == 0, q, r)
"""
