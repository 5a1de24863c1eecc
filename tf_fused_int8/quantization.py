"""Post-training quantization of a float Keras CNN into QuantizedFusedConv2D.

    import tf_fused_int8
    from tf_fused_int8 import quantization

    qmodel = quantization.quantize_model(float_model, calibration_images)
    qmodel.save("model_int8.keras")          # or qmodel.export(...)

``quantize_model`` walks a functional (or Sequential) Keras model and
rewrites every convolution stack it can into one ``QuantizedFusedConv2D``:

* ``Conv2D`` (with or without bias, activation linear, relu or relu6, any
  ``groups``) and ``DepthwiseConv2D`` (any ``depth_multiplier`` M; it
  becomes a grouped convolution with ``groups`` = its input channels and the
  kernel [Kh, Kw, Ci, M] reshaped to [Kh, Kw, 1, Ci * M]);
* a ``ZeroPadding2D`` right before the convolution becomes the op's explicit
  padding;
* a following ``BatchNormalization`` over the channel axis is folded into the
  kernel and bias (in float64, before the kernel is quantized);
* a following ``ReLU`` layer (or ``Activation("relu")``) becomes the op's
  Relu, and a ReLU6 (``ReLU(max_value=6)``, ``Activation("relu6")`` or
  ``activation="relu6"``) the op's Relu with
  ``output_max = min(127, round(6 / s_out))``; likewise any clipped ReLU
  ``ReLU(max_value=m)``, m > 0 (no negative_slope or threshold), is the op's
  Relu with ``output_max = min(127, round(m / s_out))``;
* a following ``Activation`` layer with another element-wise activation
  (``swish`` / ``silu``, ``hard_swish`` / ``hard_silu``, ``sigmoid``,
  ``hard_sigmoid``, ``gelu``, ``tanh``, ``elu``, ``selu``, ``softplus``,
  ``softsign``, ``mish``, ``leaky_relu``) becomes the op's output lookup
  table: the epilogue quantizes the activation's input at its own
  calibrated scale s_pre, and ``output_lut = activation_lut(f, s_pre,
  s_out)`` maps each of those 256 int8 values to f of it at the
  activation's output scale (``tf_fused_int8.activation_lut``);
* a two-input ``Add`` of the (linear) conv stack and another tensor, the
  residual, maps that tensor to the op's side input, and a ``ReLU`` (ReLU6,
  clipped ReLU) or a table activation after the ``Add`` becomes the op's
  activation;
* likewise InceptionResNetV2's scaled residual (keras.applications'
  ``CustomScaleLayer``, ``x + r * scale``) where ``r`` is a linear conv
  stack read by that layer alone: ``x`` is the side input and the scale is
  folded into the stack's kernel and bias (in float64, before quantizing);
* a ``Conv2DTranspose`` (any strides s_h, s_w, output_padding, dilation 1)
  is a convolution with ceil(k / s) taps per phase to s_h * s_w * filters
  channels (bias, BN and activation per channel) followed by an
  ``Int8DepthToSpace`` of block s_h x s_w and, where the blocks overlap, an
  ``Int8Cropping2D`` to Keras's output (the sub-pixel form: exact); a
  kernel equal to the stride (a U-Net decoder's 2x2 / 2) is a 1x1
  convolution;
* 1-D models: ``Conv1D``, ``DepthwiseConv1D``, ``SeparableConv1D`` and
  ``Conv1DTranspose``, and the 1-D layers after them, run as the 2-D layers
  above on [N, 1, L, C] tensors (_lift_1d).

So ResNet blocks and MobileNetV2 inverted-residual blocks (1x1 expand +
ReLU6, depthwise + ReLU6, linear 1x1 project, residual ``Add``) quantize end
to end.

Consecutive fused convolutions pass int8 tensors to each other (an "int8
region"). A ``Quantize`` layer (float -> int8) is put where a float tensor
enters a region and a ``Dequantize`` layer (int8 -> float) where an int8
tensor leaves it (to a float layer or a model output). With ``dense=True``
(the default) Dense layers on int8 tensors run as ``QuantizedDense`` and
GlobalAveragePooling2D / Flatten of int8 tensors in int8 (an int8 classifier
head, as in TFLite's full-integer conversion). Everything else (float
pooling, softmax, ...) runs in float as before, on cloned layers with the
same weights. The quantized model has the float model's inputs and
outputs (float, same structure and names).

Quantization (symmetric, zero point 0, ``real ~= scale * q``):

* weights: per output channel, ``s_w[c] = max|w[..., c]| / 127``
  (``tf_fused_int8.layers.quantize_kernel``);
* activations: one scale per tensor, from calibration on the float model:
  ``s = max|x| / 127`` (``method="minmax"``) or ``s = P_p(|x|) / 127``
  (``method="percentile"``, ``P_p`` the ``percentile``-th percentile of |x|
  over all calibration values);
* ``conv_input_scale = s_in * s_w[c] / s_out``, ``side_input_scale = s_side /
  s_out``, ``bias = b / s_out`` (see docs/quantization.md for the
  derivation).

Layers the quantizer does not understand stay float, and a
``QuantizationWarning`` lists them (with the reason for convolutions and
batch normalizations that could not be quantized / folded). The result is
never silently different from the float model beyond quantization error.

Saving: ``Quantize`` and ``Dequantize`` are registered Keras layers
(``"tf_fused_int8>Quantize"``, ``"tf_fused_int8>Dequantize"``), so
``import tf_fused_int8`` before ``keras.models.load_model``; exported
SavedModels need ``import tf_fused_int8`` before ``tf.saved_model.load``
(for the op), like any model with ``QuantizedFusedConv2D``.
"""

import collections
import itertools
import math
import warnings

import keras
import numpy as np
import tensorflow as tf

from tf_fused_int8 import ops
from tf_fused_int8.layers import _EagerCall
from tf_fused_int8.layers import _reshape
from tf_fused_int8.layers import QuantizedConvSequence
from tf_fused_int8.layers import QuantizedDense
from tf_fused_int8.layers import QuantizedFusedConv2D
from tf_fused_int8.layers import depthwise_to_grouped_kernel
from tf_fused_int8.quantized_model import QuantizedModel

__all__ = [
    "Dequantize",
    "Quantize",
    "QuantizationWarning",
    "QuantizedModel",
    "calibrate",
    "fold_batch_norm",
    "fuse_conv_sequences",
    "quantize_model",
]

_METHODS = ("minmax", "percentile")
_HIST_BINS = 2048


class QuantizationWarning(UserWarning):
  """Part of a model stays float (listed in the message)."""


# ----------------------------------------------------------------- layers

def _check_scale(scale, what):
  try:
    s = float(scale)
  except (TypeError, ValueError):
    raise ValueError(f"{what} must be a positive finite number, got "
                     f"{scale!r}") from None
  s32 = float(np.float32(s))
  if not (math.isfinite(s32) and s32 > 0):
    raise ValueError(f"{what} must be a positive finite float32 number, got "
                     f"{scale!r}")
  return s32


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Quantize(_EagerCall, keras.layers.Layer):
  """float -> int8: ``q = clip(round_half_to_even(x / scale), -128, 127)``.

  ``x`` is cast to float32 first; ``scale`` is a float32 number (the real
  value of one int8 step). NaN gives 0, +-Inf gives 127 / -128. The output
  has the input's shape and dtype int8 (what ``QuantizedFusedConv2D``
  takes).

  ``preprocess`` (optional): elementwise float32 steps applied to x before
  the division, in the same op (``tf_fused_int8.quantize_to_int8``'s
  argument: (op, values) pairs, op "mul", "add", "sub" or "div", values one
  number or one per channel of the last axis). ``quantize_model`` puts a
  model's Keras ``Rescaling`` and ``Normalization`` layers that feed its
  first Quantize here, with the same bits as those layers computing in TF.
  """

  def __init__(self, scale, preprocess=None, **kwargs):
    kwargs.pop("trainable", None)
    # float32 whatever the global dtype policy (no autocast to float16).
    kwargs.setdefault("dtype", "float32")
    super().__init__(trainable=False, **kwargs)
    self.scale = _check_scale(scale, "Quantize scale")
    self.preprocess = None
    if preprocess:
      pre_ops, sizes, values, _ = ops._preprocess_attrs(preprocess)  # pylint: disable=protected-access
      steps, at = [], 0
      for op, size in zip(pre_ops, sizes):
        steps.append((op, tuple(values[at:at + size])))
        at += size
      self.preprocess = tuple(steps)

  def call(self, inputs):
    # One op (FusedInt8Quantize), one pass: the same bits as
    # tf.round(x / scale), clipped, cast and NaN -> 0, which as six TF
    # elementwise ops took 0.2 ms of a quantized MobileNetV2's 4.2 ms at
    # batch 1 (224x224x3 input, 1 thread, Zen 4; this op 0.05 ms).
    return ops.quantize_to_int8(inputs, self.scale, preprocess=self.preprocess)

  def compute_output_shape(self, input_shape):
    return tuple(input_shape)

  def compute_output_spec(self, inputs):
    return keras.KerasTensor(inputs.shape, dtype="int8")

  def get_config(self):
    config = super().get_config()
    config.pop("trainable", None)
    config["scale"] = self.scale
    if self.preprocess:
      config["preprocess"] = [[op, list(values)] for op, values in self.preprocess]
    return config


class _Int8ScaledLayer(_EagerCall, keras.layers.Layer):
  """An inference-only float32-policy layer from an int8 tensor at
  `input_scale` to an int8 tensor at `output_scale` (both checked, both in
  its config)."""

  def __init__(self, input_scale, output_scale, **kwargs):
    kwargs.pop("trainable", None)
    kwargs.setdefault("dtype", "float32")
    super().__init__(trainable=False, **kwargs)
    cls = type(self).__name__
    self.input_scale = _check_scale(input_scale, f"{cls} input_scale")
    self.output_scale = _check_scale(output_scale, f"{cls} output_scale")

  def compute_output_shape(self, input_shape):
    return tuple(input_shape)

  def get_config(self):
    config = super().get_config()
    config.pop("trainable", None)
    config["input_scale"] = self.input_scale
    config["output_scale"] = self.output_scale
    return config


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8ChannelMultiply(_Int8ScaledLayer):
  """An int8 tensor times a float gate per image and channel, in int8.

  ``layer([x, gate])``: x int8 [N, H, W, C] at scale ``input_scale``, gate
  float [N, 1, 1, C] (a squeeze-excite gate); the output is int8 at
  ``output_scale``::

      m = float32(gate) * float32(input_scale / output_scale)
      out = clip(round_half_to_even(float32(x) * m), -128, 127)   # NaN -> 0

  (two float32 multiplies, each correctly rounded; the second in the op
  FusedInt8ChannelScale, ``ops.channel_scale_int8``).
  """

  def __init__(self, input_scale, output_scale, **kwargs):
    super().__init__(input_scale, output_scale, **kwargs)
    self.ratio = float(np.float32(self.input_scale / self.output_scale))

  def call(self, inputs):
    x, gate = inputs
    m = tf.cast(gate, tf.float32) * tf.constant(self.ratio, tf.float32)
    return ops.channel_scale_int8(x, m)

  def compute_output_shape(self, input_shape):
    return tuple(input_shape[0])

  def compute_output_spec(self, inputs):
    return keras.KerasTensor(inputs[0].shape, dtype="int8")


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8LayerNormalization(_Int8ScaledLayer):
  """Keras's ``LayerNormalization(axis=-1)`` of an int8 tensor, to int8.

  x int8 [..., C] at scale ``input_scale``; the output is int8 at
  ``output_scale``. Per row of C values (the op FusedInt8LayerNorm,
  ``ops.layer_norm_int8``: exact integer sums, one float64 reciprocal square
  root per row, then float32 per element)::

      out = clip(round_half_to_even(fmaf((C q - S1) r, gamma', beta')))

  with ``r = 1 / sqrt(C * S2 - S1^2 + epsilon' C^2)``, ``epsilon' =
  float32(epsilon / input_scale^2)``, and the weights ``gamma`` and ``beta``
  held in output steps: ``gamma' = float32(gamma_k / output_scale)``,
  ``beta' = float32(beta_k / output_scale)`` of the float layer's
  ``gamma_k`` / ``beta_k`` (``from_float_weights``).
  """

  def __init__(self, input_scale, output_scale, epsilon=1e-3, **kwargs):
    super().__init__(input_scale, output_scale, **kwargs)
    epsilon = float(epsilon)
    if not (math.isfinite(epsilon) and epsilon >= 0):
      raise ValueError(f"Int8LayerNormalization: epsilon must be finite and "
                       f">= 0, got {epsilon}")
    self.epsilon = epsilon
    steps = epsilon / self.input_scale ** 2
    if not steps <= float(np.finfo(np.float32).max):
      raise ValueError(
          f"Int8LayerNormalization: epsilon / input_scale^2 = "
          f"{steps} does not fit in float32")
    self.epsilon_steps = float(np.float32(steps))

  def build(self, input_shape):
    c = input_shape[-1]
    if c is None:
      raise ValueError("Int8LayerNormalization: the last dimension of the "
                       f"input must be known, got {tuple(input_shape)}")
    self.gamma = self.add_weight(name="gamma", shape=(c,), initializer="ones",
                                 trainable=False)
    self.beta = self.add_weight(name="beta", shape=(c,), initializer="zeros",
                                trainable=False)

  @classmethod
  def from_float_weights(cls, gamma, beta, channels, *, input_scale,
                         output_scale, epsilon, name=None):
    """The layer of a float LayerNormalization's gamma / beta (None: its
    `scale` / `center` is off), built for C = channels."""
    layer = cls(input_scale, output_scale, epsilon=epsilon, name=name)
    layer.build((None, channels))
    s_out = layer.output_scale
    g = np.ones(channels) if gamma is None else np.asarray(gamma, np.float64)
    b = np.zeros(channels) if beta is None else np.asarray(beta, np.float64)
    layer.gamma.assign((g / s_out).astype(np.float32))
    layer.beta.assign((b / s_out).astype(np.float32))
    return layer

  def call(self, inputs):
    return ops.layer_norm_int8(inputs, self.gamma, self.beta,
                               epsilon=self.epsilon_steps)

  def compute_output_spec(self, inputs):
    return keras.KerasTensor(inputs.shape, dtype="int8")

  def get_config(self):
    config = super().get_config()
    config["epsilon"] = self.epsilon
    return config


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Dequantize(_EagerCall, keras.layers.Layer):
  """int8 -> float32: ``x = float32(q) * scale`` (exact for int8 q)."""

  def __init__(self, scale, **kwargs):
    kwargs.pop("trainable", None)
    # float32 whatever the global dtype policy (no autocast to float16).
    kwargs.setdefault("dtype", "float32")
    super().__init__(trainable=False, **kwargs)
    self.scale = _check_scale(scale, "Dequantize scale")

  def call(self, inputs):
    return tf.cast(inputs, tf.float32) * tf.constant(self.scale, tf.float32)

  def compute_output_shape(self, input_shape):
    return tuple(input_shape)

  def compute_output_spec(self, inputs):
    return keras.KerasTensor(inputs.shape, dtype="float32")

  def get_config(self):
    config = super().get_config()
    config.pop("trainable", None)
    config["scale"] = self.scale
    return config


# ------------------------------------------------------------ BN folding

def fold_batch_norm(kernel, bias, gamma, beta, moving_mean, moving_variance,
                    epsilon):
  """Folds inference-mode batch normalization into the preceding conv.

  ``BN(conv(x, W) + b) = conv(x, W * f) + (b - mean) * f + beta`` with
  ``f = gamma / sqrt(var + epsilon)`` per output channel. ``kernel`` is HWIO
  (or anything whose last axis is the output channel), ``bias``, ``gamma``,
  ``beta`` may be None (zeros / ones / zeros). Returns ``(kernel, bias)`` in
  float64.
  """
  w = np.asarray(kernel, np.float64)
  co = w.shape[-1]

  def vec(v, default):
    return (np.full([co], default, np.float64) if v is None else
            np.asarray(v, np.float64).reshape([co]))

  b = vec(bias, 0.0)
  factor = vec(gamma, 1.0) / np.sqrt(vec(moving_variance, 1.0) +
                                     float(epsilon))
  return w * factor, (b - vec(moving_mean, 0.0)) * factor + vec(beta, 0.0)


# ----------------------------------------------------------------- graph

def _functional(model):
  """The functional graph of `model` (Sequential models are converted)."""
  if isinstance(model, keras.Sequential):
    if not model.built or not model.inputs:
      raise ValueError(
          "quantize_model needs a Sequential model that starts with "
          "keras.Input(...) (or is built), so that it has a graph")
    return keras.Model(model.inputs[0], model.outputs[0], name=model.name)
  if not isinstance(model, keras.Model) or not hasattr(model,
                                                       "_nodes_by_depth"):
    raise ValueError(
        f"quantize_model needs a functional or Sequential Keras model, got "
        f"{type(model).__name__}: a subclassed model has no graph to rewrite")
  return model


def _new_inputs(model, tensor_of):
  """keras.Input twins of the model's inputs (same structure, shapes,
  dtypes and names), recorded in tensor_of[id(old)]."""

  def new_input(t):
    layer = t._keras_history.operation  # pylint: disable=protected-access
    x = keras.Input(batch_shape=t.shape, dtype=t.dtype, sparse=t.sparse,
                    name=layer.name)
    tensor_of[id(t)] = x
    return x

  return keras.tree.map_structure(new_input, model.input)


def _call_float_copy(node, clones, tensor_of, values):
  """Calls the copy of the node's layer (made on its first call, weights set
  after it is built; clones[id(layer)]) on `values` ({id(old input): new
  tensor}) and records its outputs in tensor_of."""
  op = node.operation
  first_call = id(op) not in clones
  if first_call:
    clones[id(op)] = _clone_layer(op)
  new_op = clones[id(op)]
  args, kwargs = node.arguments.fill_in(values)
  outputs = new_op(*args, **kwargs)
  if first_call and new_op is not op and isinstance(op, keras.layers.Layer):
    new_op.set_weights(op.get_weights())
  for t, y in zip(node.outputs, keras.tree.flatten(outputs)):
    tensor_of[id(t)] = y


def _separable_ok(node):
  """Whether a SeparableConv2D node can be split into its depthwise and
  pointwise convolutions: channels_last, float32, called on one NHWC
  tensor with known channels."""
  op = node.operation
  x = _single_tensor_call(node)
  return (x is not None and _rank4_channels(x) and
          op.data_format == "channels_last" and _float_dtype_ok(op))


