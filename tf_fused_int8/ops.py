"""Python API of the fused int8 convolution op (and of the int8 quantize op).

The only caller of the raw op. Argument names, order and defaults follow
TF 1.x contrib's ``fused_conv2d_bias_activation`` so code written for it runs
unchanged.
"""

import contextlib
import numbers

import numpy as np
import tensorflow as tf

from tensorflow.python.framework import auto_control_deps_utils
from tensorflow.python.ops import resource_variable_ops
from tf_fused_int8 import _freeze
from tf_fused_int8 import _loader

# The op only reads its variables: automatic control dependencies in a
# tf.function need not order it after other reads of the same variables.
auto_control_deps_utils.register_read_only_resource_op(
    "ResourceFusedInt8Conv2DBiasActivation")
# Frozen graphs (convert_variables_to_constants_v2) get the tensor op.
_freeze.install()

_PADDINGS = ("SAME", "VALID", "EXPLICIT")
_ACTIVATIONS = ("Relu", "None")
_DATA_FORMATS = ("NHWC", "NCHW_VECT_C")
_FILTER_FORMATS = ("HWIO", "OIHW_VECT_I")


def _window_attr(name, value, data_format):
  """Normalizes strides/dilations to the op's 4-element form.

  Accepts an int, a pair (height, width) or the full 4-element list in
  `data_format` order.
  """
  if value is None:
    return [1, 1, 1, 1]
  if isinstance(value, numbers.Integral):
    value = [int(value), int(value)]
  value = [int(v) for v in value]
  if len(value) == 2:
    if data_format == "NHWC":
      return [1, value[0], value[1], 1]
    return [1, 1, value[0], value[1]]
  if len(value) == 4:
    return value
  raise ValueError(
      f"{name} must be an int, [height, width] or a 4-element list in "
      f"{data_format} order, got {value}")


def _activation(activation_mode):
  if activation_mode is None:
    return "None"
  for a in _ACTIVATIONS:
    if str(activation_mode).lower() == a.lower():
      return a
  raise ValueError(
      f"activation_mode must be one of {_ACTIVATIONS}, got {activation_mode!r}")


def _padding_attrs(padding, explicit_paddings):
  """(padding attr, explicit_paddings attr) from the Python arguments.

  `padding` is "SAME", "VALID", "EXPLICIT" (with `explicit_paddings`, 8 ints)
  or, like tf.nn.conv2d, a list of 4 [before, after] pairs in data_format
  order. Values are checked by the kernel (and the shape function).
  """
  if padding is None:
    raise ValueError(
        "padding must be 'SAME', 'VALID', 'EXPLICIT' or a list of 4 "
        "[before, after] pairs, got None")
  if isinstance(padding, (str, bytes)):
    padding = _choice("padding", padding, _PADDINGS)
    if explicit_paddings is None:
      explicit_paddings = []
    explicit_paddings = [int(p) for p in explicit_paddings]
    return padding, explicit_paddings
  if explicit_paddings:
    raise ValueError(
        "explicit_paddings must not be given when padding is a list of pairs")
  try:
    pairs = [[int(v) for v in pair] for pair in padding]
  except TypeError as e:
    raise ValueError(
        "padding must be 'SAME', 'VALID', 'EXPLICIT' or a list of 4 "
        f"[before, after] pairs, got {padding!r}") from e
  if len(pairs) != 4 or any(len(pair) != 2 for pair in pairs):
    raise ValueError(
        "padding as a list must have 4 [before, after] pairs (one per "
        f"dimension in data_format order), got {padding!r}")
  return "EXPLICIT", [v for pair in pairs for v in pair]


def _op_scope(eager, name, default):
  """The name scope of a wrapper's ops: none when eager (eager ops have no
  names, so a scope only costs time), `name` or `default` in a graph."""
  return contextlib.nullcontext() if eager else tf.name_scope(name or default)


def _choice(name, value, choices):
  if type(value) is str and value in choices:  # exact spelling (every eager call)
    return value
  if isinstance(value, bytes):
    value = value.decode()
  if not isinstance(value, str) or value.upper() not in [c.upper() for c in choices]:
    raise ValueError(f"{name} must be one of {choices}, got {value!r}")
  return [c for c in choices if c.upper() == value.upper()][0]


# Eager calls: tensors the wrapper would otherwise build anew on every call
# (an empty side input is an op of its own; a Python scale is a conversion),
# made once. Eager tensors only: a graph gets its own constants.
_EAGER_CONSTANTS = {}
_MAX_EAGER_CONSTANTS = 256


def _eager_constant(value, dtype):
  """convert_to_tensor(value, dtype), cached for eager Python numbers."""
  if not isinstance(value, numbers.Real) or isinstance(value, bool):
    return tf.convert_to_tensor(value, dtype=dtype)
  key = (float(value), dtype)
  t = _EAGER_CONSTANTS.get(key)
  if t is None:
    if len(_EAGER_CONSTANTS) >= _MAX_EAGER_CONSTANTS:
      _EAGER_CONSTANTS.clear()
    t = _EAGER_CONSTANTS[key] = tf.constant(value, dtype=dtype)
  return t


