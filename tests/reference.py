"""Independent numpy reference for the fused int8 conv2d op.

Only numpy and the Python standard library are used, so this file can check
the op without trusting TensorFlow or the C++ kernels.

THE CONTRACT, per output element [n, h, w, c]:

    acc = exact integer sum of int8 x int8 products over the conv window
          (zero padding, TensorFlow's SAME / VALID geometry)
    y   = float32(acc) * conv_input_scale[c]           float32 multiply
          (float32(acc) rounds to nearest even once |acc| > 2**24)
    if a side input is given (not None, size > 0) and side_input_scale != 0:
        y = fmaf(float32(side_input), side_input_scale, y)
                                                       one fused multiply-add,
                                                       a single rounding
    y   = y + bias[c]                                  float32 add
    out = clip(round_half_to_even(y), lo, hi) as int8
          lo = -128 with no activation, 0 with Relu; hi = 127

NaN / Inf: a NaN y (from NaN or Inf scales or bias) maps to lo, which is
what the SIMD kernels do (max(y, lo) then min(., hi) with max returning lo
for NaN); +Inf maps to hi and -Inf to lo.

Every float32 operation above is an IEEE-754 correctly rounded operation in
round-to-nearest-even. numpy float32 `*` and `+` on float32 arrays are exactly
that; fmaf is built below from exact float64 pieces.
"""

import numpy as np

__all__ = [
    "fmaf",
    "conv2d_int32",
    "conv_output_size_and_padding",
    "epilogue",
    "fused_conv2d_reference",
]


# --------------------------------------------------------------------------
# fmaf
# --------------------------------------------------------------------------

def fmaf(a, b, c):
    """Correctly rounded float32 fused multiply-add a*b + c (like C's fmaf).

    Vectorized; a, b, c broadcast; each is converted to float32 first, the
    result is float32 (a 0-d array for scalar inputs).

    Method ("round to odd", Boldo & Melquiond):
      * p = a*b in float64 is exact (24 + 24 significand bits <= 53, and the
        exponent range of float32 products fits float64 with no under- or
        overflow).
      * s = p + c in float64, with TwoSum giving the exact error e, so that
        p + c == s + e exactly.
      * If e != 0 and s has an even last significand bit, move s one float64
        ulp toward e. This is p + c rounded to odd in float64; with 53 >= 24+2
        bits, rounding that to float32 gives the correctly rounded result
        (also in the float32 subnormal range and at the overflow threshold).
    Only the case "s lands exactly on a float32 rounding midpoint while p + c
    is not on it" actually needs the nudge; the round-to-odd rule covers it
    without special-casing.

    Inf and NaN follow IEEE / C fmaf: Inf*0 -> NaN, Inf + -Inf -> NaN, NaN
    propagates, overflow -> +-Inf. Signed zeros follow float64 addition,
    which has the same rules as an exact fma (x + -x -> +0, -0 + -0 -> -0).
    """
    a, b, c = np.broadcast_arrays(np.asarray(a, dtype=np.float32),
                                  np.asarray(b, dtype=np.float32),
                                  np.asarray(c, dtype=np.float32))
    shape = a.shape
    a64 = a.astype(np.float64).reshape(-1)
    b64 = b.astype(np.float64).reshape(-1)
    c64 = c.astype(np.float64).reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        p = a64 * b64                       # exact
        s = p + c64
        # TwoSum (Knuth): p + c == s + e exactly (for finite s).
        bb = s - p
        e = (p - (s - bb)) + (c64 - bb)
        even = (s.view(np.uint64) & np.uint64(1)) == 0
        need = np.isfinite(s) & (e != 0) & even
        toward = np.where(e > 0, np.inf, -np.inf)
        s_odd = np.where(need, np.nextafter(s, toward), s)
        return s_odd.astype(np.float32).reshape(shape)


# --------------------------------------------------------------------------
# conv2d
# --------------------------------------------------------------------------