def _own_lut_activation(op):
  """The name of a Conv2D / DepthwiseConv2D / Conv2DTranspose / Dense layer's
  own activation when it is one of _LUT_ACTIVATIONS (SiLU, sigmoid,
  hard-swish, GELU, tanh: a GAN generator's last layer, ...), else None."""
  if type(op) not in (keras.layers.Conv2D, keras.layers.DepthwiseConv2D,  # pylint: disable=unidiomatic-typecheck
                      keras.layers.Dense, keras.layers.SeparableConv2D,
                      keras.layers.Conv2DTranspose):
    return None
  return _table_activation_name(op.activation)


def _nested_sequential(node):
  """The layers of a built keras.Sequential called as a layer on one tensor
  (ConvNeXt's stem and downsampling blocks), when each is a plain layer
  (not itself a model), else None."""
  op = node.operation
  if (not isinstance(op, keras.Sequential) or not op.built or
      _single_tensor_call(node) is None or len(node.outputs) != 1):
    return None
  layers = [l for l in op.layers if not isinstance(l, keras.layers.InputLayer)]
  if not layers or any(isinstance(l, keras.Model) for l in layers):
    return None
  return layers


def _split_layers(model):
  """`model` with each nested Sequential's layers called in its place (the
  stem and downsampling blocks of ConvNeXt), each SeparableConv2D written as
  the DepthwiseConv2D and
  1x1 Conv2D it computes, and each Conv2D / DepthwiseConv2D / Dense /
  SeparableConv2D with its own table activation (SiLU, sigmoid, hard-swish,
  GELU, ...: the squeeze-excite convolutions of EfficientNet) as the layer
  without it followed by an Activation layer (a float model with the same
  weights; the same model when there is nothing to split).

  The depthwise part, ``<name>_depthwise`` (depth_multiplier, strides,
  padding, dilation of the SeparableConv2D, no bias), feeds the pointwise
  part, a 1x1 Conv2D that keeps the layer's name, its bias and its
  activation. A split activation is ``<name>_activation``; the layer keeps
  its name, so its quantized form does too, and the Activation then becomes
  its output lookup table (_Plan). The new intermediate tensors get keys of
  their own to calibrate. Every layer is a copy (same config and weights):
  the user's layers gain no nodes. The float result equals the original's
  up to float summation order (the same products, and the activation
  applied to the same pre-activation values)."""
  nodes = [n for d in sorted(model._nodes_by_depth, reverse=True)  # pylint: disable=protected-access
           for n in model._nodes_by_depth[d]]  # pylint: disable=protected-access
  separable = {id(n) for n in nodes if not n.is_input and
               type(n.operation) is keras.layers.SeparableConv2D and  # pylint: disable=unidiomatic-typecheck
               _separable_ok(n)}
  own_act = {id(n) for n in nodes if not n.is_input and
             _own_lut_activation(n.operation) is not None and
             _single_tensor_call(n) is not None and
             _float_dtype_ok(n.operation) and
             (type(n.operation) is not keras.layers.SeparableConv2D or  # pylint: disable=unidiomatic-typecheck
              id(n) in separable)}
  nested = {id(n) for n in nodes if not n.is_input and
            _nested_sequential(n) is not None}
  if not separable and not own_act and not nested:
    return model
  names = _UniqueNames(l.name for l in model.layers)
  new_of, clones = {}, {}
  inputs = _new_inputs(model, new_of)
  for node in nodes:
    if node.is_input:
      continue
    op = node.operation
    if id(node) in nested:
      # The nested Sequential's layers, called one after the other on
      # copies (each copy made once: a Sequential called twice shares them).
      y = new_of[id(node.input_tensors[0])]
      for inner in _nested_sequential(node):
        first_call = id(inner) not in clones
        if first_call:
          config = inner.get_config()
          config["name"] = names(inner.name)
          clones[id(inner)] = type(inner).from_config(config)
        y = clones[id(inner)](y)
        if first_call:
          clones[id(inner)].set_weights(inner.get_weights())
      new_of[id(node.outputs[0])] = y
      continue
    if id(node) not in separable and id(node) not in own_act:
      _call_float_copy(node, clones, new_of,
                       {id(t): new_of[id(t)] for t in node.input_tensors})
      continue
    first_call = id(op) not in clones
    act = _own_lut_activation(op) if id(node) in own_act else None
    if first_call:
      if id(node) in separable:
        dw = keras.layers.DepthwiseConv2D(
            op.kernel_size, strides=op.strides, padding=op.padding,
            depth_multiplier=op.depth_multiplier,
            dilation_rate=op.dilation_rate, use_bias=False,
            dtype=op.dtype_policy, name=names(f"{op.name}_depthwise"))
        main = keras.layers.Conv2D(
            op.filters, 1, activation=None if act else op.activation,
            use_bias=op.use_bias, dtype=op.dtype_policy, name=op.name)
      else:
        dw = None
        config = op.get_config()
        config["activation"] = "linear"
        main = type(op).from_config(config)
      activation = (keras.layers.Activation(
          act, dtype=op.dtype_policy, name=names(f"{op.name}_activation"))
                    if act else None)
      clones[id(op)] = (dw, main, activation)
    dw, main, activation = clones[id(op)]
    y = new_of[id(node.input_tensors[0])]
    if dw is not None:
      y = dw(y)
    y = main(y)
    if first_call:
      if dw is not None:
        dw.set_weights([op.depthwise_kernel.numpy()])
        main.set_weights([op.pointwise_kernel.numpy()] +
                         ([op.bias.numpy()] if op.use_bias else []))
      else:
        main.set_weights(op.get_weights())
    if activation is not None:
      y = activation(y)
    new_of[id(node.outputs[0])] = y
  outputs = keras.tree.map_structure(lambda t: new_of[id(t)], model.output)
  return keras.Model(inputs, outputs, name=model.name)


# ------------------------------------------------------- 1-D models as 2-D

# A 1-D layer of [N, L, C] tensors and the 2-D layer(s) that compute it on
# their [N, 1, L, C] form (kernels and windows 1 x k, strides 1 x s): the
# convolutions start a lifted stretch; the layers below join it where one of
# their inputs is lifted already.
_CONV1D_TYPES = (keras.layers.Conv1D, keras.layers.DepthwiseConv1D,
                 keras.layers.SeparableConv1D, keras.layers.Conv1DTranspose)
# Layers that work on any rank the same way along the last axis (their copy
# runs on the lifted tensor as it is).
_RANK_FREE_TYPES = (keras.layers.ReLU, keras.layers.Activation,
                    keras.layers.Dropout, keras.layers.Identity,
                    keras.layers.Dense, keras.layers.Flatten)


def _lift_tensor_ok(t):
  return len(t.shape) == 3 and t.shape[-1] is not None and t.dtype == "float32"


def _lift_plan(node):
  """How a node of a 1-D model runs on the [N, 1, L, C] form of its rank-3
  float inputs: (make, conv) with make(names) -> (layers, set_weights), the
  2-D layers to call in order and the function that copies the node's
  weights into them once called; conv says whether the node starts a lifted
  stretch (a convolution) or only joins one. None where it cannot."""
  op = node.operation
  if not isinstance(op, keras.layers.Layer) or not _float_dtype_ok(op):
    return None
  if not node.input_tensors or not all(_lift_tensor_ok(t)
                                       for t in node.input_tensors):
    return None
  kind = type(op)
  merge = kind in (keras.layers.Add, keras.layers.Concatenate)
  if merge:
    if _merge_call_inputs(node) is None:
      return None
    if kind is keras.layers.Concatenate and op.axis not in (-1, 2):
      return None
  elif _single_tensor_call(node) is None:
    return None
  if getattr(op, "data_format", "channels_last") != "channels_last":
    return None
  dtype = op.dtype_policy

  if kind in _CONV1D_TYPES:
    (k,), (s,), (d,) = op.kernel_size, op.strides, op.dilation_rate
    causal = op.padding == "causal"  # Conv1D only
    common = dict(strides=(1, s), padding="valid" if causal else op.padding,
                  dilation_rate=(1, d), activation=op.activation,
                  use_bias=op.use_bias, dtype=dtype, name=op.name)
    if kind is keras.layers.Conv1D:
      conv = lambda: keras.layers.Conv2D(op.filters, (1, k), groups=op.groups,  # pylint: disable=unnecessary-lambda-assignment
                                         **common)
      kernels = [op.kernel]
    elif kind is keras.layers.DepthwiseConv1D:
      conv = lambda: keras.layers.DepthwiseConv2D(  # pylint: disable=unnecessary-lambda-assignment
          (1, k), depth_multiplier=op.depth_multiplier, **common)
      kernels = [op.kernel]
    elif kind is keras.layers.SeparableConv1D:
      conv = lambda: keras.layers.SeparableConv2D(  # pylint: disable=unnecessary-lambda-assignment
          op.filters, (1, k), depth_multiplier=op.depth_multiplier, **common)
      kernels = [op.depthwise_kernel, op.pointwise_kernel]
    else:  # Conv1DTranspose: its kernel [k, Co, Ci] as [1, k, Co, Ci]
      conv = lambda: keras.layers.Conv2DTranspose(  # pylint: disable=unnecessary-lambda-assignment
          op.filters, (1, k), output_padding=(
              None if op.output_padding is None else (0, op.output_padding[0])),
          **common)
      kernels = [op.kernel]

    def make_conv(names):
      layers = []
      if causal:  # zeros before the sequence, then valid
        layers.append(keras.layers.ZeroPadding2D(
            ((0, 0), ((k - 1) * d, 0)), dtype=dtype,
            name=names(f"{op.name}_causal_padding")))
      layers.append(conv())
      # Each kernel [k, ...] as [1, k, ...]; the bias as it is.
      return layers, lambda: layers[-1].set_weights(
          [np.expand_dims(w.numpy(), 0) for w in kernels] +
          ([op.bias.numpy()] if op.use_bias else []))
    return make_conv, True

  def one(layer_fn, weights=False):
    def make(names):
      del names
      layer = layer_fn()
      return [layer], ((lambda: layer.set_weights(op.get_weights()))
                       if weights else (lambda: None))
    return make, False

  if kind is keras.layers.BatchNormalization:
    if op.axis not in (-1, 2):
      return None
    config = op.get_config()
    config["axis"] = -1
    return one(lambda: keras.layers.BatchNormalization.from_config(config),
               weights=True)
  if kind is keras.layers.LayerNormalization:
    if list(op.axis) not in ([-1], [2]):
      return None
    config = op.get_config()
    config["axis"] = -1
    return one(lambda: keras.layers.LayerNormalization.from_config(config),
               weights=True)
  if kind in (keras.layers.MaxPooling1D, keras.layers.AveragePooling1D):
    cls = (keras.layers.MaxPooling2D if kind is keras.layers.MaxPooling1D
           else keras.layers.AveragePooling2D)
    (p,), (s,) = op.pool_size, op.strides
    return one(lambda: cls((1, p), strides=(1, s), padding=op.padding,
                           dtype=dtype, name=op.name))
  if kind in (keras.layers.GlobalAveragePooling1D,
              keras.layers.GlobalMaxPooling1D):
    cls = (keras.layers.GlobalAveragePooling2D
           if kind is keras.layers.GlobalAveragePooling1D
           else keras.layers.GlobalMaxPooling2D)
    return one(lambda: cls(keepdims=op.keepdims, dtype=dtype, name=op.name))
  if kind is keras.layers.ZeroPadding1D:
    return one(lambda: keras.layers.ZeroPadding2D(
        ((0, 0), tuple(op.padding)), dtype=dtype, name=op.name))
  if kind is keras.layers.Cropping1D:
    return one(lambda: keras.layers.Cropping2D(
        ((0, 0), tuple(op.cropping)), dtype=dtype, name=op.name))
  if kind is keras.layers.UpSampling1D:
    return one(lambda: keras.layers.UpSampling2D(
        (1, op.size), dtype=dtype, name=op.name))
  if kind is keras.layers.SpatialDropout1D:
    # SpatialDropout2D drops whole channels over H = 1 and W = L: the same.
    return one(lambda: keras.layers.SpatialDropout2D(
        op.rate, seed=op.seed, dtype=dtype, name=op.name))
  if kind is keras.layers.Concatenate:
    return one(lambda: keras.layers.Concatenate(axis=-1, dtype=dtype,
                                                name=op.name))
  if kind is keras.layers.Add or kind in _RANK_FREE_TYPES:
    return one(lambda: _clone_layer(op), weights=bool(op.weights))
  return None


def _lift_1d(model):
  """`model` with its 1-D convolutions (Conv1D, DepthwiseConv1D,
  SeparableConv1D, Conv1DTranspose, channels last) run as 2-D ones on
  [N, 1, L, C] tensors, and the 1-D layers after them on that form too
  (BatchNormalization, LayerNormalization over the channels, ReLU and other
  element-wise layers, Dense, Add, Concatenate, pooling, padding, cropping,
  nearest upsampling, Flatten), so quantize_model plans them as it plans an
  image model's: a Conv1D with kernel k, stride s and dilation d is a Conv2D
  with kernel 1 x k, strides 1 x s and dilation 1 x d (its kernel [k, Ci,
  Co] as [1, k, Ci, Co]; a Conv1DTranspose a Conv2DTranspose with strides
  1 x s and output_padding (0, p)); padding "causal" is a ZeroPadding2D of
  (k - 1) d columns on the left, then "valid". A Reshape to [N, 1, L, C]
  enters each lifted stretch and one back to [N, L, C] leaves it for any
  other layer and at the model's outputs. The lifted layers keep their
  names (calibration keys, messages); the float results equal the
  original's up to float summation order. The same model when it has no
  1-D convolution to lift."""
  nodes = [n for d in sorted(model._nodes_by_depth, reverse=True)  # pylint: disable=protected-access
           for n in model._nodes_by_depth[d]]  # pylint: disable=protected-access
  plans = {}
  lifted_ids = set()  # old tensors whose lifted form exists
  for node in nodes:
    if node.is_input:
      continue
    plan = _lift_plan(node)
    if plan is None:
      continue
    make, conv = plan
    if conv or any(id(t) in lifted_ids for t in node.input_tensors):
      plans[id(node)] = make
      lifted_ids.update(id(t) for t in node.outputs if len(t.shape) == 3)
  if not any(type(n.operation) in _CONV1D_TYPES for n in nodes  # pylint: disable=unidiomatic-typecheck
             if id(n) in plans):
    return model
  names = _UniqueNames(l.name for l in model.layers)
  new_of, clones = {}, {}
  lifted = {}  # id(old rank-3 tensor) -> its [N, 1, L, C] form
  unlifted = {}  # id(old rank-3 tensor) -> the Reshape back of lifted
  inputs = _new_inputs(model, new_of)

  def as_2d(t):
    if id(t) not in lifted:
      lifted[id(t)] = keras.layers.Reshape(
          (1, -1 if t.shape[1] is None else t.shape[1], t.shape[2]),
          name=names(f"{_layer_key(t)}_as_2d"))(new_of[id(t)])
    return lifted[id(t)]

  def as_1d(t):
    if id(t) in new_of:
      return new_of[id(t)]
    if id(t) not in unlifted:
      unlifted[id(t)] = keras.layers.Reshape(
          (-1 if t.shape[1] is None else t.shape[1], t.shape[2]),
          name=names(f"{_layer_key(t)}_as_1d"))(lifted[id(t)])
    return unlifted[id(t)]

  for node in nodes:
    if node.is_input:
      continue
    op = node.operation
    if id(node) not in plans:
      _call_float_copy(node, clones, new_of,
                       {id(t): as_1d(t) for t in node.input_tensors})
      continue
    first_call = id(op) not in clones
    if first_call:
      clones[id(op)] = plans[id(node)](names)
    layers, set_weights = clones[id(op)]
    xs = [as_2d(t) for t in node.input_tensors]
    y = layers[0](xs) if len(xs) > 1 else layers[0](xs[0])
    for layer in layers[1:]:
      y = layer(y)
    if first_call:
      set_weights()
    (out,) = node.outputs
    if len(out.shape) == 3:
      lifted[id(out)] = y
    else:
      new_of[id(out)] = y
  outputs = keras.tree.map_structure(as_1d, model.output)
  return keras.Model(inputs, outputs, name=model.name)


def _tensor_key(t):
  """A readable, stable name for a graph tensor: its producer's name."""
  op, node_index, tensor_index = t._keras_history  # pylint: disable=protected-access
  key = op.name
  if node_index or tensor_index:
    key += f":{node_index}:{tensor_index}"
  return key


def _layer_key(t):
  """_tensor_key(t) as part of a layer name: ':' is not allowed in the name
  scopes a layer's name becomes in a graph (a tensor of a shared layer's
  second call, `add_13:1:0`, named its Dequantize `add_13:1:0_dequantize`,
  and the model then failed in every tf.function)."""
  return _tensor_key(t).replace(":", "_")


def _rank4_channels(t):
  return len(t.shape) == 4 and t.shape[-1] is not None


class _Graph:
  """Nodes of a functional model in topological order, with consumers."""

  def __init__(self, model):
    self.model = model
    by_depth = model._nodes_by_depth  # pylint: disable=protected-access
    self.nodes = [n for d in sorted(by_depth, reverse=True)
                  for n in by_depth[d]]
    self.consumers = collections.defaultdict(list)
    self.producer = {}
    for node in self.nodes:
      for t in node.input_tensors:
        self.consumers[id(t)].append(node)
      for t in node.outputs:
        self.producer[id(t)] = node
    self.output_ids = {id(t) for t in model.outputs}
    # Longest path (in nodes) from a model input to each tensor.
    self.level = {}
    for node in self.nodes:
      lvl = 1 + max((self.level.get(id(t), 0) for t in node.input_tensors),
                    default=-1)
      for t in node.outputs:
        self.level[id(t)] = lvl

  def sole_consumer(self, t):
    """The one node using `t` (once), or None (several, none, an output)."""
    users = self.consumers.get(id(t), [])
    if len(users) != 1 or id(t) in self.output_ids:
      return None
    node = users[0]
    if sum(id(x) == id(t) for x in node.input_tensors) != 1:
      return None
    return node