def _cpu_variable(value, dtype):
  """Whether `value` is a resource variable of `dtype` that the CPU kernel of
  ResourceFusedInt8Conv2DBiasActivation can read: not placed on another
  device (the op has no GPU kernel; a GPU variable is read as a tensor)."""
  if not isinstance(value, resource_variable_ops.BaseResourceVariable):
    return False
  if value.dtype != dtype:
    return False
  device = value.device
  if not device:
    return True
  on_cpu = _DEVICE_ON_CPU.get(device)
  if on_cpu is None:
    # Parsing the device string took about 4 us of each eager call per
    # variable (three per layer call); a process sees few device strings.
    if len(_DEVICE_ON_CPU) >= _MAX_EAGER_CONSTANTS:
      _DEVICE_ON_CPU.clear()
    on_cpu = _DEVICE_ON_CPU[device] = tf.DeviceSpec.from_string(
        device).device_type in (None, "CPU")
  return on_cpu


# _cpu_variable's verdict per device string.
_DEVICE_ON_CPU = {}


def _identity_depthwise_operands(channels):
  """The int8 filter of ones [1, 1, 1, channels] and the zero float32 bias
  of an identity 1x1 depthwise convolution (quantization.Int8ReLU): eager
  tensors made once per channel count, or a graph's own constants."""
  def make():
    return (tf.ones([1, 1, 1, channels], tf.int8),
            tf.zeros([channels], tf.float32))
  if not tf.executing_eagerly():
    return make()
  key = ("identity_depthwise", int(channels))
  t = _EAGER_CONSTANTS.get(key)
  if t is None:
    if len(_EAGER_CONSTANTS) >= _MAX_EAGER_CONSTANTS:
      _EAGER_CONSTANTS.clear()
    t = _EAGER_CONSTANTS[key] = make()
  return t


def _empty_side_input(dtype, eager):
  if eager:
    key = ("empty", dtype)
    t = _EAGER_CONSTANTS.get(key)
    if t is None:
      t = tf.zeros([0], dtype=tf.int8)
      if dtype == tf.qint8:
        t = tf.bitcast(t, tf.qint8)
      _EAGER_CONSTANTS[key] = t
    return t
  t = tf.zeros([0], dtype=tf.int8)
  return tf.bitcast(t, tf.qint8) if dtype == tf.qint8 else t


def _sigmoid(x):
  return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|


def _relu6(x):
  return np.clip(x, 0.0, 6.0)


def _softplus(x):
  return np.logaddexp(0.0, x)


def _erf(x):
  import math  # pylint: disable=g-import-not-at-top
  return np.vectorize(math.erf)(x)


_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805

# Element-wise activations by their Keras names, in float64 numpy, as
# keras.activations defines them (Keras 3 defaults: gelu exact,
# leaky_relu slope 0.2, hard_sigmoid relu6(x + 3) / 6).
_LUT_FUNCTIONS = {
    "linear": lambda x: x,
    "relu": lambda x: np.maximum(x, 0.0),
    "relu6": _relu6,
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "silu": lambda x: x * _sigmoid(x),
    "swish": lambda x: x * _sigmoid(x),
    "hard_sigmoid": lambda x: _relu6(x + 3.0) / 6.0,
    "hard_silu": lambda x: x * _relu6(x + 3.0) / 6.0,
    "hard_swish": lambda x: x * _relu6(x + 3.0) / 6.0,
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0))),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    "selu": lambda x: _SELU_SCALE * np.where(
        x > 0, x, _SELU_ALPHA * np.expm1(np.minimum(x, 0.0))),
    "softplus": _softplus,
    "softsign": lambda x: x / (1.0 + np.abs(x)),
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "leaky_relu": lambda x: np.where(x >= 0, x, 0.2 * x),
}

LUT_ACTIVATIONS = tuple(sorted(_LUT_FUNCTIONS))


def activation_lut(activation, input_scale, output_scale):
  """The output_lut of an element-wise activation between two int8 scales.

  Entry q + 128 (q = -128 .. 127) is clip(round_half_to_even(
  f(q * input_scale) / output_scale), -128, 127), computed in float64: the
  convolution's output quantized at `input_scale` (the activation's input),
  mapped to f of it quantized at `output_scale`.

  Args:
    activation: a name in LUT_ACTIVATIONS (Keras's definitions) or a
      function of a float64 numpy array.
    input_scale, output_scale: positive finite floats.

  Returns:
    np.int8 array of 256 entries, for `fused_conv2d_bias_activation`'s
    output_lut.
  """
  for name, v in (("input_scale", input_scale), ("output_scale", output_scale)):
    if not (np.isfinite(v) and v > 0):
      raise ValueError(f"activation_lut: {name} must be a positive finite "
                       f"float, got {v!r}")
  if isinstance(activation, str):
    if activation not in _LUT_FUNCTIONS:
      raise ValueError(f"activation_lut: unknown activation {activation!r}; "
                       f"known: {', '.join(LUT_ACTIVATIONS)}, or pass a "
                       f"function of a numpy array")
    fn = _LUT_FUNCTIONS[activation]
  elif callable(activation):
    fn = activation
  else:
    raise TypeError(f"activation_lut: activation must be a name or a "
                    f"function, got {type(activation).__name__}")
  x = np.arange(-128, 128, dtype=np.float64) * float(input_scale)
  y = np.asarray(fn(x), dtype=np.float64)
  if y.shape != (256,) or not np.all(np.isfinite(y)):
    raise ValueError("activation_lut: the activation must map 256 inputs to "
                     "256 finite values")
  return np.clip(np.round(y / float(output_scale)), -128, 127).astype(np.int8)


def _output_lut(lut):
  """The output_lut attr: [] for None, else the 256 table values as ints."""
  if lut is None:
    return []
  values = np.asarray(lut)
  if values.shape != (256,):
    raise ValueError(f"output_lut must have 256 entries (out maps to "
                     f"output_lut[out + 128]), got shape {values.shape}")
  if not np.issubdtype(values.dtype, np.integer):
    if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
      raise ValueError(f"output_lut must hold integers, got dtype "
                       f"{values.dtype} with non-integer values")
  if values.min() < -128 or values.max() > 127:
    raise ValueError(f"output_lut values must be in [-128, 127], got "
                     f"[{values.min()}, {values.max()}]")
  return [int(v) for v in values]


