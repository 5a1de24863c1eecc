"""Helpers shared by the Keras layer and quantization tests."""

import importlib.util
import os

import numpy as np
import tensorflow as tf

import tf_fused_int8
from tf_fused_int8 import testing


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


# Random BatchNormalization statistics (and gamma/beta if it has them).
set_bn = testing.randomize_batch_norm


def load_example(name):
  """examples/<name>.py as a module (e.g. "ptq_digits")."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  path = os.path.join(root, "examples", name + ".py")
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


# Float results that TensorFlow's float kernels compute again -- in another batch split
# (predict's batches), another graph (a SavedModel, Keras's tf.function) or another process --
# are not bit-reproducible: a float32 matmul or mean sums its terms in an order that depends on
# the shapes and the threads, and each order rounds differently (a few ulps of the magnitudes
# summed; seen: -0.05746269 vs -0.05746281). The test models' float heads sum at most a few
# hundred terms of similar size, so 2**-16 of the largest |output| (about 500 float32 ulps of it)
# bounds that with room while staying far below a quantization step. int8 outputs, and floats
# that are one elementwise product of them (dequantized int8), are compared exactly instead.
FLOAT_REDUCTION_RTOL = 2.0**-16


def assert_float_close(got, want, err_msg=""):
  """`got` equals `want` up to float32 summation order (see FLOAT_REDUCTION_RTOL)."""
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype == np.float32, (got.dtype, want.dtype, err_msg)
  assert got.shape == want.shape, (got.shape, want.shape, err_msg)
  assert np.all(np.isfinite(want)), err_msg
  scale = float(np.abs(want).max()) if want.size else 0.0
  np.testing.assert_allclose(got, want, rtol=FLOAT_REDUCTION_RTOL,
                             atol=FLOAT_REDUCTION_RTOL * scale, err_msg=err_msg)


def assert_reloaded_model_agrees(original, reloaded, x, want):
  """A reloaded quantized model (its float head last): the output of the last
  QuantizedFusedConv2D bit for bit, the float head's output `want` (the
  original's) up to float summation order."""
  import keras  # pylint: disable=g-import-not-at-top
  last = [l.name for l in original.layers
          if isinstance(l, tf_fused_int8.QuantizedFusedConv2D)][-1]
  body = [keras.Model(m.input, m.get_layer(last).output)(x).numpy()
          for m in (original, reloaded)]
  assert body[0].dtype == np.int8 and len(np.unique(body[0])) > 10
  np.testing.assert_array_equal(body[1], body[0])
  assert_float_close(reloaded(x).numpy(), want)


def set_all_bn(model, rng):
  """set_bn on every BatchNormalization layer of the model, in layer order."""
  import keras  # pylint: disable=g-import-not-at-top
  for layer in model.layers:
    if isinstance(layer, keras.layers.BatchNormalization):
      set_bn(layer, rng)


def randomize_model(model, rng):
  """Random BN statistics (set_bn) and N(0, 0.3) convolution weights."""
  import keras  # pylint: disable=g-import-not-at-top
  for layer in model.layers:
    if isinstance(layer, keras.layers.BatchNormalization):
      set_bn(layer, rng)
    elif isinstance(layer, keras.layers.Conv2D):
      layer.set_weights([rng.normal(0, 0.3, w.shape).astype(np.float32)
                         for w in layer.get_weights()])


def assert_int8_output_exact(model, qmodel, x, want_int8, path):
  """The quantized model's one output is want_int8 (the numpy reference's
  int8 chain) dequantized at its scale, bit for bit, within a tenth of the
  float model's largest output of it, and the same bits after a .keras
  round trip to `path`. Returns the reloaded model."""
  import keras  # pylint: disable=g-import-not-at-top
  got = qmodel(x).numpy()
  s_out = np.float32(qmodel.get_layer(qmodel.output._keras_history.operation.name).scale)  # pylint: disable=protected-access
  np.testing.assert_array_equal(got, want_int8.astype(np.float32) * s_out)
  want_float = model(x).numpy()
  assert np.abs(got - want_float).max() < 0.1 * np.abs(want_float).max()
  qmodel.save(path)
  loaded = keras.models.load_model(path)
  np.testing.assert_array_equal(loaded(x).numpy(), got)
  return loaded