def _single_tensor_call(node):
  """The node's only input tensor if called as op(tensor), else None."""
  args, kwargs = node.arguments.args, node.arguments.kwargs
  # Keras records mask=None (and training=None when given); a hard-coded
  # training=True (batch statistics) is not an inference-mode layer.
  if any(v is not None and not (k == "training" and v is False)
         for k, v in kwargs.items()):
    return None
  if len(args) == 1 and len(node.input_tensors) == 1 and (
      args[0] is node.input_tensors[0]) and len(node.outputs) == 1:
    return node.input_tensors[0]
  return None


# quantize_model folds a Rescaling / Normalization chain into the Quantize
# that reads it (tests turn it off to build the unfolded twin).
_FOLD_PREPROCESSING = True


def _preprocess_steps(op, rank):
  """Quantize's preprocess steps computing what the Keras layer `op` does
  to a float32 tensor of rank `rank` (channels last), or None where it is
  not a Rescaling / Normalization this folds: float32 compute dtype,
  values one number or one per channel of the last axis, channels last."""
  channels_last = keras.backend.image_data_format() == "channels_last"
  if getattr(op, "compute_dtype", None) != "float32":
    return None
  if type(op) is keras.layers.Rescaling:  # pylint: disable=unidiomatic-typecheck
    # Keras: cast(x) * cast(scale) + cast(offset), float32.
    with np.errstate(over="ignore"):
      scale = np.asarray(op.scale, np.float64).astype(np.float32)
      offset = np.asarray(op.offset, np.float64).astype(np.float32)
    for v in (scale, offset):
      if v.ndim > 1 or (v.ndim == 1 and not channels_last):
        return None
    return [("mul", scale.reshape(-1)), ("add", offset.reshape(-1))]
  if type(op) is keras.layers.Normalization:  # pylint: disable=unidiomatic-typecheck
    # Keras: (x - mean) / maximum(sqrt(variance), epsilon()), float32, the
    # mean and variance in the broadcast shape of the kept axes.
    if op.invert or op.mean is None or not rank:
      return None
    keep = sorted(a % rank for a in op.axis)
    if keep not in ([], [rank - 1]):
      return None
    mean = np.asarray(op.mean, np.float32).reshape(-1)
    variance = np.asarray(op.variance, np.float32).reshape(-1)
    with np.errstate(invalid="ignore"):
      denominator = np.maximum(np.sqrt(variance),
                               np.float32(keras.backend.epsilon()))
    if not np.all(np.isfinite(denominator)):
      return None
    return [("sub", mean), ("div", denominator.astype(np.float32))]
  return None


def _preprocess_chain(graph, t, available):
  """(source, steps): the Rescaling / Normalization layers (each called as
  layer(x)) that compute float tensor t from `source`, a tensor in
  `available` (ids: tensors the rebuilt model has), as Quantize's
  preprocess steps; (t, None) where there are none. The per-channel steps
  must all have the last axis's size."""
  steps, cur = [], t
  rank = len(t.shape)
  channels = t.shape[-1] if rank else None
  while True:
    node = graph.producer.get(id(cur))
    if node is None:
      break
    x = _single_tensor_call(node)
    if x is None or len(x.shape) != rank:
      break
    layer_steps = _preprocess_steps(node.operation, rank)
    if layer_steps is None or any(
        v.size not in (1, channels) for _, v in layer_steps):
      break
    steps = layer_steps + steps
    cur = x
  if not steps or id(cur) not in available:
    return t, None
  return cur, steps


def _activation_name(fn):
  try:
    return keras.activations.serialize(fn)
  except Exception:  # pylint: disable=broad-except
    return getattr(fn, "__name__", repr(fn))


# A fused activation is the op's Relu with an upper bound, written as its
# float bound ``relu_max``: min(max(x, 0), relu_max), math.inf for a plain
# ReLU. These are the activation names that map onto it.
_FUSED_ACTIVATIONS = {"relu": math.inf, "relu6": 6.0}


def _activation_relu_max(fn):
  """The relu_max of a Keras activation function, None if not fused."""
  name = _activation_name(fn)  # a dict for some custom activations
  return _FUSED_ACTIVATIONS.get(name) if isinstance(name, str) else None


def _relu_max(node):
  """The bound m when the node is a ReLU / Activation layer computing
  exactly min(max(x, 0), m) (m > 0; math.inf for max(x, 0), 6 for ReLU6),
  else None."""
  op = node.operation
  if _single_tensor_call(node) is None:
    return None
  if type(op) is keras.layers.ReLU:  # pylint: disable=unidiomatic-typecheck
    if float(op.negative_slope) != 0.0 or float(op.threshold) != 0.0:
      return None
    if op.max_value is None:
      return math.inf
    m = float(op.max_value)
    return m if m > 0.0 else None  # NaN and 0 stay float
  if type(op) is keras.layers.Activation:  # pylint: disable=unidiomatic-typecheck
    return _activation_relu_max(op.activation)
  return None


# Element-wise activations an int8 output lookup table computes (the op's
# output_lut, tf_fused_int8.activation_lut); ReLU-like ones fuse as bounds.
_LUT_ACTIVATIONS = frozenset(ops.LUT_ACTIVATIONS) - {"linear", "relu",
                                                         "relu6"}


def _table_activation_name(fn):
  """The name of a Keras activation function when it is one of
  _LUT_ACTIVATIONS, else None."""
  name = _activation_name(fn)  # a dict for some custom activations
  return name if isinstance(name, str) and name in _LUT_ACTIVATIONS else None


def _leaky_relu_table(slope):
  """Keras's leaky_relu of `slope` (x, or slope * x below 0) as a table
  function: its LUT_ACTIVATIONS name for Keras's default slope 0.2."""
  if slope == 0.2:
    return "leaky_relu"
  return lambda x: np.where(x >= 0, x, slope * x)


def _elu_table(alpha):
  """Keras's elu of `alpha` (x above 0, else alpha (e^x - 1)) as a table
  function: its LUT_ACTIVATIONS name for alpha 1."""
  if alpha == 1.0:
    return "elu"
  return lambda x: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))


def _lut_activation(node):
  """The activation's table function (ops.activation_lut's argument: a name
  of _LUT_ACTIVATIONS, or a function of a float64 array) when the node,
  called on one tensor, is an Activation layer computing one of
  _LUT_ACTIVATIONS (SiLU / swish, sigmoid, hard-swish, GELU, ...), a
  LeakyReLU or ELU layer (any finite slope / alpha: a GAN's generator and
  discriminator), or a ReLU layer with a negative slope and neither a
  threshold nor a maximum (a leaky ReLU); else None."""
  op = node.operation
  if _single_tensor_call(node) is None:
    return None
  kind = type(op)
  if kind is keras.layers.Activation:
    return _table_activation_name(op.activation)
  if kind is keras.layers.LeakyReLU:
    slope = float(op.negative_slope)
    return _leaky_relu_table(slope) if math.isfinite(slope) else None
  if kind is keras.layers.ELU:
    alpha = float(op.alpha)
    return _elu_table(alpha) if math.isfinite(alpha) else None
  if (kind is keras.layers.ReLU and float(op.threshold) == 0.0 and
      op.max_value is None and float(op.negative_slope) != 0.0 and
      math.isfinite(float(op.negative_slope))):
    return _leaky_relu_table(float(op.negative_slope))
  return None


def _conv_relu_max(op):
  """The relu_max of a convolution's own activation: None for linear (a
  convolution with another activation is not quantized, _conv_problem)."""
  return _activation_relu_max(op.activation)


def _relu_output_max(relu_max, output_scale):
  """The op's output_max for min(max(x, 0), relu_max) on an int8 output of
  scale `output_scale`: min(127, round(relu_max / output_scale)), the
  quotient in float64 and Python's round (half to even); 127 for
  relu_max = inf. For relu_max = 6 it is layers.relu6_output_max."""
  q = float(relu_max) / float(output_scale)
  return 127 if q >= 127.0 else int(round(q))


def _activation_kwargs(relu_max, output_scale):
  """QuantizedFusedConv2D arguments for a group's activation."""
  if relu_max is None:
    return {"activation": None}
  if relu_max == math.inf:
    return {"activation": "relu"}
  if relu_max == 6.0:
    # The layer's own ReLU6 (same bound, see _relu_output_max), which keeps
    # activation="relu6" and output_scale in its config.
    return {"activation": "relu6"}
  return {"activation": "relu",
          "output_max": _relu_output_max(relu_max, output_scale)}


_CONV_TYPES = (keras.layers.Conv2D, keras.layers.DepthwiseConv2D)


def _is_conv(op):
  return type(op) in _CONV_TYPES  # exact types: subclasses may change call


_TransposePlan = collections.namedtuple(
    "_TransposePlan", ["strides", "taps", "padding", "crop"])


