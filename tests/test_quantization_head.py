"""The int8 classifier head: QuantizedDense, and quantize_model running
GlobalAveragePooling2D, Flatten and Dense layers of int8 tensors in int8
(dense=True, the default; dense=False keeps them float).

Checked: QuantizedDense against tests/reference.py over ranks, sizes,
activations and scales, its errors and config; the int8 global pooling (a
depthwise window over the whole image, filter 1 / (h * w) -> 127) and the
int8 Dense layers bit for bit against the reference on their actual int8
inputs; which layers stay float and why; the number of int8 regions;
closeness to the float model; .keras / SavedModel round trips; and
keras.applications.MobileNetV2 with a linear classifier int8 to the logits.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_helpers
import reference
import tf_fused_int8
from tf_fused_int8 import QuantizedDense
from tf_fused_int8 import quantization
from test_quantization import images
from test_quantization_depthwise import check_layers_against_reference
from test_quantization_depthwise import randomize

L = keras.layers
QFC = tf_fused_int8.QuantizedFusedConv2D

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning")


# ----------------------------------------------------------- QuantizedDense

def dense_reference(x, layer):
  """The layer's int8 output from the reference: each row of x [..., Ci]
  one pixel of the 1x1 convolution."""
  k, b, s = layer.get_weights()
  rows = x.reshape(-1, 1, 1, x.shape[-1])
  out_max = layer.effective_output_max()
  got = reference.fused_conv2d_reference(
      rows, k, b, conv_input_scale=s, padding="VALID",
      activation="None" if layer.activation is None else "Relu",
      output_min=layer.output_min, output_max=out_max)
  return got.reshape(x.shape[:-1] + (k.shape[-1],))


@pytest.mark.parametrize("shape,units", [
    ((1, 1), 1), ((3, 5), 7), ((2, 64), 100), ((4, 130), 65),
    ((2, 3, 20), 9), ((2, 4, 5, 48), 16), ((8, 1280), 10)])
@pytest.mark.parametrize("activation", [None, "relu", "relu6"])
@pytest.mark.parametrize("per_channel", [True, False])
def test_quantized_dense_matches_reference(shape, units, activation,
                                           per_channel):
  rng = np.random.default_rng(shape[-1] * 7 + units)
  ci = shape[-1]
  w = rng.normal(0, 1, (ci, units))
  b = rng.normal(0, 2, units)
  s_in, s_out = 0.02, 0.05 * np.sqrt(ci)
  layer = QuantizedDense.from_float_weights(
      w, b, input_scale=s_in, output_scale=s_out, activation=activation,
      per_channel_scale=per_channel)
  assert layer.units == units and layer.kernel.shape == (1, 1, ci, units)
  # The weights follow from_float_weights' formula.
  q, s_w = tf_fused_int8.layers.quantize_kernel(w.reshape(1, 1, ci, units),
                                                per_channel)
  kernel, bias, cis = layer.get_weights()
  np.testing.assert_array_equal(kernel, q)
  np.testing.assert_array_equal(cis, np.float32(s_in * s_w / s_out))
  np.testing.assert_array_equal(bias, np.float32(b / s_out))
  x = rng.integers(-128, 128, shape).astype(np.int8)
  x.flat[:2] = [-128, 127][:x.size]
  got = layer(x).numpy()
  want = dense_reference(x, layer)
  assert got.dtype == np.int8 and got.shape == shape[:-1] + (units,)
  np.testing.assert_array_equal(got, want)
  if x.size > 64 and activation != "relu6":  # relu6: round(6 / s_out) levels
    assert len(np.unique(want)) > 4  # not saturated


def test_quantized_dense_in_a_graph_with_unknown_batch_and_clip_bounds():
  rng = np.random.default_rng(5)
  layer = QuantizedDense.from_float_weights(
      rng.normal(size=(6, 4)), rng.normal(size=4), input_scale=0.05,
      output_scale=0.03, activation="relu", output_max=50)
  assert layer.effective_output_max() == 50
  inp = keras.Input((6,), dtype="int8")
  model = keras.Model(inp, layer(inp))
  assert model.output.shape == (None, 4) and model.output.dtype == "int8"
  f = tf.function(model)
  for n in (1, 3, 17):
    x = rng.integers(-128, 128, (n, 6)).astype(np.int8)
    got = f(tf.constant(x)).numpy()
    np.testing.assert_array_equal(got, dense_reference(x, layer))
    assert got.max() <= 50 and got.min() >= 0


def test_quantized_dense_output_shape_static_and_dynamic():
  """Known inner dimensions: the output reshape needs no shape ops (no Shape /
  StridedSlice / ConcatV2 in the graph); an unknown inner dimension takes the
  dynamic path. Both give the reference's values and shapes."""
  rng = np.random.default_rng(9)
  layer = QuantizedDense.from_float_weights(
      rng.normal(size=(6, 5)), rng.normal(size=5), input_scale=0.05, output_scale=0.04)
  static = tf.function(layer).get_concrete_function(tf.TensorSpec([None, 3, 6], tf.int8))
  dynamic = tf.function(layer).get_concrete_function(tf.TensorSpec([None, None, 6], tf.int8))
  ops = lambda f: {o.type for o in f.graph.get_operations()}  # noqa: E731
  assert "ConcatV2" not in ops(static) and "Shape" not in ops(static)
  assert "ConcatV2" in ops(dynamic)
  assert static.output_shapes.as_list() == [None, 3, 5]
  for f, shape in ((static, (2, 3, 6)), (dynamic, (2, 4, 6)), (dynamic, (1, 1, 6))):
    x = rng.integers(-128, 128, shape).astype(np.int8)
    got = f(tf.constant(x)).numpy()
    assert got.shape == shape[:-1] + (5,)
    np.testing.assert_array_equal(got, dense_reference(x, layer))


