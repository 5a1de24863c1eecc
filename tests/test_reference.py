"""Tests of the numpy reference (tests/reference.py) itself.

Independent checks: hand-worked convs, a per-pixel Python-loop conv, exact
Fraction arithmetic for fmaf and for the whole epilogue.
"""

import math
import struct
from fractions import Fraction

import numpy as np
import pytest

import reference
from reference import (conv2d_int32, conv_output_size_and_padding, epilogue,
                       fmaf, fused_conv2d_reference)

F32 = np.float32


# --------------------------------------------------------------------------
# exact helpers (Fraction based, no numpy rounding involved)
# --------------------------------------------------------------------------

def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def round_to_f32(q):
    """Correctly round a Fraction to float32 (nearest, ties to even)."""
    if q == 0:
        return 0.0
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    # e = floor(log2(q))
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    assert Fraction(2) ** e <= q < Fraction(2) ** (e + 1)
    e = max(e, -126)                       # subnormals share exponent -126
    quantum = Fraction(2) ** (e - 23)
    m = round(q / quantum)                 # Fraction round(): half to even
    v = m * quantum
    if v >= Fraction(2) ** 128:
        return sign * math.inf
    out = sign * float(v)                  # v is a float32, so exact
    assert float(np.float32(out)) == out
    return out


def exact_fmaf(a, b, c):
    """C fmaf(a, b, c) for finite float32 a, b, c via Fractions."""
    a, b, c = float(a), float(b), float(c)
    q = Fraction(a) * Fraction(b) + Fraction(c)
    if q == 0:
        prod_neg = math.copysign(1.0, a) * math.copysign(1.0, b) < 0
        if a * b == 0 and c == 0 and prod_neg and math.copysign(1.0, c) < 0:
            return -0.0
        return 0.0
    return round_to_f32(q)


def same_f32(x, y):
    """Bitwise float32 equality, NaN == NaN."""
    x, y = np.float32(x), np.float32(y)
    if np.isnan(x) and np.isnan(y):
        return True
    return f32_bits(x) == f32_bits(y)


def random_f32_bits(rng, n):
    """Random finite float32 from random bit patterns (all binades)."""
    bits = rng.integers(0, 2 ** 32, size=n, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    return np.where(np.isfinite(x), x, F32(1.5))


def naive_fmaf(a, b, c):
    """float64 product and sum, then one cast: double rounding."""
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)


# --------------------------------------------------------------------------
# fmaf
# --------------------------------------------------------------------------

def check_fmaf_against_exact(a, b, c):
    got = fmaf(a, b, c)
    bad = []
    for ai, bi, ci, gi in zip(a, b, c, got):
        want = exact_fmaf(ai, bi, ci)
        if not same_f32(gi, want):
            bad.append((ai, bi, ci, gi, want))
    assert not bad, bad[:5]


def test_fmaf_random_bit_patterns():
    rng = np.random.default_rng(1)
    n = 4000
    check_fmaf_against_exact(random_f32_bits(rng, n), random_f32_bits(rng, n),
                             random_f32_bits(rng, n))


def test_fmaf_random_comparable_magnitudes():
    # product and addend of similar size: cancellation and carries
    rng = np.random.default_rng(2)
    n = 4000
    a = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)).astype(F32)
    b = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)).astype(F32)
    c = (-(a.astype(np.float64) * b) * (1 + rng.standard_normal(n) * 2.0 **
         rng.integers(-30, 0, n))).astype(F32)
    check_fmaf_against_exact(a, b, c)


def test_fmaf_subnormal_and_huge():
    rng = np.random.default_rng(3)
    n = 3000
    # products around the float32 subnormal range and the overflow threshold
    ea = rng.integers(-80, -60, n)
    a = (rng.uniform(1, 2, n) * 2.0 ** ea).astype(F32)
    b = (rng.uniform(-2, 2, n) * 2.0 ** (-80 - ea + rng.integers(-10, 10, n))
         ).astype(F32)
    c = random_f32_bits(rng, n) * F32(2.0 ** -100)
    check_fmaf_against_exact(a, b, c)
    a = (rng.uniform(1, 2, n) * 2.0 ** 64).astype(F32)
    b = (rng.uniform(-2, 2, n) * 2.0 ** 63).astype(F32)
    c = (rng.uniform(-2, 2, n) * 2.0 ** 127).astype(F32)
    check_fmaf_against_exact(a, b, c)


def midpoint_cases(rng, n):
    """a*b + c where float64 rounds exactly onto a float32 midpoint.

    p = a*b = +-ulp(c)/2 * (1 - k^2 2^-46): just short of the midpoint next
    to c, by less than half a float64 ulp, so float64 rounds p + c to the
    midpoint and the cast then ties to even; the exact answer is c.
    """
    k = rng.integers(1, 300, n)
    mant = rng.integers(2 ** 23 + 1, 2 ** 24 - 1, n)    # not a power of two
    ec = rng.integers(-149 + 23, 127 - 23, n)           # c exponent of lsb
    sc = rng.choice([-1.0, 1.0], n)
    sp = rng.choice([-1.0, 1.0], n)
    c = (sc * mant * 2.0 ** ec).astype(F32)
    # ulp(c)/2 = 2^(ec-1); split the scale between a and b (both normal)
    half = ec - 1
    ea = half // 2
    eb = half - ea
    a = ((1 + k * 2.0 ** -23) * 2.0 ** ea).astype(F32)
    b = (sp * (1 - k * 2.0 ** -23) * 2.0 ** eb).astype(F32)
    return a, b, c