def quantize_strict(model, *args, **kwargs):
  """quantization.quantize_model(model, *args, **kwargs) with every
  QuantizationWarning an error: the tests that expect a model to quantize
  whole (nothing left in float, no fallback) fail on the first warning."""
  import warnings  # pylint: disable=g-import-not-at-top
  from tf_fused_int8 import quantization  # pylint: disable=g-import-not-at-top
  with warnings.catch_warnings():
    warnings.simplefilter("error", quantization.QuantizationWarning)
    return quantization.quantize_model(model, *args, **kwargs)


def quantized_with_scales(model, x):
  """(qmodel, scales): quantize_model on `x` with every QuantizationWarning
  an error, and calibrate's scales for the same data."""
  from tf_fused_int8 import quantization  # pylint: disable=g-import-not-at-top
  qmodel = quantize_strict(model, x, verbose=0)
  return qmodel, quantization.calibrate(model, x, verbose=0)


def applications_model_quantized(builder, size, batch=8, seed=0, **kwargs):
  """A keras.applications model (weights=None, Keras' initial weights, random
  BatchNormalization statistics: set_bn), quantized on `batch` random
  images in [-1, 1] with every QuantizationWarning an error. Returns
  (model, qmodel, rng) with rng ready for test images."""
  model = builder(weights=None, input_shape=(size, size, 3), **kwargs)
  rng = np.random.default_rng(seed)
  set_all_bn(model, rng)
  x = rng.uniform(-1, 1, (batch, size, size, 3)).astype(np.float32)
  qmodel = quantize_strict(model, x, verbose=0)
  return model, qmodel, rng


def assert_keras_round_trip_exact(model, x, path, keys=None):
  """model.save(path) + keras.models.load_model(path) gives the same bits
  on x (for the output dict's `keys`, or the one output). Returns the
  reloaded model."""
  import keras  # pylint: disable=g-import-not-at-top
  want = model(x)
  model.save(path)
  loaded = keras.models.load_model(path)
  got = loaded(x)
  for key in keys or [None]:
    g, w = (got, want) if key is None else (got[key], want[key])
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=str(key))
  return loaded


def assert_keras_and_saved_model_round_trip(qmodel, x, tmp_path):
  """A quantized model with outputs {"features", "logits"}: the .keras round
  trip gives the same bits for both; the exported SavedModel's serve gives
  the features' bits and the logits up to float summation order. Returns
  the reloaded .keras model."""
  import os  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  want = qmodel(x)
  again = assert_keras_round_trip_exact(
      qmodel, x, os.path.join(tmp_path, "m.keras"), keys=("features", "logits"))
  export = os.path.join(tmp_path, "sm")
  qmodel.export(export, verbose=False)
  served = tf.saved_model.load(export)  # kept alive: serve reads its variables
  out = served.serve(tf.constant(x))
  np.testing.assert_array_equal(out["features"].numpy(), want["features"].numpy())
  assert_float_close(out["logits"].numpy(), want["logits"].numpy())
  return again


def assert_outputs_close(model, qmodel, x, keys=("features", "logits"),
                         min_cosine=0.99):
  """Per image, the cosine of the float and the quantized model's outputs
  (each of `keys`) is above min_cosine."""
  want, got = model(x), qmodel(x)
  n = len(x)
  for key in keys:
    w = np.asarray(want[key]).reshape(n, -1)
    g = np.asarray(got[key]).reshape(n, -1)
    cosine = np.sum(w * g, 1) / np.linalg.norm(w, axis=1) / np.linalg.norm(g, axis=1)
    assert cosine.min() > min_cosine, (key, cosine)
