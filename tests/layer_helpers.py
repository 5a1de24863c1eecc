"""Helpers shared by the Keras layer and quantization tests."""

import importlib.util
import os

import numpy as np
import tensorflow as tf

import tf_fused_int8


def op_static_shape(layer, spec, side_spec=None):
  """The C++ shape function's answer for a built QuantizedFusedConv2D: the
  op traced on symbolic input (and side input) shapes."""
  def fn(x, side=None):
    return tf_fused_int8.fused_conv2d_bias_activation(
        x, layer.kernel.value, layer.bias.value, strides=layer.strides,
        padding=layer.op_padding, explicit_paddings=layer.explicit_paddings,
        conv_input_scale=layer.conv_input_scale.value,
        side_input_scale=1.0 if side is not None else 0.0,
        side_input=side, activation_mode="None",
        dilations=layer.dilation_rate)
  specs = [tf.TensorSpec(spec, tf.int8)]
  if side_spec is not None:
    specs.append(tf.TensorSpec(side_spec, tf.int8))
  cf = tf.function(fn).get_concrete_function(*specs)
  return tuple(cf.structured_outputs.shape.as_list())


def check_shape_inference(layer, input_specs):
  """compute_output_shape, Keras's symbolic call and the layer traced in a
  tf.function all agree with the op's shape function on every spec."""
  import keras  # pylint: disable=g-import-not-at-top
  for spec in input_specs:
    want = op_static_shape(layer, spec)
    assert layer.compute_output_shape(spec) == want, spec
    sym = layer(keras.Input(batch_shape=spec, dtype="int8"))
    assert tuple(sym.shape) == want and sym.dtype == "int8", spec
    cf = tf.function(layer).get_concrete_function(tf.TensorSpec(spec, tf.int8))
    assert tuple(cf.structured_outputs.shape.as_list()) == want, spec


def set_bn(layer, rng):
  """Random BatchNormalization statistics (and gamma/beta if it has them)."""
  n = layer.moving_mean.shape[0]
  weights = []
  if layer.scale:
    weights.append(rng.uniform(0.5, 1.5, n))
  if layer.center:
    weights.append(rng.normal(0.0, 0.2, n))
  weights += [rng.normal(0.0, 0.3, n), rng.uniform(0.3, 2.0, n)]
  layer.set_weights([w.astype(np.float32) for w in weights])


def load_example(name):
  """examples/<name>.py as a module (e.g. "ptq_digits")."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  path = os.path.join(root, "examples", name + ".py")
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