def test_int8_reshape_eager_and_graph():
  """Int8Reshape's eager fast path (a cached shape constant) and Keras's path
  (a graph, a target with -1) give numpy's reshape, int8 kept."""
  from tf_fused_int8.quantization import Int8Reshape  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  for target in ((6,), (-1,), (2, 3)):
    layer = Int8Reshape(target)
    inp = keras.Input((1, 1, 6), dtype="int8")
    model = keras.Model(inp, layer(inp))
    assert model.output.dtype == "int8"
    graph = tf.function(model)
    for n in (1, 4):
      x = rng.integers(-128, 128, (n, 1, 1, 6)).astype(np.int8)
      want = x.reshape((n,) + ((6,) if target == (-1,) else target))
      for got in (layer(tf.constant(x)), model(tf.constant(x)), graph(tf.constant(x))):
        assert got.dtype == tf.int8
        np.testing.assert_array_equal(got.numpy(), want)


def test_quantized_dense_errors_and_config(tmp_path):
  layer = QuantizedDense.from_float_weights(np.ones((5, 3)), None)
  with pytest.raises(ValueError, match=r"int8 \[\.\.\., 5\].*got shape \(2, 4\)"):
    layer(np.zeros((2, 4), np.int8))
  with pytest.raises(ValueError, match="got dtype float32"):
    layer(np.zeros((2, 5), np.float32))
  with pytest.raises(ValueError, match=r"rank >= 2.*got shape \(5,\)"):
    layer(np.zeros((5,), np.int8))
  with pytest.raises(ValueError, match="no strides"):
    QuantizedDense(4, strides=2)
  with pytest.raises(ValueError, match="no use_side_input"):
    QuantizedDense(4, use_side_input=True)
  with pytest.raises(ValueError, match="no side input"):
    QuantizedDense.from_float_weights(np.ones((5, 3)), side_input_scale=1.0)
  with pytest.raises(ValueError, match="Dense kernel"):
    QuantizedDense.from_float_weights(np.ones((3, 3, 5, 3)))
  with pytest.raises(ValueError, match="units"):
    QuantizedDense()
  with pytest.raises(ValueError, match="known channel count"):
    QuantizedDense(3).build((None, None))
  config = layer.get_config()
  assert config["units"] == 3 and "filters" not in config
  assert "kernel_size" not in config and "strides" not in config
  again = QuantizedDense.from_config(config)
  assert again.units == 3 and again.kernel_size == (1, 1)
  # .keras round trip (registered as tf_fused_int8>QuantizedDense).
  rng = np.random.default_rng(1)
  layer = QuantizedDense.from_float_weights(
      rng.normal(size=(5, 3)), rng.normal(size=3), activation="relu6",
      output_scale=0.02)
  inp = keras.Input((2, 5), dtype="int8")
  model = keras.Model(inp, layer(inp))
  path = str(tmp_path / "dense.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  x = rng.integers(-128, 128, (4, 2, 5)).astype(np.int8)
  np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
  assert type(loaded.layers[-1]) is QuantizedDense  # pylint: disable=unidiomatic-typecheck
  assert loaded.layers[-1].activation == "relu6"


# --------------------------------------------------------- quantize_model

def head_model(keepdims=False, seed=0):
  """conv + BN + ReLU -> conv -> GAP -> Dense(relu) -> ReLU-free Dense
  (logits); and a Flatten branch from the first conv -> Dense + ReLU6."""
  inp = keras.Input((9, 7, 3), name="image")
  h = L.ReLU(name="r1")(L.BatchNormalization(name="bn1")(
      L.Conv2D(16, 3, padding="same", name="c1")(inp)))
  h2 = L.Conv2D(24, 3, strides=2, activation="relu", name="c2")(h)
  g = L.GlobalAveragePooling2D(keepdims=keepdims, name="gap")(h2)
  if keepdims:
    g = L.Flatten(name="gap_flat")(g)
  d = L.Dense(12, activation="relu", name="fc")(g)
  logits = L.Dense(5, name="logits")(d)
  f = L.Flatten(name="flat")(L.Conv2D(2, 3, strides=3, name="c3")(h))
  side = L.ReLU(6.0, name="side_relu")(L.Dense(6, name="side_fc")(f))
  model = keras.Model(inp, {"logits": logits, "side": side})
  rng = np.random.default_rng(seed)
  randomize(model, rng)
  for layer in model.layers:
    if isinstance(layer, L.Dense):
      layer.set_weights([rng.normal(0, 0.4, w.shape).astype(np.float32)
                         for w in layer.get_weights()])
  return model


@pytest.mark.parametrize("keepdims", [False, True])
def test_head_runs_in_int8_bit_exact(keepdims):
  model = head_model(keepdims)
  x = images(24)
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  kinds = {l.name: type(l).__name__ for l in qmodel.layers}
  for name in ("fc", "logits", "side_fc"):
    assert kinds[name] == "QuantizedDense", kinds
  assert kinds["gap"] == "QuantizedFusedConv2D"
  assert kinds["flat"] == "Int8Flatten"
  assert kinds.get("gap_reshape") == (None if keepdims else "Int8Reshape")
  assert kinds.get("gap_flat") == ("Int8Flatten" if keepdims else None)
  # One int8 region from the image to both outputs.
  values = list(kinds.values())
  assert values.count("Quantize") == 1 and values.count("Dequantize") == 2
  fc, logits, side_fc = (qmodel.get_layer(n) for n in ("fc", "logits",
                                                       "side_fc"))
  assert fc.activation == "relu" and logits.activation is None
  assert side_fc.activation == "relu6"  # the ReLU(6) layer fused
  # The global pooling: a depthwise window over the 4 x 3 image, filter 127,
  # conv_input_scale s_in / (h * w * 127 * s_out), no bias.
  scales = quantization.calibrate(model, x, verbose=0)
  gap = qmodel.get_layer("gap")
  assert gap.kernel_size == (4, 3) and gap.groups == 24 and gap.padding == "valid"
  kernel, bias, cis = gap.get_weights()
  assert (kernel == 127).all() and (bias == 0).all()
  np.testing.assert_allclose(
      cis, np.float64(np.float32(scales["c2"])) / (12 * 127 *
                                                   np.float32(scales["gap"])),
      rtol=1e-6)
  # Dense weights: s_in * s_w / s_out per unit, bias / s_out.
  w, b = model.get_layer("logits").get_weights()
  s_w = np.abs(w).max(axis=0) / 127
  s_in, s_out = (np.float64(np.float32(scales[k])) for k in ("fc", "logits"))
  np.testing.assert_allclose(logits.conv_input_scale.numpy(),
                             s_in * s_w / s_out, rtol=1e-6)
  np.testing.assert_allclose(logits.bias.numpy(), b / s_out, rtol=1e-5)
  # Every fused layer bit for bit on its actual int8 input: 3 convs, the
  # pooling, 3 Dense.
  xt = images(6, seed=8)
  assert check_layers_against_reference(qmodel, xt, min_unique=3) == 7
  want, got = model(xt), qmodel(xt)
  for key in ("logits", "side"):
    w_, g_ = want[key].numpy(), got[key].numpy()
    assert g_.dtype == np.float32 and g_.shape == w_.shape
    assert np.abs(g_ - w_).max() < 0.08 * np.abs(w_).max(), key
    cos = (w_ * g_).sum() / np.linalg.norm(w_) / np.linalg.norm(g_)
    assert cos > 0.99, (key, cos)


def test_dense_false_keeps_the_head_float():
  model = head_model()
  x = images(24)
  qmodel = quantization.quantize_model(model, x, verbose=0, dense=False)
  kinds = {l.name: type(l).__name__ for l in qmodel.layers}
  for name, cls in [("gap", "GlobalAveragePooling2D"), ("fc", "Dense"),
                    ("logits", "Dense"), ("flat", "Flatten"),
                    ("side_fc", "Dense"), ("side_relu", "ReLU")]:
    assert kinds[name] == cls, (name, kinds)
  # The float head is a copy with the same weights: on the dequantized
  # features it gives the float layers' results.
  for name in ("fc", "logits"):
    for a, b in zip(qmodel.get_layer(name).get_weights(),
                    model.get_layer(name).get_weights()):
      np.testing.assert_array_equal(a, b)
  assert set(quantization.calibrate(model, x, verbose=0, dense=False)) == {
      "image", "r1", "c2", "c3"}


def test_what_stays_float_in_the_head():
  inp = keras.Input((None, None, 3), name="image")  # unknown size
  h = L.Conv2D(8, 3, activation="relu", name="c1")(inp)
  g = L.GlobalAveragePooling2D(name="gap")(h)  # window size unknown: float
  a = L.Dense(4, name="after_float_gap")(g)    # float input: float
  fixed = keras.Input((6, 6, 3), name="fixed")
  h2 = L.Conv2D(8, 3, activation="relu", name="c2")(fixed)
  p = L.GlobalAveragePooling2D(name="gap2")(h2)
  soft = L.Dense(4, activation="softmax", name="softmax_head")(p)
  tanh = L.Dense(4, activation="tanh", name="tanh_head")(p)
  on_input = L.Dense(2, name="on_input")(L.Flatten(name="flat_in")(fixed))
  model = keras.Model([inp, fixed], [a, soft, tanh, on_input])
  randomize(model, np.random.default_rng(3))
  data = [images(8, shape=(7, 7, 3)), images(8, seed=2, shape=(6, 6, 3))]
  # Dense and the pooling are float-head layers: no warning.
  qmodel = layer_helpers.quantize_strict(model, data, verbose=0)
  kinds = {l.name: type(l).__name__ for l in qmodel.layers}
  assert kinds["gap"] == "GlobalAveragePooling2D"
  assert kinds["after_float_gap"] == "Dense"
  assert kinds["gap2"] == "QuantizedFusedConv2D"  # int8, read by two floats
  for name in ("softmax_head", "on_input"):
    assert kinds[name] == "Dense", name
  # An element-wise activation of an int8 Dense is its lookup table (a tanh
  # head is int8 to its output, as in TFLite's full-integer conversion).
  assert kinds["tanh_head"] == "QuantizedDense"
  assert qmodel.get_layer("tanh_head").output_lut is not None
  # The model input is quantized for c2, but Flatten's reader is float: the
  # Flatten stays float too (no int8 round trip on a float path).
  assert kinds["flat_in"] == "Flatten"
  want, got = model(data), qmodel(data)
  for w, g in zip(want, got):
    w, g = w.numpy(), g.numpy()
    assert np.abs(g - w).max() < 0.05 * np.abs(w).max() + 1e-6


def test_int8_head_saves_and_exports(tmp_path):
  model = head_model()
  x = images(16)
  qmodel = quantization.quantize_model(model, x, verbose=0)
  xt = images(5, seed=3)
  want = qmodel(xt)
  loaded = layer_helpers.assert_keras_round_trip_exact(
      qmodel, xt, str(tmp_path / "head_int8.keras"), keys=("logits", "side"))
  assert type(loaded.get_layer("logits")) is QuantizedDense  # pylint: disable=unidiomatic-typecheck
  assert type(loaded.get_layer("gap_reshape")).__name__ == "Int8Reshape"
  export_dir = str(tmp_path / "head_int8_savedmodel")
  qmodel.export(export_dir, verbose=False)
  with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
    assert b"FusedInt8Conv2DBiasActivation" in f.read()
  restored = tf.saved_model.load(export_dir)
  out = restored.serve(tf.constant(xt))
  for key in ("logits", "side"):
    np.testing.assert_array_equal(out[key].numpy(), want[key].numpy())


def test_keras_applications_mobilenet_v2_int8_to_the_logits():
  model, qmodel, rng = layer_helpers.applications_model_quantized(
      keras.applications.MobileNetV2, 64, alpha=0.35, classes=10,
      classifier_activation=None)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == kinds.count("Dequantize") == 1, kinds
  assert type(qmodel.get_layer("predictions")) is QuantizedDense  # pylint: disable=unidiomatic-typecheck
  gap_name, = [l.name for l in model.layers
               if isinstance(l, L.GlobalAveragePooling2D)]  # Keras numbers it
  gap = qmodel.get_layer(gap_name)
  assert gap.kernel_size == (2, 2) and gap.groups == 1280
  assert "Dense" not in kinds and "GlobalAveragePooling2D" not in kinds
  xt = rng.uniform(-1, 1, (4, 64, 64, 3)).astype(np.float32)
  w, g = model(xt).numpy(), qmodel(xt).numpy()
  cos = (w * g).sum() / np.linalg.norm(w) / np.linalg.norm(g)
  assert cos > 0.99, cos
  layer_helpers.assert_float_close(qmodel(xt).numpy(), g)  # deterministic


def test_dense_batch_norm_and_activations_fold_into_quantized_dense(tmp_path):
  """A transfer-learning head, GAP -> Dense + BN + ReLU -> Dense + BN +
  LeakyReLU -> Dense: each BatchNormalization of a Dense's units folds into
  that QuantizedDense (kernel and bias per unit, as a conv's), the ReLU is
  its bound and the LeakyReLU its table: one int8 region to the logits, no
  warning, each layer's scales and bias the fold's, every layer bit for bit
  against the reference, close to float, a .keras round trip."""
  inp = keras.Input((5, 4, 3), name="image")
  h = L.Conv2D(24, 3, padding="same", activation="relu", name="c1")(inp)
  g = L.GlobalAveragePooling2D(name="gap")(h)
  f = L.ReLU(name="fc_relu")(L.BatchNormalization(name="fc_bn")(L.Dense(32, name="fc")(g)))
  f = L.LeakyReLU(0.1, name="fc2_act")(L.BatchNormalization(name="fc2_bn")(
      L.Dense(16, use_bias=False, name="fc2")(f)))
  model = keras.Model(inp, L.Dense(5, name="logits")(f))
  rng = np.random.default_rng(12)
  randomize(model, rng)
  for layer in model.layers:
    if isinstance(layer, L.Dense):
      layer.set_weights([rng.normal(0, 0.4, w.shape).astype(np.float32)
                         for w in layer.get_weights()])
  x = images(24, shape=(5, 4, 3))
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  kinds = {l.name: type(l).__name__ for l in qmodel.layers}
  for name in ("fc", "fc2", "logits"):
    assert kinds[name] == "QuantizedDense", kinds
  values = list(kinds.values())
  for cls in ("BatchNormalization", "ReLU", "LeakyReLU"):
    assert cls not in values, kinds
  assert values.count("Quantize") == 1 and values.count("Dequantize") == 1, kinds
  fc, fc2 = qmodel.get_layer("fc"), qmodel.get_layer("fc2")
  assert fc.activation == "relu" and fc2.output_lut is not None
  # fc's folded weights: W * f and (b - mean) * f + beta, f = gamma /
  # sqrt(var + eps) per unit; quantized per unit, s_in * s_w / s_out.
  scales = quantization.calibrate(model, x, verbose=0)
  w, b = model.get_layer("fc").get_weights()
  gamma, beta, mean, var = model.get_layer("fc_bn").get_weights()
  factor = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-3)
  w_f, b_f = w * factor, (b - mean) * factor + beta
  s_w = np.abs(w_f).max(axis=0) / 127
  s_in, s_out = (np.float64(np.float32(scales[k])) for k in ("gap", "fc_relu"))
  np.testing.assert_allclose(fc.conv_input_scale.numpy(), s_in * s_w / s_out, rtol=1e-5)
  np.testing.assert_allclose(fc.bias.numpy(), b_f / s_out, rtol=1e-5, atol=1e-6)
  xt = images(6, seed=8, shape=(5, 4, 3))
  assert check_layers_against_reference(qmodel, xt, min_unique=3) == 5
  w_, g_ = model(xt).numpy(), qmodel(xt).numpy()
  assert (w_ * g_).sum() > 0.99 * np.linalg.norm(w_) * np.linalg.norm(g_)
  layer_helpers.assert_keras_round_trip_exact(qmodel, xt, str(tmp_path / "h.keras"))