def _pair(v, name):
    """(a, b) from a length-2 or NHWC length-4 sequence (or one int)."""
    if np.ndim(v) == 0:
        return int(v), int(v)
    v = [int(x) for x in v]
    if len(v) == 2:
        return v[0], v[1]
    if len(v) == 4:
        if v[0] != 1 or v[3] != 1:
            raise ValueError(f"{name}: batch/channel entries must be 1: {v}")
        return v[1], v[2]
    raise ValueError(f"{name} must have 2 or 4 entries, got {v}")


def _size_and_pad(in_size, k, stride, dilation, padding):
    """Output size and (before, after) padding along one spatial axis."""
    eff_k = (k - 1) * dilation + 1
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            before = after = 0
            # TF: (in - eff_k + stride) // stride, i.e. ceil((in - (k-1)d)/s).
            out = -(-(in_size - eff_k + 1) // stride)
        elif mode == "SAME":
            out = -(-in_size // stride)  # ceil(in / stride)
            total = max((out - 1) * stride + eff_k - in_size, 0)
            before = total // 2          # the odd extra goes after
            after = total - before
        else:
            raise ValueError(f"unknown padding {padding!r}")
    else:
        before, after = (int(x) for x in padding)
        if before < 0 or after < 0:
            raise ValueError(f"negative explicit padding {padding!r}")
        out = (in_size + before + after - eff_k) // stride + 1
    # A window bigger than the (padded) input gives an empty output here;
    # rejecting such shapes is the op's job, not the reference's.
    return max(out, 0), before, after


def conv_output_size_and_padding(input_hw, filter_hw, strides=(1, 1),
                                 padding="SAME", dilations=(1, 1)):
    """((Ho, Wo), ((top, bottom), (left, right))) for the given geometry.

    padding: "SAME", "VALID", [[top, bottom], [left, right]], or the TF
    NHWC explicit_paddings form [[0,0],[top,bottom],[left,right],[0,0]]
    (also accepted flattened to 4 or 8 integers).
    """
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilations, "dilations")
    if min(sh, sw, dh, dw) < 1:
        raise ValueError("strides and dilations must be >= 1")
    if isinstance(padding, str):
        ph = pw = padding
    else:
        pad = np.asarray(padding, dtype=np.int64).reshape(-1, 2)
        if pad.shape[0] == 4:
            if np.any(pad[0] != 0) or np.any(pad[3] != 0):
                raise ValueError("explicit padding of batch/channel must be 0")
            pad = pad[1:3]
        if pad.shape[0] != 2:
            raise ValueError(f"bad explicit padding {padding!r}")
        ph, pw = pad[0], pad[1]
    ho, top, bottom = _size_and_pad(input_hw[0], filter_hw[0], sh, dh, ph)
    wo, left, right = _size_and_pad(input_hw[1], filter_hw[1], sw, dw, pw)
    return (ho, wo), ((top, bottom), (left, right))


def conv2d_int32(conv_input, filter, strides=(1, 1), padding="SAME",
                 dilations=(1, 1)):
    """Exact conv2d accumulators, int64 array [N, Ho, Wo, Co].

    conv_input: int8 NHWC [N, H, W, Ci]; filter: int8 HWIO [Kh, Kw, Ci/G, Co]
    with G = Ci / filter in-depth groups (as tf.nn.conv2d): Co % G == 0 and
    output channel c of group g = c // (Co/G) reads input channels
    [g*Ci/G, (g+1)*Ci/G). G = Ci is a depthwise convolution (channel
    multiplier Co/Ci, output channel c reads input channel c // (Co/Ci)).
    Zero padding. SAME: Ho = ceil(H / sh), pad_total =
    max((Ho-1)*sh + (Kh-1)*dh + 1 - H, 0), pad_top = pad_total // 2 (the odd
    extra row/column goes at the bottom/right). VALID: no padding,
    Ho = ceil((H - (Kh-1)*dh) / sh). Explicit padding: see
    conv_output_size_and_padding.

    The result is returned as int64 and is exact: the int32 kernels agree
    with it as long as |acc| < 2**31 (guaranteed for Kh*Kw*Ci < 2**17).
    The sums are done as float64 matmuls, which are exact because every
    partial sum is an integer below 2**53 whatever the summation order.
    """
    x = np.asarray(conv_input)
    w = np.asarray(filter)
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError("conv_input must be NHWC and filter HWIO (4-D)")
    n, h, wd, ci = x.shape
    kh, kw, fci, co = w.shape
    if fci == 0:
        if ci != 0:
            raise ValueError(f"filter depth 0 with input depth {ci}")
        groups = 1
    else:
        if ci == 0 or ci % fci:
            raise ValueError(f"input depth {ci} is not a multiple of filter "
                             f"depth {fci}")
        groups = ci // fci
    if co % groups:
        raise ValueError(f"output depth {co} is not a multiple of groups "
                         f"{groups}")
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilations, "dilations")
    (ho, wo), ((top, bottom), (left, right)) = conv_output_size_and_padding(
        (h, wd), (kh, kw), strides, padding, dilations)
    if kh * kw * fci * 128 * 128 >= 2 ** 53:
        raise ValueError("window too large for exact float64 accumulation")

    xp = np.zeros((n, h + top + bottom, wd + left + right, ci), np.float64)
    xp[:, top:top + h, left:left + wd, :] = x
    wf = w.astype(np.float64)
    acc = np.zeros((n, ho, wo, co), np.float64)
    if ho == 0 or wo == 0:
        return acc.astype(np.int64)
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dh, j * dw
            patch = xp[:, r0:r0 + (ho - 1) * sh + 1:sh,
                       c0:c0 + (wo - 1) * sw + 1:sw, :]
            if groups == 1:
                acc += patch @ wf[i, j]
                continue
            cog = co // groups
            for g in range(groups):
                acc[..., g * cog:(g + 1) * cog] += (
                    patch[..., g * fci:(g + 1) * fci]
                    @ wf[i, j, :, g * cog:(g + 1) * cog])
    return acc.astype(np.int64)


