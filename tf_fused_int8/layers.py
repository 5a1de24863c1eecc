"""Keras 3 layer for the fused int8 convolution.

``QuantizedFusedConv2D`` is a Keras layer whose ``call`` is one
``fused_conv2d_bias_activation`` (NHWC, HWIO): int8 conv2d, per-channel (or
per-tensor) scale, optional int8 side input (residual), bias, and optional
Relu, producing int8. Tensors at the Keras boundary are ``int8`` (Keras has
no ``qint8`` dtype).

Quantization model (symmetric, zero point 0)
--------------------------------------------
A real tensor ``r`` is represented by int8 ``q`` with a float scale ``s``:
``r ~= s * q``. With input scale ``s_in``, weight scales ``s_w[c]`` (one per
output channel, or one for the whole kernel), output scale ``s_out`` and the
scale of the side input (residual) ``s_side``, the real computation
``y = conv(x, w) + b + residual`` becomes, in the op's int8 terms::

    q_y = round(acc[c] * conv_input_scale[c] + q_side * side_input_scale
                + bias[c])
    conv_input_scale[c] = s_in * s_w[c] / s_out
    side_input_scale    = s_side / s_out
    bias[c]             = b[c] / s_out

``QuantizedFusedConv2D.from_float_weights`` does exactly this, with
``s_w[c] = max(|w[..., c]|) / 127`` and ``q_w = round(w / s_w[c])`` clipped
to [-127, 127].

Grouped and depthwise convolutions
----------------------------------
``groups=G`` (Keras ``Conv2D`` semantics) splits the Ci input and the
``filters`` output channels into G groups: the kernel is
[Kh, Kw, Ci / G, filters] and output channel c (group c // (filters / G))
reads input channels [g * Ci / G, (g + 1) * Ci / G). A depthwise
convolution with channel multiplier M is ``groups=Ci, filters=Ci * M`` with
the depthwise kernel [Kh, Kw, Ci, M] reshaped to [Kh, Kw, 1, Ci * M]
(``depthwise_to_grouped_kernel``; output channel c reads input channel
c // M, ``tf.nn.depthwise_conv2d``'s order);
``QuantizedFusedConv2D.from_float_depthwise_weights`` does both.

Dense layers
------------
``QuantizedDense`` is the int8 ``keras.layers.Dense``: inputs int8
[..., Ci], kernel [1, 1, Ci, units], each row of the input one pixel of a 1x1
convolution (the same op, the same contract per output element).

Saving: the layer is registered with Keras as
``"tf_fused_int8>QuantizedFusedConv2D"``, so ``import tf_fused_int8`` before
``keras.models.load_model``. A SavedModel exported from a model with this
layer contains the custom op ``FusedInt8Conv2DBiasActivation``; ``import
tf_fused_int8`` before ``tf.saved_model.load`` (see docs/serving.md).
"""

import inspect
import numbers

import keras
import numpy as np
import tensorflow as tf

from tf_fused_int8 import ops as ops_lib
from tf_fused_int8.ops import fused_conv2d_bias_activation

__all__ = ["QuantizedDense", "QuantizedFusedConv2D",
           "depthwise_to_grouped_kernel", "quantize_kernel",
           "relu6_output_max"]


def _pair(value, name):
  if isinstance(value, numbers.Integral):
    value = (int(value), int(value))
  try:
    value = tuple(int(v) for v in value)
  except TypeError:
    raise ValueError(f"{name} must be an int or a pair of ints, got "
                     f"{value!r}") from None
  if len(value) != 2 or min(value) < 1:
    raise ValueError(f"{name} must be a positive int or a pair of positive "
                     f"ints, got {value!r}")
  return value


def _activation(activation):
  if activation is None:
    return None
  name = str(activation).lower()
  if name in ("none", "linear"):
    return None
  if name in ("relu", "relu6"):
    return name
  raise ValueError(f"activation must be None, 'relu' or 'relu6' (the fused op "
                   f"has no other activation), got {activation!r}")


def relu6_output_max(output_scale):
  """The int8 upper bound of Relu6 for an output quantized with `output_scale`:
  min(127, round(6 / output_scale)), the quotient in float64 and Python's
  round (half to even)."""
  s = float(output_scale)
  if not (np.isfinite(s) and s > 0):
    raise ValueError(f"output_scale must be a positive finite float, got "
                     f"{output_scale!r}")
  return int(min(127, round(6.0 / s)))


_PADDING_FORMS = (
    "'same', 'valid', or explicit zero padding as keras.layers.ZeroPadding2D "
    "takes it: an int p (all four sides), (pad_h, pad_w) (symmetric per "
    "axis) or ((top, bottom), (left, right)); also tf.nn.conv2d's NHWC "
    "[[0, 0], [top, bottom], [left, right], [0, 0]]")


def _nonneg_int(v):
  if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
    raise TypeError(v)
  if v < 0:
    raise ValueError(f"padding values must be >= 0, got {v}")
  return int(v)


def _padding(padding):
  """'same', 'valid' or ((top, bottom), (left, right)) (ints >= 0).

  Explicit forms, like keras.layers.ZeroPadding2D: p -> ((p, p), (p, p));
  (ph, pw) -> ((ph, ph), (pw, pw)); ((t, b), (l, r)) as is; and
  tf.nn.conv2d's NHWC [[0, 0], [t, b], [l, r], [0, 0]].
  """
  if isinstance(padding, bytes):
    padding = padding.decode()
  if isinstance(padding, str):
    p = padding.lower()
    if p not in ("same", "valid"):
      raise ValueError(f"padding must be {_PADDING_FORMS}; got {padding!r}")
    return p
  try:
    if isinstance(padding, numbers.Integral):
      p = _nonneg_int(padding)
      return ((p, p), (p, p))
    items = list(padding)
    if len(items) == 2 and all(isinstance(v, numbers.Integral)
                               for v in items):
      ph, pw = (_nonneg_int(v) for v in items)
      return ((ph, ph), (pw, pw))
    pairs = [tuple(_nonneg_int(v) for v in pair) for pair in items]
    if any(len(pair) != 2 for pair in pairs):
      raise TypeError(padding)
    if len(pairs) == 4:
      if pairs[0] != (0, 0) or pairs[3] != (0, 0):
        raise ValueError(
            f"padding as 4 [before, after] pairs is NHWC: the batch and "
            f"channel pairs must be [0, 0], got {padding!r}")
      pairs = pairs[1:3]
    if len(pairs) != 2:
      raise TypeError(padding)
    return (pairs[0], pairs[1])
  except TypeError:
    raise ValueError(f"padding must be {_PADDING_FORMS}; got "
                     f"{padding!r}") from None


def depthwise_to_grouped_kernel(depthwise_kernel):
  """A depthwise kernel [Kh, Kw, Ci, M] as the grouped kernel
  [Kh, Kw, 1, Ci * M] of ``groups=Ci`` (any dtype; a reshape).

  Output channel c * M + m of the grouped convolution is depthwise channel
  (c, m), the order of ``tf.nn.depthwise_conv2d`` and
  ``keras.layers.DepthwiseConv2D``, so the outputs are the same.
  """
  k = np.asarray(depthwise_kernel)
  if k.ndim != 4:
    raise ValueError(f"depthwise kernel must be [Kh, Kw, Ci, M], got shape "
                     f"{k.shape}")
  kh, kw, ci, m = k.shape
  return k.reshape(kh, kw, 1, ci * m)


def _windowed_size(size, k, stride, dilation, padding, what):
  """TensorFlow's output size along one axis (None for unknown).

  The same arithmetic as the op's C++ shape function
  (GetWindowedOutputSizeFromDimsV2): SAME -> ceil(in / stride);
  VALID -> ceil((in - eff_k + 1) / stride), an error when in < eff_k;
  explicit (before, after) -> (in + before + after - eff_k) // stride + 1,
  an error when in + before + after < eff_k.
  """
  if size is None:
    return None
  eff_k = (k - 1) * dilation + 1
  if padding == "same":
    return (size + stride - 1) // stride
  if padding == "valid":
    if size < eff_k:
      raise ValueError(
          f"{what} {size} is smaller than the dilated kernel ({eff_k}) with "
          f"padding='valid'; the output would be empty")
    return (size - eff_k + stride) // stride
  before, after = padding
  if size + before + after < eff_k:
    raise ValueError(
        f"{what} {size} padded by ({before}, {after}) is smaller than the "
        f"dilated kernel ({eff_k}); the output would be empty")
  return (size + before + after - eff_k) // stride + 1