def fused_conv2d_bias_activation(conv_input,
                                 filter,  # pylint: disable=redefined-builtin
                                 bias,
                                 strides=None,
                                 padding=None,
                                 conv_input_scale=1.0,
                                 side_input_scale=0.0,
                                 side_input=None,
                                 activation_mode="Relu",
                                 data_format=None,
                                 filter_format=None,
                                 dilations=None,
                                 name=None,
                                 explicit_paddings=None,
                                 output_min=-128,
                                 output_max=127,
                                 output_lut=None):
  """Fused int8 conv2d + scale + side input + bias + activation.

  Per output element, with ``acc`` the exact int32 sum of int8 products:

      y = float32(acc) * conv_input_scale[c]
      if side_input is given and side_input_scale != 0:
          y = fmaf(side_input, side_input_scale, y)   # one rounding
      y = y + bias[c]
      lo = max(0, output_min) if Relu else output_min
      out = clip(round_half_to_even(y), lo, output_max)   # NaN y -> lo
      if output_lut is given: out = output_lut[out + 128]

  Args:
    conv_input: int8 or qint8 tensor, [N, H, W, C] (NHWC) or
      [N, C/4, H, W, 4] (NCHW_VECT_C).
    filter: same dtype, [Kh, Kw, C, Co] (HWIO) or [Co, C/4, Kh, Kw, 4]
      (OIHW_VECT_I).
    bias: float32 [Co].
    strides: int, [h, w] or 4 elements in data_format order. Default 1.
    padding: "SAME", "VALID", "EXPLICIT" (with `explicit_paddings`) or, as in
      tf.nn.conv2d, a list of 4 [before, after] pairs in data_format order,
      e.g. [[0, 0], [top, bottom], [left, right], [0, 0]] for NHWC
      (required). Pads may be asymmetric and larger than the filter; batch
      and depth pads must be 0.
    conv_input_scale: float32 scalar or [Co] (per output channel).
      When filter, bias and conv_input_scale are all tf.Variables on the CPU
      and data_format is NHWC (as in the Keras layers), the op reads them itself
      (ResourceFusedInt8Conv2DBiasActivation: the same bits, one graph node
      instead of one more per variable read).
    side_input_scale: float32 scalar; 0 disables the side input.
    side_input: None/empty, or a tensor of the output's shape and dtype.
    activation_mode: "Relu" or "None" (None is accepted too).
    data_format: "NHWC" (default) or "NCHW_VECT_C" (GPU).
    filter_format: "HWIO" (default) or "OIHW_VECT_I" (GPU).
    dilations: like strides. Default 1.
    name: op name.
    explicit_paddings: with padding="EXPLICIT", 8 non-negative ints (the
      flattened pairs above).
    output_min, output_max: the int8 output range, -128 <= output_min <=
      output_max <= 127 (defaults -128, 127); Relu raises the lower bound to
      max(0, output_min). Relu6 for an output quantized with scale s is
      activation_mode="Relu", output_max=round(6 / s).
    output_lut: None (default) or 256 int8 values: the output is
      output_lut[out + 128] of the clipped out above (an activation such as
      SiLU tabulated at quantization time, see `activation_lut`). CPU only:
      the GPU kernel refuses it.

  Returns:
    A tensor of conv_input's dtype in data_format layout.
  """
  ops = _loader.load_ops()
  padding, explicit_paddings = _padding_attrs(padding, explicit_paddings)
  data_format = _choice("data_format", data_format or "NHWC", _DATA_FORMATS)
  filter_format = _choice(
      "filter_format",
      filter_format or ("OIHW_VECT_I" if data_format == "NCHW_VECT_C" else "HWIO"),
      _FILTER_FORMATS)
  strides = _window_attr("strides", strides, data_format)
  dilations = _window_attr("dilations", dilations, data_format)
  activation_mode = _activation(activation_mode)
  output_lut = _output_lut(output_lut)
  eager = tf.executing_eagerly()
  scope = _op_scope(eager, name, "fused_conv2d_bias_activation")
  with scope:
    if not isinstance(conv_input, tf.Tensor):  # a tensor as is (1.5 us eagerly)
      conv_input = tf.convert_to_tensor(conv_input, name="conv_input")
    if conv_input.dtype not in (tf.int8, tf.qint8):
      raise TypeError(
          f"conv_input must be int8 or qint8, got {conv_input.dtype.name}")
    # Resource variables on the CPU (what the Keras layers hold): the kernel
    # reads them itself, one graph node instead of one ReadVariableOp each.
    # NHWC only: NCHW_VECT_C is the GPU kernel's layout, and the resource op
    # has no GPU kernel (it would pull such a call onto the CPU).
    from_variables = (data_format == "NHWC" and
                      _cpu_variable(filter, conv_input.dtype) and
                      _cpu_variable(bias, tf.float32) and
                      _cpu_variable(conv_input_scale, tf.float32))
    if not from_variables:
      filter = tf.convert_to_tensor(filter, dtype=conv_input.dtype,
                                    name="filter")
      bias = tf.convert_to_tensor(bias, dtype=tf.float32, name="bias")
      if eager:
        conv_input_scale = _eager_constant(conv_input_scale, tf.float32)
      else:
        conv_input_scale = tf.convert_to_tensor(
            conv_input_scale, dtype=tf.float32, name="conv_input_scale")
    if eager:
      side_input_scale = _eager_constant(side_input_scale, tf.float32)
    else:
      side_input_scale = tf.convert_to_tensor(
          side_input_scale, dtype=tf.float32, name="side_input_scale")
    if side_input is None:
      side_input = _empty_side_input(conv_input.dtype, eager)
    else:
      side_input = tf.convert_to_tensor(
          side_input, dtype=conv_input.dtype, name="side_input")
    if from_variables:
      op = ops.resource_fused_int8_conv2d_bias_activation
      # As a ReadVariableOp would: the function graph lists the variables it
      # uses (freezing and concrete_function.variables rely on it) and a
      # GradientTape watches the trainable ones.
      for v in (filter, bias, conv_input_scale):
        resource_variable_ops.variable_accessed(v)
      filter, bias, conv_input_scale = (
          filter.handle, bias.handle, conv_input_scale.handle)
    else:
      op = ops.fused_int8_conv2d_bias_activation
    return op(
        conv_input=conv_input,
        filter=filter,
        bias=bias,
        side_input=side_input,
        conv_input_scale=conv_input_scale,
        side_input_scale=side_input_scale,
        strides=strides,
        padding=padding,
        explicit_paddings=explicit_paddings,
        output_min=int(output_min),
        output_max=int(output_max),
        output_lut=output_lut,
        data_format=data_format,
        filter_format=filter_format,
        activation_mode=activation_mode,
        dilations=dilations)


