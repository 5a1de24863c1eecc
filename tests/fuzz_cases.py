"""Malformed and valid calls of the raw op, described as plain data.

A case is a dict of shapes, dtypes and attrs plus a seed; `make_arrays` turns
it into numpy arrays deterministically, so the parent test process (which
owns the reference and the validity model) and the child process (which runs
the op, and may crash) see the same inputs.
"""

import numpy as np

INT32_MAX = 2**31 - 1
MAX_DEPTH = INT32_MAX // (128 * 128)


def numel(shape):
  n = 1
  for d in shape:
    n *= d
  return n


def make_arrays(case):
  rng = np.random.default_rng(case["seed"])

  def ints(shape, dtype):
    if numel(shape) > 1 << 22:  # never build huge tensors (huge dims come with a 0)
      raise ValueError("case too large")
    return rng.integers(-128, 128, size=shape).astype(dtype)

  def floats(shape):
    return rng.uniform(-2.0, 2.0, size=shape).astype(np.float32) * np.float32(
        case.get("float_scale", 1.0))

  data_dtype = np.uint8 if case["dtype"] == "uint8" else np.int8
  return dict(
      conv_input=ints(case["input_shape"], data_dtype),
      filter=ints(case["filter_shape"], np.int8 if case.get("filter_dtype") != "uint8" else np.uint8),
      bias=floats(case["bias_shape"]),
      side_input=ints(case["side_shape"], data_dtype),
      conv_input_scale=np.abs(floats(case["scale_shape"])) * np.float32(0.01),
      side_input_scale=floats(case["side_scale_shape"]) * np.float32(0.5),
  )


def expected_output_shape(case):
  """The output shape if the call is valid, else None (the validity model).

  Mirrors the documented contract of the op's CPU kernel: what is rejected is
  rejected with an error, never a crash.
  """
  if case["dtype"] not in ("int8", "qint8") or case.get("filter_dtype", "int8") != "int8":
    return None
  if case["padding"] not in ("SAME", "VALID") or case["activation"] not in ("Relu", "None"):
    return None
  for attr in ("strides", "dilations"):
    v = case[attr]
    if len(v) != 4 or v[0] != 1 or v[3] != 1 or min(v) < 1 or max(v) > INT32_MAX:
      return None
  x, w = case["input_shape"], case["filter_shape"]
  if len(x) != 4 or len(w) != 4:
    return None
  n, h, wd, ci = x
  kh, kw, fci, co = w
  # Grouped convolution as tf.nn.conv2d: groups = ci / filter in-depth.
  if fci == 0:
    if ci != 0:
      return None
    groups = 1
  else:
    if ci == 0 or ci % fci != 0:
      return None
    groups = ci // fci
    if co % groups != 0:
      return None
  if any(d > INT32_MAX for d in list(x) + list(w)):
    return None
  if kh < 1 or kw < 1:
    return None
  if tuple(case["bias_shape"]) != (co,):
    return None
  s = case["scale_shape"]
  if len(s) > 1:
    return None
  sn = numel(s)
  if not (sn == 1 or (sn == co and sn >= 1)):
    return None
  if len(case["side_scale_shape"]) != 0:
    return None
  if numel(x) > INT32_MAX or numel(w) > INT32_MAX or kh * kw * fci > MAX_DEPTH:
    return None
  out = []
  for size, k, st, dl in ((h, kh, case["strides"][1], case["dilations"][1]),
                          (wd, kw, case["strides"][2], case["dilations"][2])):
    eff = (k - 1) * dl + 1
    if eff - 1 > INT32_MAX:
      return None
    if case["padding"] == "VALID":
      if size < eff:
        return None
      out.append((size - eff) // st + 1)
    else:
      out.append(-(-size // st))
  shape = (n, out[0], out[1], co)
  if numel(shape) > INT32_MAX:
    return None
  side = tuple(case["side_shape"])
  if numel(side) != 0 and side != shape:
    return None
  return shape