# --------------------------------------------------------------------------
# epilogue
# --------------------------------------------------------------------------

def _as_int_bound(v, name):
    f = float(v)
    if f != int(f):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    return int(f)


def epilogue(acc, conv_input_scale, bias, side_input=None,
             side_input_scale=0.0, activation="Relu", output_min=None,
             output_max=None):
    """Apply the contract's epilogue to exact accumulators; returns int8.

    acc: integer array [..., C] (exact conv sums, |acc| < 2**53).
    conv_input_scale: scalar or per-channel [C] (float32).
    bias: scalar or [C] (float32).
    side_input: optional array with acc's shape (int8, or anything exactly
      representable in float32); used only when not None, non-empty and
      side_input_scale != 0 (a NaN scale counts as non-zero).
    activation: "Relu", "None" or None.
    output_min / output_max: optional integer clip bounds (default -128 /
      127, clamped to the int8 range); Relu raises the lower bound to
      max(0, output_min).

        y   = float32(acc) * scale[c]
        y   = fmaf(float32(side), side_input_scale, y)     (if side used)
        y   = y + bias[c]
        out = clip(rint(y), lo, hi)   (NaN -> lo, +Inf -> hi, -Inf -> lo)
    """
    acc = np.asarray(acc)
    if not np.issubdtype(acc.dtype, np.integer):
        raise TypeError(f"acc must be integer, got {acc.dtype}")
    acc64 = acc.astype(np.int64)
    if acc64.size and np.max(np.abs(acc64)) >= 2 ** 53:
        raise ValueError("|acc| >= 2**53 not supported")
    channels = acc.shape[-1] if acc.ndim else 1

    def per_channel(v, name):
        v = np.asarray(v, dtype=np.float32)
        if v.ndim > 1 or (v.ndim == 1 and v.shape[0] not in (1, channels)):
            raise ValueError(f"{name} must be scalar or [{channels}], "
                             f"got shape {v.shape}")
        return v

    scale = per_channel(conv_input_scale, "conv_input_scale")
    bias = per_channel(bias, "bias")

    if activation == "Relu":
        relu = True
    elif activation in (None, "None"):
        relu = False
    else:
        raise ValueError(f"unsupported activation {activation!r}")
    lo = -128 if output_min is None else _as_int_bound(output_min, "output_min")
    hi = 127 if output_max is None else _as_int_bound(output_max, "output_max")
    if relu:
        lo = max(lo, 0)
    lo, hi = max(lo, -128), min(hi, 127)
    if lo > hi:
        raise ValueError(f"empty output range [{lo}, {hi}]")

    # int64 -> float64 is exact (|acc| < 2**53), float64 -> float32 is then
    # a single round-to-nearest-even.
    accf = acc64.astype(np.float64).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        y = accf * scale
        ss = np.float32(side_input_scale)
        if side_input is not None and np.size(side_input) > 0 and ss != 0:
            side = np.asarray(side_input)
            if side.shape != acc.shape:
                raise ValueError(f"side_input shape {side.shape} != "
                                 f"output shape {acc.shape}")
            side32 = side.astype(np.float32)
            if not np.array_equal(side32.astype(np.float64),
                                  side.astype(np.float64), equal_nan=True):
                raise ValueError("side_input not exactly representable "
                                 "in float32")
            y = fmaf(side32, ss, y)
        y = y + bias
        assert y.dtype == np.float32
        r = np.rint(y)                      # round half to even
        r = np.where(np.isnan(r), np.float32(lo), r)
        r = np.clip(r, np.float32(lo), np.float32(hi))
    return r.astype(np.int8)