def test_fmaf_constructed_midpoints():
    rng = np.random.default_rng(4)
    a, b, c = midpoint_cases(rng, 3000)
    # the construction is exact: a, b did not round
    assert np.all(a.astype(np.float64) * b != 0)
    check_fmaf_against_exact(a, b, c)
    got = fmaf(a, b, c)
    assert np.array_equal(got, c)         # exact answer is c itself
    naive = naive_fmaf(a, b, c)
    wrong = naive != got
    # naive is wrong exactly when c's last bit is odd (the tie goes away
    # from c): about half of the cases
    odd = (c.view(np.uint32) & 1) == 1
    assert np.array_equal(wrong, odd)
    assert wrong.sum() > 1000


def test_fmaf_specific_double_rounding_case():
    # c = 1 + 2^-23 (odd last bit), a*b = 2^-24 (1 - 2^-46): float64 sum is
    # the midpoint 1 + 2^-23 + 2^-24, which ties to 1 + 2^-22; exact -> c.
    a = F32(1 + 2.0 ** -23)
    b = F32(2.0 ** -24 * (1 - 2.0 ** -23))
    c = F32(1 + 2.0 ** -23)
    assert float(a) * float(b) == 2.0 ** -24 - 2.0 ** -70
    assert naive_fmaf(a, b, c) == F32(1 + 2.0 ** -22)
    assert fmaf(a, b, c) == c
    assert exact_fmaf(a, b, c) == float(c)
    # and the mirror image, with the error on the other side
    assert fmaf(-a, b, -c) == -c
    assert naive_fmaf(-a, b, -c) == F32(-(1 + 2.0 ** -22))


def test_fmaf_exact_midpoint_still_ties_to_even():
    # a*b + c exactly on a float32 midpoint: ties to even, no nudge
    assert fmaf(F32(2.0 ** -24), F32(1), F32(1)) == F32(1)
    assert fmaf(F32(3 * 2.0 ** -24), F32(1), F32(1)) == F32(1 + 2.0 ** -22)
    assert fmaf(F32(2.0 ** -24), F32(1), F32(1 + 2.0 ** -23)) == \
        F32(1 + 2.0 ** -22)


def test_fmaf_specials():
    inf, nan = np.inf, np.nan
    big = F32(2.0 ** 127)
    cases = [
        (inf, 0, 1, nan),
        (0, inf, 1, nan),
        (inf, 1, -inf, nan),
        (inf, 2, 1, inf),
        (inf, -2, 1, -inf),
        (1, 1, inf, inf),
        (1, 1, -inf, -inf),
        (nan, 1, 1, nan),
        (1, nan, 1, nan),
        (1, 1, nan, nan),
        (big, 2, 0, inf),                         # overflow
        (big, -2, 0, -inf),
        (big, 2, -big, big),                      # no intermediate overflow
        (F32(3.4028235e38), 1, F32(2.0 ** 103), inf),   # max + half ulp: tie
        (F32(3.4028235e38), 1, F32(2.0 ** 102), F32(3.4028235e38)),
        (F32(2.0 ** -75), F32(2.0 ** -75), 0, 0.0),     # 2^-150: ties to 0
        (F32(2.0 ** -75), F32(1.5 * 2.0 ** -75), 0, F32(2.0 ** -149)),
        (F32(2.0 ** -149), 1, F32(2.0 ** -149), F32(2.0 ** -148)),
    ]
    for a, b, c, want in cases:
        got = fmaf(F32(a), F32(b), F32(c))
        assert same_f32(got, want), (a, b, c, got, want)


def test_fmaf_signed_zeros():
    assert f32_bits(fmaf(F32(-0.0), F32(1), F32(-0.0))) == f32_bits(-0.0)
    assert f32_bits(fmaf(F32(-0.0), F32(1), F32(0.0))) == f32_bits(0.0)
    assert f32_bits(fmaf(F32(0.0), F32(1), F32(-0.0))) == f32_bits(0.0)
    assert f32_bits(fmaf(F32(1), F32(1), F32(-1))) == f32_bits(0.0)
    assert f32_bits(fmaf(F32(-1), F32(-0.0), F32(-0.0))) == f32_bits(0.0)


def test_fmaf_broadcast_and_dtype():
    out = fmaf(np.ones((2, 3), F32), F32(2), np.arange(3, dtype=F32))
    assert out.dtype == np.float32 and out.shape == (2, 3)
    assert np.array_equal(out, [[2, 3, 4], [2, 3, 4]])
    assert fmaf(2.0, 3.0, 1.0).dtype == np.float32


# No math.fma comparison: math.fma (Python 3.13+) rounds to float64, and
# casting that to float32 is exactly the double rounding fmaf must avoid, so
# it is not an oracle for a float32 fma. Exact Fractions are the judge here.


# --------------------------------------------------------------------------
# conv2d: hand-worked cases
# --------------------------------------------------------------------------

def nhwc(a):
    """2-D int list -> int8 [1, H, W, 1]."""
    return np.asarray(a, np.int8)[None, :, :, None]


def hwio(a):
    """2-D int list -> int8 [Kh, Kw, 1, 1]."""
    return np.asarray(a, np.int8)[:, :, None, None]


def test_conv_1x1_channels():
    x = np.array([[[[1, 2], [-3, 4]]]], np.int8)          # [1, 1, 2, 2]
    w = np.array([[[[1, 0, -1], [2, 5, 3]]]], np.int8)    # [1, 1, 2, 3]
    # pixel (1, 2):  [1*1+2*2, 1*0+2*5, 1*-1+2*3] = [5, 10, 5]
    # pixel (-3, 4): [-3+8, 0+20, 3+12]            = [5, 20, 15]
    want = np.array([[[[5, 10, 5], [5, 20, 15]]]])
    for pad in ("SAME", "VALID"):
        got = conv2d_int32(x, w, padding=pad)
        assert got.shape == (1, 1, 2, 3)
        assert np.array_equal(got, want)