def test_dense_inputs_quantizes_a_generator_from_its_noise(tmp_path):
  """dense="inputs": a Dense that reads the model's input runs as a
  QuantizedDense too (its BN folded, its LeakyReLU a table), so a small
  generator (noise -> Dense + BN + LeakyReLU -> Reshape -> Conv2DTranspose
  -> Conv2D + tanh) is int8 from one Quantize of the noise to its output:
  no warning, the reference's bits layer by layer, close to float, a
  .keras round trip. The default keeps that Dense (and the BN after it)
  float, and dense must be True, False or "inputs"."""
  inp = keras.Input((8,), name="noise")
  h = L.LeakyReLU(name="fc_act")(L.BatchNormalization(name="fc_bn")(
      L.Dense(4 * 3 * 16, use_bias=False, name="fc")(inp)))
  h = L.Reshape((4, 3, 16), name="reshape")(h)
  h = L.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu", name="up")(h)
  model = keras.Model(inp, L.Conv2D(3, 3, padding="same", activation="tanh", name="out")(h))
  rng = np.random.default_rng(21)
  randomize(model, rng)
  x = rng.normal(0, 1, (32, 8)).astype(np.float32)
  with pytest.warns(quantization.QuantizationWarning, match="'fc_bn'"):
    default = quantization.quantize_model(model, x, verbose=0)
  assert type(default.get_layer("fc")).__name__ == "Dense"
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0, dense="inputs")
  kinds = {l.name: type(l).__name__ for l in qmodel.layers}
  assert kinds["fc"] == "QuantizedDense" and kinds["reshape"] == "Int8Reshape", kinds
  values = list(kinds.values())
  assert values.count("Quantize") == 1 and values.count("Dequantize") == 1, kinds
  for cls in ("BatchNormalization", "LeakyReLU", "Dense", "Reshape"):
    assert cls not in values, kinds
  assert qmodel.get_layer("fc").output_lut is not None
  assert "noise" in quantization.calibrate(model, x, verbose=0, dense="inputs")
  assert check_layers_against_reference(qmodel, x[:4], min_unique=3) == 3
  w_, g_ = model(x).numpy().ravel(), qmodel(x).numpy().ravel()
  assert w_ @ g_ > 0.99 * np.linalg.norm(w_) * np.linalg.norm(g_)
  layer_helpers.assert_keras_round_trip_exact(qmodel, x[:4], str(tmp_path / "g.keras"))
  for bad in ("input", 1, None):
    with pytest.raises(ValueError, match="dense must be True, False or 'inputs'"):
      quantization.quantize_model(model, x, verbose=0, dense=bad)