def _transpose_plan(op):
  """How a Conv2DTranspose (any strides s_h, s_w >= 1, dilation 1, 'same'
  or 'valid', with or without output_padding) runs in int8 (sub-pixel form,
  exact): output pixel f = s q + r (per axis) is the sum over t of x[q - t]
  * W[s t + r], a plain convolution of x with taps[axis] = ceil(k / s) taps
  per phase r. So: one convolution of x padded by taps - 1 before and taps
  - 1 + e after (`padding`) to s_h * s_w * filters channels (phase (r_h,
  r_w), then the filter, W's taps reversed, zero past k), a depth-to-space of
  block s_h x s_w (none for strides 1 x 1), and a crop of the result
  (`crop`, ((top, bottom), (left, right))) to Keras's output. The
  convolution's s (L + taps - 1 + e) rows hold the full correlation's
  (L - 1) s + k from row 0, then bias-only rows (zero input). Keras's output
  is L s + extra rows, extra = max(k - s, 0) ('valid'), 0 ('same'), or with
  output_padding p: k - s - 2 pad + p (pad = k // 2 for 'same', else 0);
  it starts at the padding TF's conv2d_transpose takes from that size, half
  of max((L - 1) s + k - out, 0) = max(k - s, 0) or max(2 pad - p, 0)
  ('same'; 0 for 'valid'), independent of L. e is the whole steps of s that
  the output reaches past the grid without it (only with output_padding). A
  kernel equal to the stride is a 1x1 convolution and a depth-to-space
  (each input pixel writes its own block). On an axis of stride 1 the crop
  is taken off the padding instead (the same outputs, none computed to be
  dropped). None for any other layer."""
  if type(op) is not keras.layers.Conv2DTranspose:  # pylint: disable=unidiomatic-typecheck
    return None
  strides = tuple(int(v) for v in op.strides)
  if (min(strides) < 1 or tuple(op.dilation_rate) != (1, 1) or
      op.padding not in ("same", "valid")):
    return None
  same = op.padding == "same"
  taps, padding, crop = [], [], []
  for axis, (k, s) in enumerate(zip(op.kernel_size, strides)):
    k = int(k)
    t = -(-k // s)
    if op.output_padding is None:
      extra = 0 if same else max(k - s, 0)
      start = max(k - s, 0) // 2 if same else 0
    else:
      p = int(op.output_padding[axis])
      pad = k // 2 if same else 0
      extra = k - s - 2 * pad + p
      start = max(2 * pad - p, 0) // 2 if same else 0
    e = max(0, -(-(start + extra - s * (t - 1)) // s))
    before, after = t - 1, t - 1 + e
    crop_before, crop_after = start, s * (t - 1 + e) - start - extra
    if s == 1 and crop_before <= before and crop_after <= after:
      # Stride 1: the crop is that much less padding (a 'same' k x k one is
      # a plain 'same' convolution, no rows computed to be dropped).
      before, after = before - crop_before, after - crop_after
      crop_before = crop_after = 0
    taps.append(t)
    padding.append((before, after))
    crop.append((crop_before, crop_after))
  return _TransposePlan(strides, tuple(taps), tuple(padding), tuple(crop))


def _is_conv_like(op):
  """A Conv2D, DepthwiseConv2D or Conv2DTranspose (exact types)."""
  return _is_conv(op) or type(op) is keras.layers.Conv2DTranspose  # pylint: disable=unidiomatic-typecheck


def _is_depthwise(op):
  return type(op) is keras.layers.DepthwiseConv2D  # pylint: disable=unidiomatic-typecheck


def _float_dtype_ok(layer):
  policy = getattr(layer, "dtype_policy", None)
  return policy is None or (policy.compute_dtype == "float32" and
                            policy.variable_dtype == "float32")


def _conv_problem(node):
  """Why this Conv2D / DepthwiseConv2D node cannot become a
  QuantizedFusedConv2D (or None)."""
  op = node.operation
  x = _single_tensor_call(node)
  if x is None:
    return "it is not called on exactly one tensor"
  if not _rank4_channels(x):
    return f"its input shape {x.shape} is not [N, H, W, C] with known C"
  if op.data_format != "channels_last":
    return f"data_format={op.data_format!r} (only channels_last)"
  if op.padding not in ("same", "valid"):
    return f"padding={op.padding!r}"
  act = _activation_name(op.activation)
  if act != "linear" and _activation_relu_max(op.activation) is None:
    return (f"activation={act!r} (the fused op has relu, relu6 and the "
            f"element-wise activations of tf_fused_int8.LUT_ACTIVATIONS as "
            f"lookup tables)")
  if getattr(op, "quantization_mode", None):
    return f"it is already quantized ({op.quantization_mode})"
  if (type(op) is keras.layers.Conv2DTranspose and  # pylint: disable=unidiomatic-typecheck
      _transpose_plan(op) is None):
    return "a Conv2DTranspose runs in int8 with dilation 1"
  if not _float_dtype_ok(op):
    return f"dtype policy {op.dtype_policy.name!r} (only float32)"
  return None


def _bn_problem(node):
  op = node.operation
  x = _single_tensor_call(node)
  if x is None:
    return "it is not called on exactly one tensor"
  axis = op.axis
  if isinstance(axis, (list, tuple)):
    if len(axis) != 1:
      return f"axis={axis}"
    axis = axis[0]
  if not _rank4_channels(x) or axis not in (-1, 3):
    return "it does not normalize the channel axis of an NHWC tensor"
  if not _float_dtype_ok(op):
    return f"dtype policy {op.dtype_policy.name!r} (only float32)"
  return None


class _Group:
  """One fused conv stack: [ZeroPadding2D +] Conv2D|DepthwiseConv2D [+ BN]
  [+ ReLU|ReLU6|ReLU(max_value=m)] [+ Add(side) [+ the same]]; or a
  BatchNormalization [+ ReLU...] that follows no conv, an unpadded
  AveragePooling2D or an Add of two int8 tensors [+ ReLU...], each run as a
  depthwise convolution."""

  def __init__(self, conv_node, bn_only=False, avg_pool=None,
               global_pool=None, dense=False, add_only=False):
    self.conv_node = conv_node
    # add_only: conv_node is an Add of two int8 tensors that no conv takes
    # as its side input: a 1x1 depthwise convolution with the filter 1 of
    # its first input, the second as the side input.
    self.add_only = add_only
    # bn_only: conv_node is a BatchNormalization that follows no conv: the
    # stack is BN [+ ReLU], run as a 1x1 depthwise convolution (filter
    # gamma / sigma per channel, bias beta - mean * gamma / sigma).
    self.bn_only = bn_only
    # avg_pool: ((kh, kw), (sh, sw)) when conv_node is an AveragePooling2D
    # without padding: a depthwise convolution with the filter 1 / (kh * kw).
    self.avg_pool = avg_pool
    # global_pool: ((h, w), keepdims) when conv_node is a
    # GlobalAveragePooling2D of an [N, h, w, C] tensor: avg_pool's depthwise
    # convolution over the whole image, its [N, 1, 1, C] output reshaped to
    # [N, C] unless keepdims.
    self.global_pool = global_pool
    if global_pool is not None:
      avg_pool = (global_pool[0], (1, 1))
      self.avg_pool = avg_pool
    # dense: conv_node is a Dense layer, a QuantizedDense (a 1x1 convolution
    # per row of its input).
    self.dense = dense
    self.pad_node = None
    op = conv_node.operation
    # transpose: a Conv2DTranspose's _TransposePlan: a convolution to
    # s_h * s_w * filters channels, a depth-to-space and a crop.
    self.transpose = _transpose_plan(op)
    plain = bn_only or avg_pool or dense or add_only or self.transpose
    if self.transpose:
      self.padding = self.transpose.padding  # explicit (_transpose_plan)
    else:
      self.padding = "valid" if plain else op.padding
    self.strides = (1 if bn_only or dense or add_only or self.transpose else
                    avg_pool[1] if avg_pool else op.strides)
    self.dilation_rate = 1 if plain else op.dilation_rate
    self.bn_node = None
    self.add_node = None
    self.side = None
    # None (linear), or the Relu's float bound (math.inf: unbounded).
    self.relu_max = (None if bn_only or avg_pool or add_only else
                     _conv_relu_max(op))
    # lut: the name of an element-wise activation that follows the stack
    # (an Activation layer), run as the op's output lookup table from the
    # scale of pre_lut (its input, calibrated) to the scale of the tail.
    self.lut = None
    self.pre_lut = None
    # channel_scale: float64 [Co] of a per-channel multiply after a linear
    # Dense (ConvNeXt's LayerScale), folded into its kernel and bias.
    self.channel_scale = None
    self.members = [conv_node]
    self.input = conv_node.input_tensors[0]
    self.tail = conv_node.outputs[0]

  def extend(self, node):
    self.members.append(node)
    self.tail = node.outputs[0]

  def fuse_activation(self, node):
    """Extends the stack by node when it is a ReLU-like bound or a
    lookup-table activation of the tail (the caller checked that node alone
    reads it); returns whether it did."""
    if node is None or self.relu_max is not None or self.lut is not None:
      return False
    self.relu_max = _relu_max(node)
    if self.relu_max is not None:
      self.extend(node)
      return True
    name = _lut_activation(node)
    if name is None:
      return False
    self.lut, self.pre_lut = name, self.tail
    self.extend(node)
    return True

  @property
  def tail_node(self):
    return self.members[-1]


# Layers that are meant to stay float (no warning): the model's head and
# glue. Anything not listed, and not absorbed into a fused convolution, is
# reported by the QuantizationWarning.
_FLOAT_LAYERS = (
    keras.layers.InputLayer, keras.layers.Dense, keras.layers.Flatten,
    keras.layers.Reshape, keras.layers.Dropout, keras.layers.SpatialDropout2D,
    keras.layers.MaxPooling2D, keras.layers.AveragePooling2D,
    keras.layers.GlobalAveragePooling2D, keras.layers.GlobalMaxPooling2D,
    keras.layers.ReLU, keras.layers.Activation, keras.layers.Softmax,
    keras.layers.Add, keras.layers.Rescaling, keras.layers.Identity,
    keras.layers.ZeroPadding2D, keras.layers.Cropping2D,
)


class _KeepsInputDtype:
  """Mixin: the symbolic output has the input's dtype (Keras would announce
  its float compute dtype; the TF op itself keeps int8)."""

  def compute_output_spec(self, inputs, *args, **kwargs):
    spec = super().compute_output_spec(inputs, *args, **kwargs)
    first = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
    return keras.KerasTensor(spec.shape, dtype=first.dtype)


class _Int8Pooling2D(_EagerCall, _KeepsInputDtype):
  """Mixin of Int8MaxPooling2D / Int8AveragePooling2D: ``zero_padding``
  (keras.layers.ZeroPadding2D's forms; None: none) adds those zeros around
  the input first, in the same op; channels_last int8 runs the class's
  ``_int8_op``; anything else pads and pools as Keras does. Eager calls
  take _EagerCall's fast path, as do the other Keras-derived int8 layers
  below (ResNet50's stem pool, 1x112x112x64, eagerly on one thread: 230-260
  us a call through Keras's __call__, 55-66 us without, Keras's InputSpec
  check of the input kept)."""

  _int8_op = None  # (x, pool_size, strides, padding, zero_padding) -> int8

  def __init__(self, *args, zero_padding=None, **kwargs):
    super().__init__(*args, **kwargs)
    if zero_padding is None:
      self.zero_padding = None
    else:
      t, b, l, r = ops._zero_padding(zero_padding)  # pylint: disable=protected-access
      self.zero_padding = ((t, b), (l, r))

  def call(self, inputs):
    if inputs.dtype == tf.int8 and self.data_format == "channels_last":
      return self._int8_op(inputs, self.pool_size, self.strides,
                           self.padding.upper(), self.zero_padding)
    if self.zero_padding is not None:
      (t, b), (l, r) = self.zero_padding
      spatial = [[t, b], [l, r]]
      inputs = tf.pad(inputs, [[0, 0]] + spatial + [[0, 0]]
                      if self.data_format == "channels_last" else
                      [[0, 0], [0, 0]] + spatial)
    return super().call(inputs)

  def compute_output_shape(self, input_shape):
    if self.zero_padding is not None:
      input_shape = list(input_shape)
      rows, cols = (1, 2) if self.data_format == "channels_last" else (2, 3)
      for axis, (before, after) in zip((rows, cols), self.zero_padding):
        if input_shape[axis] is not None:
          input_shape[axis] += before + after
    return super().compute_output_shape(tuple(input_shape))

  def get_config(self):
    config = super().get_config()
    config["zero_padding"] = self.zero_padding
    return config


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8MaxPooling2D(_Int8Pooling2D, keras.layers.MaxPooling2D):
  """MaxPooling2D of an int8 tensor, in int8 (exact at the input's scale).

  ``zero_padding`` (keras.layers.ZeroPadding2D's forms; None: none) adds
  those zeros around the input first, in the same op: quantize_model folds
  a ZeroPadding2D that feeds only this pooling into it (ResNet's stem).
  channels_last int8 runs ``tf_fused_int8.max_pool2d_int8`` (one pass, no
  padded copy; on the CPU); anything else pads and pools as Keras does.
  """

  _int8_op = staticmethod(ops.max_pool2d_int8)


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8AveragePooling2D(_Int8Pooling2D, keras.layers.AveragePooling2D):
  """AveragePooling2D of an int8 tensor, in int8 at the input's scale.

  Each window's average is the exact sum of its int8 values over the number
  of its cells (SAME's padding cells do not count, as in Keras), rounded
  once, half to even (``tf_fused_int8.avg_pool2d_int8``): within half a
  step of the input's scale of Keras's float average of the same int8
  values. ``zero_padding`` as Int8MaxPooling2D's (its zeros count as
  cells). channels_last int8 runs the op (on the CPU); anything else pads
  and pools as Keras does.
  """

  _int8_op = staticmethod(ops.avg_pool2d_int8)


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8GlobalMaxPooling2D(_EagerCall, _KeepsInputDtype,
                             keras.layers.GlobalMaxPooling2D):
  """GlobalMaxPooling2D of an int8 tensor, in int8."""


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8ZeroPadding2D(_EagerCall, _KeepsInputDtype,
                        keras.layers.ZeroPadding2D):
  """ZeroPadding2D of an int8 tensor (int8 zeros are real zeros): channels
  last, one FusedInt8Pad2D op (TF's Pad shards over the intra-op pool our
  convolutions' helper holds: NASNetMobile's eight pads at batch 1 took 294
  us on two threads, 171 on one)."""

  def call(self, inputs):
    if self.data_format == "channels_last" and inputs.dtype == tf.int8:
      (t, b), (l, r) = self.padding
      return ops._pad2d_int8(inputs, (t, b, l, r))  # pylint: disable=protected-access
    return super().call(inputs)


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8Cropping2D(_EagerCall, _KeepsInputDtype, keras.layers.Cropping2D):
  """Cropping2D of an int8 tensor (a slice: exact at the input's scale;
  NASNet's reductions crop a padded tensor by one row and column): channels
  last, one FusedInt8Pad2D op with negative paddings (as Int8ZeroPadding2D)."""

  def call(self, inputs):
    if self.data_format == "channels_last" and inputs.dtype == tf.int8:
      (t, b), (l, r) = self.cropping
      h, w = inputs.shape[1], inputs.shape[2]
      if (h is None or t + b <= h) and (w is None or l + r <= w):
        return ops._pad2d_int8(inputs, (-t, -b, -l, -r))  # pylint: disable=protected-access
    return super().call(inputs)


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8UpSampling2D(_EagerCall, _KeepsInputDtype, keras.layers.UpSampling2D):
  """UpSampling2D with nearest interpolation of an int8 tensor (each value
  repeated: exact at the input's scale; a U-Net's or FPN's decoder).
  Channels last, known non-zero sizes: FusedInt8Concat copies (each pixel
  size[1] times along the channels, then each row size[0] times: in
  row-major order that is the upsampled tensor) and reshapes, on the
  convolutions' threads (TF's repeats shard over the intra-op pool, as
  ConcatV2 does: see ops.concat_int8); otherwise Keras's repeats."""

  def call(self, inputs):
    shape = inputs.shape
    if (self.data_format == "channels_last" and inputs.dtype == tf.int8 and
        self.interpolation == "nearest" and shape.rank == 4 and
        all(d is not None and d > 0 for d in shape[1:])):
      h, w, c = shape[1], shape[2], shape[3]
      sh, sw = self.size
      x = inputs
      if sw > 1:
        x = ops.concat_int8([x] * sw)  # [N, H, W, sw * C]
      if sh > 1:
        x = ops.concat_int8([_reshape(x, (-1, h, w * sw * c))] * sh)
      return _reshape(x, (-1, h * sh, w * sw, c))
    return super().call(inputs)


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8DepthToSpace(_EagerCall, keras.layers.Layer):
  """Depth-to-space of an int8 NHWC tensor (a copy) with a block of
  ``block_size`` pixels, an int b (b x b, as TF's) or a pair (bh, bw):
  after the convolution that quantize_model makes of a Conv2DTranspose
  (the sub-pixel form, _transpose_plan), it puts each pixel's bh * bw
  phases of `filters` channels at their output pixels. Runs
  ops.depth_to_space_int8 (FusedInt8DepthToSpace); TF's DepthToSpace for
  any other dtype (square blocks)."""

  def __init__(self, block_size, **kwargs):
    super().__init__(**kwargs)
    if isinstance(block_size, (tuple, list)):
      if len(block_size) != 2:
        raise ValueError(f"block_size must be an int or a pair, got "
                         f"{block_size!r}")
      block_size = tuple(int(b) for b in block_size)
      if block_size[0] == block_size[1]:
        block_size = block_size[0]
    else:
      block_size = int(block_size)
    self.block_size = block_size
    bh, bw = self._pair()
    if bh < 1 or bw < 1 or bh * bw < 2:
      raise ValueError(f"block_size must be at least 2 pixels, got "
                       f"{block_size!r}")

  def _pair(self):
    b = self.block_size
    return (b, b) if isinstance(b, int) else b

  def call(self, inputs):
    if inputs.dtype == tf.int8:
      return ops.depth_to_space_int8(inputs, self._pair())
    return tf.nn.depth_to_space(inputs, self.block_size)

  def compute_output_spec(self, inputs):
    n, h, w, c = inputs.shape
    bh, bw = self._pair()
    return keras.KerasTensor(
        (n, None if h is None else h * bh, None if w is None else w * bw,
         None if c is None else c // (bh * bw)), dtype=inputs.dtype)

  def get_config(self):
    config = super().get_config()
    config["block_size"] = (self.block_size if isinstance(self.block_size, int)
                            else list(self.block_size))
    return config


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8Flatten(_EagerCall, _KeepsInputDtype, keras.layers.Flatten):
  """Flatten of an int8 tensor (a reshape: exact at the input's scale)."""


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8Reshape(_EagerCall, _KeepsInputDtype, keras.layers.Reshape):
  """Reshape of an int8 tensor (an int8 global average pooling's [N, 1, 1,
  C] output to GlobalAveragePooling2D's [N, C]). Eager calls take the
  layers' fast path (_EagerCall); a fully given target shape reshapes through
  _reshape (eagerly a cached shape constant); a target with -1 is
  keras.layers.Reshape's."""

  def call(self, inputs):
    target = tuple(self.target_shape)
    if all(isinstance(d, int) and d >= 0 for d in target):
      return _reshape(inputs, (-1,) + target)
    return super().call(inputs)


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8Dropout(_EagerCall, keras.layers.Layer):
  """A Dropout / SpatialDropout2D of an int8 tensor in the quantized
  (inference) model: the identity, as those layers are at inference. Keeps
  the float layer's config (rate, noise_shape, seed) for reference."""

  def __init__(self, rate=0.0, noise_shape=None, seed=None, **kwargs):
    kwargs.pop("data_format", None)  # SpatialDropout2D's
    super().__init__(**kwargs)
    self.rate = float(rate)
    self.noise_shape = noise_shape
    self.seed = seed

  def call(self, inputs):
    return inputs

  def compute_output_spec(self, inputs):
    return keras.KerasTensor(inputs.shape, dtype=inputs.dtype)

  def get_config(self):
    config = super().get_config()
    config.update(rate=self.rate, noise_shape=self.noise_shape, seed=self.seed)
    return config


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8ReLU(_EagerCall, keras.layers.Layer):
  """A ReLU / ReLU6 / ReLU(max_value=m) of an int8 tensor that no conv
  absorbed (its input has other readers, e.g. Xception's pre-activations
  beside the residual), in int8 at the input's scale s: clip(q, 0,
  output_max) with output_max = min(127, round(m / s)) (127 for a plain
  ReLU). Exact: rounding is monotonic and real 0 is int8 0, so
  round(min(max(y, 0), m) / s) = min(max(round(y / s), 0), round(m / s))."""

  def __init__(self, output_max=127, **kwargs):
    super().__init__(**kwargs)
    self.output_max = int(output_max)
    if not 0 <= self.output_max <= 127:
      raise ValueError(f"output_max must be in [0, 127], got {output_max!r}")

  def call(self, inputs):
    channels = inputs.shape[-1] if inputs.shape.rank == 4 else None
    if inputs.dtype == tf.int8 and channels:
      # The fused op as an identity 1x1 depthwise convolution: filter 1,
      # scale 1, bias 0, Relu up to output_max, so out = clip(q, 0,
      # output_max) exactly (|q| <= 128: every step is exact in float32).
      # TF's Maximum / Minimum on int8 took 40-45 us each per call on
      # NASNetMobile's tensors (one Zen 4 thread of two); the op runs the
      # depthwise kernels' 1x1 path.
      ones, zeros = ops._identity_depthwise_operands(channels)  # pylint: disable=protected-access
      return ops.fused_conv2d_bias_activation(
          inputs, ones, zeros, strides=1, padding="VALID",
          conv_input_scale=1.0, activation_mode="Relu",
          output_max=self.output_max)
    return tf.clip_by_value(inputs, tf.constant(0, inputs.dtype),
                            tf.constant(self.output_max, inputs.dtype))

  def compute_output_spec(self, inputs):
    return keras.KerasTensor(inputs.shape, dtype=inputs.dtype)

  def get_config(self):
    config = super().get_config()
    config["output_max"] = self.output_max
    return config


# The dropout layers: the identity at inference (quantize_model's result is
# an inference model).
_DROPOUT_LAYERS = (keras.layers.Dropout, keras.layers.SpatialDropout2D)

_INT8_PASSTHROUGH = {
    keras.layers.MaxPooling2D: Int8MaxPooling2D,
    # Only where its windows reach SAME's padding (an unpadded one is a
    # depthwise convolution with a calibrated output, _avg_pool_window).
    keras.layers.AveragePooling2D: Int8AveragePooling2D,
    keras.layers.GlobalMaxPooling2D: Int8GlobalMaxPooling2D,
    keras.layers.ZeroPadding2D: Int8ZeroPadding2D,
    keras.layers.Cropping2D: Int8Cropping2D,
    # Nearest interpolation only (the others average: float).
    keras.layers.UpSampling2D: Int8UpSampling2D,
    keras.layers.Flatten: Int8Flatten,
    # A squeeze-excite branch's GAP -> Reshape([1, 1, C]) -> conv.
    keras.layers.Reshape: Int8Reshape,
    # EfficientNet's GAP -> Dropout -> Dense head.
    **{cls: Int8Dropout for cls in _DROPOUT_LAYERS},
}


def _int8_passthrough(node, dense=True):
  """Whether a node can run on the int8 tensor of its one input as it is:
  MaxPooling2D, GlobalMaxPooling2D, ZeroPadding2D, Cropping2D and a nearest
  UpSampling2D, channels_last (max commutes with the monotonic quantization,
  padding zeros are int8 zeros, a crop is a slice, nearest upsampling a
  copy),
  an AveragePooling2D whose windows reach SAME's padding (Keras divides
  those by the cells they hold: Int8AveragePooling2D, the exact average
  rounded once at the input's scale), a ReLU / ReLU6 / ReLU(max_value=m) no
  conv absorbed (Int8ReLU), and, with `dense` (quantize_model's), Flatten
  (a reshape); Reshape (exact); Dropout and SpatialDropout2D (the identity
  at inference).
  """
  op = node.operation
  if _relu_max(node) is not None:
    return True  # Int8ReLU
  if type(op) not in _INT8_PASSTHROUGH:  # pylint: disable=unidiomatic-typecheck
    return False
  if (type(op) is keras.layers.AveragePooling2D and  # pylint: disable=unidiomatic-typecheck
      _avg_pool_window(node) is not None):
    return False
  if type(op) is keras.layers.Flatten and not dense:  # pylint: disable=unidiomatic-typecheck
    return False
  if (type(op) is keras.layers.UpSampling2D and  # pylint: disable=unidiomatic-typecheck
      op.interpolation != "nearest"):
    return False
  if getattr(op, "data_format", "channels_last") != "channels_last":
    return False
  return len(node.input_tensors) == 1 and len(node.outputs) == 1


def _planned_passthrough_only(node):
  """Passthroughs made int8 only where the plan put them (Flatten, ReLU,
  average pooling: it rounds), unlike the max poolings and paddings, which
  also run on a float tensor quantized for a conv (ResNet's stem)."""
  return (type(node.operation) in (keras.layers.Flatten, keras.layers.Reshape,
                                   keras.layers.AveragePooling2D) +
          _DROPOUT_LAYERS or _relu_max(node) is not None)


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class Int8Concatenate(_KeepsInputDtype, keras.layers.Concatenate):
  """Concatenate of int8 tensors that share one scale, in int8: a copy.
  Along the last axis it runs ``tfi.concat_int8`` (one FusedInt8Concat op,
  copying on the fused convolutions' threads: TF's ConcatV2 waited for the
  intra-op pool their helpers hold, DenseNet121 at batch 1 on two threads
  about 66 us a concatenation against 16 on one); along another, Keras's."""

  def call(self, inputs):
    rank = len(inputs[0].shape)
    if (rank >= 1 and self.axis in (-1, rank - 1) and
        all(x.dtype == tf.int8 and len(x.shape) == rank for x in inputs)):
      return ops.concat_int8(list(inputs))
    return super().call(inputs)


def _is_ops_numpy(op, name):
  """Whether op is keras.ops' numpy operation `name` ("Add", "Multiply"):
  what `a + b` or `x * c` on KerasTensors makes in a functional model."""
  return type(op).__name__ == name and type(op).__module__ == "keras.src.ops.numpy"


def _numpy_op_with_constant(node, name):
  """The constant c of `x OP c` or `c OP x` (keras.ops' numpy op `name`,
  "Add" or "Multiply", on one KerasTensor and a Python number), else
  None."""
  if (not _is_ops_numpy(node.operation, name) or len(node.input_tensors) != 1 or
      len(node.outputs) != 1 or
      any(v is not None for v in node.arguments.kwargs.values())):
    return None
  args = node.arguments.args
  if len(args) != 2:
    return None
  consts = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
  if len(consts) != 1 or not any(a is node.input_tensors[0] for a in args):
    return None
  return float(consts[0])


def _hard_sigmoid_chain(graph, node):
  """The nodes of `relu6(x + 3) * (1 / 6)` starting at node (keras.ops' add
  of 3.0, a ReLU(6.0), keras.ops' multiply by 1 / 6, each alone reading the
  one before: keras.applications MobileNetV3's hard_sigmoid, its squeeze-
  excite gate), else None. Keras's hard_sigmoid activation is the same
  function (relu6(x + 3) / 6), which the output table computes."""
  if node is None or _numpy_op_with_constant(node, "Add") != 3.0:
    return None
  relu = graph.sole_consumer(node.outputs[0])
  if (relu is None or _single_tensor_call(relu) is None or
      type(relu.operation) is not keras.layers.ReLU):  # pylint: disable=unidiomatic-typecheck
    return None
  op = relu.operation
  if not (op.max_value is not None and float(op.max_value) == 6.0 and
          float(op.negative_slope) == 0.0 and float(op.threshold) == 0.0):
    return None
  mul = graph.sole_consumer(relu.outputs[0])
  if mul is None or _numpy_op_with_constant(mul, "Multiply") != 1.0 / 6.0:
    return None
  return [node, relu, mul]


def _two_input_add(node):
  """The two input tensors of an Add layer called on a list of two distinct
  tensors, or of `a + b` on two distinct KerasTensors (keras.ops.add, as
  ConvNeXt's residual connection; no other arguments), else None."""
  if _is_ops_numpy(node.operation, "Add"):
    args, ins = node.arguments.args, node.input_tensors
    if (len(args) == 2 and not any(
        v is not None for v in node.arguments.kwargs.values()) and
        len(ins) == 2 and args[0] is ins[0] and args[1] is ins[1] and
        ins[0] is not ins[1] and len(node.outputs) == 1):
      return list(ins)
    return None
  return _two_tensor_call(node, keras.layers.Add)


def _custom_scale_layer_class():
  """keras.applications' InceptionResNetV2 residual layer class
  (CustomScaleLayer: inputs[0] + inputs[1] * scale), or None where this
  Keras has no such module."""
  try:
    from keras.src.applications import inception_resnet_v2  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return getattr(inception_resnet_v2, "CustomScaleLayer", None)


_CUSTOM_SCALE_LAYER = _custom_scale_layer_class()


def _scaled_add(node):
  """(inputs, scale) of an InceptionResNetV2 CustomScaleLayer called on two
  distinct tensors, inputs[0] + inputs[1] * scale with a finite non-zero
  scale, else None."""
  if _CUSTOM_SCALE_LAYER is None:
    return None
  ins = _two_tensor_call(node, _CUSTOM_SCALE_LAYER)
  if ins is None:
    return None
  scale = getattr(node.operation, "scale", None)
  if (isinstance(scale, bool) or not isinstance(scale, (int, float)) or
      not math.isfinite(scale) or scale == 0):
    return None
  return ins, float(scale)


def _merge_call_inputs(node):
  """The input tensors of a merge layer (Add, Concatenate) called as
  op([a, b, ...]) on two or more tensors, nothing else given, one output,
  else None."""
  args, kwargs = node.arguments.args, node.arguments.kwargs
  if any(v is not None for v in kwargs.values()) or len(args) != 1:
    return None
  values = args[0]
  if (not isinstance(values, (list, tuple)) or len(values) < 2 or
      len(values) != len(node.input_tensors) or len(node.outputs) != 1 or
      any(a is not b for a, b in zip(values, node.input_tensors))):
    return None
  return list(values)


def _two_tensor_call(node, cls):
  """The two input tensors of a `cls` layer (exact type) called on a list of
  two distinct tensors (no other arguments), else None."""
  if type(node.operation) is not cls:  # pylint: disable=unidiomatic-typecheck
    return None
  ins = _merge_call_inputs(node)
  if ins is None or len(ins) != 2 or ins[0] is ins[1]:
    return None
  return ins


# Layers whose inference-time output is their input.
_IDENTITY_LAYERS = _DROPOUT_LAYERS + (keras.layers.Identity,)


def _inference_identity(node):
  """Whether the node is one of _IDENTITY_LAYERS, or an
  Activation("linear") (ConvNeXt's `_identity` before its residual Add),
  called on one tensor."""
  op = node.operation
  return ((type(op) in _IDENTITY_LAYERS or  # pylint: disable=unidiomatic-typecheck
           (type(op) is keras.layers.Activation and  # pylint: disable=unidiomatic-typecheck
            _activation_name(op.activation) == "linear")) and
          _single_tensor_call(node) is not None)


def _channel_multiplier(node):
  """w (float64 [C]) when the node's layer multiplies its one input [..., C]
  by a vector, one value per channel (ConvNeXt's LayerScale: x * gamma):
  a layer that is not one of Keras's own, with one weight, of shape (C,),
  whose output on a random probe is exactly probe * w in float32; else
  None."""
  op = node.operation
  t = _single_tensor_call(node)
  if (t is None or not isinstance(op, keras.layers.Layer) or
      isinstance(op, keras.Model) or
      type(op).__module__.startswith("keras.src.layers") or
      len(t.shape) < 2 or t.shape[-1] is None or len(node.outputs) != 1 or
      len(op.weights) != 1 or tuple(op.weights[0].shape) != (t.shape[-1],) or
      tuple(node.outputs[0].shape) != tuple(t.shape)):
    return None
  w = np.asarray(op.weights[0].numpy(), np.float32)
  probe = np.random.default_rng(0).standard_normal(
      (2,) + (1,) * (len(t.shape) - 2) + (t.shape[-1],)).astype(np.float32)
  try:
    got = np.asarray(op(probe))
  except Exception:  # pylint: disable=broad-except
    return None
  if got.shape != probe.shape or not np.array_equal(got, probe * w):
    return None
  return w.astype(np.float64)


def _layer_norm_input(node):
  """The input tensor of a LayerNormalization over the last axis only (not
  RMS scaling) of a tensor of rank >= 2 whose last dimension is known and at
  most FusedInt8LayerNorm's 65536, else None."""
  op = node.operation
  if type(op) is not keras.layers.LayerNormalization:  # pylint: disable=unidiomatic-typecheck
    return None
  t = _single_tensor_call(node)
  if t is None or getattr(op, "rms_scaling", False) or not _float_dtype_ok(op):
    return None
  rank = len(t.shape)
  c = t.shape[-1] if rank else None
  axes = op.axis if isinstance(op.axis, (list, tuple)) else [op.axis]
  if (rank < 2 or c is None or not 1 <= c <= 65536 or
      [a % rank for a in axes] != [rank - 1]):
    return None
  return t


def _gate_multiply_inputs(node):
  """(x, gate) when the node is a Multiply of two distinct tensors, x an
  NHWC tensor [N, H, W, C] and gate [N, 1, 1, C] (a squeeze-excite gate),
  else None."""
  ins = _two_tensor_call(node, keras.layers.Multiply)
  if ins is None:
    return None
  for x, gate in (ins, ins[::-1]):
    if (_rank4_channels(x) and len(gate.shape) == 4 and
        tuple(gate.shape[1:]) == (1, 1, x.shape[-1]) and
        tuple(x.shape[1:3]) != (1, 1)):
      return x, gate
  return None


def _concat_inputs(node):
  """The input tensors of a last-axis Concatenate called on one list (at
  least two) of tensors of one rank >= 2 with known last dimensions (NHWC
  channels; a classifier's pooled [N, C] features, as a text CNN's
  branches), else None."""
  op = node.operation
  if type(op) is not keras.layers.Concatenate:  # pylint: disable=unidiomatic-typecheck
    return None
  ins = _merge_call_inputs(node)
  if ins is None:
    return None
  rank = len(ins[0].shape)
  if rank < 2 or op.axis not in (-1, rank - 1):
    return None
  if not all(len(t.shape) == rank and t.shape[-1] is not None and
             t.dtype == ins[0].dtype for t in ins):
    return None
  return ins


def _pooled_input(node, cls):
  """The input of a channels_last `cls` pooling node called on one NHWC
  tensor of known height, width and channels, else None."""
  op = node.operation
  if type(op) is not cls:  # pylint: disable=unidiomatic-typecheck
    return None
  x = _single_tensor_call(node)
  if (x is None or not _rank4_channels(x) or op.data_format != "channels_last"
      or x.shape[1] is None or x.shape[2] is None):
    return None
  return x


def _avg_pool_window(node):
  """((kh, kw), (sh, sw)) of a channels_last AveragePooling2D on one NHWC
  tensor of known size whose windows never reach into padding (valid, or
  same where same pads nothing): the average is then the sum over a full
  window / (kh * kw), a depthwise convolution. Else None (Keras divides a
  window that reaches into padding by its valid elements only)."""
  x = _pooled_input(node, keras.layers.AveragePooling2D)
  if x is None:
    return None
  op = node.operation
  k, st = tuple(op.pool_size), tuple(op.strides)
  if op.padding == "same":
    for size, kk, ss in zip(x.shape[1:3], k, st):
      if max((-(-size // ss) - 1) * ss + kk - size, 0) != 0:
        return None
  return k, st


def _global_pool_window(node):
  """((h, w), keepdims) of a channels_last GlobalAveragePooling2D of one
  [N, h, w, C] tensor of known size (the mean over the image is the sum
  over one h x w window / (h * w), a depthwise convolution), else None."""
  x = _pooled_input(node, keras.layers.GlobalAveragePooling2D)
  if x is None:
    return None
  return (int(x.shape[1]), int(x.shape[2])), bool(node.operation.keepdims)


def _dense_ok(node):
  """Whether a Dense node runs as a QuantizedDense: called on one tensor
  of rank >= 2 with a known last dimension, float32, activation linear, relu
  or relu6 (softmax etc. stay float)."""
  op = node.operation
  if type(op) is not keras.layers.Dense:  # pylint: disable=unidiomatic-typecheck
    return False
  x = _single_tensor_call(node)
  if x is None or len(x.shape) < 2 or x.shape[-1] is None:
    return False
  if not _float_dtype_ok(op) or getattr(op, "lora_enabled", False):
    return False
  return _activation_name(op.activation) == "linear" or (
      _activation_relu_max(op.activation) is not None)


def _zero_padding_pairs(node):
  """((top, bottom), (left, right)) of a plain channels_last ZeroPadding2D
  node called on one NHWC tensor, else None."""
  op = node.operation
  if type(op) is not keras.layers.ZeroPadding2D:  # pylint: disable=unidiomatic-typecheck
    return None
  x = _single_tensor_call(node)
  if x is None or not _rank4_channels(x) or op.data_format != "channels_last":
    return None
  (top, bottom), (left, right) = op.padding
  return ((int(top), int(bottom)), (int(left), int(right)))


def _folded_zero_padding(pool_node, graph, int8_of):
  """(((top, bottom), (left, right)), the padding's input) of the plain
  ZeroPadding2D whose output only this MaxPooling2D node reads, both layers
  called once and the padding's input int8 (in `int8_of`); else None."""
  op = pool_node.operation
  if (type(op) is not keras.layers.MaxPooling2D or  # pylint: disable=unidiomatic-typecheck
      len(op._inbound_nodes) != 1):  # pylint: disable=protected-access
    return None
  x = pool_node.input_tensors[0]
  pad = graph.producer.get(id(x))
  if pad is None or pad.is_input or graph.sole_consumer(x) is not pool_node:
    return None
  pairs = _zero_padding_pairs(pad)
  if pairs is None or len(pad.operation._inbound_nodes) != 1:  # pylint: disable=protected-access
    return None
  src = pad.input_tensors[0]
  if id(src) not in int8_of:
    return None
  return pairs, src


def _merged_padding(conv, zero_pads, in_hw):
  """The explicit ((t, b), (l, r)) padding equal to ZeroPadding2D(zero_pads)
  followed by `conv` (its own "valid"/"same" padding on the padded input),
  or None when it depends on an unknown input size (SAME with stride > 1).

  Exact: the zeros ZeroPadding2D adds are the zeros of the op's padding
  (real 0 is int8 0). SAME adds TensorFlow's pads for the padded size,
  total = max((ceil(P / s) - 1) * s + (K - 1) * d + 1 - P, 0), the odd one
  after.
  """
  if conv.padding == "valid":
    return zero_pads
  pairs = []
  for axis in (0, 1):
    k, s, d = (conv.kernel_size[axis], conv.strides[axis],
               conv.dilation_rate[axis])
    eff_k = (k - 1) * d + 1
    before, after = zero_pads[axis]
    size = in_hw[axis]
    if s == 1:
      total = eff_k - 1
    elif size is None:
      return None
    else:
      padded = size + before + after
      total = max((-(-padded // s) - 1) * s + eff_k - padded, 0)
    pairs.append((before + total // 2, after + total - total // 2))
  return tuple(pairs)


class _Plan:
  """Which nodes fuse into which QuantizedFusedConv2D, and what stays float."""

  def __init__(self, graph, dense=True):
    self.graph = graph
    # dense: Dense layers of int8 tensors run as QuantizedDense, and
    # GlobalAveragePooling2D / Flatten of int8 tensors in int8.
    self.dense = dense
    self.groups = []
    self.float_notes = []  # (layer name, class name, reason or None)
    for node in graph.nodes:
      op = node.operation
      if _is_conv_like(op):
        problem = _conv_problem(node)
        if problem:
          self.float_notes.append((op.name, type(op).__name__, problem))
          continue
        self.groups.append(self._chain(node))
    self._assign_adds()
    member = {id(n) for g in self.groups for n in g.members}
    # A BatchNormalization that no conv stack absorbed (pre-activation
    # ResNet / DenseNet blocks: BN + ReLU after an Add or a Concatenate) is
    # a per-channel affine map: a 1x1 depthwise convolution, with the ReLU
    # that follows it fused.
    for node in graph.nodes:
      if (id(node) not in member and not node.is_input and
          type(node.operation) is keras.layers.BatchNormalization and  # pylint: disable=unidiomatic-typecheck
          _bn_problem(node) is None):
        g = _Group(node, bn_only=True)
        self._fuse_relu(g, member)
        self.groups.append(g)
        member.update(id(n) for n in g.members)
    self._plan_int8_joins(member)
    for node in graph.nodes:
      op = node.operation
      if node.is_input or id(node) in member:
        continue
      if _is_conv_like(op) or id(node) in self.int8_concats:
        continue  # noted above, or int8
      if type(op) is keras.layers.BatchNormalization:  # pylint: disable=unidiomatic-typecheck
        self.float_notes.append((op.name, "BatchNormalization",
                                 self._bn_reason(node)))
      elif not isinstance(op, _FLOAT_LAYERS):
        self.float_notes.append((op.name, type(op).__name__, None))
    self.tail_of = {id(g.tail_node): g for g in self.groups}
    self.member_ids = member

  def _plan_int8_joins(self, member):
    """Average poolings, concatenations, and (with self.dense) global
    average poolings and Dense layers on int8 tensors (adds their nodes to
    `member`)."""
    # Concatenates with an int8 input run in int8: every tensor they join
    # (and every max pooling / zero padding between them) shares one scale,
    # the largest calibrated one, so that the concatenation is a plain copy
    # of int8 bytes. scale_classes: lists of tensors that share a scale.
    int8_able = {id(g.tail) for g in self.groups}
    parent = {}

    def find(t):
      root = t
      while parent.get(root, root) != root:
        root = parent[root]
      return root

    def union(a, b):
      parent.setdefault(a, a)
      parent.setdefault(b, b)
      parent[find(a)] = find(b)

    self.int8_concats = set()
    # Flatten / ReLU nodes planned int8 (the rewrite makes these int8 only
    # here, not on a float tensor that happens to be quantized for a conv:
    # their float readers would see the rounding).
    self.int8_planned = set()
    self.concat_inputs = []
    # Squeeze-excite Multiplies of an int8 tensor by a float gate: id(node)
    # -> (x, gate, output), run as Int8ChannelMultiply; the output is
    # calibrated and int8 (x, int8 already, has its scale).
    self.gate_multiplies = {}
    # LayerNormalizations (last axis) of an int8 tensor: id(node) -> (x,
    # output), run as Int8LayerNormalization; the output is calibrated.
    self.layer_norms = {}
    tensors = {}
    source = {}  # max pooling / zero padding output -> the tensor it pools
    for node in self.graph.nodes:
      if node.is_input or id(node) in member:
        continue
      if (_int8_passthrough(node, self.dense) and
          id(node.input_tensors[0]) in int8_able):
        # Runs at its input's scale: the class is its source's.
        t, out = node.input_tensors[0], node.outputs[0]
        if _planned_passthrough_only(node):
          self.int8_planned.add(id(node))
        int8_able.add(id(out))
        source[id(out)] = source.get(id(t), t)
        continue
      window = _avg_pool_window(node)
      if window is not None and id(node.input_tensors[0]) in int8_able:
        g = _Group(node, avg_pool=window)
        self.groups.append(g)
        member.add(id(node))
        int8_able.add(id(g.tail))
        continue
      if (self.dense and node.input_tensors and
          (id(node.input_tensors[0]) in int8_able or
           (self.dense == "inputs" and self._model_input(node.input_tensors[0]) and
            _dense_ok(node)))):
        g = None
        pool = _global_pool_window(node)
        if pool is not None:
          g = _Group(node, global_pool=pool)
        elif _dense_ok(node):
          g = _Group(node, dense=True)
          if g.relu_max is None:
            self._fuse_dense_batch_norm(g, member)
            if g.bn_node is None:
              self._fuse_channel_multiply(g, member)
            self._fuse_relu(g, member)
        if g is not None:
          self.groups.append(g)
          member.update(id(n) for n in g.members)
          int8_able.add(id(g.tail))
          continue
      ins = self._int8_add_inputs(node)
      if ins is not None and all(id(t) in int8_able for t in ins):
        # An Add of two int8 tensors that no conv took as its side input
        # (both ReLU'd, pooled, concatenated, ...): exact within the
        # contract as the identity 1x1 depthwise convolution of the first
        # (filter 1 -> 127, conv_input_scale s_a / (127 s_out)) with the
        # second as its side input (side_input_scale s_b / s_out).
        g = _Group(node, add_only=True)
        g.input, g.side = ins
        self._fuse_relu(g, member)
        self.groups.append(g)
        member.update(id(n) for n in g.members)
        int8_able.add(id(g.tail))
        continue
      x = _layer_norm_input(node)
      if x is not None and id(x) in int8_able:
        self.layer_norms[id(node)] = (x, node.outputs[0])
        member.add(id(node))
        int8_able.add(id(node.outputs[0]))
        continue
      gated = _gate_multiply_inputs(node)
      if gated is not None and id(gated[0]) in int8_able:
        self.gate_multiplies[id(node)] = gated + (node.outputs[0],)
        member.add(id(node))
        int8_able.add(id(node.outputs[0]))
        continue
      ins = _concat_inputs(node)
      if ins is not None and any(id(t) in int8_able for t in ins):
        out = node.outputs[0]
        self.int8_concats.add(id(node))
        int8_able.add(id(out))
        tensors[id(out)] = out
        for t in ins:
          if id(t) not in int8_able:
            self.concat_inputs.append(t)  # quantized for the concat
          root = source.get(id(t), t)
          tensors[id(root)] = root
          union(id(out), id(root))
    classes = collections.defaultdict(list)
    for key in parent:
      classes[find(key)].append(tensors[key])
    self.scale_classes = [c for c in classes.values() if len(c) > 1]

  def _fuse_channel_multiply(self, g, member):
    """Extends a linear Dense group by the per-channel multiply that alone
    reads its tail (ConvNeXt's LayerScale), and by the identity layers after
    it, so that a residual Add after them reads the group's int8 output."""
    nxt = self.graph.sole_consumer(g.tail)
    if nxt is None or id(nxt) in member:
      return
    w = _channel_multiplier(nxt)
    if w is None:
      return
    g.channel_scale = w
    g.extend(nxt)
    self._extend_through_identities(g, member)

  def _model_input(self, t):
    """Whether t is one of the model's inputs."""
    producer = self.graph.producer.get(id(t))
    return producer is not None and producer.is_input

  def _fuse_dense_batch_norm(self, g, member):
    """Extends a linear Dense group by the BatchNormalization of its output's
    last axis (its units) that alone reads its tail: folded into the kernel
    and bias per unit as a conv's BN is (a classifier head's Dense + BN +
    ReLU)."""
    nxt = self.graph.sole_consumer(g.tail)
    if (nxt is None or id(nxt) in member or
        type(nxt.operation) is not keras.layers.BatchNormalization or  # pylint: disable=unidiomatic-typecheck
        _single_tensor_call(nxt) is None or not _float_dtype_ok(nxt.operation)):
      return
    axis = nxt.operation.axis
    axis = axis[0] if isinstance(axis, (list, tuple)) and len(axis) == 1 else axis
    rank = len(g.tail.shape)
    if not isinstance(axis, int) or axis not in (-1, rank - 1):
      return
    g.bn_node = nxt
    g.extend(nxt)

  def _extend_through_identities(self, g, member=()):
    """Extends g by the layers that are the identity at inference (Dropout,
    Identity, Activation("linear")) that alone read its tail, one after the
    other, so that an Add after them still reads the group's output."""
    nxt = self.graph.sole_consumer(g.tail)
    while nxt is not None and id(nxt) not in member and _inference_identity(nxt):
      g.extend(nxt)
      nxt = self.graph.sole_consumer(g.tail)

  def _fuse_relu(self, g, member):
    """Extends g by the ReLU / ReLU6 / ReLU(max_value=m) that alone reads
    its tail, if that is in no other group."""
    nxt = self.graph.sole_consumer(g.tail)
    if nxt is not None and id(nxt) not in member:
      g.fuse_activation(nxt)

  def _int8_add_inputs(self, node):
    """The two NHWC input tensors of a plain two-input Add of equal shapes,
    else None."""
    ins = _two_input_add(node)
    if (ins is None or not all(_rank4_channels(t) for t in ins) or
        not self._same_shape(ins[0], ins[1])):
      return None
    return ins

  def _chain(self, conv_node):
    g = _Group(conv_node)
    # A ZeroPadding2D feeding only this convolution: explicit padding.
    x = g.input
    pad = self.graph.producer.get(id(x))
    if pad is not None and not pad.is_input and not g.transpose and (
        self.graph.sole_consumer(x) is conv_node):
      zero_pads = _zero_padding_pairs(pad)
      if zero_pads is not None:
        shape = pad.input_tensors[0].shape
        merged = _merged_padding(conv_node.operation, zero_pads,
                                 (shape[1], shape[2]))
        if merged is not None:
          g.pad_node = pad
          g.padding = merged
          g.input = pad.input_tensors[0]
          g.members.insert(0, pad)
    nxt = self.graph.sole_consumer(g.tail)
    if (g.relu_max is None and nxt is not None and
        type(nxt.operation) is keras.layers.BatchNormalization and  # pylint: disable=unidiomatic-typecheck
        _bn_problem(nxt) is None):
      g.bn_node = nxt
      g.extend(nxt)
      nxt = self.graph.sole_consumer(g.tail)
    hard_sigmoid = (_hard_sigmoid_chain(self.graph, nxt)
                    if g.relu_max is None and g.lut is None else None)
    if hard_sigmoid is not None:
      # MobileNetV3's squeeze-excite gate: a table, so that the gate is int8
      # (as EfficientNet's sigmoid gate) and the block stays in sequences.
      g.lut, g.pre_lut = "hard_sigmoid", g.tail
      for n in hard_sigmoid:
        g.extend(n)
    else:
      g.fuse_activation(nxt)
    # Layers that are the identity at inference (Dropout before a residual
    # Add, as in EfficientNet): part of the stack, so that the Add after them
    # still takes the stack's output as its side input.
    self._extend_through_identities(g)
    return g

  def _assign_adds(self):
    by_tail = {id(g.tail): g for g in self.groups}
    level = self.graph.level
    for node in self.graph.nodes:
      ins, scale = _two_input_add(node), None
      if ins is None:
        scaled = _scaled_add(node)
        if scaled is None:
          continue
        # InceptionResNetV2's x + r * scale: the stack that computes r (a
        # linear conv, its only reader this layer) takes x as its side input,
        # with the scale folded into its kernel and bias.
        ins, scale = scaled
      candidates = []
      for i, t in enumerate(ins):
        g = by_tail.get(id(t))
        other = ins[1 - i]
        if (g is None or g.relu_max is not None or g.lut is not None or
            g.add_node is not None or g.transpose or
            self.graph.sole_consumer(t) is not node or
            not self._same_shape(t, other)):
          continue
        if scale is not None and (i != 1 or g.dense or g.channel_scale is not None or
                                  not _is_conv(g.conv_node.operation)):
          continue
        candidates.append(((level[id(g.input)], i), g, other))
      if not candidates:
        continue
      # The stack on the longer path from the inputs (the main path of a
      # ResNet block; the other input, e.g. a projection shortcut conv, is
      # then an int8 side input of its own); ties: the second Add input.
      _, g, other = max(candidates, key=lambda c: c[0])
      if scale is not None:
        g.channel_scale = np.full([int(g.tail.shape[-1])], scale)
      g.add_node = node
      g.side = other
      g.extend(node)
      g.fuse_activation(self.graph.sole_consumer(g.tail))

  @staticmethod
  def _same_shape(a, b):
    """Both [N, H, W, C] of one dtype, no known dimension differing (the op
    needs the side input to have the output's shape: no broadcasting)."""
    if len(a.shape) != 4 or len(b.shape) != 4 or a.dtype != b.dtype:
      return False
    return all(x is None or y is None or x == y
               for x, y in zip(a.shape, b.shape))

  def _bn_reason(self, node):
    problem = _bn_problem(node)
    if problem:
      return problem
    x = node.input_tensors[0]
    prod = self.graph.producer.get(id(x))
    if prod is None or not _is_conv(prod.operation):
      return "its input is not a Conv2D or DepthwiseConv2D output"
    kind = type(prod.operation).__name__
    if _conv_problem(prod):
      return f"its {kind} is not quantized"
    if _activation_name(prod.operation.activation) != "linear":
      return (f"its {kind} has an activation (BN after ReLU cannot be "
              f"folded)")
    return f"the {kind} output is also used elsewhere"

  def calibration_tensors(self):
    seen, out = set(), []
    for g in self.groups:
      for t in (g.input, g.side, g.pre_lut, g.tail):
        if t is not None and id(t) not in seen:
          seen.add(id(t))
          out.append(t)
    for t in self.concat_inputs + [
        out for _, _, out in self.gate_multiplies.values()] + [
            out for _, out in self.layer_norms.values()]:
      if id(t) not in seen:
        seen.add(id(t))
        out.append(t)
    return out

  def share_scales(self, scale_of):
    """Gives every tensor of a scale class the largest calibrated scale of
    the class (in place)."""
    for tensors in self.scale_classes:
      known = [scale_of[id(t)] for t in tensors if id(t) in scale_of]
      if not known:
        continue
      shared = max(known)
      for t in tensors:
        scale_of[id(t)] = shared

  def warn(self, stacklevel=3):
    if not self.float_notes:
      return
    items = [f"'{name}' ({cls}" + (f": {why})" if why else ")")
             for name, cls, why in self.float_notes]
    warnings.warn(
        f"quantize_model: {len(items)} layer(s) stay float (not quantized): "
        + ", ".join(items), QuantizationWarning, stacklevel=stacklevel)


# ------------------------------------------------------------ calibration

class _AbsHistogram:
  """Histogram of |x| over [0, top) in _HIST_BINS bins; `top` doubles (bins
  merge pairwise, so the counts stay exact) when a larger value arrives."""

  def __init__(self):
    self.counts = None
    self.top = 0.0
    self.zeros = 0
    self.amax = 0.0

  def update(self, a):
    if a.size == 0:
      return
    m = float(a.max())
    self.amax = max(self.amax, m)
    if m == 0.0 and self.counts is None:
      self.zeros += a.size
      return
    if self.counts is None:
      self.counts = np.zeros(_HIST_BINS, np.int64)
      self.counts[0] = self.zeros
      self.top = m
    while m >= self.top:
      merged = self.counts.reshape(-1, 2).sum(axis=1)
      self.counts = np.concatenate([merged, np.zeros_like(merged)])
      self.top *= 2.0
    idx = np.minimum((a.astype(np.float64) * (_HIST_BINS / self.top)).astype(
        np.int64), _HIST_BINS - 1)
    self.counts += np.bincount(idx, minlength=_HIST_BINS)

  def percentile(self, p):
    if self.counts is None:
      return 0.0
    cum = np.cumsum(self.counts)
    target = p / 100.0 * cum[-1]
    i = int(np.searchsorted(cum, target, side="left"))
    i = min(i, _HIST_BINS - 1)
    below = cum[i - 1] if i else 0
    frac = (target - below) / self.counts[i] if self.counts[i] else 1.0
    width = self.top / _HIST_BINS
    return float(min(self.amax, (i + min(max(frac, 0.0), 1.0)) * width))


def _n_inputs(model):
  return len(model.inputs)


def _is_array(x):
  return isinstance(x, (np.ndarray, tf.Tensor)) or (
      hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "__len__"))


def _as_array_inputs(data, n_inputs):
  """The arrays of `data` when it is numpy-like input data, else None."""
  if _is_array(data):
    return data
  if isinstance(data, dict) and data and all(_is_array(v)
                                             for v in data.values()):
    return data
  if isinstance(data, (list, tuple)) and data and all(_is_array(v)
                                                      for v in data):
    if n_inputs > 1 and len(data) == n_inputs:
      return list(data)
    if isinstance(data, tuple) and n_inputs == 1 and len(data) <= 3:
      return data[0]  # Keras's (x, y[, sample_weight])
  return None


def _batches(data, n_inputs, batch_size, steps):
  """(iterator over input batches, number of batches or None)."""
  arrays = _as_array_inputs(data, n_inputs)
  if arrays is not None:
    flat = keras.tree.flatten(arrays)
    n = int(flat[0].shape[0])
    if any(int(a.shape[0]) != n for a in flat):
      raise ValueError("calibration arrays must have the same number of "
                       "samples (first dimension)")
    if batch_size is None or batch_size < 1:
      raise ValueError(f"batch_size must be a positive int, got "
                       f"{batch_size!r}")
    total = -(-n // batch_size)
    if steps is not None:
      total = min(total, steps)

    def gen():
      for i in range(total):
        yield keras.tree.map_structure(
            lambda a, i=i: a[i * batch_size:(i + 1) * batch_size], arrays)
    return gen(), total

  if isinstance(data, tf.data.Dataset):
    card = int(data.cardinality())
    total = card if card >= 0 else None
    it = iter(data)
  elif isinstance(data, keras.utils.PyDataset):
    total = len(data)
    it = (data[i] for i in range(total))
  elif hasattr(data, "__iter__") or hasattr(data, "__next__"):
    try:
      total = len(data)
    except TypeError:
      total = None
    it = iter(data)
  else:
    raise TypeError(
        f"calibration_data must be a tf.data.Dataset, numpy arrays, a "
        f"keras.utils.PyDataset or a generator/iterable of batches, got "
        f"{type(data).__name__}")
  if steps is not None:
    total = steps if total is None else min(total, steps)

  def unpack():
    for elem in (it if steps is None else itertools.islice(it, steps)):
      x, _, _ = keras.utils.unpack_x_y_sample_weight(elem)
      yield x
  return unpack(), total


def _calibrate_tensors(model, tensors, data, method, percentile, batch_size,
                       steps, verbose):
  if method not in _METHODS:
    raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
  if method == "percentile" and not 0.0 < float(percentile) <= 100.0:
    raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
  keys = [_tensor_key(t) for t in tensors]
  if not tensors:
    return {}
  probe = keras.Model(model.input, list(tensors), name="calibration_probe")
  run = tf.function(lambda x: probe(x, training=False), reduce_retracing=True)
  batches, total = _batches(data, _n_inputs(model), batch_size, steps)
  amax = [0.0] * len(tensors)
  hists = [_AbsHistogram() for _ in tensors] if method == "percentile" else None
  bar = keras.utils.Progbar(total, verbose=verbose, unit_name="batch")
  seen = 0
  for x in batches:
    outs = run(keras.tree.map_structure(tf.convert_to_tensor, x))
    if not isinstance(outs, (list, tuple)):
      outs = [outs]
    for i, y in enumerate(outs):
      a = np.abs(np.asarray(y, np.float32)).reshape(-1)
      if not np.all(np.isfinite(a)):
        raise ValueError(f"calibration: tensor '{keys[i]}' has NaN or Inf "
                         f"values")
      if a.size:
        amax[i] = max(amax[i], float(a.max()))
      if hists is not None:
        hists[i].update(a)
    seen += 1
    bar.update(seen)
  if seen == 0:
    raise ValueError("calibration_data gave no batches")
  if total is None or seen < total:
    bar.update(seen, finalize=True)
  scales = {}
  for i, key in enumerate(keys):
    r = amax[i] if hists is None else hists[i].percentile(float(percentile))
    scales[key] = float(np.float32(r / 127.0)) if r > 0 else 1.0
    if scales[key] == 0.0:  # float32 underflow
      scales[key] = 1.0
  return scales


def _check_dense(dense):
  if not (dense is True or dense is False or dense == "inputs"):
    raise ValueError(f"dense must be True, False or 'inputs', got {dense!r}")


def calibrate(model, calibration_data, *, method="minmax", percentile=99.99,
              batch_size=32, steps=None, verbose=1, dense=True):
  """Activation scales for `quantize_model`, from the float model.

  Runs the float `model` (inference mode) over `calibration_data` with a
  Keras progress bar and returns ``{tensor name: scale}`` for every tensor
  that becomes int8: the input of each fused convolution, its residual (side
  input) and its output. A tensor is named after the layer that produces it
  (``"name:node:output"`` for a shared layer's later calls or a later
  output). Scales are float32 values: ``max|x| / 127`` (``"minmax"``) or the
  ``percentile``-th percentile of |x| over all values / 127
  (``"percentile"``, from a 2048-bin histogram); an all-zero tensor gets 1.

  `calibration_data`: a ``tf.data.Dataset`` of batches, numpy arrays (split
  into `batch_size` batches; several inputs as a list or dict of arrays), a
  ``keras.utils.PyDataset``, or a generator / iterable of batches. Elements
  may be ``x``, ``(x, y)`` or ``(x, y, sample_weight)`` like in
  ``model.fit``; only ``x`` is used. `steps` limits the number of batches.
  `dense` as in ``quantize_model`` (the scales of dense="inputs" serve all
  three values, those of dense=True serve True and False).
  """
  _check_dense(dense)
  graph = _Graph(_split_layers(_lift_1d(_functional(model))))
  plan = _Plan(graph, dense=dense)
  return _calibrate_tensors(graph.model, plan.calibration_tensors(),
                            calibration_data, method, percentile, batch_size,
                            steps, verbose)


# ------------------------------------------------------------- rewriting

def _clone_layer(op):
  """A copy of a float layer (same config; weights set after it is built)."""
  if not isinstance(op, keras.layers.Layer):
    return op  # a stateless operation (e.g. keras.ops on KerasTensors)
  try:
    if isinstance(op, keras.Model):
      return keras.models.clone_model(op)
    return op.__class__.from_config(op.get_config())
  except Exception:  # pylint: disable=broad-except
    return op  # shared with the float model, which is still correct


def _group_weights(group):
  """(float64 HWIO kernel [Kh, Kw, Ci / G, Co], float64 bias [Co], G),
  with BN folded. A DepthwiseConv2D kernel [Kh, Kw, Ci, M] becomes
  [Kh, Kw, 1, Ci * M] with G = Ci (output channel c * M + m, the order of
  DepthwiseConv2D's output, so its bias and a following BN apply as is)."""
  conv = group.conv_node.operation
  if group.add_only:
    channels = int(group.input.shape[-1])
    return np.ones([1, 1, 1, channels]), np.zeros([channels]), channels
  if group.dense:
    kernel = np.asarray(conv.kernel.numpy(), np.float64)
    b = (np.asarray(conv.bias.numpy(), np.float64) if conv.use_bias else
         np.zeros(kernel.shape[-1]))
    if group.bn_node is not None:  # per unit, the kernel's last axis
      bn = group.bn_node.operation
      kernel, b = fold_batch_norm(
          kernel, b, bn.gamma.numpy() if bn.scale else None,
          bn.beta.numpy() if bn.center else None, bn.moving_mean.numpy(),
          bn.moving_variance.numpy(), bn.epsilon)
    if group.channel_scale is not None:
      kernel = kernel * group.channel_scale
      b = b * group.channel_scale
    return kernel.reshape((1, 1) + kernel.shape), b, 1
  if group.avg_pool is not None:
    (kh, kw), _ = group.avg_pool
    channels = int(group.input.shape[-1])
    return (np.full([kh, kw, 1, channels], 1.0 / (kh * kw)),
            np.zeros([channels]), channels)
  if group.bn_only:
    bn = conv
    channels = int(bn.moving_mean.shape[0])
    kernel, b = fold_batch_norm(
        np.ones([1, 1, 1, channels]), None,
        bn.gamma.numpy() if bn.scale else None,
        bn.beta.numpy() if bn.center else None,
        bn.moving_mean.numpy(), bn.moving_variance.numpy(), bn.epsilon)
    return kernel, b, channels
  weights = conv.get_weights()
  kernel = np.asarray(weights[0], np.float64)
  bias = weights[1] if conv.use_bias else None
  tiles = 1
  if group.transpose:
    # Conv2DTranspose [kh, kw, Co, Ci] -> [th, tw, Ci, s_h * s_w * Co]
    # (_transpose_plan): output channel (r_h * s_w + r_w) * Co + co of tap
    # (u, v) is W[s_h (th - 1 - u) + r_h, s_w (tw - 1 - v) + r_w, co, :],
    # zero past the kernel; depth-to-space puts phase (r_h, r_w) of pixel
    # (q_h, q_w) at (s_h q_h + r_h, s_w q_w + r_w). The per-channel bias
    # and BN repeat per phase.
    sh, sw = group.transpose.strides
    th, tw = group.transpose.taps
    kh, kw, co, ci = kernel.shape
    sub = np.zeros([th, tw, ci, sh, sw, co])
    for u in range(th):
      for v in range(tw):
        for rh in range(sh):
          for rw in range(sw):
            a, c = sh * (th - 1 - u) + rh, sw * (tw - 1 - v) + rw
            if a < kh and c < kw:
              sub[u, v, :, rh, rw, :] = kernel[a, c].T
    kernel = sub.reshape(th, tw, ci, sh * sw * co)
    tiles = sh * sw
    bias = None if bias is None else np.tile(np.asarray(bias, np.float64), tiles)
    groups = 1
  elif _is_depthwise(conv):
    groups = kernel.shape[2]
    kernel = depthwise_to_grouped_kernel(kernel)
  else:
    groups = conv.groups
  if group.bn_node is None:
    b = (np.zeros(kernel.shape[-1]) if bias is None else
         np.asarray(bias, np.float64))
  else:
    bn = group.bn_node.operation
    tiled = lambda v: np.tile(v.numpy(), tiles)  # per output channel
    kernel, b = fold_batch_norm(
        kernel, bias,
        tiled(bn.gamma) if bn.scale else None,
        tiled(bn.beta) if bn.center else None,
        tiled(bn.moving_mean), tiled(bn.moving_variance), bn.epsilon)
  if group.channel_scale is not None:  # InceptionResNetV2's residual scale
    kernel = kernel * group.channel_scale
    b = b * group.channel_scale
  return kernel, b, groups


class _UniqueNames:

  def __init__(self, taken):
    self.taken = set(taken)

  def __call__(self, base):
    name, k = base, 1
    while name in self.taken:
      name = f"{base}_{k}"
      k += 1
    self.taken.add(name)
    return name


def quantize_model(model, calibration_data=None, *, method="minmax",
                   percentile=99.99, per_channel=True, batch_size=32,
                   steps=None, scales=None, verbose=1, name=None,
                   dense=True):
  """Post-training int8 quantization of a float Keras CNN.

  Args:
    model: a functional or Sequential Keras model (float32) made of Conv2D,
      DepthwiseConv2D, ZeroPadding2D, BatchNormalization, ReLU / ReLU6 /
      ReLU(max_value=m), Add,
      pooling, Flatten, Dense, ... layers.
    calibration_data: representative inputs (a few hundred samples is
      plenty): a ``tf.data.Dataset`` of batches, numpy arrays, a
      ``keras.utils.PyDataset`` or a generator of batches (see
      ``calibrate``). Not needed when `scales` is given.
    method: "minmax" (``s = max|x| / 127``) or "percentile"
      (``s = P(|x|) / 127``, clipping rare outliers).
    percentile: the percentile for method="percentile" (default 99.99).
    per_channel: per-output-channel weight scales (else one per kernel).
    batch_size: batch size for numpy calibration arrays.
    steps: at most this many calibration batches.
    scales: ``{tensor name: scale}`` (as returned by ``calibrate``) to use
      instead of calibrating.
    verbose: 1 shows the calibration progress bar and a one-line summary,
      0 is silent.
    name: the new model's name (default ``<model.name>_int8``).
    dense: Dense layers (activation linear, relu or relu6) whose input is
      int8 run as ``QuantizedDense`` with a calibrated int8 output, and
      GlobalAveragePooling2D and Flatten of int8 tensors run in int8, as in
      TFLite's full-integer conversion: a classifier head's logits are then
      int8 at their calibrated scale (dequantized at the model output).
      False keeps them float (float logits, more time in the head).
      "inputs": as True, and a Dense that reads a model input runs as a
      QuantizedDense too, its input quantized per tensor as an image input
      is (a GAN generator's noise, a VAE decoder's latent: the whole
      generator int8). Not the default: one scale for raw features of
      different ranges (a tabular model's) rounds the small ones away.

  Returns:
    A new ``QuantizedModel`` (a functional ``keras.Model`` whose eager calls
    run a traced function: tf_fused_int8/quantized_model.py) with the float
    model's inputs and outputs in which
    every quantizable conv stack is one ``QuantizedFusedConv2D`` (BN folded,
    ReLU / ReLU6 / ReLU(max_value=m) fused, residual Add as side input
    (InceptionResNetV2's scaled residual too, the scale in the kernel), a
    preceding ZeroPadding2D as explicit padding; a DepthwiseConv2D becomes
    ``groups`` = its input channels; a BatchNormalization that follows no
    conv, with a ReLU after it, a 1x1 depthwise one; a channel Concatenate
    with an int8 input an Int8Concatenate, the tensors it joins sharing one
    scale; an AveragePooling2D of an int8 tensor whose windows never reach
    into padding a depthwise one with the filter 1 / (kh * kw), one whose
    windows do an Int8AveragePooling2D at its input's scale; with `dense`, a
    Dense on an int8 tensor a QuantizedDense and a GlobalAveragePooling2D
    of an int8 tensor of known size a depthwise one over the whole image), with ``Quantize`` /
    ``Dequantize`` layers at the borders of the int8 regions. MaxPooling2D,
    GlobalMaxPooling2D, ZeroPadding2D, Cropping2D and a nearest UpSampling2D
    applied to an int8 tensor run in int8 at its scale (exact: max commutes
    with the monotonic quantization, the others copy values; ResNet's stem
    pooling stays in the int8 region). The float model is not
    modified.

  Warns:
    QuantizationWarning listing every layer that stays float although it is
    not a plain float head/glue layer (e.g. a Conv2D with a sigmoid, a
    BatchNormalization that could not be folded, an unknown layer).
  """
  _check_dense(dense)
  graph = _Graph(_split_layers(_lift_1d(_functional(model))))
  src = graph.model
  plan = _Plan(graph, dense=dense)
  needed = plan.calibration_tensors()
  if scales is None:
    if calibration_data is None:
      raise ValueError("quantize_model needs calibration_data (or scales=)")
    scales = _calibrate_tensors(src, needed, calibration_data, method,
                                percentile, batch_size, steps, verbose)
  else:
    scales = dict(scales)
    missing = [_tensor_key(t) for t in needed if _tensor_key(t) not in scales]
    if missing:
      raise ValueError(f"scales has no entry for {missing}; calibrate(model, "
                       f"data) gives all of them (scales calibrated with "
                       f"dense=False serve quantize_model(..., dense=False))")
  scale_of = {id(t): _check_scale(scales[_tensor_key(t)],
                                  f"scale of '{_tensor_key(t)}'")
              for t in needed}

  plan.share_scales(scale_of)

  names = _UniqueNames(l.name for l in src.layers)

  def int8_name(op):
    """The name of op's int8 layer: op's own, or a fresh `<name>_int8` when
    op is called more than once (its int8 layers are one per call)."""
    return (names(f"{op.name}_int8") if len(op._inbound_nodes) > 1  # pylint: disable=protected-access
            else op.name)
  float_of, int8_of = {}, {}
  clones, int8_clones = {}, {}
  counts = collections.Counter()

  def get_float(t):
    if id(t) not in float_of:
      q = int8_of[id(t)]
      float_of[id(t)] = Dequantize(
          scale_of[id(t)], name=names(f"{_layer_key(t)}_dequantize"))(q)
      counts["dequantize"] += 1
    return float_of[id(t)]

  def get_int8(t):
    if id(t) not in int8_of:
      # The Rescaling / Normalization layers that compute t from a model
      # input run in the Quantize op (the same bits): in TF they were
      # three broadcasting elementwise ops over the image, ~0.65 ms of a
      # quantized EfficientNetB0 at batch 1 (224x224x3, 2 threads, Zen 4),
      # against ~0.06 ms folded.
      source, steps = t, None
      if _FOLD_PREPROCESSING:
        source, steps = _preprocess_chain(graph, t, float_of)
      int8_of[id(t)] = Quantize(
          scale_of[id(t)], preprocess=steps,
          name=names(f"{_layer_key(t)}_quantize"))(get_float(source))
      counts["quantize"] += 1
    return int8_of[id(t)]

  new_inputs = _new_inputs(src, float_of)
  qconv_names = set()
  # Conv2D layers also called as float layers keep their name there.
  float_convs = {id(n.operation) for n in graph.nodes
                 if not n.is_input and id(n) not in plan.member_ids}
  for node in graph.nodes:
    if node.is_input:
      continue
    group = plan.tail_of.get(id(node))
    if group is not None:
      conv = group.conv_node.operation
      kernel, bias, groups = _group_weights(group)
      if id(conv) in float_convs or conv.name in qconv_names:
        base = names(f"{conv.name}_int8")
      else:
        base = conv.name  # the Conv2D's name, now free
      qconv_names.add(base)
      s_out = scale_of[id(group.tail)]
      lut_kwargs = {}
      if group.lut is not None:
        # The epilogue quantizes the activation's input at its calibrated
        # scale; the table maps that to the activation's output at s_out.
        s_pre = scale_of[id(group.pre_lut)]
        lut_kwargs["output_lut"] = ops.activation_lut(group.lut, s_pre,
                                                          s_out)
        s_out = s_pre
      if group.dense:
        layer = QuantizedDense.from_float_weights(
            kernel, bias, input_scale=scale_of[id(group.input)],
            output_scale=s_out, per_channel_scale=per_channel, name=base,
            **_activation_kwargs(group.relu_max, s_out), **lut_kwargs)
        int8_of[id(group.tail)] = layer(get_int8(group.input))
        counts["dense"] += 1
        continue
      layer = QuantizedFusedConv2D.from_float_weights(
          kernel, bias,
          input_scale=scale_of[id(group.input)],
          output_scale=s_out,
          side_input_scale=(None if group.side is None else
                            scale_of[id(group.side)]),
          # A BN's filter is one value per channel: always per channel
          # (exact: each channel's value quantizes to +-127).
          per_channel_scale=per_channel or group.bn_only,
          strides=group.strides, padding=group.padding,
          dilation_rate=group.dilation_rate, groups=groups,
          name=base, **_activation_kwargs(group.relu_max, s_out),
          **lut_kwargs)
      x = get_int8(group.input)
      if group.side is None:
        y = layer(x)
      else:
        y = layer(x, side_input=get_int8(group.side))
      if group.global_pool is not None and not group.global_pool[1]:
        y = Int8Reshape((int(y.shape[-1]),),
                        name=names(f"{base}_reshape"))(y)
      if group.transpose:
        if group.transpose.strides != (1, 1):
          y = Int8DepthToSpace(group.transpose.strides,
                               name=names(f"{base}_depth_to_space"))(y)
        if any(group.transpose.crop[0] + group.transpose.crop[1]):
          y = Int8Cropping2D(group.transpose.crop, name=names(f"{base}_crop"))(y)
      int8_of[id(group.tail)] = y
      counts["conv"] += 1
      counts["depthwise"] += (_is_depthwise(conv) or group.bn_only or
                              group.add_only or
                              group.avg_pool is not None)
      counts["bn"] += group.bn_node is not None or group.bn_only
      counts["add"] += group.add_node is not None or group.add_only
      continue
    if id(node) in plan.gate_multiplies:
      x, gate, out = plan.gate_multiplies[id(node)]
      op = node.operation
      int8_of[id(out)] = Int8ChannelMultiply(
          scale_of[id(x)], scale_of[id(out)],
          name=int8_name(op))([get_int8(x), get_float(gate)])
      counts["multiply"] += 1
      continue
    if id(node) in plan.layer_norms:
      x, out = plan.layer_norms[id(node)]
      op = node.operation
      int8_of[id(out)] = Int8LayerNormalization.from_float_weights(
          op.gamma.numpy() if op.scale else None,
          op.beta.numpy() if op.center else None, int(x.shape[-1]),
          input_scale=scale_of[id(x)], output_scale=scale_of[id(out)],
          epsilon=op.epsilon,
          name=int8_name(op))(get_int8(x))
      counts["layer_norm"] += 1
      continue
    if id(node) in plan.member_ids:
      continue  # part of a fused convolution, built at its last node
    op = node.operation
    if (_int8_passthrough(node, dense) and
        id(node.input_tensors[0]) in int8_of and
        (not _planned_passthrough_only(node) or id(node) in plan.int8_planned)):
      # Max pooling and zero padding of an int8 tensor, in int8, at its
      # scale: exact (rounding and clipping are monotonic, so they commute
      # with max; padding zeros are int8 zeros), and no float round trip.
      # Likewise an average pooling whose windows reach SAME's padding: the
      # exact window average rounded once at the input's scale.
      # The copy is the int8 twin of the layer (same config).
      t, out = node.input_tensors[0], node.outputs[0]
      relu_max = _relu_max(node)
      int8_op = int8_clones.get(id(op))
      if relu_max is not None:
        # The bound depends on this call's input scale: one layer per call.
        shared = int8_op is not None or len(op._inbound_nodes) > 1  # pylint: disable=protected-access
        int8_op = Int8ReLU(
            _relu_output_max(relu_max, scale_of[id(t)]),
            name=names(f"{op.name}_int8") if shared else op.name)
        int8_clones[id(op)] = int8_op
      elif int8_op is None:
        config = op.get_config()
        config["name"] = int8_name(op)
        pad = _folded_zero_padding(node, graph, int8_of)
        if pad is not None:
          # A ZeroPadding2D feeding only this pooling: its zeros are added
          # in the pooling op (no padded copy). The ZeroPadding2D's own int8
          # twin, built at its node, is then read by nothing and is not part
          # of the model.
          config["zero_padding"] = pad[0]
          t = pad[1]
        int8_op = int8_clones[id(op)] = _INT8_PASSTHROUGH[type(op)].from_config(
            config)
      int8_of[id(out)] = int8_op(int8_of[id(t)])
      scale_of[id(out)] = scale_of[id(t)]
      counts["int8_pool"] += 1
      continue
    if id(node) in plan.int8_concats:
      # The joined tensors share one scale (plan.share_scales): in int8 the
      # concatenation is a copy of bytes, exact.
      int8_op = int8_clones.get(id(op))
      if int8_op is None:
        config = op.get_config()
        config["name"] = int8_name(op)
        int8_op = int8_clones[id(op)] = Int8Concatenate.from_config(config)
      out = node.outputs[0]
      int8_of[id(out)] = int8_op([get_int8(t) for t in node.input_tensors])
      counts["int8_concat"] += 1
      continue
    _call_float_copy(node, clones, float_of,
                     {id(t): get_float(t) for t in node.input_tensors})
  new_outputs = keras.tree.map_structure(get_float, src.output)
  qmodel = QuantizedModel(new_inputs, new_outputs,
                          name=name or f"{model.name}_int8")
  # A Rescaling / Normalization folded into its Quantize (preprocess) is
  # not float any more, nor a layer that ran as its int8 passthrough (a
  # nearest UpSampling2D): not in the warning.
  kept = {l.name: type(l) for l in qmodel.layers}
  int8_classes = set(_INT8_PASSTHROUGH.values())
  plan.float_notes = [
      n for n in plan.float_notes
      if (n[1] not in ("Rescaling", "Normalization") or n[0] in kept) and
      kept.get(n[0]) not in int8_classes]
  plan.warn()
  if verbose:
    print(f"quantize_model: {counts['conv']} QuantizedFusedConv2D "
          f"({counts['depthwise']} depthwise, {counts['bn']} "
          f"BatchNormalization folded, {counts['add']} "
          f"residual Add as side input), {counts['dense']} QuantizedDense, "
          f"{counts['quantize']} Quantize, "
          f"{counts['dequantize']} Dequantize; "
          f"{len(plan.float_notes)} unsupported layer(s) left float")
  return qmodel


def _relu_step_input(node):
  """The int8 [N, H, W, C] input of an Int8ReLU node (C known), which runs
  as the identity 1x1 depthwise convolution (_relu_step_conv), else None."""
  if type(node.operation) is not Int8ReLU:  # pylint: disable=unidiomatic-typecheck
    return None
  x = _single_tensor_call(node)
  if (x is None or len(x.shape) != 4 or x.shape[-1] is None or
      keras.backend.standardize_dtype(x.dtype) != "int8"):
    return None
  return x


def _relu_step_conv(node):
  """An Int8ReLU as a sequence step: the QuantizedFusedConv2D twin of what
  its call runs (Int8ReLU.call: a 1x1 depthwise conv, filter 1, scale 1,
  bias 0, Relu up to output_max), the same bits."""
  c = int(_relu_step_input(node).shape[-1])
  conv = QuantizedFusedConv2D(c, 1, groups=c, activation="relu",
                              per_channel_scale=False,
                              output_max=node.operation.output_max,
                              name=node.operation.name)
  conv.build((None, None, None, c))
  ones, zeros = ops._identity_depthwise_operands(c)  # pylint: disable=protected-access
  conv.set_weights([ones.numpy(), zeros.numpy(), np.float32(1.0)])
  return conv


def _sequence_step(node):
  """(input tensor, side tensor or None) of a node that can be a step of a
  QuantizedConvSequence: a QuantizedFusedConv2D (not a QuantizedDense; its
  output_lut, if any, runs in the step), called as layer(x) or layer(x,
  side_input=s), or an Int8ReLU of an int8 [N, H, W, C] tensor
  (_relu_step_conv); else None."""
  op = node.operation
  relu_input = _relu_step_input(node)
  if relu_input is not None:
    return relu_input, None
  if (type(op) is not QuantizedFusedConv2D or  # pylint: disable=unidiomatic-typecheck
      len(node.outputs) != 1):
    return None
  args, kwargs = node.arguments.args, node.arguments.kwargs
  if len(args) != 1 or any(k != "side_input" for k in kwargs):
    return None
  x, side = args[0], kwargs.get("side_input")
  tensors = [id(t) for t in node.input_tensors]
  if id(x) not in tensors or (side is not None and id(side) not in tensors):
    return None
  return x, side


def _phase_boxes(kernel, block):
  """Per phase row and per phase column of a sub-pixel kernel [Th, Tw, Ci,
  bh * bw * Co] (phase (r_h, r_w) in channels (r_h * bw + r_w) * Co ..),
  the (start, taps) box of the kernel rows (columns) that hold its non-zero
  weights (one tap where there are none: zeros are multiplied exactly)."""
  th, tw = kernel.shape[:2]
  bh, bw = block
  phases = kernel.reshape(th, tw, kernel.shape[2], bh, bw, -1) != 0
  rows, cols = [], []
  for rh in range(bh):
    used = np.flatnonzero(phases[:, :, :, rh].any(axis=(1, 2, 3, 4)))
    rows.append((int(used[0]), int(used[-1] - used[0] + 1)) if used.size else (th - 1, 1))
  for rw in range(bw):
    used = np.flatnonzero(phases[:, :, :, :, rw].any(axis=(0, 2, 3, 4)))
    cols.append((int(used[0]), int(used[-1] - used[0] + 1)) if used.size else (tw - 1, 1))
  return tuple(rows), tuple(cols)


def _transposed_pattern(graph, node):
  """(last node, conv node, inner nodes, phases) when `node` is the
  Int8DepthToSpace of a transposed convolution quantize_model made
  (_transpose_plan): a built QuantizedFusedConv2D (stride, dilation and
  groups 1, explicit padding, no side input) read only by it, and that
  only by an Int8Cropping2D, if any; phases: its block, crop and the
  boxes of its kernel's non-zero taps (_phase_boxes), where they leave out
  enough taps to make up for their smaller blocks of channels (below; else
  running the phases apart would multiply as much or more, in smaller
  pieces). Else None."""
  op = node.operation
  if type(op) is not Int8DepthToSpace:  # pylint: disable=unidiomatic-typecheck
    return None
  x = _single_tensor_call(node)
  conv = None if x is None else graph.producer.get(id(x))
  if conv is None or graph.sole_consumer(x) is not node:
    return None
  step = _sequence_step(conv)
  layer = conv.operation
  if (step is None or step[1] is not None or
      type(layer) is not QuantizedFusedConv2D or not layer.built or  # pylint: disable=unidiomatic-typecheck
      layer.strides != (1, 1) or layer.dilation_rate != (1, 1) or
      layer.groups != 1 or isinstance(layer.padding, str)):
    return None
  block = op._pair()  # pylint: disable=protected-access
  if layer.filters % (block[0] * block[1]):
    return None
  kernel = layer.get_weights()[0]
  rows, cols = _phase_boxes(kernel, block)
  th, tw = kernel.shape[:2]
  # The kernels compute output channels in blocks of 16 or more lanes: a
  # phase of few channels fills a block with zeros, so the phases go apart
  # only where their taps times their blocks are fewer than the sub-pixel
  # convolution's (TF's DCGAN generator's last layer, 1 channel of 4
  # phases, ran no faster apart, its 64-channel layer faster).
  co = layer.filters // (block[0] * block[1])
  apart = sum(n for _, n in rows) * sum(m for _, m in cols) * -(-co // 16)
  if apart >= th * tw * -(-layer.filters // 16):
    return None
  last, inner, crop = node, [conv, node], (0, 0, 0, 0)
  y = node.outputs[0]
  nxt = graph.sole_consumer(y)
  if (nxt is not None and type(nxt.operation) is Int8Cropping2D and  # pylint: disable=unidiomatic-typecheck
      nxt.operation.data_format == "channels_last" and
      _single_tensor_call(nxt) is y):
    (t, b), (l, r) = nxt.operation.cropping
    crop = (int(t), int(b), int(l), int(r))
    last = nxt
    inner.append(nxt)
  inner.remove(last)
  return last, conv, inner, dict(block=block, crop=crop, rows=rows, cols=cols)


class _Steps:
  """What fuse_conv_sequences can run as sequence steps, over `graph`: the
  QuantizedFusedConv2D nodes (_sequence_step), and each Int8ChannelMultiply
  whose gate is a Dequantize of an int8 tensor read by it alone (a channel
  scale step: the squeeze-excite gate applied as those two layers compute
  it). Int8Reshape chains that give back their source's shape (the squeeze's
  [N, 1, 1, C] -> [N, C] -> [N, 1, 1, C], each link read only by the next)
  read as their source, and such a chain or a gate's Dequantize as the
  nodes that read them (absorbed: they vanish inside a sequence)."""

  def __init__(self, graph):
    self.graph = graph
    self.alias = {}      # id(chain's last output) -> its source tensor
    # id(absorbed node) -> (its nodes, their last output): a reshape chain,
    # or a gate's Dequantize alone.
    self.chain_of = {}
    for node in graph.nodes:
      if type(node.operation) is not Int8Reshape:  # pylint: disable=unidiomatic-typecheck
        continue
      chain, cur = [node], _single_tensor_call(node)
      while cur is not None:
        prev = graph.producer.get(id(cur))
        if (prev is None or type(prev.operation) is not Int8Reshape or  # pylint: disable=unidiomatic-typecheck
            graph.sole_consumer(cur) is not chain[0]):
          break
        x = _single_tensor_call(prev)
        if x is None:
          break
        chain.insert(0, prev)
        cur = x
      if cur is None or len(node.outputs) != 1:
        continue
      out = node.outputs[0]
      if tuple(cur.shape) == tuple(out.shape) and len(cur.shape) == 4:
        self.alias[id(out)] = cur
        self.chain_of[id(chain[0])] = (chain, out)
    self.gate_of = {}  # id(Int8ChannelMultiply node) -> (x, gate, Dequantize node)
    for node in graph.nodes:
      if type(node.operation) is not Int8ChannelMultiply or len(  # pylint: disable=unidiomatic-typecheck
          node.input_tensors) != 2 or len(node.outputs) != 1:
        continue
      x, d = node.input_tensors
      deq = graph.producer.get(id(d))
      if (deq is None or type(deq.operation) is not Dequantize or  # pylint: disable=unidiomatic-typecheck
          graph.sole_consumer(d) is not node or id(d) in graph.output_ids):
        continue
      g = _single_tensor_call(deq)
      if g is None or len(g.shape) != 4 or len(x.shape) != 4:
        continue
      self.gate_of[id(node)] = (self.resolve(x), self.resolve(g), deq)
      self.chain_of[id(deq)] = ([deq], d)
    # Transposed convolutions: a QuantizedFusedConv2D read only by an
    # Int8DepthToSpace (and that only by an Int8Cropping2D, if any), what
    # quantize_model makes of a Conv2DTranspose, is one step at its last
    # node (_transposed_pattern); its other nodes are inner.
    self.transposed = {}  # id(last node) -> (conv node, [inner nodes], phases)
    self.inner = {}  # id(inner node) -> its step's last node
    for node in graph.nodes:
      found = _transposed_pattern(graph, node)
      if found is not None:
        last, conv, inner, phases = found
        self.transposed[id(last)] = (conv, inner, phases)
        self.inner.update((id(n), last) for n in inner)

  def resolve(self, t):
    return self.alias.get(id(t), t)

  def step(self, node):
    """(input, side or gate) of a step node, resolved, or None."""
    gate = self.gate_of.get(id(node))
    if gate is not None:
      return gate[0], gate[1]
    if id(node) in self.inner:
      return None
    transposed = self.transposed.get(id(node))
    if transposed is not None:
      return self.resolve(_sequence_step(transposed[0])[0]), None
    step = _sequence_step(node)
    if step is None:
      return None
    x, side = step
    return self.resolve(x), None if side is None else self.resolve(side)

  def consumers(self, t):
    """The nodes reading t, an absorbed chain's or Dequantize's readers in
    its place and a transposed step's last node for its conv; None where t
    (or a chain's output) is a model output."""
    if id(t) in self.graph.output_ids:
      return None
    out = []
    for c in self.graph.consumers.get(id(t), []):
      c = self.inner.get(id(c), c)  # a transposed step reads it
      absorbed = self.chain_of.get(id(c))
      if absorbed is None:
        out.append(c)
        continue
      more = self.consumers(absorbed[1])
      if more is None:
        return None
      out.extend(more)
    return out

  def absorbed_by(self, nodes):
    """The absorbed nodes (chains, Dequantizes) whose every reader is in
    `nodes` and whose source is one of their outputs."""
    inside = {id(n) for n in nodes}
    out = []
    for n in nodes:
      if id(n) in self.transposed:
        out.extend(self.transposed[id(n)][1])
      for c in self.graph.consumers.get(id(n.outputs[0]), []):
        absorbed = self.chain_of.get(id(c))
        if absorbed is None:
          continue
        chain, last = absorbed
        readers = self.consumers(last)
        if readers and all(id(r) in inside for r in readers):
          out.extend(chain)
    return out

  def layer(self, node):
    """The QuantizedConvSequence entry of a step node."""
    gate = self.gate_of.get(id(node))
    if gate is None:
      if id(node) in self.transposed:
        conv, _, phases = self.transposed[id(node)]
        return {"transposed": dict(conv=conv.operation, **phases)}
      if type(node.operation) is Int8ReLU:  # pylint: disable=unidiomatic-typecheck
        return _relu_step_conv(node)
      return node.operation
    x = gate[0]
    return {"channel_scale": {"channels": int(x.shape[-1]),
                              "gate_scale": gate[2].operation.scale,
                              "ratio": node.operation.ratio}}


class _Sequence:
  """A run of conv nodes (graph order) that read only the run's entry tensor
  and each other's outputs."""

  def __init__(self, entry, node):
    self.entry = entry
    self.nodes = [node]

  def source(self, t):
    """0 for the entry, k for the k-th node's output, None otherwise."""
    if id(t) == id(self.entry):
      return 0
    for k, node in enumerate(self.nodes):
      if id(node.outputs[0]) == id(t):
        return k + 1
    return None

  @staticmethod
  def _runs_alone(steps, nodes):
    """Whether `nodes` can be one sequence: each reads only the first
    node's input and the outputs of the nodes before it, and no output but
    the last node's is read outside them (or is a model output)."""
    known = {id(steps.step(nodes[0])[0])}
    for node in nodes:
      x, side = steps.step(node)
      if id(x) not in known or (side is not None and id(side) not in known):
        return False
      known.add(id(node.outputs[0]))
    inside = {id(n) for n in nodes}
    for n in nodes[:-1]:
      readers = steps.consumers(n.outputs[0])
      if readers is None or any(id(c) not in inside for c in readers):
        return False
    return True

  def branches(self, steps):
    """The run's nodes in groups (graph order kept) that no sequence can
    span: a node joins the group of every node reading its output when
    all of them are in the run, since a sequence holding one of them must
    hold the others; a node whose output is also read outside the run (or
    is a model output) joins its readers' groups through no edge of its
    own. Sibling branches that start from one tensor (an Inception
    block's 1x1 -> 5x5 and 1x1 -> 3x3 -> 3x3, each ending in the block's
    concatenation) are then groups of their own instead of one run whose
    graph order interleaves them (segments() cut from the front found
    none of them whole: InceptionV3 kept 62 single convolutions), while a
    ResNet block's shortcut conv, read only by the block's last conv,
    stays with it."""
    index = {id(n): i for i, n in enumerate(self.nodes)}
    parent = list(range(len(self.nodes)))

    def find(i):
      while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
      return i

    for i, node in enumerate(self.nodes):
      readers = steps.consumers(node.outputs[0])
      if not readers or any(id(c) not in index for c in readers):
        continue
      for c in readers:
        parent[find(index[id(c)])] = find(i)
    groups = {}  # in the order of their first nodes (dict order)
    for i, node in enumerate(self.nodes):
      groups.setdefault(find(i), []).append(node)
    return list(groups.values())

  def split(self, steps):
    """The run as sequences: each branch group (branches()) whole where it
    can be one sequence; else, where a node of the group forks (two or more
    of the group read its output), the nodes not downstream of the fork
    (it included) cut by segments() and the rest split again as a run from
    the fork's output, so that each branch after it can be a sequence
    (NASNet's ReLU -> separable conv branches from one conv's output,
    which graph order interleaves); else cut by segments()."""
    out = []
    for nodes in self.branches(steps):
      # A transposed convolution alone is a sequence too: one node instead
      # of three, and only its phases' taps multiplied.
      if len(nodes) < 2 and id(nodes[0]) not in steps.transposed:
        continue
      group = _Sequence(steps.step(nodes[0])[0], nodes[0])
      group.nodes = nodes
      if self._runs_alone(steps, nodes):
        out.append(group)
        continue
      inside = {id(n) for n in nodes}
      fork = next((i for i, n in enumerate(nodes) if sum(
          id(c) in inside for c in steps.consumers(n.outputs[0]) or ()) >= 2),
                  None)
      if fork is None:
        out.extend(group.segments(steps))
        continue
      reached, tail = {id(nodes[fork].outputs[0])}, []
      for n in nodes[fork + 1:]:
        x, side = steps.step(n)
        if id(x) in reached or (side is not None and id(side) in reached):
          reached.add(id(n.outputs[0]))
          tail.append(n)
      downstream = {id(n) for n in tail}
      head = [n for n in nodes if id(n) not in downstream]
      group.nodes = head
      out.extend(group.segments(steps))
      rest = _Sequence(nodes[fork].outputs[0], tail[0])
      rest.nodes = tail
      out.extend(rest.split(steps))
    return out

  def segments(self, steps):
    """The run cut into sequences of at least 2 nodes, from the front, each
    as long as it can be (_runs_alone): a node whose output is also read
    outside ends one, and the nodes after it may start the next. (Cutting
    only the longest prefix lost every later node of a run, now that lookup
    table layers join runs: EfficientNet's expand and depthwise convs
    follow a projection whose output the next block's residual reads.)"""
    out, i, nodes = [], 0, self.nodes
    while i < len(nodes) - 1:
      end = next((j for j in range(len(nodes), i + 1, -1)
                  if self._runs_alone(steps, nodes[i:j])), None)
      if end is None:
        i += 1
        continue
      seg = _Sequence(steps.step(nodes[i])[0], nodes[i])
      seg.nodes = nodes[i:end]
      out.append(seg)
      i = end
    return out


def fuse_conv_sequences(model, name=None):
  """Runs each chain of QuantizedFusedConv2D layers as one graph node.

  Returns a new ``QuantizedModel`` (same inputs, outputs and layers, the
  layers shared with `model`) in which every run of at least two
  ``QuantizedFusedConv2D`` layers (each reading the run's input or an
  earlier layer's output; residual side inputs included) that reads one
  tensor from outside and whose only output read outside is its last
  layer's is called as one
  ``QuantizedConvSequence`` (parallel branches from one tensor, an
  Inception block's, one each). The results are the same bits; in a
  ``tf.function`` the run is one ResourceFusedInt8ConvSequence node
  instead of one node per layer. A quantized MobileNetV2's 52
  convolutions become one sequence, a ResNet50's all but the stem.

  An ``Int8ReLU`` (a ReLU no conv absorbed, NASNet's and Xception's before
  their separable convs) is a step too: the identity 1x1 depthwise conv its
  call runs, the same bits. QuantizedDense layers and every other layer
  stay as they are and end a run (a conv's ``output_lut`` runs in its
  step), but for a squeeze-excite
  gate applied by ``Int8ChannelMultiply`` to a Dequantize of an int8 gate
  (a channel scale step, the same bits) and Int8Reshape pairs that give
  back their input's shape (read through), so that a quantized
  EfficientNet's blocks, squeeze-excite included, run as one sequence.

  A ``Conv2DTranspose`` that quantize_model made a sub-pixel convolution,
  an ``Int8DepthToSpace`` and an ``Int8Cropping2D`` is one step (a
  transposed step, even alone) where its phases read fewer taps than the
  sub-pixel kernel has (kernel > stride and not a multiple of it on an
  axis) and have channels enough (_transposed_pattern): each phase
  multiplies only its own taps (a 3x3 stride-2 kernel 9 of 16), the same
  bits (cc/core/transposed_conv.h). Measured on the Zen 4 VM, two threads,
  the fused model without and with these steps in one process, alternated,
  ``tf.function`` / ``InferenceRunner`` at batch 1: a convolutional
  autoencoder (two 3x3 stride-2 decoders, 32 -> 128 pixels) 0.77x / 0.77x
  the time, a U-Net with three 0.87x / 0.91x, TF's DCGAN generator (5x5
  stride 2) 0.96x / 0.98x; at batch 8 0.73x / 0.72x, 0.95x / 0.91x and
  0.81x / 0.90x.
  """
  graph = _Graph(_functional(model))
  steps = _Steps(graph)
  # A conv joins the run that produced (or starts from) its input when its
  # side input is in that run too; else it starts a run. Runs need not be
  # consecutive in the graph order (parallel branches interleave there):
  # a run is called where its last layer was, and everything it reads is
  # its entry or its own. A channel scale joins like a conv whose side
  # input is its gate.
  runs, run_of = [], {}
  for node in graph.nodes:
    step = steps.step(node)
    if step is None:
      continue
    x, side = step
    run = run_of.get(id(x))
    if run is not None and (side is None or run.source(side) is not None):
      run.nodes.append(node)
    elif side is None or id(side) == id(x):
      run = _Sequence(x, node)
      runs.append(run)
      run_of.setdefault(id(x), run)
    else:
      continue
    run_of[id(node.outputs[0])] = run
  runs = [seg for r in runs for seg in r.split(steps)]

  last_of, member = {}, set()
  for run in runs:
    last_of[id(run.nodes[-1])] = run
    member.update(id(n) for n in run.nodes[:-1])
    member.update(id(n) for n in steps.absorbed_by(run.nodes))
  tensor_of = {}
  inputs = _new_inputs(model, tensor_of)
  names = _UniqueNames(l.name for l in model.layers)
  for node in graph.nodes:
    op = node.operation
    if isinstance(op, keras.layers.InputLayer) or id(node) in member:
      continue
    run = last_of.get(id(node))
    if run is not None:
      input_sources, side_sources = [], []
      for n in run.nodes:
        x, side = steps.step(n)
        input_sources.append(run.source(x))
        side_sources.append(-1 if side is None else run.source(side))
      seq = QuantizedConvSequence(
          [steps.layer(n) for n in run.nodes], input_sources, side_sources,
          name=names(f"{run.nodes[0].operation.name}_sequence"))
      tensor_of[id(node.outputs[0])] = seq(tensor_of[id(run.entry)])
      continue
    args, kwargs = node.arguments.fill_in(tensor_of)
    outputs = op(*args, **kwargs)
    for t, y in zip(node.outputs, keras.tree.flatten(outputs)):
      tensor_of[id(t)] = y
  outputs = keras.tree.map_structure(lambda t: tensor_of[id(t)], model.output)
  return QuantizedModel(inputs, outputs, name=name or model.name)
