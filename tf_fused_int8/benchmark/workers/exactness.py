"""The exactness column: is an implementation's int8 result the exact one?

Each implementation computes two probes of the row's layer (batch 1):
  * "extreme": every activation at its maximum (255 for uint8 activations,
    127 for int8) and every weight -128: where u8 x s8 products are summed in
    pairs with the saturating VPMADDUBSW (2 * 255 * -128 = -65280 does not
    fit int16), the sums saturate;
  * "random": uniform activations and weights over their whole range.
Activations are quantized with scale 1 (zero point 128 for uint8, 0 for
int8), weights with scale 1 per channel, bias 0, no activation, and the
output multiplier M = x_scale * w_scale / y_scale is chosen so that the
exact outputs span about +-100 levels: one level is then a small part of the
accumulator, and an accumulation error shows as levels.

An implementation reports what it really used (the zero points, its weights
and scales after its own quantization: TFLite's converter, for one, picks
its own), and the exact result is computed here from those integers in
float64 (exact: |sum| < 2^53). The error of an output is its distance from
the exact real value acc * M + zero_point (clipped to the output range);
rounding alone keeps that at most 0.5 whatever the rounding rule, so a row is
"exact" when every output is within 0.5 (+ a 1e-3 allowance for the float32
multiplier), and "off by N levels" otherwise with N the largest error.
"""

import math

import numpy as np

PROBE_KINDS = ("extreme", "random")
_SLACK = 1e-3


def probe_inputs(spec, kind, act_dtype, seed=0):
  """(activations as the implementation's dtype, int8 weights HWIO, zero point)."""
  shape = (1, spec["height"], spec["width"], spec["in_channels"])
  wshape = (spec["kernel_h"], spec["kernel_w"],
            spec["in_channels"] // spec["groups"], spec["out_channels"])
  if act_dtype == "uint8":
    lo, hi, zp = 0, 255, 128
  elif act_dtype == "int8":
    lo, hi, zp = -128, 127, 0
  else:
    raise ValueError(act_dtype)
  if kind == "extreme":
    x = np.full(shape, hi, np.int64)
    w = np.full(wshape, -128, np.int64)
  elif kind == "random":
    rng = np.random.default_rng(seed)
    x = rng.integers(lo, hi + 1, shape)
    w = rng.integers(-128, 128, wshape)
  else:
    raise ValueError(kind)
  return x.astype(act_dtype), w.astype(np.int8), zp


def exact_accumulators(x_real, w, spec, pads=None):
  """Exact int64 accumulators of the NHWC conv of integer x_real with HWIO w.

  x_real: activations minus their zero point (any integer dtype); pads
  (top, bottom, left, right) default to the spec's (TF's SAME or VALID).
  """
  x = np.asarray(x_real, np.float64)
  w = np.asarray(w, np.float64)
  t, b, l, r = spec["pads"] if pads is None else pads
  x = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)))
  kh, kw, cig, co = w.shape
  sh, sw = spec["stride_h"], spec["stride_w"]
  dh, dw = spec.get("dilation_h", 1), spec.get("dilation_w", 1)
  groups = spec["groups"]
  n, hp, wp, ci = x.shape
  ho = (hp - (kh - 1) * dh - 1) // sh + 1
  wo = (wp - (kw - 1) * dw - 1) // sw + 1
  cog = co // groups
  out = np.empty((n, ho, wo, co), np.float64)
  for g in range(groups):
    xg = x[..., g * cig:(g + 1) * cig]
    cols = np.empty((n, ho, wo, kh, kw, cig), np.float64)
    for i in range(kh):
      for j in range(kw):
        cols[:, :, :, i, j, :] = xg[:, i * dh:i * dh + (ho - 1) * sh + 1:sh,
                                    j * dw:j * dw + (wo - 1) * sw + 1:sw, :]
    wg = w[..., g * cog:(g + 1) * cog].reshape(kh * kw * cig, cog)
    out[..., g * cog:(g + 1) * cog] = (
        cols.reshape(-1, kh * kw * cig) @ wg).reshape(n, ho, wo, cog)
  return out.astype(np.int64)


def output_multiplier(acc, target=100.0):
  """A power of two M with max |acc| * M about `target` levels."""
  peak = float(np.abs(acc).max())
  if peak == 0:
    return 1.0
  return 2.0 ** math.floor(math.log2(target / peak))


def level_error(out_q, acc, multiplier, out_zero_point, out_min, out_max,
                bias_q=None):
  """Largest distance (in levels) of out_q from the exact clipped value."""
  m = np.asarray(multiplier, np.float64)
  acc = np.asarray(acc, np.float64)
  if bias_q is not None:
    acc = acc + np.asarray(bias_q, np.float64)
  want = np.clip(acc * m + out_zero_point, out_min, out_max)
  got = np.asarray(out_q, np.float64)
  if got.shape != want.shape:
    raise ValueError(f"output shape {got.shape}, expected {want.shape}")
  return float(np.abs(got - want).max()) if got.size else 0.0


def verdict(errors):
  """(exact: bool, text) from the level errors of the probes."""
  worst = max(errors)
  if worst <= 0.5 + _SLACK:
    return True, "exact"
  return False, f"off by {int(round(worst))}"


def evaluate(spec, kind, act_dtype, result, seed=0):
  """Level error of one probe result reported by an implementation.

  result: dict with "out" (integer array, NHWC), "x_zero_point",
  "weights" (int8 HWIO as used; default: the probe's), "multiplier"
  (scalar or [Co], x_scale * w_scale / y_scale as used), "out_zero_point",
  "out_min", "out_max", optional "pads" and "bias_q" (int32 [Co]) and, when
  the implementation changed the activations (rare), "x".
  """
  x, w, _ = probe_inputs(spec, kind, act_dtype, seed)
  x = result.get("x", x)
  w = result.get("weights", w)
  x_real = np.asarray(x, np.int64) - int(result["x_zero_point"])
  acc = exact_accumulators(x_real, w, spec, result.get("pads"))
  return level_error(result["out"], acc, result["multiplier"],
                     result["out_zero_point"], result["out_min"],
                     result["out_max"], result.get("bias_q"))