def _conv_sequence_attrs(steps):
  """The sequence ops' attrs (per-step lists, flattened) for `steps`, dicts
  of: input_source (0 = conv_input, k = step k - 1's output), side_source
  (-1 = none), filter_shape (Kh, Kw, Ci / groups, Co), per_channel_scale,
  strides and dilations (height, width), padding ("SAME", "VALID" or
  "EXPLICIT"), explicit_pads (top, bottom, left, right), activation_mode,
  output_min, output_max, and optionally output_lut (None or 256 int8
  values), kind (1: a channel scale, 2: a transposed convolution; the op's
  step_kinds) and, for kind 2, transpose: its phases, a dict of block (s_h,
  s_w), crop (top, bottom, left, right), rows and cols ((start, taps) per
  phase row / column; the op's transpose_steps record). Computed once per
  layer (``layers.QuantizedConvSequence.build``), not per call."""
  luts = [(k, s["output_lut"]) for k, s in enumerate(steps)
          if s.get("output_lut") is not None]
  kinds = [int(s.get("kind", 0)) for s in steps]
  extra = dict(step_kinds=kinds) if any(kinds) else {}
  records = []
  for k, s in enumerate(steps):
    t = s.get("transpose")
    if t is not None:
      records += [k, *t["block"], *t["crop"]]
      records += [int(v) for box in t["rows"] + t["cols"] for v in box]
  if records:
    extra["transpose_steps"] = [int(v) for v in records]
  return dict(
      steps=len(steps),
      input_sources=[int(s["input_source"]) for s in steps],
      side_sources=[int(s["side_source"]) for s in steps],
      filter_shapes=[int(v) for s in steps for v in s["filter_shape"]],
      per_channel_scales=[bool(s["per_channel_scale"]) for s in steps],
      strides=[int(v) for s in steps for v in s["strides"]],
      dilations=[int(v) for s in steps for v in s["dilations"]],
      paddings=[s["padding"] for s in steps],
      explicit_paddings=[int(v) for s in steps for v in s["explicit_pads"]],
      activation_modes=[_activation(s["activation_mode"]) for s in steps],
      output_mins=[int(s["output_min"]) for s in steps],
      output_maxes=[int(s["output_max"]) for s in steps],
      lut_steps=[k for k, _ in luts],
      output_luts=[int(v) for _, lut in luts for v in lut],
      **extra)


def _conv_sequence(conv_input, filters, epilogue, attrs, name=None):
  """Runs convolution steps as one ResourceFusedInt8ConvSequence op.

  The caller (``layers.QuantizedConvSequence``) has checked that `filters`
  (int8) and `epilogue` (float32) are CPU resource variables laid out as
  ``layers.conv_sequence_layout`` says; `attrs` is
  ``_conv_sequence_attrs(steps)``. The output is the last step's, bit for
  bit what the single op gives step by step.
  """
  ops = _loader.load_ops()
  eager = tf.executing_eagerly()
  with _op_scope(eager, name, "fused_conv_sequence"):
    conv_input = tf.convert_to_tensor(conv_input, name="conv_input")
    if conv_input.dtype != tf.int8:
      raise TypeError(
          f"conv_input must be int8, got {conv_input.dtype.name}")
    for v in (filters, epilogue):  # as ReadVariableOp would (see above)
      resource_variable_ops.variable_accessed(v)
    return ops.resource_fused_int8_conv_sequence(
        conv_input=conv_input, filters=filters.handle,
        epilogue=epilogue.handle, **attrs)


def _to_int8_view(x):
  """(tensor viewed as int8, a function that restores the original dtype)."""
  x = tf.convert_to_tensor(x)
  if x.dtype == tf.qint8:
    return tf.bitcast(x, tf.int8), lambda y: tf.bitcast(y, tf.qint8)
  return x, lambda y: y


def _pad_axis_to_multiple(x, axis, multiple):
  extra = (-tf.shape(x)[axis]) % multiple
  paddings = tf.tensor_scatter_nd_update(
      tf.zeros([x.shape.rank, 2], tf.int32), [[axis, 1]], [extra])
  return tf.pad(x, paddings)