def quantize_kernel(kernel, per_channel=True):
  """Symmetric int8 quantization of a float HWIO kernel.

  Returns ``(q, scale)``: ``q`` int8 [Kh, Kw, Ci, Co] (or a grouped
  [Kh, Kw, Ci / groups, Co]) with values in
  [-127, 127] and ``scale`` float64, [Co] when `per_channel` (else a 0-d
  array), such that ``kernel ~= q * scale``. ``scale = max|w| / 127`` over
  each output channel (or the whole kernel); an all-zero channel gets scale
  1.0. Rounding is half to even.
  """
  w = np.asarray(kernel, dtype=np.float64)
  if w.ndim != 4:
    raise ValueError(f"kernel must be HWIO [Kh, Kw, Ci, Co], got shape "
                     f"{w.shape}")
  if not np.all(np.isfinite(w)):
    raise ValueError("kernel has NaN or Inf values")
  amax = np.max(np.abs(w), axis=(0, 1, 2)) if per_channel else np.max(np.abs(w))
  scale = np.where(amax > 0, amax / 127.0, 1.0)
  q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
  return q, np.asarray(scale, np.float64)


def _int8_initializer(initializer):
  """Wraps a Keras initializer so that it yields int8 (round, clip, cast)."""
  def init(shape, dtype=None):
    del dtype
    values = initializer(shape, dtype="float32")
    values = keras.ops.clip(keras.ops.round(values), -128, 127)
    return keras.ops.cast(values, "int8")
  return init


class _EagerCall:
  """An eager call of a built layer on eager tensors goes straight to call().

  Keras's Layer.__call__ binds the call's arguments, maps over them, opens
  name scopes and a call context on every call: for QuantizedFusedConv2D
  (two call arguments) about 75 us of a 110-120 us eager call whose call()
  takes 33 us (tf.nn.conv2d: 24 us; Zen 5, 1x1 on 4x4x8). None of it
  changes what these layers compute eagerly: they take no training flag,
  support no mask, add no losses, and the dtype policy leaves int8 inputs
  (and float inputs of the compute dtype) as they are. So the fast path is
  taken only when all of that holds for this call (built; executing
  eagerly; every argument an eager tf.Tensor or None, with no Keras mask,
  none floating in another dtype; no activity regularizer or distribution);
  anything else (symbolic inputs while building a model, graphs, arrays,
  masks) takes Keras's own path.

  `training=None` or `training=False` where call() takes no `training`
  (none of these layers' does) is dropped, as Keras's CallSpec drops it. A
  functional model called eagerly as `model(x, training=False)` passes it
  to every layer, which all took Keras's path on every call before: the
  quantized models, eagerly, batch 1, one thread (Xeon with AMX under KVM,
  old and new alternated twice), MobileNetV2 3.89-3.99 -> 3.14-3.24 ms a
  call, ResNet50 10.0-10.6 -> 8.9-9.5 ms (model(x) without it: 3.1-3.2 and
  9.0-9.7 ms before and after). `training=True` (Keras would also pass it
  to nested layers) takes Keras's path.
  """

  def __call__(self, *args, **kwargs):
    call_kwargs = self._eager_call_kwargs(args, kwargs) if self.built else None
    if call_kwargs is None:
      return super().__call__(*args, **kwargs)
    if self.input_spec is not None:
      # Keras's own check of the first input against the layer's InputSpec
      # (the Keras-derived int8 layers: a rank-3 tensor to GlobalMaxPooling2D
      # would otherwise reduce the wrong axes).
      params = _call_parameters(type(self))
      self._assert_input_compatibility(
          args[0] if args else call_kwargs.get(params[0] if params else None))
    if not self._called:
      self._called = True
    return self.call(*args, **call_kwargs)

  def _eager_call_kwargs(self, args, kwargs):
    """The keyword arguments to pass to call() on the fast path, or None
    where this call takes Keras's path."""
    if not tf.executing_eagerly() or self.activity_regularizer is not None:
      return None
    params = _call_parameters(type(self))
    if len(args) > len(params):
      return None
    call_kwargs = {}
    for k, v in kwargs.items():
      if k in params:
        call_kwargs[k] = v
      elif not _is_inference_training(k, v):
        # Keras's CallSpec drops a call-context argument that call() does
        # not take (left out of call_kwargs); inference values only (see the
        # class docstring).
        return None
    for value in args + tuple(call_kwargs.values()):
      if value is None:
        continue
      if not isinstance(value, tf.Tensor) or _has_keras_mask(value):
        return None
      # A float input the dtype policy would cast (autocast to another
      # compute dtype): Keras's path. (DTypes are interned: `is` first.)
      dtype = value.dtype
      if (dtype is not tf.int8 and dtype.is_floating and
          dtype != self.compute_dtype):
        return None
    return call_kwargs if keras.distribution.distribution() is None else None


def _is_inference_training(name, value):
  """Whether the keyword argument name=value is `training=None` or
  `training=False`: the call-context argument that means inference for
  every layer of a quantized model, which the eager fast paths
  (_EagerCall, QuantizedModel) take."""
  return name == "training" and (value is None or value is False)


def _has_keras_mask(value):
  """Whether Keras has set a mask on the tensor `value`. Keras sets it as
  the attribute `_keras_mask` (keras.src.backend.common.tensor_attributes):
  on an eager tensor that is its instance dict, read here directly, since
  getattr of an attribute an EagerTensor lacks takes its slow fallback
  (0.84 us against 0.04, Zen 5)."""
  attrs = getattr(value, "__dict__", None)
  if attrs is not None and "_keras_mask" not in attrs:
    return False
  return getattr(value, "_keras_mask", None) is not None


_CALL_PARAMETERS = {}