# --------------------------------------------------------------------------
# whole op
# --------------------------------------------------------------------------

def fused_conv2d_reference(conv_input, filter, bias, side_input=None,
                           conv_input_scale=1.0, side_input_scale=0.0,
                           strides=(1, 1), padding="SAME", activation="Relu",
                           dilations=(1, 1), output_min=None, output_max=None,
                           output_lut=None):
    """int8 NHWC output of the fused op: conv2d_int32 followed by epilogue.

    conv_input int8 NHWC, filter int8 HWIO, bias float32 [Co] (or scalar),
    side_input int8 [N, Ho, Wo, Co] or None/empty, conv_input_scale scalar or
    [Co]. See the module docstring for the exact per-element contract.
    output_lut: None or 256 int8 values; the result is then
    output_lut[out + 128] of the epilogue's out.
    """
    acc = conv2d_int32(conv_input, filter, strides=strides, padding=padding,
                       dilations=dilations)
    out = epilogue(acc, conv_input_scale, bias, side_input=side_input,
                   side_input_scale=side_input_scale, activation=activation,
                   output_min=output_min, output_max=output_max)
    if output_lut is None:
        return out
    table = np.asarray(output_lut)
    assert table.shape == (256,) and table.min() >= -128 and table.max() <= 127
    return table.astype(np.int8)[out.astype(np.int64) + 128]


def depth_to_space(x, block):
    """Depth-to-space of an NHWC array with a block of bh x bw pixels
    (`block` an int b for b x b, as TF's, or a pair): [N, H, W, bh * bw * C]
    -> [N, H * bh, W * bw, C], output pixel (y bh + i, x bw + j) the input
    pixel (y, x)'s channels (i bw + j) C .. + C - 1."""
    bh, bw = (block, block) if isinstance(block, int) else block
    n, h, w, depth = x.shape
    c = depth // (bh * bw)
    # [N, H, W, bh(i), bw(j), C] -> [N, H, bh(i), W, bw(j), C]
    return (x.reshape(n, h, w, bh, bw, c).transpose(0, 1, 3, 2, 4, 5)
            .reshape(n, h * bh, w * bw, c))