def test_conv_3x3_same_ones_counts_window():
    # all-ones input and filter: output = number of in-bounds taps
    got = conv2d_int32(np.ones((1, 3, 3, 1), np.int8),
                       np.ones((3, 3, 1, 1), np.int8), padding="SAME")
    assert np.array_equal(got[0, :, :, 0], [[4, 6, 4], [6, 9, 6], [4, 6, 4]])


def test_conv_same_even_kernel_pads_bottom_right():
    # 2x2 kernel on 3x3: pad_total = 1 -> top 0 / bottom 1, left 0 / right 1
    x = nhwc([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    w = hwio([[1, 2], [3, 4]])
    # out[i,j] = x[i,j] + 2x[i,j+1] + 3x[i+1,j] + 4x[i+1,j+1], zeros outside
    want = [[1 + 4 + 12 + 20, 2 + 6 + 15 + 24, 3 + 0 + 18 + 0],
            [4 + 10 + 21 + 32, 5 + 12 + 24 + 36, 6 + 0 + 27 + 0],
            [7 + 16 + 0 + 0, 8 + 18 + 0 + 0, 9 + 0 + 0 + 0]]
    got = conv2d_int32(x, w, padding="SAME")
    assert np.array_equal(got[0, :, :, 0], want)
    assert conv_output_size_and_padding((3, 3), (2, 2)) == \
        ((3, 3), ((0, 1), (0, 1)))


def test_conv_stride2_same_odd_pad_total():
    # H=W=4, K=3, s=2: Ho=2, pad_total=(2-1)*2+3-4=1 -> top 0, bottom 1
    assert conv_output_size_and_padding((4, 4), (3, 3), (2, 2)) == \
        ((2, 2), ((0, 1), (0, 1)))
    x = nhwc(np.arange(16).reshape(4, 4))
    w = hwio(np.ones((3, 3)))
    got = conv2d_int32(x, w, strides=(2, 2), padding="SAME")
    # windows start at rows/cols 0 and 2: rows {0,1,2} and {2,3}
    # sum over rows R, cols C of 4r + c
    def block(rows, cols):
        return sum(4 * r + c for r in rows for c in cols)
    want = [[block([0, 1, 2], [0, 1, 2]), block([0, 1, 2], [2, 3])],
            [block([2, 3], [0, 1, 2]), block([2, 3], [2, 3])]]
    assert want == [[45, 39], [66, 50]]     # worked by hand
    assert np.array_equal(got[0, :, :, 0], want)


def test_conv_stride2_valid():
    # 5x5 arange, 3x3 ones, stride 2 VALID: Ho = ceil((5-2)/2) = 2;
    # each output = 9 * window centre = 9 * x[2i+1, 2j+1]
    x = nhwc(np.arange(25).reshape(5, 5))
    got = conv2d_int32(x, hwio(np.ones((3, 3))), strides=(2, 2),
                       padding="VALID")
    assert np.array_equal(got[0, :, :, 0], [[9 * 6, 9 * 8], [9 * 16, 9 * 18]])
    # 4-element NHWC strides are accepted too
    got4 = conv2d_int32(x, hwio(np.ones((3, 3))), strides=[1, 2, 2, 1],
                        padding="VALID")
    assert np.array_equal(got4, got)


def test_conv_dilation2_valid():
    # 2x2 kernel, dilation 2 (effective 3x3) on 5x5 arange: Ho = 3
    # out[i,j] = 1x[i,j] + 2x[i,j+2] + 3x[i+2,j] + 4x[i+2,j+2]
    x = nhwc(np.arange(25).reshape(5, 5))
    got = conv2d_int32(x, hwio([[1, 2], [3, 4]]), padding="VALID",
                       dilations=(2, 2))
    assert got.shape == (1, 3, 3, 1)
    assert got[0, 0, 0, 0] == 0 + 2 * 2 + 3 * 10 + 4 * 12          # 82
    assert got[0, 2, 2, 0] == 12 + 2 * 14 + 3 * 22 + 4 * 24        # 202
    assert got[0, 1, 0, 0] == 5 + 2 * 7 + 3 * 15 + 4 * 17          # 132


def test_conv_dilation2_same():
    # 3x3 kernel, dilation 2 (effective 5) on 4x4: pad_total 4 -> 2 / 2
    assert conv_output_size_and_padding((4, 4), (3, 3), (1, 1), "SAME",
                                        (2, 2)) == ((4, 4), ((2, 2), (2, 2)))
    # 2x2 kernel, dilation 2 (effective 3) on 4x4: pad_total 2 -> 1 / 1
    # 2x2 kernel, dilation 3 (effective 4) on 4x4: pad_total 3 -> 1 / 2
    assert conv_output_size_and_padding((4, 4), (2, 2), (1, 1), "SAME",
                                        (3, 3)) == ((4, 4), ((1, 2), (1, 2)))
    x = nhwc(np.arange(16).reshape(4, 4))
    got = conv2d_int32(x, hwio([[1, 2], [3, 4]]), padding="SAME",
                       dilations=(3, 3))
    # top pad 1: out[i,j] taps rows i-1, i+2 and cols j-1, j+2
    # out[0,0] = 1*0(pad) + 2*0(pad) + 3*0(pad) + 4*x[2,2]=4*10
    assert got[0, 0, 0, 0] == 40
    # out[1,1] = x[0,0] + 2x[0,3] + 3x[3,0] + 4x[3,3] = 0+6+36+60
    assert got[0, 1, 1, 0] == 102
    # out[3,3]: rows 2, 5(pad); cols 2, 5(pad) -> x[2,2] = 10
    assert got[0, 3, 3, 0] == 10


def test_conv_output_sizes():
    f = conv_output_size_and_padding
    assert f((7, 7), (3, 3), (2, 2), "VALID") == ((3, 3), ((0, 0), (0, 0)))
    assert f((8, 8), (3, 3), (2, 2), "VALID") == ((3, 3), ((0, 0), (0, 0)))
    assert f((8, 8), (3, 3), (3, 3), "VALID") == ((2, 2), ((0, 0), (0, 0)))
    assert f((7, 5), (3, 1), (2, 1), "SAME") == ((4, 5), ((1, 1), (0, 0)))
    assert f((8, 8), (1, 1), (3, 3), "SAME") == ((3, 3), ((0, 0), (0, 0)))
    assert f((2, 2), (3, 3), (1, 1), "VALID") == ((0, 0), ((0, 0), (0, 0)))
    # explicit: Ho = 5+1+2-3+1 = 6, Wo = 6+0+3-3+1 = 7
    assert f((5, 6), (3, 3), (1, 1), [[1, 2], [0, 3]]) == \
        ((6, 7), ((1, 2), (0, 3)))
    assert f((5, 6), (3, 3), (1, 1), [[0, 0], [1, 2], [0, 3], [0, 0]]) == \
        ((6, 7), ((1, 2), (0, 3)))
    assert f((5, 6), (3, 3), (2, 3), [1, 2, 0, 3]) == \
        ((3, 3), ((1, 2), (0, 3)))


def test_conv_explicit_padding_matches_padded_valid():
    rng = np.random.default_rng(6)
    x = rng.integers(-128, 128, (2, 5, 6, 3)).astype(np.int8)
    w = rng.integers(-128, 128, (3, 2, 3, 4)).astype(np.int8)
    pads = [[2, 0], [1, 3]]
    got = conv2d_int32(x, w, strides=(2, 1), padding=pads)
    xp = np.pad(x, [(0, 0), (2, 0), (1, 3), (0, 0)])
    assert np.array_equal(got, conv2d_int32(xp, w, strides=(2, 1),
                                            padding="VALID"))
    assert np.array_equal(got, brute_conv(x, w, (2, 1), pads, (1, 1)))


def test_conv_extreme_values_exact():
    # -128 * -128 * 9 * Ci, way past float32 precision, stays exact
    x = np.full((1, 3, 3, 1000), -128, np.int8)
    w = np.full((3, 3, 1000, 2), -128, np.int8)
    w[0, 0, 0, 1] = 127
    got = conv2d_int32(x, w, padding="VALID")
    assert got.dtype == np.int64
    assert got[0, 0, 0, 0] == 9000 * 16384
    assert got[0, 0, 0, 1] == 8999 * 16384 - 128 * 127


# --------------------------------------------------------------------------
# conv2d vs an independent per-pixel loop
# --------------------------------------------------------------------------

def brute_conv(x, w, strides, padding, dilations):
    """Slow direct definition, written independently of reference.py."""
    n, h, wd, ci = x.shape
    kh, kw, _, co = w.shape
    sh, sw = strides
    dh, dw = dilations

    def axis(size, k, s, d, pad):
        ek = (k - 1) * d + 1
        if pad == "VALID":
            o = math.ceil((size - ek + 1) / s) if size >= ek else 0
            return o, 0
        if pad == "SAME":
            o = math.ceil(size / s)
            total = max((o - 1) * s + ek - size, 0)
            return o, total // 2
        before, after = pad
        padded = size + before + after
        return ((padded - ek) // s + 1 if padded >= ek else 0), before

    if isinstance(padding, str):
        ph = pw = padding
    else:
        ph, pw = padding
    ho, top = axis(h, kh, sh, dh, ph)
    wo, left = axis(wd, kw, sw, dw, pw)
    out = np.zeros((n, ho, wo, co), np.int64)
    xi = x.astype(int).tolist()
    wi = w.astype(int).tolist()
    for b in range(n):
        for oy in range(ho):
            for ox in range(wo):
                for oc in range(co):
                    total = 0
                    for ky in range(kh):
                        iy = oy * sh + ky * dh - top
                        if not 0 <= iy < h:
                            continue
                        for kx in range(kw):
                            ix = ox * sw + kx * dw - left
                            if not 0 <= ix < wd:
                                continue
                            for c in range(ci):
                                total += xi[b][iy][ix][c] * wi[ky][kx][c][oc]
                    out[b, oy, ox, oc] = total
    return out


def test_conv_vs_brute_force_random():
    rng = np.random.default_rng(7)
    n_odd_same = 0
    for trial in range(150):
        n = int(rng.integers(1, 3))
        h, wd = (int(v) for v in rng.integers(1, 9, 2))
        kh, kw = (int(v) for v in rng.integers(1, 5, 2))
        ci, co = (int(v) for v in rng.integers(1, 4, 2))
        sh, sw = (int(v) for v in rng.integers(1, 4, 2))
        dh, dw = (int(v) for v in rng.integers(1, 3, 2))
        pad = ["SAME", "VALID", "EXPLICIT"][trial % 3]
        if pad == "EXPLICIT":
            pad = [[int(v) for v in rng.integers(0, 3, 2)],
                   [int(v) for v in rng.integers(0, 3, 2)]]
        elif pad == "VALID" and ((kh - 1) * dh + 1 > h or
                                 (kw - 1) * dw + 1 > wd):
            pad = "SAME"
        if pad == "SAME":
            (_, _), ((t, b), (l, r)) = conv_output_size_and_padding(
                (h, wd), (kh, kw), (sh, sw), "SAME", (dh, dw))
            n_odd_same += (b == t + 1) or (r == l + 1)
        x = rng.integers(-128, 128, (n, h, wd, ci)).astype(np.int8)
        w = rng.integers(-128, 128, (kh, kw, ci, co)).astype(np.int8)
        got = conv2d_int32(x, w, (sh, sw), pad, (dh, dw))
        want = brute_conv(x, w, (sh, sw), pad, (dh, dw))
        assert got.shape == want.shape, (trial, pad)
        assert np.array_equal(got, want), (trial, pad)
    assert n_odd_same >= 10     # the asymmetric SAME case was exercised


def test_conv_vs_tensorflow_if_available():
    """Geometry cross-check against tf.nn.conv2d (float, exact here)."""
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(8)
    for trial in range(30):
        h, wd = (int(v) for v in rng.integers(1, 10, 2))
        kh, kw = (int(v) for v in rng.integers(1, 5, 2))
        sh, sw = (int(v) for v in rng.integers(1, 4, 2))
        pad = "SAME" if trial % 2 else "VALID"
        if pad == "VALID" and (kh > h or kw > wd):
            pad = "SAME"
        dil = (1, 1)
        if trial % 3 == 0:              # TF: dilation needs stride 1
            sh = sw = 1
            dil = (2, 2)
            if pad == "VALID" and (2 * kh - 1 > h or 2 * kw - 1 > wd):
                pad = "SAME"
        x = rng.integers(-8, 8, (1, h, wd, 2)).astype(np.int8)
        w = rng.integers(-8, 8, (kh, kw, 2, 3)).astype(np.int8)
        want = tf.nn.conv2d(x.astype(np.float32), w.astype(np.float32),
                            strides=[1, sh, sw, 1], padding=pad,
                            dilations=[1, dil[0], dil[1], 1]).numpy()
        got = conv2d_int32(x, w, (sh, sw), pad, dil)
        assert got.shape == want.shape, (trial, pad)
        assert np.array_equal(got, want), (trial, pad)


# --------------------------------------------------------------------------
# epilogue
# --------------------------------------------------------------------------

def acc1(*values):
    """Accumulators as [1, 1, len, 1]: one channel, several pixels."""
    return np.asarray(values, np.int64).reshape(1, 1, -1, 1)


def flat(a):
    return np.asarray(a).reshape(-1).tolist()


def test_epilogue_round_half_to_even():
    # y = acc * 0.5 exactly: -3.5 -2.5 -1.5 -0.5 0.5 1.5 2.5 3.5
    acc = acc1(-7, -5, -3, -1, 1, 3, 5, 7)
    out = epilogue(acc, 0.5, 0.0, activation=None)
    assert out.dtype == np.int8
    assert flat(out) == [-4, -2, -2, 0, 0, 2, 2, 4]
    assert flat(epilogue(acc, 0.5, 0.0, activation="None")) == \
        [-4, -2, -2, 0, 0, 2, 2, 4]
    assert flat(epilogue(acc, 0.5, 0.0, activation="Relu")) == \
        [0, 0, 0, 0, 0, 2, 2, 4]
    # ties produced by the bias instead of the scale
    out = epilogue(acc1(0, 1, 2, -1, -2), 1.0, 0.5, activation=None)
    assert flat(out) == [0, 2, 2, 0, -2]
    # just off the tie
    out = epilogue(acc1(0, 0), 1.0, [np.nextafter(F32(0.5), F32(1))],
                   activation=None)
    assert flat(out) == [1, 1]


def test_epilogue_clipping():
    acc = acc1(126, 127, 128, 1000, 10 ** 9, -127, -128, -129, -1000,
               -10 ** 9)
    assert flat(epilogue(acc, 1.0, 0.0, activation=None)) == \
        [126, 127, 127, 127, 127, -127, -128, -128, -128, -128]
    assert flat(epilogue(acc, 1.0, 0.0, activation="Relu")) == \
        [126, 127, 127, 127, 127, 0, 0, 0, 0, 0]
    # at the edges of the range after rounding: 127.5 -> 128 -> 127,
    # -128.5 -> -128, -128.6 -> -129 -> -128, 126.5 -> 126
    acc = acc1(255, -257, 253)
    assert flat(epilogue(acc, 0.5, 0.0, activation=None)) == [127, -128, 126]
    assert flat(epilogue(acc1(0), 1.0, -128.6, activation=None)) == [-128]
    # Relu: -0.4 -> -0 -> 0, 0.4 -> 0, 0.6 -> 1
    assert flat(epilogue(acc1(0, 0, 0), 1.0, [-0.4], activation="Relu")) == \
        [0, 0, 0]


def test_epilogue_output_min_max():
    acc = acc1(-50, -3, 0, 3, 6, 7, 50)
    assert flat(epilogue(acc, 1.0, 0.0, activation="Relu", output_max=6)) == \
        [0, 0, 0, 3, 6, 6, 6]
    assert flat(epilogue(acc, 1.0, 0.0, activation=None, output_min=-3,
                         output_max=6)) == [-3, -3, 0, 3, 6, 6, 6]
    # Relu raises output_min to 0
    assert flat(epilogue(acc, 1.0, 0.0, activation="Relu",
                         output_min=-3)) == [0, 0, 0, 3, 6, 7, 50]
    with pytest.raises(ValueError):
        epilogue(acc, 1.0, 0.0, output_max=6.5)
    with pytest.raises(ValueError):
        epilogue(acc, 1.0, 0.0, activation="Relu6")


@pytest.mark.parametrize("acc,f32_acc", [
    (2 ** 24, 2 ** 24),
    (2 ** 24 + 1, 2 ** 24),          # tie -> even (2^24)
    (2 ** 24 + 2, 2 ** 24 + 2),
    (2 ** 24 + 3, 2 ** 24 + 4),      # tie -> even (2^24 + 4)
    (2 ** 24 + 5, 2 ** 24 + 4),      # tie -> even
    (2 ** 24 + 7, 2 ** 24 + 8),
    (2 ** 25 + 2, 2 ** 25),          # spacing 4: tie -> even
    (2 ** 25 + 6, 2 ** 25 + 8),
    (2 ** 25 + 3, 2 ** 25 + 4),      # not a tie: nearest
    (2 ** 25 + 1, 2 ** 25),
])
def test_epilogue_float32_of_large_acc(acc, f32_acc):
    # y = float32(acc) * 1 - 2^24 (or 2^25), all exact after the conversion
    base = 2 ** 24 if acc < 2 ** 25 else 2 ** 25
    out = epilogue(acc1(acc, -acc), 1.0, 0.0, activation=None)
    assert flat(out) == [127, -128]
    out = epilogue(acc1(acc), 1.0, float(-base), activation=None)
    assert flat(out) == [f32_acc - base]
    out = epilogue(acc1(-acc), 1.0, float(base), activation=None)
    assert flat(out) == [base - f32_acc]


def test_epilogue_acc_rounded_to_float32_before_scale():
    # float32(2^24 + 1) = 2^24, times 1.5 = 25165824 exactly -> out 0.
    # Rounding the exact product 1.5 * (2^24 + 1) = 25165825.5 once instead
    # would give 25165826 -> out 2.
    out = epilogue(acc1(2 ** 24 + 1), 1.5, -25165824.0, activation=None)
    assert flat(out) == [0]


def test_epilogue_vs_exact_model_large_acc():
    # |acc| > 2^24 with non-power-of-two scales; one pixel per channel so a
    # per-channel bias can pull y back into the int8 range.
    rng = np.random.default_rng(12)
    c = 2000
    acc = (rng.choice([-1, 1], c) * rng.integers(2 ** 24, 2 ** 28, c)
           ).reshape(1, 1, 1, c)
    scale = (rng.uniform(1, 2, c) * 2.0 ** -rng.integers(0, 8, c)
             ).astype(F32)
    approx = acc.reshape(-1) * scale.astype(np.float64)
    bias = (-approx + rng.uniform(-100, 100, c)).astype(F32)
    side = rng.integers(-128, 128, acc.shape).astype(np.int8)
    ss = F32(0.7)
    got = epilogue(acc, scale, bias, side, ss, activation=None)
    in_range = 0
    for ch in range(c):
        idx = (0, 0, 0, ch)
        want = exact_epilogue_one(acc[idx], scale[ch], side[idx], ss,
                                  bias[ch], -128, 127)
        assert got[idx] == want, ch
        in_range += -128 < want < 127
    assert in_range > c // 2


def test_fused_large_acc_through_conv():
    # 1x1 conv with Ci = 1025: 1024 * (-128 * -128) + 1 = 2^24 + 1
    ci = 1025
    x = np.full((1, 1, 1, ci), -128, np.int8)
    w = np.full((1, 1, ci, 2), -128, np.int8)
    x[..., -1] = 1
    w[0, 0, -1, :] = [1, 3]
    acc = conv2d_int32(x, w)
    assert flat(acc) == [2 ** 24 + 1, 2 ** 24 + 3]
    out = fused_conv2d_reference(x, w, bias=[-2.0 ** 24, -2.0 ** 24],
                                 activation=None)
    assert flat(out) == [0, 4]      # not [1, 3]: float32(acc) rounds to even


def test_epilogue_side_input_is_fused():
    # side = 7, side_scale = (2^26 + 3) / 7 * 2^-26, so that
    # side * side_scale = 1 + 3 * 2^-26 exactly; float32 of that is 1.0.
    # y = -1 * 0.5 = -0.5.
    # fused:    round32(0.5 + 3*2^-26) = 0.5 + 2^-24   -> rint 1
    # separate: round32(1.0 - 0.5)     = 0.5           -> rint 0
    k = (2 ** 26 + 3) // 7
    assert k * 7 == 2 ** 26 + 3 and 2 ** 23 <= k < 2 ** 24
    ss = F32(k * 2.0 ** -26)
    assert float(ss) == k * 2.0 ** -26
    side = np.array([7], np.int8).reshape(1, 1, 1, 1)
    acc = acc1(-1)
    fused = epilogue(acc, 0.5, 0.0, side_input=side, side_input_scale=ss,
                     activation=None)
    assert flat(fused) == [1]
    y = F32(-1) * F32(0.5)
    separate = (F32(7) * ss + y) + F32(0)
    assert separate == F32(0.5) and np.rint(separate) == 0
    # and the same through the whole op
    x = np.array([-1], np.int8).reshape(1, 1, 1, 1)
    w = np.array([1], np.int8).reshape(1, 1, 1, 1)
    out = fused_conv2d_reference(x, w, [0.0], side_input=side,
                                 conv_input_scale=0.5, side_input_scale=ss,
                                 activation=None)
    assert flat(out) == [1]


def test_epilogue_side_input_usage_rules():
    acc = acc1(10, 20)
    side = np.array([3, -4], np.int8).reshape(acc.shape)
    base = flat(epilogue(acc, 1.0, 0.0, activation=None))
    assert base == [10, 20]
    assert flat(epilogue(acc, 1.0, 0.0, side, 2.0, activation=None)) == \
        [16, 12]
    # scale 0 (or -0): side input ignored
    assert flat(epilogue(acc, 1.0, 0.0, side, 0.0, activation=None)) == base
    assert flat(epilogue(acc, 1.0, 0.0, side, -0.0, activation=None)) == base
    # None / empty side input: ignored even with a non-zero scale
    assert flat(epilogue(acc, 1.0, 0.0, None, 2.0, activation=None)) == base
    assert flat(epilogue(acc, 1.0, 0.0, np.zeros((0,), np.int8), 2.0,
                         activation=None)) == base
    # wrong shape is an error
    with pytest.raises(ValueError):
        epilogue(acc, 1.0, 0.0, side.reshape(-1), 2.0)
    # via the whole op: empty side input ignored
    x = np.array([[[[2]]]], np.int8)
    w = np.array([[[[3]]]], np.int8)
    assert flat(fused_conv2d_reference(x, w, [1.0], np.zeros((0,), np.int8),
                                       side_input_scale=5.0)) == [7]
    assert flat(fused_conv2d_reference(x, w, [1.0], np.array(
        [[[[-2]]]], np.int8), side_input_scale=5.0, activation=None)) == [-3]


def test_epilogue_per_channel_vs_scalar_scale():
    acc = np.array([10, 10, 10, -10, -10, -10], np.int64).reshape(1, 2, 1, 3)
    out = epilogue(acc, [0.5, 1.0, 2.0], [0.0, 1.0, -1.0], activation=None)
    assert out[0, :, 0, :].tolist() == [[5, 11, 19], [-5, -9, -21]]
    # scalar == per-channel constant == length-1
    a = epilogue(acc, 0.75, 0.25, activation=None)
    b = epilogue(acc, [0.75] * 3, [0.25] * 3, activation=None)
    c = epilogue(acc, [0.75], [0.25], activation=None)
    assert np.array_equal(a, b) and np.array_equal(a, c)
    assert a[0, :, 0, :].tolist() == [[8, 8, 8], [-7, -7, -7]]  # 7.75, -7.25
    with pytest.raises(ValueError):
        epilogue(acc, [1.0, 2.0], 0.0)


def test_epilogue_float32_scale_multiply():
    # the scale is float32 and the product is rounded to float32:
    # acc = 3, scale = float32(1/6) = 0.16666667163... -> 3*scale is
    # 0.5000000149 exactly, float32 rounds it to 0.5 -> rint 0.
    # (a float64 computation would give 0.50000001 -> 1)
    s = F32(1 / 6)
    assert float(s) * 3 > 0.5 and F32(3) * s == F32(0.5)
    assert flat(epilogue(acc1(3), s, 0.0)) == [0]


def test_epilogue_nan_inf():
    inf, nan = np.inf, np.nan
    acc = np.array([0, 5, -5], np.int64).reshape(1, 1, 1, 3)

    def run(scale, bias, act):
        return epilogue(acc, scale, bias, activation=act)[0, 0, 0].tolist()

    # NaN scale or bias -> lo
    assert run(nan, 0.0, None) == [-128, -128, -128]
    assert run(nan, 0.0, "Relu") == [0, 0, 0]
    assert run(1.0, nan, None) == [-128, -128, -128]
    assert run(1.0, [0.0, nan, 0.0], None) == [0, -128, -5]
    # Inf scale: 0 * Inf = NaN -> lo; 5 * Inf = Inf -> 127; -5 * Inf -> lo
    assert run(inf, 0.0, None) == [-128, 127, -128]
    assert run(inf, 0.0, "Relu") == [0, 127, 0]
    assert run(-inf, 0.0, None) == [-128, -128, 127]
    # Inf bias
    assert run(1.0, inf, None) == [127, 127, 127]
    assert run(1.0, -inf, None) == [-128, -128, -128]
    assert run(1.0, -inf, "Relu") == [0, 0, 0]
    # Inf scale with Inf bias of opposite sign -> NaN -> lo
    assert run(inf, -inf, None) == [-128, -128, -128]
    # float32 overflow in the multiply: 2^40 * 2^100 -> Inf -> 127
    assert flat(epilogue(acc1(2 ** 40), 2.0 ** 100, 0.0)) == [127]
    # NaN side-input scale: used (NaN != 0) -> NaN -> lo
    side = np.ones((1, 1, 1, 3), np.int8)
    assert epilogue(acc, 1.0, 0.0, side, nan, None)[0, 0, 0].tolist() == \
        [-128, -128, -128]
    # Inf side-input scale: Inf*1 + y = Inf -> 127
    assert epilogue(acc, 1.0, 0.0, side, inf, None)[0, 0, 0].tolist() == \
        [127, 127, 127]


def test_epilogue_integer_inputs_only():
    with pytest.raises(TypeError):
        epilogue(np.zeros((1, 1, 1, 1), np.float32), 1.0, 0.0)


# --------------------------------------------------------------------------
# epilogue vs an exact, step-by-step Fraction model of the contract
# --------------------------------------------------------------------------

def exact_epilogue_one(acc, scale, side, side_scale, bias, lo, hi):
    """The contract for one element, each float32 step rounded exactly."""
    y = round_to_f32(Fraction(int(acc)))                     # float32(acc)
    y = round_to_f32(Fraction(y) * Fraction(float(scale)))   # * scale
    if side is not None and side_scale != 0:
        y = exact_fmaf(F32(side), F32(side_scale), F32(y))   # fma
    y = round_to_f32(Fraction(y) + Fraction(float(bias)))    # + bias
    q = round(Fraction(y))                                   # half to even
    return min(max(q, lo), hi)


def test_epilogue_vs_exact_model_random():
    rng = np.random.default_rng(9)
    for trial in range(40):
        c = int(rng.integers(1, 5))
        shape = (1, 3, 4, c)
        mag = 2 ** int(rng.integers(4, 28))
        acc = rng.integers(-mag, mag, shape)
        scale = (rng.uniform(0.1, 2, c) * 2.0 ** -rng.integers(0, 24, c)
                 ).astype(F32)
        # aim the pre-rounding value into [-200, 200]
        bias = rng.uniform(-150, 150, c).astype(F32)
        use_side = trial % 2 == 0
        side = rng.integers(-128, 128, shape).astype(np.int8)
        ss = F32(rng.uniform(-1, 1)) if use_side else F32(0)
        act = "Relu" if trial % 3 == 0 else None
        lo, hi = (0 if act else -128), 127
        got = epilogue(acc, scale if c > 1 or trial % 4 else scale[0], bias,
                       side if use_side else None, ss, activation=act)
        for idx in np.ndindex(shape):
            ch = idx[-1]
            want = exact_epilogue_one(acc[idx], scale[ch],
                                      side[idx] if use_side else None, ss,
                                      bias[ch], lo, hi)
            assert got[idx] == want, (trial, idx)


def test_epilogue_vs_exact_model_near_ties():
    # values engineered to land on or next to .5 after scaling so that each
    # float32 rounding step matters
    rng = np.random.default_rng(10)
    n = 1000
    half = rng.integers(-300, 300, n) * 2 + 1          # odd -> x.5
    acc = (half * 2 ** int(7)).astype(np.int64).reshape(1, 1, n, 1)
    scale = F32(2.0 ** -8)
    jitter = rng.integers(-2, 3, n).astype(np.int64).reshape(acc.shape)
    acc = acc + jitter
    side = rng.integers(-128, 128, acc.shape).astype(np.int8)
    for ss in (F32(0), F32(2.0 ** -20), F32(1 / 3), F32(-0.1)):
        for bias in (F32(0), F32(0.25), F32(-1e-8)):
            got = epilogue(acc, scale, bias, side, ss, activation=None)
            for i in range(n):
                idx = (0, 0, i, 0)
                want = exact_epilogue_one(acc[idx], scale, side[idx], ss,
                                          bias, -128, 127)
                assert got[idx] == want, (ss, bias, i)


# --------------------------------------------------------------------------
# the whole op
# --------------------------------------------------------------------------

def test_fused_reference_composes():
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (2, 6, 5, 3)).astype(np.int8)
    w = rng.integers(-128, 128, (3, 3, 3, 4)).astype(np.int8)
    bias = rng.uniform(-10, 10, 4).astype(F32)
    scale = rng.uniform(1e-4, 1e-3, 4).astype(F32)
    side = rng.integers(-128, 128, (2, 3, 3, 4)).astype(np.int8)
    out = fused_conv2d_reference(x, w, bias, side, scale, F32(0.3),
                                 strides=(2, 2), padding="SAME",
                                 activation="Relu")
    assert out.dtype == np.int8 and out.shape == (2, 3, 3, 4)
    acc = brute_conv(x, w, (2, 2), "SAME", (1, 1))
    for idx in np.ndindex(out.shape):
        want = exact_epilogue_one(acc[idx], scale[idx[-1]], side[idx],
                                  F32(0.3), bias[idx[-1]], 0, 127)
        assert out[idx] == want, idx
    assert out.min() >= 0 and 0 < np.count_nonzero(out) < out.size


def test_fused_reference_hand_example():
    # 2x2 input, 1x1 filter with 2 out channels, per-channel scale + bias,
    # side input, no activation:
    # acc[c0] = x, acc[c1] = -2x;  y = acc*scale + side*0.5 + bias
    x = nhwc([[1, 3], [-4, 10]])
    w = np.array([1, -2], np.int8).reshape(1, 1, 1, 2)
    side = np.array([[[2, 4], [6, 8]], [[-2, 0], [1, -1]]],
                    np.int8).reshape(1, 2, 2, 2)
    out = fused_conv2d_reference(x, w, [0.5, -1.0], side, [2.5, 0.25], 0.5,
                                 activation=None)
    # (0,0): c0 1*2.5+1+0.5=4.0->4        c1 -2*.25+2-1=0.5->0
    # (0,1): c0 3*2.5+3+0.5=11.0->11      c1 -6*.25+4-1=1.5->2
    # (1,0): c0 -4*2.5-1+0.5=-10.5->-10   c1 8*.25+0-1=1.0->1
    # (1,1): c0 10*2.5+0.5+0.5=26->26     c1 -20*.25-0.5-1=-6.5->-6
    assert out[0].tolist() == [[[4, 0], [11, 2]], [[-10, 1], [26, -6]]]
    relu = fused_conv2d_reference(x, w, [0.5, -1.0], side, [2.5, 0.25], 0.5,
                                  activation="Relu")
    assert relu[0].tolist() == [[[4, 0], [11, 2]], [[0, 1], [26, 0]]]


def test_module_uses_only_numpy_and_stdlib():
    import ast
    import sys
    tree = ast.parse(open(reference.__file__).read())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mods.add(node.module.split(".")[0])
    allowed = {"numpy"} | set(sys.stdlib_module_names)
    assert mods <= allowed, mods