def _call_parameters(cls):
  """The names of cls.call's parameters after self (cached per class)."""
  names = _CALL_PARAMETERS.get(cls)
  if names is None:
    sig = inspect.signature(cls.call)
    names = _CALL_PARAMETERS[cls] = tuple(
        n for n, p in sig.parameters.items()
        if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
  return names


_EAGER_SHAPES = {}


def _reshape(x, dims):
  """tf.reshape(x, dims) for a tuple of ints. Eagerly, the shape is a cached
  int32 constant: a Python list shape makes TF's eager fast path fall back
  to converting it on every call (an eager reshape of one 1280-byte row:
  22 us with the list, 6.6 us with a constant tensor, Zen 5). In a graph,
  the list (a Const node, nothing captured)."""
  if not tf.executing_eagerly():
    return tf.reshape(x, list(dims))
  shape = _EAGER_SHAPES.get(dims)
  if shape is None:
    if len(_EAGER_SHAPES) >= 1024:
      _EAGER_SHAPES.clear()
    with tf.init_scope(), tf.device("/CPU:0"):  # Reshape reads its shape on the host
      shape = _EAGER_SHAPES[dims] = tf.constant(dims, tf.int32)
  return tf.reshape(x, shape)


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class QuantizedFusedConv2D(_EagerCall, keras.layers.Layer):
  """Fused int8 2D convolution + scale + side input + bias + activation.

  ``outputs = layer(inputs)`` or ``layer(inputs, side_input=residual)``;
  ``inputs`` int8 [N, H, W, Ci] (NHWC), ``residual`` int8 with the output's
  shape [N, Ho, Wo, filters], ``outputs`` int8 [N, Ho, Wo, filters] (Keras
  has no qint8: bitcast qint8 tensors to int8 first). Per
  output element (see ``tf_fused_int8.fused_conv2d_bias_activation``)::

      y = float32(acc) * conv_input_scale[c]
      y = fmaf(side_input, side_input_scale, y)     # only with a side input
      y = y + bias[c]
      out = clip(round_half_to_even(y), lo, hi)   # lo = max(0, output_min) with
                                                  # relu/relu6, else output_min;
                                                  # hi = effective_output_max()

  Weights (in ``get_weights``/``set_weights`` order):
    kernel            int8  [Kh, Kw, Ci / groups, filters], non-trainable
    bias              float32 [filters]
    conv_input_scale  float32 [filters] (per_channel_scale) or scalar []
    side_input_scale  float32 scalar, only when ``use_side_input``

  Nothing is trainable (the op has no gradient); the layer is for inference.
  ``supports_jit`` is False: the op has no XLA kernel, so Keras's
  ``jit_compile="auto"`` stays off for models containing this layer.

  Args:
    filters: number of output channels.
    kernel_size: int or (Kh, Kw).
    strides: int or (sh, sw).
    padding: "valid" or "same" (TensorFlow's geometry), or explicit zero
      padding in keras.layers.ZeroPadding2D's forms: an int p (p rows /
      columns on all four sides), (pad_h, pad_w) (symmetric per axis) or
      ((top, bottom), (left, right)); tf.nn.conv2d's NHWC list
      [[0, 0], [top, bottom], [left, right], [0, 0]] is accepted too.
      Explicit pads may be asymmetric and larger than the kernel; the layer
      runs the op with padding="EXPLICIT" and explicit_paddings
      [0, 0, top, bottom, left, right, 0, 0], and the output size is
      (in + before + after - (K - 1) * dilation - 1) // stride + 1. Stored
      (``self.padding``, ``get_config``) as "same", "valid" or
      ((top, bottom), (left, right)). So ``ZeroPadding2D(p)`` followed by a
      "valid" convolution is this layer with ``padding=p``.
    activation: None (or "linear"), "relu" or "relu6". "relu6" needs
      ``output_scale`` (the scale s_out of the int8 output, real = s_out * q)
      and runs the op with Relu and output_max = min(output_max,
      relu6_output_max(output_scale)), relu6_output_max(s) = min(127,
      round(6 / s)) (float64 quotient, Python round: half to even).
    output_scale: s_out, used by "relu6" only (from_float_weights passes its
      output_scale).
    output_min, output_max: the int8 output range of the op (-128 <=
      output_min <= output_max <= 127, defaults -128/127); Relu raises the
      lower bound to max(0, output_min).
    output_lut: None, or 256 int8 values (the op's ``output_lut``): the
      layer's output is output_lut[out + 128] of the clipped out above, e.g.
      ``tf_fused_int8.activation_lut("swish", s_pre, s_out)`` for a SiLU
      whose input is quantized at s_pre and output at s_out. CPU only.
    use_side_input: when True, ``call`` requires ``side_input`` and the layer
      has a ``side_input_scale`` weight.
    per_channel_scale: ``conv_input_scale`` has one value per output channel
      (True) or is a scalar (False).
    dilation_rate: int or (dh, dw).
    groups: G, as in keras.layers.Conv2D: the input channels Ci and
      ``filters`` must both be multiples of G; the kernel is
      [Kh, Kw, Ci / G, filters] and output channel c, of group
      g = c // (filters / G), reads input channels [g * Ci / G,
      (g + 1) * Ci / G). Depthwise (channel multiplier M) is groups=Ci,
      filters=Ci * M, kernel [Kh, Kw, 1, Ci * M]: see
      ``from_float_depthwise_weights`` and ``depthwise_to_grouped_kernel``.
      The op infers G from the kernel's shape (like tf.nn.conv2d).
    kernel_initializer: Keras initializer; its values are rounded, clipped to
      [-128, 127] and cast to int8. Default "zeros" (weights normally come
      from ``set_weights`` or ``from_float_weights``).
    bias_initializer, conv_input_scale_initializer,
    side_input_scale_initializer: Keras initializers (float32).
    **kwargs: base Layer arguments (name, ...).
  """

  def __init__(self,
               filters,
               kernel_size,
               strides=1,
               padding="valid",
               activation=None,
               use_side_input=False,
               per_channel_scale=True,
               dilation_rate=1,
               kernel_initializer="zeros",
               bias_initializer="zeros",
               conv_input_scale_initializer="ones",
               side_input_scale_initializer="ones",
               output_min=-128,
               output_max=127,
               output_scale=None,
               groups=1,
               output_lut=None,
               **kwargs):
    kwargs.pop("trainable", None)  # nothing here is trainable
    super().__init__(trainable=False, **kwargs)
    if not isinstance(filters, numbers.Integral) or filters < 1:
      raise ValueError(f"filters must be a positive int, got {filters!r}")
    self.filters = int(filters)
    self.kernel_size = _pair(kernel_size, "kernel_size")
    self.strides = _pair(strides, "strides")
    self.padding = _padding(padding)
    self.activation = _activation(activation)
    self.use_side_input = bool(use_side_input)
    self.per_channel_scale = bool(per_channel_scale)
    self.dilation_rate = _pair(dilation_rate, "dilation_rate")
    if (isinstance(groups, (bool, np.bool_)) or
        not isinstance(groups, numbers.Integral) or groups < 1):
      raise ValueError(f"groups must be a positive int, got {groups!r}")
    self.groups = int(groups)
    if self.filters % self.groups:
      raise ValueError(
          f"filters ({self.filters}) must be a multiple of groups "
          f"({self.groups}): each group has filters / groups output channels")
    self.output_min = int(output_min)
    self.output_max = int(output_max)
    if not -128 <= self.output_min <= self.output_max <= 127:
      raise ValueError(f"output_min and output_max must satisfy -128 <= "
                       f"output_min <= output_max <= 127, got {output_min!r} "
                       f"and {output_max!r}")
    self.output_scale = None if output_scale is None else float(output_scale)
    try:
      lut = ops_lib._output_lut(output_lut)  # pylint: disable=protected-access
    except ValueError as e:
      raise ValueError(f"{self.__class__.__name__}: {e}") from None
    self.output_lut = tuple(lut) if lut else None
    if self.activation == "relu6":
      if self.output_scale is None:
        raise ValueError("activation='relu6' needs output_scale (the int8 "
                         "output's scale): output_max = round(6 / output_scale)")
      relu6_output_max(self.output_scale)  # validates
    if self.activation in ("relu", "relu6") and self.output_max < 0:
      raise ValueError(f"activation {self.activation!r} needs output_max >= "
                       f"0, got {output_max!r}")
    self.kernel_initializer = keras.initializers.get(kernel_initializer)
    self.bias_initializer = keras.initializers.get(bias_initializer)
    self.conv_input_scale_initializer = keras.initializers.get(
        conv_input_scale_initializer)
    self.side_input_scale_initializer = keras.initializers.get(
        side_input_scale_initializer)
    # Layer.__init__ sets supports_jit = True; the op has no XLA kernel.
    self.supports_jit = False
    self.input_channels = None

  # ------------------------------------------------------------------ build

  def _expected_input(self):
    ci = "Ci" if self.input_channels is None else self.input_channels
    return f"int8 [batch, height, width, {ci}] (NHWC)"

  def _check_input_shape(self, shape, what="inputs"):
    shape = tuple(shape) if shape is not None else None
    if shape is None or len(shape) != 4:
      raise ValueError(
          f"{self.__class__.__name__} '{self.name}' expects {what} of shape "
          f"{self._expected_input()}, got shape {shape}")
    if (self.input_channels is not None and shape[3] is not None and
        shape[3] != self.input_channels):
      kernel = (f"the kernel has {self.input_channels} input channels"
                if self.groups == 1 else
                f"the kernel has {self.input_channels // self.groups} input "
                f"channels per group, {self.groups} groups")
      raise ValueError(
          f"{self.__class__.__name__} '{self.name}' expects {what} of shape "
          f"{self._expected_input()} ({kernel}), got shape {shape}")

  def _check_dtype(self, dtype, what="inputs", shape=None):
    if dtype is tf.int8:  # the common case, without Keras's standardization
      return
    try:
      dtype = keras.backend.standardize_dtype(dtype)
    except ValueError:  # a dtype Keras does not know, e.g. tf.qint8
      dtype = getattr(dtype, "name", str(dtype))
    if dtype != "int8":
      expect = (self._expected_input() if what == "inputs" else
                f"int8 with the output's shape")
      raise ValueError(
          f"{self.__class__.__name__} '{self.name}' expects {what} of "
          f"{expect}, got dtype {dtype}"
          + (f" and shape {tuple(shape)}" if shape is not None else "")
          + ". Quantize float tensors first (q = clip(round(x / scale), "
          "-128, 127) cast to int8).")

  def build(self, input_shape):
    input_shape = tuple(input_shape) if input_shape is not None else None
    if input_shape is None or len(input_shape) != 4:
      raise ValueError(
          f"{self.__class__.__name__} '{self.name}' expects inputs of shape "
          f"{self._expected_input()}, got shape {input_shape}")
    if input_shape[3] is None:
      raise ValueError(
          f"{self.__class__.__name__} '{self.name}' needs a known channel "
          f"count: expected inputs of shape {self._expected_input()}, got "
          f"shape {input_shape}")
    ci = int(input_shape[3])
    if ci % self.groups:
      raise ValueError(
          f"{self.__class__.__name__} '{self.name}' has groups={self.groups}: "
          f"the input channel count must be a multiple of {self.groups}, got "
          f"inputs of shape {input_shape}")
    self.input_channels = ci
    kh, kw = self.kernel_size
    co = self.filters
    self.kernel = self.add_weight(
        name="kernel", shape=(kh, kw, ci // self.groups, co), dtype="int8",
        initializer=_int8_initializer(self.kernel_initializer),
        trainable=False, autocast=False)
    self.bias = self.add_weight(
        name="bias", shape=(co,), dtype="float32",
        initializer=self.bias_initializer, trainable=False, autocast=False)
    self.conv_input_scale = self.add_weight(
        name="conv_input_scale",
        shape=(co,) if self.per_channel_scale else (), dtype="float32",
        initializer=self.conv_input_scale_initializer, trainable=False,
        autocast=False)
    if self.use_side_input:
      self.side_input_scale = self.add_weight(
          name="side_input_scale", shape=(), dtype="float32",
          initializer=self.side_input_scale_initializer, trainable=False,
          autocast=False)
    else:
      self.side_input_scale = None
    # The shape is checked against the new weights (channel count, spatial
    # size for padding="valid").
    self.compute_output_shape(input_shape)

  # ------------------------------------------------------------ shape / spec

  def compute_output_shape(self, input_shape):
    """[N, Ho, Wo, filters]; None where the op's shape function has None.

    Agrees with the C++ shape function: batch passes through, an unknown
    height/width gives an unknown output height/width, a known one gives
    TensorFlow's SAME/VALID size or, with explicit padding,
    (in + before + after - (K - 1) * dilation - 1) // stride + 1 (groups do
    not change the output shape).
    """
    input_shape = tuple(input_shape) if input_shape is not None else None
    self._check_input_shape(input_shape)
    n, h, w, _ = input_shape
    kh, kw = self.kernel_size
    (sh, sw), (dh, dw) = self.strides, self.dilation_rate
    if isinstance(self.padding, str):
      pad_h = pad_w = self.padding
    else:
      pad_h, pad_w = self.padding
    ho = _windowed_size(h, kh, sh, dh, pad_h, "input height")
    wo = _windowed_size(w, kw, sw, dw, pad_w, "input width")
    return (n, ho, wo, self.filters)

  @property
  def op_padding(self):
    """The op's ``padding`` attr: "SAME", "VALID" or "EXPLICIT"."""
    if isinstance(self.padding, str):
      return self.padding.upper()
    return "EXPLICIT"

  @property
  def explicit_paddings(self):
    """The op's ``explicit_paddings`` attr: [] for same/valid, else the NHWC
    [0, 0, top, bottom, left, right, 0, 0]."""
    if isinstance(self.padding, str):
      return []
    (top, bottom), (left, right) = self.padding
    return [0, 0, top, bottom, left, right, 0, 0]

  def _side_shape(self, output_shape, side_shape):
    """Merges the side input's shape into the output's (as the op does)."""
    side_shape = tuple(side_shape) if side_shape is not None else None
    expected = ("int8 [" + ", ".join(
        "?" if d is None else str(d) for d in output_shape) + "]")
    msg = (f"{self.__class__.__name__} '{self.name}' expects side_input of "
           f"shape {expected} (the output's shape), got shape {side_shape}")
    if side_shape is None or len(side_shape) != 4:
      raise ValueError(msg)
    merged = []
    for a, b in zip(output_shape, side_shape):
      if a is not None and b is not None and a != b:
        raise ValueError(msg)
      merged.append(a if a is not None else b)
    return tuple(merged)

  def _check_side(self, side_input):
    if self.use_side_input and side_input is None:
      raise ValueError(
          f"{self.__class__.__name__} '{self.name}' was created with "
          f"use_side_input=True; call it as layer(inputs, side_input=...)")
    if not self.use_side_input and side_input is not None:
      raise ValueError(
          f"{self.__class__.__name__} '{self.name}' got a side_input but was "
          f"created with use_side_input=False")

  def compute_output_spec(self, inputs, side_input=None):
    self._check_dtype(inputs.dtype, shape=inputs.shape)
    self._check_side(side_input)
    shape = self.compute_output_shape(inputs.shape)
    if side_input is not None:
      self._check_dtype(side_input.dtype, "side_input", side_input.shape)
      shape = self._side_shape(shape, side_input.shape)
    return keras.KerasTensor(shape, dtype="int8")

  # ------------------------------------------------------------------- call

  def call(self, inputs, side_input=None):
    self._check_dtype(inputs.dtype, shape=inputs.shape)
    self._check_side(side_input)
    static = tuple(inputs.shape) if inputs.shape.rank is not None else None
    if static is not None:
      out_shape = self.compute_output_shape(static)
    else:
      out_shape = (None, None, None, self.filters)
    if side_input is not None:
      self._check_dtype(side_input.dtype, "side_input", side_input.shape)
      if side_input.shape.rank is not None:
        self._side_shape(out_shape, tuple(side_input.shape))
    return fused_conv2d_bias_activation(
        inputs,
        self.kernel.value,
        self.bias.value,
        strides=self.strides,
        padding=self.op_padding,
        explicit_paddings=self.explicit_paddings,
        conv_input_scale=self.conv_input_scale.value,
        side_input_scale=(self.side_input_scale.value
                          if self.use_side_input else 0.0),
        side_input=side_input,
        activation_mode="None" if self.activation is None else "Relu",
        dilations=self.dilation_rate,
        output_min=self.output_min,
        output_max=self.effective_output_max(),
        output_lut=self.output_lut)

  def effective_output_max(self):
    """The op's output_max: output_max, lowered to round(6 / output_scale)
    for activation="relu6"."""
    if self.activation == "relu6":
      return min(self.output_max, relu6_output_max(self.output_scale))
    return self.output_max

  # ---------------------------------------------------------------- weights

  def set_weights(self, weights):
    """Like Layer.set_weights, refusing a kernel that is not int8-valued.

    Keras would silently cast a float kernel to int8 (truncating); here the
    kernel must be an integer array with values in [-128, 127].
    """
    weights = list(weights)
    if weights:
      k = np.asarray(weights[0])
      if not np.issubdtype(k.dtype, np.integer):
        raise ValueError(
            f"{self.__class__.__name__} '{self.name}': the kernel (first "
            f"weight) must be an int8 array, got dtype {k.dtype}; use "
            f"QuantizedFusedConv2D.from_float_weights or quantize_kernel for "
            f"float weights")
      if k.size and (k.min() < -128 or k.max() > 127):
        raise ValueError(
            f"{self.__class__.__name__} '{self.name}': kernel values must be "
            f"in [-128, 127], got [{k.min()}, {k.max()}]")
      weights[0] = k.astype(np.int8)
    super().set_weights(weights)

  @classmethod
  def from_float_weights(cls,
                         kernel,
                         bias=None,
                         input_scale=1.0,
                         output_scale=1.0,
                         side_input_scale=None,
                         per_channel_scale=True,
                         **kwargs):
    """A built layer from float weights and the activations' scales.

    Args:
      kernel: float HWIO kernel [Kh, Kw, Ci / groups, Co] (e.g. a Conv2D's
        kernel; ``groups`` from `kwargs`, default 1, and the layer is built
        for Ci = kernel.shape[2] * groups input channels). For a depthwise
        kernel [Kh, Kw, Ci, M] use ``from_float_depthwise_weights``.
      bias: float [Co] or None (zeros).
      input_scale: s_in, the scale of the int8 input (real = s_in * q).
      output_scale: s_out, the scale of the int8 output.
      side_input_scale: s_side, the scale of the int8 side input (residual);
        given -> use_side_input=True.
      per_channel_scale: per-output-channel weight scales (else one).
      **kwargs: the other constructor arguments (strides, padding,
        activation, dilation_rate, groups, name, ...); filters and
        kernel_size come from the kernel.

    The weights are (computed in float64, stored as float32):
      q_w, s_w = quantize_kernel(kernel, per_channel_scale)
      conv_input_scale = s_in * s_w / s_out
      bias             = b / s_out
      side_input_scale = s_side / s_out
    """
    kernel = np.asarray(kernel)
    if kernel.ndim != 4:
      raise ValueError(f"kernel must be HWIO [Kh, Kw, Ci, Co], got shape "
                       f"{kernel.shape}")
    kh, kw, ci, co = kernel.shape
    for key in ("filters", "kernel_size", "use_side_input"):
      if key in kwargs:
        raise ValueError(f"from_float_weights takes {key} from its other "
                         f"arguments, not from {key}=")
    s_in = float(input_scale)
    s_out = float(output_scale)
    if not (np.isfinite(s_in) and s_in > 0 and np.isfinite(s_out) and
            s_out > 0):
      raise ValueError(f"input_scale and output_scale must be positive, got "
                       f"{input_scale!r} and {output_scale!r}")
    q, s_w = quantize_kernel(kernel, per_channel_scale)
    b = (np.zeros([co]) if bias is None else
         np.asarray(bias, np.float64).reshape([co]))
    weights = [q,
               (b / s_out).astype(np.float32),
               (s_in * s_w / s_out).astype(np.float32)]
    use_side = side_input_scale is not None
    if (str(kwargs.get("activation")).lower() == "relu6" and
        kwargs.get("output_scale") is None):
      kwargs["output_scale"] = s_out
    if use_side:
      weights.append(np.float32(float(side_input_scale) / s_out))
    layer = cls(filters=co, kernel_size=(kh, kw), use_side_input=use_side,
                per_channel_scale=per_channel_scale, **kwargs)
    layer.build((None, None, None, ci * layer.groups))
    layer.set_weights(weights)
    return layer

  @classmethod
  def from_float_depthwise_weights(cls,
                                   depthwise_kernel,
                                   bias=None,
                                   input_scale=1.0,
                                   output_scale=1.0,
                                   side_input_scale=None,
                                   per_channel_scale=True,
                                   **kwargs):
    """A built depthwise layer from a float depthwise kernel.

    ``depthwise_kernel`` is [Kh, Kw, Ci, M] (keras.layers.DepthwiseConv2D's
    kernel, channel multiplier M), ``bias`` [Ci * M] or None. The layer has
    ``groups=Ci``, ``filters=Ci * M`` and the int8 kernel [Kh, Kw, 1, Ci * M]
    (``depthwise_to_grouped_kernel``): output channel c * M + m is depthwise
    channel (c, m), as in DepthwiseConv2D. Weight scales are per output
    channel (one per (c, m)) unless ``per_channel_scale=False``. The other
    arguments are those of ``from_float_weights`` (``groups`` comes from the
    kernel).
    """
    if "groups" in kwargs:
      raise ValueError("from_float_depthwise_weights takes groups from the "
                       "depthwise kernel (groups = its input channels), not "
                       "from groups=")
    kernel = depthwise_to_grouped_kernel(depthwise_kernel)
    return cls.from_float_weights(
        kernel, bias, input_scale=input_scale, output_scale=output_scale,
        side_input_scale=side_input_scale,
        per_channel_scale=per_channel_scale,
        groups=np.asarray(depthwise_kernel).shape[2], **kwargs)

  # ----------------------------------------------------------------- config

  def get_config(self):
    config = super().get_config()
    config.pop("trainable", None)
    config.update({
        "filters": self.filters,
        "kernel_size": self.kernel_size,
        "strides": self.strides,
        "padding": self.padding,
        "activation": self.activation,
        "use_side_input": self.use_side_input,
        "per_channel_scale": self.per_channel_scale,
        "dilation_rate": self.dilation_rate,
        "groups": self.groups,
        "output_min": self.output_min,
        "output_max": self.output_max,
        "output_scale": self.output_scale,
        "output_lut": (None if self.output_lut is None else
                       list(self.output_lut)),
        "kernel_initializer": keras.initializers.serialize(
            self.kernel_initializer),
        "bias_initializer": keras.initializers.serialize(
            self.bias_initializer),
        "conv_input_scale_initializer": keras.initializers.serialize(
            self.conv_input_scale_initializer),
        "side_input_scale_initializer": keras.initializers.serialize(
            self.side_input_scale_initializer),
    })
    return config


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class QuantizedDense(QuantizedFusedConv2D):
  """The int8 ``keras.layers.Dense``: a 1x1 fused convolution per row.

  ``outputs = layer(inputs)``; ``inputs`` int8 [..., Ci] (rank >= 2, Ci
  known), ``outputs`` int8 [..., units]. The input is viewed as
  [rows, 1, 1, Ci] (rows the product of the leading dimensions) and run
  through ``fused_conv2d_bias_activation`` with the 1x1 kernel
  [1, 1, Ci, units], so every output element follows the op's contract::

      y = float32(acc) * conv_input_scale[c] + bias[c]
      out = clip(round_half_to_even(y), lo, hi)

  with ``acc`` the exact int32 dot product of the row with kernel column c.
  Weights as QuantizedFusedConv2D's (kernel int8 [1, 1, Ci, units], bias,
  conv_input_scale); no side input. ``from_float_weights`` takes a Dense
  kernel [Ci, units] (or [1, 1, Ci, units]).

  Args:
    units: output channels.
    activation, output_scale, output_min, output_max, per_channel_scale,
    kernel_initializer, bias_initializer, conv_input_scale_initializer,
    **kwargs: as in QuantizedFusedConv2D.
  """

  def __init__(self, units=None, activation=None, per_channel_scale=True,
               **kwargs):
    filters = kwargs.pop("filters", None)
    if units is None:
      units = filters
    elif filters is not None and filters != units:
      raise ValueError(f"QuantizedDense got units={units!r} and "
                       f"filters={filters!r}")
    if units is None:
      raise ValueError("QuantizedDense needs units")
    # from_float_weights passes the 1x1 geometry of the kernel.
    for key, ok in (("kernel_size", (1, 1)), ("strides", (1, 1)),
                    ("dilation_rate", (1, 1)), ("groups", 1),
                    ("padding", "valid"), ("use_side_input", False)):
      if key in kwargs:
        value = kwargs.pop(key)
        norm = (_pair(value, key) if isinstance(ok, tuple) else
                value.lower() if isinstance(value, str) else value)
        if norm != ok:
          raise ValueError(f"QuantizedDense has no {key} (a Dense layer is a "
                           f"1x1 convolution per row), got {key}={value!r}")
    super().__init__(filters=units, kernel_size=1, activation=activation,
                     per_channel_scale=per_channel_scale, **kwargs)

  @property
  def units(self):
    return self.filters

  def _expected_input(self):
    ci = "Ci" if self.input_channels is None else self.input_channels
    return f"int8 [..., {ci}] (rank >= 2)"

  def _check_input_shape(self, shape, what="inputs"):
    shape = tuple(shape) if shape is not None else None
    if shape is None or len(shape) < 2:
      raise ValueError(
          f"QuantizedDense '{self.name}' expects {what} of shape "
          f"{self._expected_input()}, got shape {shape}")
    if (self.input_channels is not None and shape[-1] is not None and
        shape[-1] != self.input_channels):
      raise ValueError(
          f"QuantizedDense '{self.name}' expects {what} of shape "
          f"{self._expected_input()} (the kernel has {self.input_channels} "
          f"input channels), got shape {shape}")

  def build(self, input_shape):
    input_shape = tuple(input_shape) if input_shape is not None else None
    self._check_input_shape(input_shape)
    if input_shape[-1] is None:
      raise ValueError(
          f"QuantizedDense '{self.name}' needs a known channel count: "
          f"expected inputs of shape {self._expected_input()}, got shape "
          f"{input_shape}")
    super().build((None, 1, 1, int(input_shape[-1])))

  def compute_output_shape(self, input_shape):
    input_shape = tuple(input_shape) if input_shape is not None else None
    self._check_input_shape(input_shape)
    return input_shape[:-1] + (self.filters,)

  def compute_output_spec(self, inputs):
    self._check_dtype(inputs.dtype, shape=inputs.shape)
    return keras.KerasTensor(self.compute_output_shape(inputs.shape),
                             dtype="int8")

  def call(self, inputs):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    self._check_dtype(inputs.dtype, shape=inputs.shape)
    if inputs.shape.rank is not None:
      self._check_input_shape(tuple(inputs.shape))
    rows = _reshape(inputs, (-1, 1, 1, self.input_channels))
    y = fused_conv2d_bias_activation(
        rows,
        self.kernel.value,
        self.bias.value,
        strides=(1, 1),
        padding="VALID",
        conv_input_scale=self.conv_input_scale.value,
        side_input_scale=0.0,
        activation_mode="None" if self.activation is None else "Relu",
        output_min=self.output_min,
        output_max=self.effective_output_max(),
        output_lut=self.output_lut)
    # The output's shape without Shape / StridedSlice / ConcatV2 ops when
    # every dimension but the first is known (a Dense input [N, Ci] always):
    # three graph nodes, and three eager ops per call, fewer.
    dims = inputs.shape.as_list() if inputs.shape.rank is not None else None
    if dims is not None and len(dims) >= 2 and all(d is not None for d in dims[1:-1]):
      return _reshape(y, (-1, *dims[1:-1], self.filters))
    shape = tf.concat([tf.shape(inputs)[:-1], [self.filters]], axis=0)
    return tf.reshape(y, shape)

  @classmethod
  def from_float_weights(cls, kernel, bias=None, input_scale=1.0,
                         output_scale=1.0, side_input_scale=None,
                         per_channel_scale=True, **kwargs):
    """A built layer from a float Dense kernel [Ci, units] (or its 1x1 form
    [1, 1, Ci, units]) and bias; the rest as
    QuantizedFusedConv2D.from_float_weights (no side input)."""
    if side_input_scale is not None:
      raise ValueError("QuantizedDense has no side input")
    kernel = np.asarray(kernel)
    if kernel.ndim == 2:
      kernel = kernel.reshape((1, 1) + kernel.shape)
    if kernel.ndim != 4 or kernel.shape[:2] != (1, 1):
      raise ValueError(f"kernel must be a Dense kernel [Ci, units], got "
                       f"shape {kernel.shape}")
    return super().from_float_weights(
        kernel, bias, input_scale=input_scale, output_scale=output_scale,
        per_channel_scale=per_channel_scale, **kwargs)

  def get_config(self):
    config = super().get_config()
    for key in ("filters", "kernel_size", "strides", "padding",
                "use_side_input", "dilation_rate", "groups",
                "side_input_scale_initializer"):
      config.pop(key, None)
    config["units"] = self.filters
    return config


def _is_channel_scale(conv):
  """Whether a QuantizedConvSequence step (a layer, a config or a channel
  scale) is a channel scale: {"channel_scale": {"channels": C,
  "gate_scale": s_g, "ratio": r}} (a squeeze-excite gate applied as
  quantize_model's Dequantize + Int8ChannelMultiply compute it)."""
  return isinstance(conv, dict) and set(conv) == {"channel_scale"}


def _channel_scale_step(conv, k):
  """The channel scale step's checked factors."""
  step = conv["channel_scale"]
  try:
    c = int(step["channels"])
    gate_scale = float(np.float32(step["gate_scale"]))
    ratio = float(np.float32(step["ratio"]))
  except (KeyError, TypeError, ValueError):
    raise ValueError(
        f"QuantizedConvSequence: convs[{k}] must be a channel scale "
        f'{{"channel_scale": {{"channels": C, "gate_scale": s, "ratio": r}}}}, '
        f"got {conv!r}") from None
  if c < 1 or not (np.isfinite(gate_scale) and np.isfinite(ratio)):
    raise ValueError(
        f"QuantizedConvSequence: convs[{k}]: a channel scale needs channels >= 1 "
        f"and finite gate_scale and ratio, got {step!r}")
  return dict(channels=c, gate_scale=gate_scale, ratio=ratio)


def _channel_scale_shape(name, k, channels, x_shape, gate_shape):
  """A channel scale step's output shape (its input's): x [N, H, W, C],
  gate [N, 1, 1, C]."""
  x_shape, gate_shape = tuple(x_shape), tuple(gate_shape)
  ok = len(x_shape) == 4 and len(gate_shape) == 4 and x_shape[3] in (
      None, channels) and gate_shape[1:3] == (1, 1) and gate_shape[3] in (
          None, channels)
  if ok and None not in (x_shape[0], gate_shape[0]):
    ok = x_shape[0] == gate_shape[0]
  if not ok:
    raise ValueError(
        f"QuantizedConvSequence '{name}': step {k} (a channel scale of "
        f"{channels} channels) needs an input [N, H, W, {channels}] and a gate "
        f"[N, 1, 1, {channels}], got {x_shape} and {gate_shape}")
  return x_shape[:3] + (channels,)


def _is_transposed(conv):
  """Whether a QuantizedConvSequence step is a transposed convolution:
  {"transposed": {"conv": its sub-pixel QuantizedFusedConv2D (a layer or
  its config), "block": (s_h, s_w), "crop": (top, bottom, left, right),
  "rows": ((start, taps) per phase row), "cols": ((start, taps) per phase
  column)}} (cc/core/transposed_conv.h; fuse_conv_sequences makes them of
  quantize_model's Conv2DTranspose layers)."""
  return isinstance(conv, dict) and set(conv) == {"transposed"}


def _transposed_step(conv, k):
  """(the sub-pixel conv as given, its checked phases dict) of a transposed
  step."""
  step = conv["transposed"]
  try:
    block = tuple(int(v) for v in step["block"])
    crop = tuple(int(v) for v in step["crop"])
    rows = tuple((int(a), int(n)) for a, n in step["rows"])
    cols = tuple((int(a), int(n)) for a, n in step["cols"])
    sub = step["conv"]
  except (KeyError, TypeError, ValueError):
    raise ValueError(
        f"QuantizedConvSequence: convs[{k}] must be a transposed convolution "
        f'{{"transposed": {{"conv": ..., "block": (s_h, s_w), "crop": (top, '
        f'bottom, left, right), "rows": ((start, taps), ...), "cols": '
        f'((start, taps), ...)}}}}, got {conv!r}') from None
  if (len(block) != 2 or min(block) < 1 or len(crop) != 4 or min(crop) < 0 or
      len(rows) != block[0] or len(cols) != block[1] or
      min(n for _, n in rows + cols) < 1 or min(a for a, _ in rows + cols) < 0):
    raise ValueError(
        f"QuantizedConvSequence: convs[{k}] (a transposed convolution) needs "
        f"blocks >= 1, crops >= 0, and one (start >= 0, taps >= 1) per phase "
        f"row and column, got block {block}, crop {crop}, rows {rows}, cols "
        f"{cols}")
  return sub, dict(block=block, crop=crop, rows=rows, cols=cols)


def _conv_config(config):
  """The QuantizedFusedConv2D config of a conv or transposed step's config."""
  return config["transposed"]["conv"] if _is_transposed(config) else config


def _transposed_phase_boxes(shape, phases):
  """(boxes, size) of a transposed step whose sub-pixel kernel has `shape`:
  boxes [(phase, rows slice, cols slice, channels slice, offset)] in phase
  order, offset where its filter [row taps, column taps, Ci, Co / phases]
  starts in the step's filter slot (each at a multiple of 64), and size
  the slot's elements (TransposedConvFilterBytes,
  cc/core/transposed_conv.h)."""
  bh, bw = phases["block"]
  co = shape[3] // (bh * bw)
  boxes, at = [], 0
  for rh, (a, n) in enumerate(phases["rows"]):
    for rw, (b, m) in enumerate(phases["cols"]):
      p = rh * bw + rw
      at = -(-at // 64) * 64
      boxes.append((p, slice(a, a + n), slice(b, b + m),
                    slice(p * co, (p + 1) * co), at))
      at += n * m * shape[2] * co
  return boxes, at


def conv_sequence_layout(filter_shapes, per_channel_scales, side_flags,
                         filter_sizes=None):
  """Where ResourceFusedInt8ConvSequence finds each step's weights.

  Returns (steps, filter_total, epilogue_total), steps a list of dicts of
  element offsets into the two weight vectors: "filter" (int8, each at a
  multiple of 64), "bias", "scale" (length Co or 1) and "side_scale" (None
  without a side input) into the float32 one, each at a multiple of 16; in
  step order, zeros between (the op's doc; the kernel computes the same).
  filter_sizes: per step, its filter slot's elements where that is not the
  product of its shape (a transposed step's phase filters), else None.
  """
  def up(x, m):
    return -(-x // m) * m

  steps, f_end, e_end = [], 0, 0
  if filter_sizes is None:
    filter_sizes = [None] * len(filter_shapes)
  for shape, per_channel, side, size in zip(filter_shapes, per_channel_scales,
                                            side_flags, filter_sizes):
    f_off = up(f_end, 64)
    f_end = f_off + (int(np.prod(shape)) if size is None else int(size))
    co = int(shape[3])
    bias = up(e_end, 16)
    scale = up(bias + co, 16)
    scale_size = co if per_channel else 1
    e_end = scale + scale_size
    side_scale = None
    if side:
      side_scale = up(e_end, 16)
      e_end = side_scale + 1
    steps.append(dict(filter=f_off, bias=bias, scale=scale,
                      scale_size=scale_size, side_scale=side_scale))
  return steps, f_end, e_end


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class QuantizedConvSequence(_EagerCall, keras.layers.Layer):
  """Several QuantizedFusedConv2D layers as one layer and one graph node.

  ``QuantizedConvSequence(convs, input_sources, side_sources)(x)``
  computes, in order, ``out[k] = convs[k - 1](src(input_sources[k - 1]),
  side_input=src(side_sources[k - 1]))`` with ``src(0) = x``, ``src(j) =
  out[j]`` (an earlier layer's output) and no side input where
  ``side_sources`` is -1, and returns the last layer's output: exactly the
  bits of calling the layers one by one. It exists for speed: one
  ResourceFusedInt8ConvSequence op instead of one op per layer (an eager
  Keras call of a quantized MobileNetV2, 52 convolutions: 13.3 -> 4.3 ms),
  and two weights instead of three or four per layer (a ``tf.function``
  captures every variable it reads, and pays for each capture on every
  call). ``quantization.fuse_conv_sequences`` builds these from a quantized
  model.

  The layer holds the convolutions' configs, not the layers: its weights
  are two vectors, ``filters`` (int8, every kernel) and ``epilogue``
  (float32: every bias, conv_input_scale and side_input_scale), laid out
  as ``conv_sequence_layout`` says. ``conv_weights(k)`` gives layer k's
  weights back (``QuantizedFusedConv2D.get_weights()``'s list), and
  ``set_conv_weights(k, weights)`` sets them. Where a weight is not a CPU
  resource variable (e.g. placed on a GPU) the steps run as single ops.

  Args:
    convs: QuantizedFusedConv2D layers (not QuantizedDense; an
      ``output_lut`` runs in the step) or their configs; built layers'
      weights are copied. An entry ``{"channel_scale": {"channels": C,
      "gate_scale": s, "ratio": r}}`` is a channel scale step instead: its
      input [N, H, W, C] times ``(float32(gate) * s) * r`` per image and
      channel, rounded and clipped, with the int8 gate [N, 1, 1, C] as its
      side source (what a Dequantize of the gate and an
      ``Int8ChannelMultiply`` compute; ``fuse_conv_sequences`` makes them).
      An entry ``{"transposed": {"conv": c, "block": (s_h, s_w), "crop":
      (top, bottom, left, right), "rows": ((start, taps), ...), "cols":
      ((start, taps), ...)}}`` is a transposed convolution: the sub-pixel
      QuantizedFusedConv2D ``c`` (stride, dilation and groups 1, explicit
      padding, no side input, ``s_h * s_w * Co`` filters, phase (r_h, r_w)
      in channels ``(r_h * s_w + r_w) * Co ..``), its output put through a
      depth-to-space of ``s_h x s_w`` and cropped, each phase computed
      from the kernel rows ``rows[r_h]`` and columns ``cols[r_w]`` only
      (its kernel must be zero outside them; ``conv_weights`` gives the
      sub-pixel kernel). What quantize_model's ``Conv2DTranspose`` layers
      (``c``, an ``Int8DepthToSpace`` and an ``Int8Cropping2D``) compute,
      with only the taps each phase reads multiplied (a 3x3 stride-2 kernel:
      9 of the sub-pixel form's 16; ``fuse_conv_sequences`` makes them).
    input_sources: per layer, 0 (the sequence's input) or k >= 1 (the output
      of ``convs[k - 1]``, an earlier layer).
    side_sources: per layer, -1 (no side input; the layer must have
      ``use_side_input=False``) or a source as above (``use_side_input``).
  """

  def __init__(self, convs, input_sources, side_sources, **kwargs):
    kwargs.pop("trainable", None)
    super().__init__(trainable=False, **kwargs)
    input_sources = [int(v) for v in input_sources]
    side_sources = [int(v) for v in side_sources]
    if not convs:
      raise ValueError("QuantizedConvSequence needs at least one layer")
    if len(input_sources) != len(convs) or len(side_sources) != len(convs):
      raise ValueError(
          f"QuantizedConvSequence: input_sources and side_sources need one "
          f"entry per layer ({len(convs)}), got {len(input_sources)} and "
          f"{len(side_sources)}")
    configs, pending = [], []
    for k, conv in enumerate(convs):
      if _is_channel_scale(conv):
        step = _channel_scale_step(conv, k)
        src, side = input_sources[k], side_sources[k]
        if not 0 <= src <= k or not 0 <= side <= k:
          raise ValueError(
              f"QuantizedConvSequence: convs[{k}] is a channel scale: its "
              f"input_sources and side_sources (the gate) must be 0 or an "
              f"earlier layer's output (1..{k}), got {src} and {side}")
        configs.append({"channel_scale": step})
        c = step["channels"]
        pending.append([np.zeros((1, 1, 1, c), np.int8), np.zeros(c, np.float32),
                        np.float32(step["gate_scale"]), np.float32(step["ratio"])])
        continue
      phases = None
      if _is_transposed(conv):
        conv, phases = _transposed_step(conv, k)
      if isinstance(conv, dict):
        conv = QuantizedFusedConv2D.from_config(conv)
      if type(conv) is not QuantizedFusedConv2D:  # pylint: disable=unidiomatic-typecheck
        raise ValueError(
            f"QuantizedConvSequence: convs[{k}] must be a QuantizedFusedConv2D, "
            f"got {type(conv).__name__}")
      src, side = input_sources[k], side_sources[k]
      if not 0 <= src <= k:
        raise ValueError(
            f"QuantizedConvSequence: input_sources[{k}] must be 0 (the input) "
            f"or an earlier layer's output (1..{k}), got {src}")
      if not -1 <= side <= k:
        raise ValueError(
            f"QuantizedConvSequence: side_sources[{k}] must be -1 (none), 0 or "
            f"an earlier layer's output (1..{k}), got {side}")
      if (side >= 0) != conv.use_side_input:
        raise ValueError(
            f"QuantizedConvSequence: side_sources[{k}] is {side} but "
            f"convs[{k}] ('{conv.name}') has use_side_input="
            f"{conv.use_side_input}")
      if phases is not None:
        bh, bw = phases["block"]
        if (side >= 0 or conv.strides != (1, 1) or conv.dilation_rate != (1, 1) or
            conv.groups != 1 or isinstance(conv.padding, str) or
            conv.filters % (bh * bw)):
          raise ValueError(
              f"QuantizedConvSequence: convs[{k}] is a transposed convolution: "
              f"its sub-pixel conv needs no side input, strides, dilation_rate "
              f"and groups 1, explicit padding and filters a multiple of the "
              f"{bh * bw} phases, got side source {side}, strides "
              f"{conv.strides}, dilation_rate {conv.dilation_rate}, groups "
              f"{conv.groups}, padding {conv.padding!r}, filters {conv.filters}")
        configs.append({"transposed": dict(conv=conv.get_config(), **phases)})
      else:
        configs.append(conv.get_config())
      pending.append(conv.get_weights() if conv.built else None)
    self.conv_configs = configs
    self.input_sources = input_sources
    self.side_sources = side_sources
    self._pending = pending
    self.supports_jit = False
    self._layout = None

  def _templates(self):
    """Unbuilt QuantizedFusedConv2D twins (shapes and attrs only); a channel
    scale's is a 1x1 depthwise conv with a side input (the op's encoding of
    it: the same attrs and weight slots)."""
    out = []
    for c in self.conv_configs:
      if _is_channel_scale(c):
        n = c["channel_scale"]["channels"]
        out.append(QuantizedFusedConv2D(n, 1, groups=n, use_side_input=True,
                                        per_channel_scale=False))
      else:
        out.append(QuantizedFusedConv2D.from_config(_conv_config(c)))
    return out

  def _shapes(self, input_shape, templates):
    """The sources' shapes: the input's, then each layer's output."""
    shapes = [tuple(input_shape)]
    for k, (conv, src, side) in enumerate(zip(templates, self.input_sources,
                                              self.side_sources)):
      if _is_channel_scale(self.conv_configs[k]):
        shapes.append(_channel_scale_shape(self.name, k, conv.filters,
                                           shapes[src], shapes[side]))
        continue
      out = conv.compute_output_shape(shapes[src])
      if _is_transposed(self.conv_configs[k]):
        t = self.conv_configs[k]["transposed"]
        (bh, bw), (top, bottom, left, right) = t["block"], t["crop"]
        h = None if out[1] is None else out[1] * bh - top - bottom
        w = None if out[2] is None else out[2] * bw - left - right
        if (h is not None and h < 0) or (w is not None and w < 0):
          raise ValueError(
              f"QuantizedConvSequence '{self.name}': step {k}'s crop {t['crop']} "
              f"is larger than its {out[1] * bh} x {out[2] * bw} phases")
        out = (out[0], h, w, out[3] // (bh * bw))
      if side >= 0:
        out = conv._side_shape(out, shapes[side])  # pylint: disable=protected-access
      shapes.append(tuple(out))
    return shapes

  def build(self, input_shape):
    templates = self._templates()
    shapes = self._shapes(input_shape, templates)
    filter_shapes = []
    for k, (conv, src) in enumerate(zip(templates, self.input_sources)):
      ci = shapes[src][3]
      if ci is None or ci % conv.groups:
        raise ValueError(
            f"QuantizedConvSequence '{self.name}': convs[{k}] ('{conv.name}') "
            f"needs a known input channel count that is a multiple of groups="
            f"{conv.groups}, got input shape {shapes[src]}")
      kh, kw = conv.kernel_size
      filter_shapes.append((kh, kw, ci // conv.groups, conv.filters))
      config = self.conv_configs[k]
      if _is_transposed(config):
        t = config["transposed"]
        if any(a + n > kh for a, n in t["rows"]) or any(
            a + n > kw for a, n in t["cols"]):
          raise ValueError(
              f"QuantizedConvSequence '{self.name}': step {k}'s phases read "
              f"rows {t['rows']} and columns {t['cols']} (start, taps) of a "
              f"{kh} x {kw} kernel: each must lie inside it")
    self.filter_shapes = filter_shapes
    phases = [c["transposed"] if _is_transposed(c) else None
              for c in self.conv_configs]
    self._layout, f_total, e_total = conv_sequence_layout(
        filter_shapes, [t.per_channel_scale for t in templates],
        [side >= 0 for side in self.side_sources],
        [None if t is None else _transposed_phase_boxes(shape, t)[1]
         for shape, t in zip(filter_shapes, phases)])
    # Each step's attrs, and the op's (flattened) attrs: once, not per call.
    self._steps = [
        dict(self._step_attrs(t), input_source=src, side_source=side,
             filter_shape=shape, per_channel_scale=t.per_channel_scale,
             kind=(1 if _is_channel_scale(config) else
                   2 if _is_transposed(config) else 0),
             transpose=(config["transposed"] if _is_transposed(config)
                        else None))
        for t, src, side, shape, config in zip(
            templates, self.input_sources, self.side_sources, filter_shapes,
            self.conv_configs)]
    self._op_attrs = ops_lib._conv_sequence_attrs(self._steps)  # pylint: disable=protected-access
    # The layers' weights (when they were built) as the initial values: a
    # build inside a tf.function's first trace creates the variables with
    # them (an assign there would be a graph op, not run at creation).
    f_init, e_init = "zeros", "zeros"
    if all(w is not None for w in self._pending):
      f = np.zeros(f_total, np.int8)
      e = np.zeros(e_total, np.float32)
      for k, w in enumerate(self._pending):
        self._pack_into(f, e, k, w)
      f_init = lambda shape, dtype=None: f  # pylint: disable=unnecessary-lambda-assignment
      e_init = lambda shape, dtype=None: e  # pylint: disable=unnecessary-lambda-assignment
    self._pending = None
    self.filters = self.add_weight(
        name="filters", shape=(f_total,), dtype="int8", initializer=f_init,
        trainable=False, autocast=False)
    self.epilogue = self.add_weight(
        name="epilogue", shape=(e_total,), dtype="float32",
        initializer=e_init, trainable=False, autocast=False)

  @staticmethod
  def _step_attrs(conv):
    pads = conv.explicit_paddings
    return dict(strides=conv.strides, dilations=conv.dilation_rate,
                padding=conv.op_padding,
                explicit_pads=tuple(pads[2:6]) if pads else (0, 0, 0, 0),
                activation_mode="None" if conv.activation is None else "Relu",
                output_min=conv.output_min,
                output_max=conv.effective_output_max(),
                output_lut=conv.output_lut)

  def _pack_into(self, f, e, k, w):
    """Writes layer k's weights `w` into the two weight vectors f, e."""
    l, shape = self._layout[k], tuple(self.filter_shapes[k])
    kernel = np.asarray(w[0])
    if kernel.shape != shape:
      raise ValueError(
          f"QuantizedConvSequence '{self.name}': convs[{k}]'s kernel must "
          f"have shape {shape}, got {kernel.shape}")
    config = self.conv_configs[k]
    if _is_transposed(config):
      # The phase filters, each from a multiple of 64 (zeros between); every
      # tap outside them must be zero (what the phases leave out).
      left = np.array(kernel, copy=True)
      boxes, _ = _transposed_phase_boxes(shape, config["transposed"])
      for _, rows, cols, chans, at in boxes:
        box = kernel[rows, cols, :, chans]
        f[l["filter"] + at:l["filter"] + at + box.size] = box.reshape(-1)
        left[rows, cols, :, chans] = 0
      if left.any():
        raise ValueError(
            f"QuantizedConvSequence '{self.name}': convs[{k}] is a transposed "
            f"convolution whose phases read rows {config['transposed']['rows']} "
            f"and columns {config['transposed']['cols']} of its kernel, but the "
            f"kernel is not zero outside them")
    else:
      f[l["filter"]:l["filter"] + kernel.size] = kernel.reshape(-1)
    co = shape[3]
    e[l["bias"]:l["bias"] + co] = np.asarray(w[1], np.float32).reshape(co)
    e[l["scale"]:l["scale"] + l["scale_size"]] = np.asarray(
        w[2], np.float32).reshape(l["scale_size"])
    if l["side_scale"] is not None:
      e[l["side_scale"]] = np.float32(w[3])

  def conv_weights(self, k):
    """convs[k]'s weights, as QuantizedFusedConv2D.get_weights() lists
    them: kernel, bias, conv_input_scale (and side_input_scale). (A channel
    scale step has none: its factors are in its config.)"""
    if _is_channel_scale(self.conv_configs[k]):
      raise ValueError(
          f"QuantizedConvSequence '{self.name}': step {k} is a channel scale "
          f"(no convolution weights; its factors are conv_configs[{k}])")
    if self._layout is None:
      raise ValueError(
          f"QuantizedConvSequence '{self.name}' is not built yet: call it on "
          f"an input (or build it) first")
    l, shape = self._layout[k], tuple(self.filter_shapes[k])
    f, e = self.filters.numpy(), self.epilogue.numpy()
    co = shape[3]
    scale = e[l["scale"]:l["scale"] + l["scale_size"]].copy()
    config = self.conv_configs[k]
    if _is_transposed(config):
      # The sub-pixel kernel: the phase filters in their boxes, zeros around.
      kernel = np.zeros(shape, np.int8)
      boxes, _ = _transposed_phase_boxes(shape, config["transposed"])
      for _, rows, cols, chans, at in boxes:
        box = kernel[rows, cols, :, chans]
        kernel[rows, cols, :, chans] = f[l["filter"] + at:
                                         l["filter"] + at + box.size].reshape(box.shape)
    else:
      kernel = f[l["filter"]:l["filter"] + int(np.prod(shape))].reshape(shape)
    out = [kernel, e[l["bias"]:l["bias"] + co].copy(),
           scale if _conv_config(config)["per_channel_scale"] else
           scale.reshape(())]
    if l["side_scale"] is not None:
      out.append(e[l["side_scale"]].copy())
    return out

  def set_conv_weights(self, k, weights):
    """Sets convs[k]'s weights (conv_weights(k)'s list)."""
    current = self.conv_weights(k)
    if len(weights) != len(current):
      raise ValueError(
          f"QuantizedConvSequence '{self.name}': convs[{k}] has "
          f"{len(current)} weights (kernel, bias, conv_input_scale"
          f"{', side_input_scale' if len(current) == 4 else ''}), got "
          f"{len(weights)}")
    kernel = np.asarray(weights[0])
    if (not np.issubdtype(kernel.dtype, np.integer) or
        (kernel.size and (kernel.min() < -128 or kernel.max() > 127))):
      raise ValueError(
          f"QuantizedConvSequence '{self.name}': convs[{k}]'s kernel must be "
          f"int8-valued integers, got dtype {kernel.dtype}")
    f, e = self.filters.numpy(), self.epilogue.numpy()
    self._pack_into(f, e, k, [kernel.astype(np.int8)] + list(weights[1:]))
    self.filters.assign(f)
    self.epilogue.assign(e)

  def compute_output_shape(self, input_shape):
    return self._shapes(input_shape, self._templates())[-1]

  def compute_output_spec(self, inputs):
    self._templates()[0]._check_dtype(inputs.dtype, shape=inputs.shape)  # pylint: disable=protected-access
    return keras.KerasTensor(self.compute_output_shape(inputs.shape),
                             dtype="int8")

  def call(self, inputs):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if inputs.dtype != tf.int8:
      self._templates()[0]._check_dtype(inputs.dtype, shape=inputs.shape)  # pylint: disable=protected-access
    filters, epilogue = self.filters.value, self.epilogue.value
    if (ops_lib._cpu_variable(filters, tf.int8) and  # pylint: disable=protected-access
        ops_lib._cpu_variable(epilogue, tf.float32)):  # pylint: disable=protected-access
      return ops_lib._conv_sequence(inputs, filters, epilogue,  # pylint: disable=protected-access
                                    self._op_attrs)
    # Single ops on slices of the two vectors.
    f, e = tf.convert_to_tensor(filters), tf.convert_to_tensor(epilogue)
    outs = [inputs]
    for step, l in zip(self._steps, self._layout):
      if step["kind"] == 1:
        # Dequantize's multiply, then Int8ChannelMultiply's (float32 each).
        gate = tf.cast(outs[step["side_source"]], tf.float32) * e[l["scale"]]
        outs.append(ops_lib.channel_scale_int8(outs[step["input_source"]],
                                               gate * e[l["side_scale"]]))
        continue
      shape = step["filter_shape"]
      if step["kind"] == 2:
        outs.append(self._transposed_ops(outs[step["input_source"]], step, l, f, e))
        continue
      size = int(np.prod(shape))
      co = shape[3]
      side = step["side_source"]
      pads = step["explicit_pads"]
      outs.append(ops_lib.fused_conv2d_bias_activation(
          outs[step["input_source"]],
          tf.reshape(f[l["filter"]:l["filter"] + size], shape),
          e[l["bias"]:l["bias"] + co],
          strides=step["strides"], padding=step["padding"],
          explicit_paddings=([0, 0, pads[0], pads[1], pads[2], pads[3], 0, 0]
                             if step["padding"] == "EXPLICIT" else []),
          conv_input_scale=e[l["scale"]:l["scale"] + l["scale_size"]],
          side_input_scale=(e[l["side_scale"]] if side >= 0 else 0.0),
          side_input=outs[side] if side >= 0 else None,
          activation_mode=step["activation_mode"],
          dilations=step["dilations"], output_min=step["output_min"],
          output_max=step["output_max"], output_lut=step["output_lut"]))
    return outs[-1]

  @staticmethod
  def _transposed_ops(x, step, l, f, e):
    """A transposed step as single ops (the fallback of call): each phase's
    convolution on its slice of the filter vector, with the padding its box
    leaves, then their depth-to-space and the crop (the same bits)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    t, shape = step["transpose"], step["filter_shape"]
    (bh, bw), (top, bottom, left, right) = t["block"], t["crop"]
    co = shape[3] // (bh * bw)
    pt, pb, pl, pr = step["explicit_pads"]
    scale = e[l["scale"]:l["scale"] + l["scale_size"]]
    phases = []
    for p, rows, cols, _, at in _transposed_phase_boxes(shape, t)[0]:
      n, m = rows.stop - rows.start, cols.stop - cols.start
      size = n * m * shape[2] * co
      phases.append(ops_lib.fused_conv2d_bias_activation(
          x, tf.reshape(f[l["filter"] + at:l["filter"] + at + size],
                        (n, m, shape[2], co)),
          e[l["bias"] + p * co:l["bias"] + (p + 1) * co],
          strides=(1, 1), padding="EXPLICIT",
          explicit_paddings=[0, 0, pt - rows.start, pb - (shape[0] - rows.stop),
                             pl - cols.start, pr - (shape[1] - cols.stop), 0, 0],
          conv_input_scale=(scale[p * co:(p + 1) * co] if l["scale_size"] != 1
                            else scale),
          activation_mode=step["activation_mode"],
          output_min=step["output_min"], output_max=step["output_max"],
          output_lut=step["output_lut"]))
    y = ops_lib.depth_to_space_int8(tf.concat(phases, axis=-1), (bh, bw))
    h, w = tf.shape(y)[1], tf.shape(y)[2]
    return y[:, top:h - bottom, left:w - right, :]

  def get_config(self):
    config = super().get_config()
    config.pop("trainable", None)
    config.update({
        "convs": [dict(c) for c in self.conv_configs],
        "input_sources": list(self.input_sources),
        "side_sources": list(self.side_sources),
    })
    return config