def nhwc_to_nchw_vect_c(x, vect_size=4):
  """[N, H, W, C] -> [N, ceil(C/v), H, W, v].

  C is zero-padded up to a multiple of `vect_size` (4 for INT8x4, 32 for
  INT8x32); zero channels add nothing to a convolution. Undo with
  `nchw_vect_c_to_nhwc(y, channels=C)`.
  """
  x, restore = _to_int8_view(x)
  if x.shape.rank != 4:
    raise ValueError(f"nhwc_to_nchw_vect_c expects a rank-4 NHWC tensor, got "
                     f"shape {x.shape}")
  x = _pad_axis_to_multiple(x, 3, vect_size)
  s = tf.shape(x)
  x = tf.reshape(x, [s[0], s[1], s[2], s[3] // vect_size, vect_size])
  return restore(tf.transpose(x, [0, 3, 1, 2, 4]))


def nchw_vect_c_to_nhwc(x, channels=None):
  """[N, C/v, H, W, v] -> [N, H, W, C]; `channels` drops padded channels."""
  x, restore = _to_int8_view(x)
  if x.shape.rank != 5:
    raise ValueError(f"nchw_vect_c_to_nhwc expects a rank-5 NCHW_VECT_C "
                     f"tensor, got shape {x.shape}")
  s = tf.shape(x)
  x = tf.reshape(tf.transpose(x, [0, 2, 3, 1, 4]), [s[0], s[2], s[3], s[1] * s[4]])
  if channels is not None:
    x = x[..., :channels]
  return restore(x)


def hwio_to_oihw_vect_i(w, vect_size=4):
  """[Kh, Kw, I, O] -> [O, ceil(I/v), Kh, Kw, v], I zero-padded to a multiple.

  Right for ungrouped filters (the input's padded channels are zero too).
  For a grouped or depthwise filter whose input depth per group is not a
  multiple of v, the padded filter describes a different layer (NCHW_VECT_C
  reads the filter input depth as v * dimension 1): give a depthwise filter
  [Kh, Kw, 1, C * m] as `depthwise_filter_to_oihw_vect_i(w, m)` instead.
  """
  w, restore = _to_int8_view(w)
  if w.shape.rank != 4:
    raise ValueError(f"hwio_to_oihw_vect_i expects a rank-4 HWIO filter, got "
                     f"shape {w.shape}")
  w = _pad_axis_to_multiple(w, 2, vect_size)
  s = tf.shape(w)
  w = tf.reshape(w, [s[0], s[1], s[2] // vect_size, vect_size, s[3]])
  return restore(tf.transpose(w, [4, 2, 0, 1, 3]))


def depthwise_filter_to_oihw_vect_i(w, channel_multiplier=1):
  """A depthwise filter [Kh, Kw, 1, C*m] -> the OIHW_VECT_I filter [C*m, 1, Kh, Kw, 4]
  of the same layer in NCHW_VECT_C.

  NCHW_VECT_C counts the filter input depth in int8x4 words (4 * filter
  dimension 1), so its groups have at least 4 channels: a depthwise layer
  (groups = C, as tf.nn.conv2d with an HWIO filter [Kh, Kw, 1, C*m], output
  channel o reading input channel o // m) runs as groups = C / 4, with output
  channel o's weights in lane (o // m) % 4 and zeros in the other 3 lanes:
  the same sums, so the same bits (on the GPU, where grouped convolutions run
  on a direct kernel, and on the CPU). `hwio_to_oihw_vect_i` of a depthwise
  filter would instead put every weight in lane 0, which the op reads as a
  different (grouped) layer. C must be a multiple of 4. `channel_multiplier`
  is m (tf.nn.depthwise_conv2d's filter [Kh, Kw, C, m] reshaped to
  [Kh, Kw, 1, C*m] is this layout).
  """
  w, restore = _to_int8_view(w)
  if w.shape.rank != 4 or (w.shape[2] is not None and w.shape[2] != 1):
    raise ValueError(f"depthwise_filter_to_oihw_vect_i expects an HWIO depthwise filter "
                     f"[Kh, Kw, 1, C * channel_multiplier], got shape {w.shape}")
  m = int(channel_multiplier)
  if m < 1:
    raise ValueError(f"channel_multiplier must be >= 1, got {channel_multiplier}")
  out = w.shape[3]
  if out is not None and (out % m or (out // m) % 4):
    raise ValueError(f"the filter's output depth {out} must be C * channel_multiplier "
                     f"({m}) with C a multiple of 4 (NCHW_VECT_C)")
  lane = (tf.range(tf.shape(w)[3]) // m) % 4                 # [C*m]
  mask = tf.equal(tf.range(4)[:, tf.newaxis], lane[tf.newaxis, :])  # [4, C*m]
  w4 = tf.where(mask[tf.newaxis, tf.newaxis], w, tf.zeros_like(w))  # [Kh, Kw, 4, C*m]
  return restore(hwio_to_oihw_vect_i(w4))


def oihw_vect_i_to_hwio(w, in_channels=None):
  """[O, I/v, Kh, Kw, v] -> [Kh, Kw, I, O]; `in_channels` drops padding."""
  w, restore = _to_int8_view(w)
  if w.shape.rank != 5:
    raise ValueError(f"oihw_vect_i_to_hwio expects a rank-5 OIHW_VECT_I "
                     f"filter, got shape {w.shape}")
  s = tf.shape(w)
  w = tf.reshape(tf.transpose(w, [2, 3, 1, 4, 0]), [s[2], s[3], s[1] * s[4], s[0]])
  if in_channels is not None:
    w = w[:, :, :in_channels, :]
  return restore(w)


_PREPROCESS_OPS = ("mul", "add", "sub", "div")


def _preprocess_attrs(preprocess):
  """The op's (preprocess_ops, preprocess_sizes, preprocess_values, C) for
  `preprocess`, a sequence of (op, values) pairs; C is the per-channel
  steps' value count (1 where every step has one value)."""
  ops_, sizes, values, channels = [], [], [], 1
  for k, step in enumerate(preprocess):
    try:
      op, vals = step
    except (TypeError, ValueError):
      raise ValueError(f"preprocess[{k}] must be an (op, values) pair, got "
                       f"{step!r}") from None
    if op not in _PREPROCESS_OPS:
      raise ValueError(f"preprocess[{k}]: op must be one of {_PREPROCESS_OPS}, "
                       f"got {op!r}")
    with np.errstate(over="ignore"):
      v = np.asarray(vals, np.float64).astype(np.float32).reshape(-1)
    if v.size == 0 or (v.size > 1 and channels > 1 and v.size != channels):
      raise ValueError(
          f"preprocess[{k}]: values must be one number or one per channel of "
          f"the last axis (every per-channel step the same count"
          f"{f', {channels}' if channels > 1 else ''}), got {v.size} values")
    if v.size > 1:
      channels = v.size
    ops_.append(op)
    sizes.append(int(v.size))
    values.extend(float(a) for a in v)
  return ops_, sizes, values, channels


def quantize_to_int8(x, scale, name=None, preprocess=None):
  """float -> int8 in one op: ``clip(round_half_to_even(x / scale), -128, 127)``.

  ``x`` is cast to float32 first (any real dtype); ``x / scale`` is IEEE
  float32 division, NaN gives 0 and +-Inf 127 / -128: bit for bit
  ``tf.round(x / scale)`` clipped and cast, in one pass over the tensor
  instead of six (the op FusedInt8Quantize, CPU kernel; on a GPU device TF
  places it on the CPU). What ``tf_fused_int8.Quantize`` runs.

  Args:
    x: a tensor of any shape.
    scale: the real value of one int8 step, a positive finite float32.
    name: optional name scope (graph mode).
    preprocess: optional elementwise float32 steps applied to x first, in
      order, in the same pass: (op, values) pairs, op one of "mul", "add",
      "sub", "div" (x * v, x + v, x - v, x / v: one IEEE float32 operation
      each, what TF's Mul / AddV2 / Sub / RealDiv give), values one number or
      one per index of x's last axis (a model's Keras ``Rescaling`` is
      [("mul", scale), ("add", offset)], its ``Normalization`` [("sub",
      mean), ("div", max(sqrt(variance), epsilon))]; ``quantize_model``
      folds them so).

  Returns:
    An int8 tensor of x's shape.
  """
  try:
    s = float(scale)
  except (TypeError, ValueError):
    raise ValueError(f"scale must be a positive finite float32 number, got "
                     f"{scale!r}") from None
  with np.errstate(over="ignore"):
    s32 = float(np.float32(s))  # 1e39 -> inf: refused below
  if not (np.isfinite(s32) and s32 > 0.0):
    raise ValueError(f"scale must be a positive finite float32 number, got "
                     f"{scale!r}")
  ops = _loader.load_ops()
  eager = tf.executing_eagerly()
  scope = _op_scope(eager, name, "quantize_to_int8")
  with scope:
    x = tf.convert_to_tensor(x)
    if x.dtype != tf.float32:
      x = tf.cast(x, tf.float32)
    if not preprocess:
      return ops.fused_int8_quantize(x=x, scale=s32)
    pre_ops, sizes, values, channels = _preprocess_attrs(preprocess)
    if channels > 1 and x.shape.rank is not None and (
        x.shape.rank == 0 or x.shape[-1] not in (None, channels)):
      raise ValueError(
          f"quantize_to_int8: x's last dimension must be {channels} (the "
          f"per-channel preprocess values), got shape {x.shape}")
    return ops.fused_int8_quantize(
        x=x, scale=s32, preprocess_ops=pre_ops, preprocess_sizes=sizes,
        preprocess_values=values)


def _int8_input(x, api_name):
  """x as a tensor; a TypeError naming api_name unless it is int8."""
  x = tf.convert_to_tensor(x)
  if x.dtype != tf.int8:
    raise TypeError(f"{api_name}: x must be int8, got {x.dtype.name}")
  return x


def layer_norm_int8(x, gamma, beta, epsilon=0.0, name=None):
  """Layer normalization of an int8 tensor over its last axis, to int8.

  The op FusedInt8LayerNorm (CPU kernel). Per row q of C values (the last
  axis), with S1 = sum q and S2 = sum q^2 exact and D = C * S2 - S1^2::

      r = float32(1 / sqrt(float64(D) + float64(epsilon) * C^2))  # 0 if D == 0
      out[c] = clip(round_half_to_even(
                   fmaf(float32(C * q[c] - S1) * r, gamma[c], beta[c])),
                   -128, 127)                                      # NaN -> 0

  ``(C q - S1) r`` is ``(q - mean) / sqrt(var + epsilon)`` in q's units, so
  Keras's ``LayerNormalization(axis=-1, epsilon=e)`` of x at scale s_in,
  quantized at s_out, is ``gamma = gamma_k / s_out``, ``beta = beta_k /
  s_out`` and ``epsilon = e / s_in**2``; every CPU path gives the same bits.
  What ``quantization.Int8LayerNormalization`` runs.

  Args:
    x: int8 [..., C], 1 <= C <= 65536.
    gamma: float32 [C].
    beta: float32 [C].
    epsilon: a finite float >= 0 (in q's units squared).
    name: optional name scope (graph mode).

  Returns:
    int8, x's shape.
  """
  epsilon = float(epsilon)
  if not (np.isfinite(epsilon) and epsilon >= 0):
    raise ValueError(f"layer_norm_int8: epsilon must be finite and >= 0, got "
                     f"{epsilon}")
  ops = _loader.load_ops()
  eager = tf.executing_eagerly()
  scope = _op_scope(eager, name, "layer_norm_int8")
  with scope:
    x = _int8_input(x, "layer_norm_int8")
    gamma = tf.convert_to_tensor(gamma, tf.float32)
    beta = tf.convert_to_tensor(beta, tf.float32)
    return ops.fused_int8_layer_norm(x=x, gamma=gamma, beta=beta,
                                     epsilon=epsilon)


def channel_scale_int8(x, multiplier, name=None):
  """int8 x [N, H, W, C] times a float32 multiplier per image and channel.

  ``clip(round_half_to_even(float32(x) * multiplier[n, c]), -128, 127)``
  with one IEEE float32 multiply, NaN -> 0 (the op FusedInt8ChannelScale,
  CPU kernel): a squeeze-excite gate g applied to an int8 tensor at scale
  s_x, for an int8 output at scale s_out, is ``multiplier = g * (s_x /
  s_out)``. What ``quantization.Int8ChannelMultiply`` runs.

  Args:
    x: int8 [N, H, W, C].
    multiplier: float32 [N, C] or [N, 1, 1, C].
    name: optional name scope (graph mode).

  Returns:
    int8, x's shape.
  """
  ops = _loader.load_ops()
  eager = tf.executing_eagerly()
  scope = _op_scope(eager, name, "channel_scale_int8")
  with scope:
    x = _int8_input(x, "channel_scale_int8")
    multiplier = tf.convert_to_tensor(multiplier)
    if multiplier.dtype != tf.float32:
      raise TypeError(f"channel_scale_int8: multiplier must be float32, got "
                      f"{multiplier.dtype.name}")
    return ops.fused_int8_channel_scale(x=x, multiplier=multiplier)


def _zero_padding(zero_padding):
  """[top, bottom, left, right] of keras.layers.ZeroPadding2D's forms."""
  if zero_padding is None:
    return [0, 0, 0, 0]
  if isinstance(zero_padding, numbers.Integral):
    p = int(zero_padding)
    pads = [p, p, p, p]
  else:
    zero_padding = list(zero_padding)
    if len(zero_padding) != 2:
      raise ValueError(f"zero_padding must be an int, (rows, cols) or "
                       f"((top, bottom), (left, right)), got {zero_padding!r}")
    pads = []
    for part in zero_padding:
      if isinstance(part, numbers.Integral):
        pads += [int(part), int(part)]
      else:
        part = list(part)
        if len(part) != 2:
          raise ValueError(f"zero_padding must be an int, (rows, cols) or "
                           f"((top, bottom), (left, right)), got "
                           f"{zero_padding!r}")
        pads += [int(v) for v in part]
  if min(pads) < 0:
    raise ValueError(f"zero_padding must be non-negative, got {zero_padding!r}")
  return pads


def concat_int8(values, name=None):
  """Concatenation of int8 tensors along their last axis, in one op.

  ``tf.concat(values, axis=-1)`` for int8 tensors, bit for bit (the op
  FusedInt8Concat, CPU kernel): what ``tf_fused_int8.quantization``'s
  ``Int8Concatenate`` runs for a channels-last concatenation of tensors that
  share one scale. It copies on the same threads as the fused convolutions
  (TF's ConcatV2 shards over the intra-op pool, which the convolutions'
  helpers keep busy between ops: DenseNet121 at batch 1 on two threads spent
  about 4x longer per concatenation than on one).

  Args:
    values: a list of one or more int8 tensors of one rank (at least 1),
      with the same dimensions but the last.
    name: optional name scope (graph mode).

  Returns:
    An int8 tensor: the dimensions of values[0] but the last, which is the
    sum of theirs.
  """
  if isinstance(values, (tf.Tensor, np.ndarray)) or not values:
    raise ValueError("concat_int8: values must be a non-empty list of int8 "
                     "tensors")
  ops = _loader.load_ops()
  eager = tf.executing_eagerly()
  with _op_scope(eager, name, "concat_int8"):
    tensors = []
    for i, v in enumerate(values):
      v = tf.convert_to_tensor(v)
      if v.dtype != tf.int8:
        raise TypeError(f"concat_int8: values[{i}] must be int8, got "
                        f"{v.dtype.name}")
      tensors.append(v)
    return ops.fused_int8_concat(values=tensors)


def depth_to_space_int8(x, block_size, name=None):
  """Depth-to-space of an int8 NHWC tensor, in one op.

  ``tf.nn.depth_to_space(x, block_size)`` for an int8 ``x`` [N, H, W,
  bh * bw * C], bit for bit, and its non-square form: [N, H * bh, W * bw,
  C], output pixel (y bh + i, x bw + j) holding input pixel (y, x)'s
  channels (i bw + j) C .. + C - 1 (the op FusedInt8DepthToSpace, CPU
  kernel). What ``tf_fused_int8.quantization``'s ``Int8DepthToSpace`` runs
  after the convolution it makes of a ``Conv2DTranspose``. A copy on the
  fused convolutions' threads; TF's DepthToSpace moved int8 tensors several
  times slower and shards over the intra-op pool (see concat_int8).

  Args:
    x: an int8 tensor [batch, height, width, channels], channels a multiple
      of bh * bw.
    block_size: an int b (bh = bw = b, as TF's) or a pair (bh, bw), each 1
      to 65536.
    name: optional name scope (graph mode).

  Returns:
    An int8 tensor [batch, height * bh, width * bw, channels / (bh * bw)].
  """
  bh, bw = _block_pair(block_size)
  ops = _loader.load_ops()
  with _op_scope(tf.executing_eagerly(), name, "depth_to_space_int8"):
    return ops.fused_int8_depth_to_space(
        input=_int8_input(x, "depth_to_space_int8"), block_height=bh,
        block_width=bw)


def _block_pair(block_size):
  """(bh, bw) of depth_to_space_int8's block_size; a ValueError naming it
  unless it is an int or a pair of ints in [1, 65536]."""
  ok = lambda v: (isinstance(v, numbers.Integral) and  # pylint: disable=unnecessary-lambda-assignment
                  not isinstance(v, bool) and 1 <= v <= 65536)
  if ok(block_size):
    return int(block_size), int(block_size)
  if (isinstance(block_size, (tuple, list)) and len(block_size) == 2 and
      all(ok(v) for v in block_size)):
    return int(block_size[0]), int(block_size[1])
  raise ValueError(f"depth_to_space_int8: block_size must be an int or a "
                   f"pair of ints in [1, 65536], got {block_size!r}")


def _pad2d_int8(x, paddings, name=None):
  """Zero padding (positive) and cropping (negative) of an int8 NHWC
  tensor's rows and columns in one op, FusedInt8Pad2D: paddings = (top,
  bottom, left, right). What Int8ZeroPadding2D and Int8Cropping2D run
  (TF's Pad and StridedSlice shard over the intra-op pool, as ConcatV2:
  see concat_int8)."""
  pads = [int(p) for p in paddings]
  ops = _loader.load_ops()
  with _op_scope(tf.executing_eagerly(), name, "pad2d_int8"):
    return ops.fused_int8_pad2d(input=_int8_input(x, "pad2d_int8"),
                                paddings=pads)


def max_pool2d_int8(x, ksize, strides, padding, zero_padding=None, name=None):
  """int8 max pooling (NHWC), optionally after zero padding, in one op.

  ``tf.nn.max_pool2d(ZeroPadding2D(zero_padding)(x), ksize, strides,
  padding)`` for an int8 ``x`` (int8 0 is real 0, so the zeros are what a
  ``keras.layers.ZeroPadding2D`` adds; SAME's own padding cells are ignored,
  as in ``tf.nn.max_pool2d``), bit for bit, without the padded copy (the op
  FusedInt8MaxPool, CPU kernel; on a GPU device TF places it on the CPU).
  What ``tf_fused_int8.quantization``'s ``Int8MaxPooling2D`` runs.

  Args:
    x: an int8 tensor [batch, height, width, channels].
    ksize: the window: an int, [height, width] or [1, height, width, 1].
    strides: likewise.
    padding: "SAME" or "VALID".
    zero_padding: None, an int, (rows, cols) or ((top, bottom), (left,
      right)), as ``keras.layers.ZeroPadding2D``.
    name: optional name scope (graph mode).

  Returns:
    An int8 tensor [batch, out_height, out_width, channels].
  """
  return _pool2d_int8("max_pool2d_int8", "fused_int8_max_pool", x, ksize,
                      strides, padding, zero_padding, name)


def avg_pool2d_int8(x, ksize, strides, padding, zero_padding=None, name=None):
  """int8 average pooling (NHWC) at the input's scale, optionally after zero
  padding, in one op.

  Each window of ``tf.nn.avg_pool2d(ZeroPadding2D(zero_padding)(x), ksize,
  strides, padding)`` gives ``round_half_to_even(S / D)``: S the exact sum
  of its int8 cells, D their number (zero padding cells count as zeros;
  SAME's own padding cells do not count, so a border window is divided by
  the cells it holds, as ``tf.nn.avg_pool2d`` and
  ``keras.layers.AveragePooling2D`` do). The exact rational is rounded once,
  ties to even (the op FusedInt8AvgPool, CPU kernel; every CPU path gives
  the same bytes). What ``tf_fused_int8.quantization``'s
  ``Int8AveragePooling2D`` runs.

  Args:
    x: an int8 tensor [batch, height, width, channels].
    ksize: the window: an int, [height, width] or [1, height, width, 1].
    strides: likewise.
    padding: "SAME" or "VALID".
    zero_padding: None, an int, (rows, cols) or ((top, bottom), (left,
      right)), as ``keras.layers.ZeroPadding2D``.
    name: optional name scope (graph mode).

  Returns:
    An int8 tensor [batch, out_height, out_width, channels].
  """
  return _pool2d_int8("avg_pool2d_int8", "fused_int8_avg_pool", x, ksize,
                      strides, padding, zero_padding, name)


def _pool2d_int8(api_name, op_name, x, ksize, strides, padding, zero_padding,
                 name):
  padding = _choice("padding", padding, ("SAME", "VALID"))
  ksize = _window_attr("ksize", ksize, "NHWC")
  strides = _window_attr("strides", strides, "NHWC")
  pads = _zero_padding(zero_padding)
  ops = _loader.load_ops()
  eager = tf.executing_eagerly()
  scope = _op_scope(eager, name, api_name)
  with scope:
    x = _int8_input(x, api_name)
    return getattr(ops, op_name)(input=x, ksize=ksize, strides=strides,
                                 padding=padding, zero_paddings=pads)
