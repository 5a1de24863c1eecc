"""Post-training quantization (tf_fused_int8.quantization): BN folding in
float, the scale formulas and the int8 graph on a hand-made model (bit-exact
against the numpy reference), Quantize/Dequantize, calibration inputs and
methods, unsupported layers, end-to-end accuracy on scikit-learn's digits,
and .keras / SavedModel round trips of the quantized model."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_helpers
import reference
import tf_fused_int8
from tf_fused_int8 import quantization
from tf_fused_int8.layers import quantize_kernel

# Keras's own saving code trips numpy 2's __array__(copy=...) deprecation.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning")

L = keras.layers
QFC = tf_fused_int8.QuantizedFusedConv2D


def residual_model(seed=0):
  """image -> c1+bn1+relu1 -> c2+bn2 -> Add(relu1) -> relu2 -> GAP -> Dense.

  Outputs {"logits", "features" (relu2's output)}; BN statistics random.
  """
  inp = keras.Input((9, 7, 3), name="image")
  h1 = L.ReLU(name="relu1")(L.BatchNormalization(epsilon=1e-3, name="bn1")(
      L.Conv2D(8, 3, padding="same", name="c1")(inp)))
  h2 = L.BatchNormalization(epsilon=1e-3, name="bn2")(
      L.Conv2D(8, 3, padding="same", use_bias=False, name="c2")(h1))
  out = L.ReLU(name="relu2")(L.Add(name="add")([h2, h1]))
  logits = L.Dense(5, name="head")(L.GlobalAveragePooling2D(name="gap")(out))
  model = keras.Model(inp, {"logits": logits, "features": out})
  randomize(model, np.random.default_rng(seed))
  return model


randomize = layer_helpers.randomize_model


def images(n, seed=1, shape=(9, 7, 3)):
  return np.random.default_rng(seed).uniform(-1, 1, (n,) + shape).astype(
      np.float32)


def reference_conv(qmodel, name, v, **kw):
  """The reference's int8 output of qmodel's QuantizedFusedConv2D `name`
  (no side input) on the int8 input v."""
  k, b, s = qmodel.get_layer(name).get_weights()
  return reference.fused_conv2d_reference(v, k, b, conv_input_scale=s, **kw)


def assert_stays_float_between_convs(layer, x, match):
  """Conv2D -> `layer` -> Conv2D on x's images: quantize_model warns
  (`match`) and leaves the layer float between two int8 regions."""
  inp = keras.Input(x.shape[1:], name="image")
  h = L.Conv2D(8, 3, padding="same", activation="relu", name="c1")(inp)
  model = keras.Model(inp, L.Conv2D(2, 1, name="c2")(layer(h)))
  with pytest.warns(quantization.QuantizationWarning, match=match):
    qmodel = quantization.quantize_model(model, x, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 2 and type(layer).__name__ in kinds, kinds


# ------------------------------------------------------------- BN folding

@pytest.mark.parametrize("use_bias,center,scale", [(True, True, True),
                                                   (False, True, True),
                                                   (True, False, False)])
def test_bn_folding_is_exact_in_float(use_bias, center, scale):
  rng = np.random.default_rng(7)
  inp = keras.Input((10, 10, 4))
  conv = L.Conv2D(6, 3, strides=2, padding="same", use_bias=use_bias)
  bn = L.BatchNormalization(epsilon=1e-3, center=center, scale=scale)
  model = keras.Model(inp, bn(conv(inp)))
  conv.set_weights([rng.normal(0, 0.5, w.shape) for w in conv.get_weights()])
  layer_helpers.set_bn(bn, rng)
  k, b = quantization.fold_batch_norm(
      conv.kernel.numpy(), conv.bias.numpy() if use_bias else None,
      bn.gamma.numpy() if scale else None, bn.beta.numpy() if center else None,
      bn.moving_mean.numpy(), bn.moving_variance.numpy(), bn.epsilon)
  folded = L.Conv2D(6, 3, strides=2, padding="same")
  folded.build((None, 10, 10, 4))
  folded.set_weights([k.astype(np.float32), b.astype(np.float32)])
  x = rng.normal(0, 1, (3, 10, 10, 4)).astype(np.float32)
  want = model(x, training=False).numpy()
  got = folded(x).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5,
                             atol=1e-5 * np.abs(want).max())
  # And in float64, to rounding.
  want64 = (tf.nn.conv2d(x.astype(np.float64), conv.kernel.numpy().astype(
      np.float64), 2, "SAME").numpy() + (conv.bias.numpy() if use_bias else 0))
  f = (bn.gamma.numpy() if scale else 1) / np.sqrt(
      bn.moving_variance.numpy().astype(np.float64) + bn.epsilon)
  want64 = (want64 - bn.moving_mean.numpy()) * f + (
      bn.beta.numpy() if center else 0)
  got64 = tf.nn.conv2d(x.astype(np.float64), k, 2, "SAME").numpy() + b
  np.testing.assert_allclose(got64, want64, rtol=1e-12, atol=1e-12)


# ---------------------------------------------- scales on a hand-made model

def test_scale_derivation_and_int8_graph_on_a_hand_made_model():
  model = residual_model()
  scales = {"image": 0.0125, "relu1": 0.04, "relu2": 0.0625}
  # Activation scales are float32 numbers (what Quantize/Dequantize use).
  s_in, s_h1, s_out = (float(np.float32(scales[k]))
                       for k in ("image", "relu1", "relu2"))
  # The conv body's derivation (the head stays float: dense=False; the int8
  # head: tests/test_quantization_head.py).
  qmodel = layer_helpers.quantize_strict(model, scales=scales, verbose=0, dense=False)
  kinds = {l.name: type(l).__name__ for l in qmodel.layers}
  assert kinds == {"image": "InputLayer", "image_quantize": "Quantize",
                   "c1": "QuantizedFusedConv2D", "c2": "QuantizedFusedConv2D",
                   "relu2_dequantize": "Dequantize",
                   "gap": "GlobalAveragePooling2D", "head": "Dense"}
  c1, c2 = qmodel.get_layer("c1"), qmodel.get_layer("c2")
  assert c1.activation == "relu" and not c1.use_side_input
  assert c2.activation == "relu" and c2.use_side_input
  assert qmodel.get_layer("image_quantize").scale == s_in
  assert qmodel.get_layer("relu2_dequantize").scale == s_out

  def folded(conv, bn):  # in float64
    f64 = lambda v: v.numpy().astype(np.float64)
    w = f64(conv.kernel)
    b = f64(conv.bias) if conv.use_bias else np.zeros(w.shape[-1])
    f = f64(bn.gamma) / np.sqrt(f64(bn.moving_variance) + bn.epsilon)
    return w * f, (b - f64(bn.moving_mean)) * f + f64(bn.beta)

  # conv_input_scale = s_in * s_w[c] / s_out, bias = b / s_out,
  # side_input_scale = s_side / s_out; weights symmetric per channel.
  for qconv, conv, bn, si, so, side in [
      (c1, "c1", "bn1", s_in, s_h1, None), (c2, "c2", "bn2", s_h1, s_out,
                                             s_h1)]:
    w, b = folded(model.get_layer(conv), model.get_layer(bn))
    s_w = np.max(np.abs(w), axis=(0, 1, 2)) / 127
    weights = qconv.get_weights()
    np.testing.assert_array_equal(weights[0], np.clip(np.rint(w / s_w), -127,
                                                      127).astype(np.int8))
    np.testing.assert_array_equal(weights[0], quantize_kernel(w)[0])
    np.testing.assert_array_equal(weights[1], (b / so).astype(np.float32))
    np.testing.assert_array_equal(weights[2],
                                  (si * s_w / so).astype(np.float32))
    if side is not None:
      assert weights[3] == np.float32(side / so)

  # The int8 graph, bit for bit: quantize, two fused convs (the residual as
  # side input), dequantize, then the float head.
  x = images(4)
  out = qmodel(x)
  q = np.clip(np.rint(x / np.float32(s_in)), -128, 127).astype(np.int8)
  k1, b1, cs1 = c1.get_weights()
  h1 = reference.fused_conv2d_reference(q, k1, b1, conv_input_scale=cs1,
                                        padding="SAME", activation="Relu")
  k2, b2, cs2, ss2 = c2.get_weights()
  h2 = reference.fused_conv2d_reference(
      h1, k2, b2, side_input=h1, conv_input_scale=cs2, side_input_scale=ss2,
      padding="SAME", activation="Relu")
  features = h2.astype(np.float32) * np.float32(s_out)
  np.testing.assert_array_equal(out["features"].numpy(), features)
  assert out["features"].dtype == tf.float32
  assert len(np.unique(h1)) > 20 and len(np.unique(h2)) > 20
  head = model.get_layer("head")
  np.testing.assert_allclose(
      out["logits"].numpy(), features.mean(axis=(1, 2)) @ head.kernel.numpy()
      + head.bias.numpy(), rtol=1e-5, atol=1e-5)
  # The float model is untouched and the quantized one approximates it.
  want = model(x)
  assert isinstance(model.get_layer("bn1"), L.BatchNormalization)
  err = np.abs(out["features"].numpy() - want["features"].numpy())
  assert err.max() < 3 * s_out


def test_missing_or_bad_scales_are_errors():
  model = residual_model()
  with pytest.raises(ValueError, match="relu2"):
    quantization.quantize_model(model, scales={"image": 0.1, "relu1": 0.1},
                                verbose=0, dense=False)
  with pytest.raises(ValueError, match="positive"):
    quantization.quantize_model(
        model, scales={"image": 0.1, "relu1": 0.0, "relu2": 0.1}, verbose=0,
        dense=False)
  # The int8 head (default dense=True) needs the head's scales too.
  with pytest.raises(ValueError, match=r"\['gap', 'head'\].*dense=False"):
    quantization.quantize_model(
        model, scales={"image": 0.1, "relu1": 0.1, "relu2": 0.1}, verbose=0)
  with pytest.raises(ValueError, match="calibration_data"):
    quantization.quantize_model(model, verbose=0)
  with pytest.raises(ValueError, match="method"):
    quantization.quantize_model(model, images(4), method="kl", verbose=0)


# --------------------------------------------------- Quantize / Dequantize

def test_quantize_and_dequantize_layers():
  s = 0.5
  x = np.array([-1000, -64.25, -0.75, -0.25, 0.25, 0.75, 1.25, 63.5, 1e9,
                np.nan, np.inf, -np.inf], np.float32)
  q = quantization.Quantize(s)(x).numpy()
  assert q.dtype == np.int8
  # round half to even of x / s, clipped to [-128, 127]; NaN -> 0.
  np.testing.assert_array_equal(
      q, [-128, -128, -2, 0, 0, 2, 2, 127, 127, 0, 127, -128])
  # Long enough for TF's vectorized kernels, NaN and Inf anywhere, eagerly
  # and in a graph: the same numbers as numpy's formula.
  rng = np.random.default_rng(0)
  big = rng.normal(0, 40, 4099).astype(np.float32)
  big[rng.integers(0, big.size, 300)] = np.nan
  big[rng.integers(0, big.size, 50)] = np.inf
  big[rng.integers(0, big.size, 50)] = -np.inf
  big[:64] = np.arange(-32, 32) * 0.25  # ties
  with np.errstate(invalid="ignore"):
    want = np.where(np.isnan(big), 0,
                    np.clip(np.rint(big / np.float32(s)), -128, 127))
  layer = quantization.Quantize(s)
  for got in (layer(big), tf.function(layer)(tf.constant(big))):
    np.testing.assert_array_equal(got.numpy(), want.astype(np.int8))
  d = quantization.Dequantize(s)(q).numpy()
  assert d.dtype == np.float32
  np.testing.assert_array_equal(d, q.astype(np.float32) * 0.5)
  layer = quantization.Quantize(0.1, name="qq")
  config = layer.get_config()
  assert config["scale"] == float(np.float32(0.1)) and config["name"] == "qq"
  again = keras.saving.deserialize_keras_object(
      keras.saving.serialize_keras_object(layer))
  assert isinstance(again, quantization.Quantize) and again.scale == layer.scale
  assert keras.saving.get_registered_name(quantization.Dequantize) == (
      "tf_fused_int8>Dequantize")
  sym = quantization.Quantize(1.0)(keras.Input((4, 4, 2)))
  assert sym.dtype == "int8" and tuple(sym.shape) == (None, 4, 4, 2)
  with pytest.raises(ValueError, match="positive"):
    quantization.Quantize(-1.0)


# ------------------------------------------------------------ calibration

def test_calibration_accepts_dataset_numpy_and_generators(capsys):
  model = residual_model()
  x = images(40, seed=3)
  y = np.arange(40) % 5
  want = quantization.calibrate(model, x, batch_size=16, verbose=1)
  out = capsys.readouterr().out
  assert "3/3" in out  # the Keras progress bar, 3 batches
  # The convolutions' tensors and the int8 head's (pooled features, logits).
  assert set(want) == {"image", "relu1", "relu2", "gap", "head"}
  assert set(quantization.calibrate(model, x, verbose=0, dense=False)) == {
      "image", "relu1", "relu2"}
  # min/max: max |x| / 127 over all calibration data, as float32.
  probe = keras.Model(model.input, [model.get_layer(n).output
                                    for n in ("relu1", "relu2", "gap",
                                              "head")])
  h1, h2, pooled, logits = (t.numpy() for t in probe(x))
  for key, t in [("image", x), ("relu1", h1), ("relu2", h2), ("gap", pooled),
                 ("head", logits)]:
    assert want[key] == pytest.approx(float(np.float32(
        np.abs(t).max() / 127)), rel=1e-6), key
  inputs = {
      "numpy (x, y)": (x, y),
      "tf.data.Dataset of (x, y)":
          tf.data.Dataset.from_tensor_slices((x, y)).batch(16),
      "tf.data.Dataset of x": tf.data.Dataset.from_tensor_slices(x).batch(7),
      "generator": (x[i:i + 16] for i in range(0, 40, 16)),
      "generator of (x, y)": ((x[i:i + 8], y[i:i + 8])
                              for i in range(0, 40, 8)),
  }
  for what, data in inputs.items():
    got = quantization.calibrate(model, data, batch_size=16, verbose=0)
    assert got == want, what
  assert capsys.readouterr().out == ""  # verbose=0 is silent
  # steps= limits the batches (here: only the first 16 images).
  first = quantization.calibrate(model, x, batch_size=16, steps=1, verbose=0)
  assert first == quantization.calibrate(model, x[:16], verbose=0)
  # An unknown-length generator still gets a progress bar.
  quantization.calibrate(model, (x[i:i + 10] for i in range(0, 40, 10)))
  assert "4/Unknown" in capsys.readouterr().out
  with pytest.raises(TypeError, match="calibration_data"):
    quantization.calibrate(model, 3.0, verbose=0)


def test_percentile_calibration():
  model = residual_model()
  x = images(64, seed=5)
  x[0, 0, 0, 0] = 25.0  # one outlier in the input
  got = quantization.calibrate(model, x, method="percentile", percentile=99.0,
                               batch_size=10, verbose=0)
  probe = keras.Model(model.input, model.get_layer("relu2").output)
  h2 = probe(x).numpy()
  for key, t in [("image", x), ("relu2", h2)]:
    a = np.abs(t).reshape(-1)
    p = np.percentile(a, 99.0)
    # Within one histogram bin (range <= 2 max|x|, 2048 bins).
    assert abs(got[key] * 127 - p) <= 2 * a.max() / 2048 + 1e-6, key
  assert got["image"] * 127 < 1.0  # the outlier is clipped away
  full = quantization.calibrate(model, x, method="percentile",
                                percentile=100.0, verbose=0)
  assert full["image"] == float(np.float32(25.0 / 127))
  qmodel = quantization.quantize_model(model, x, method="percentile",
                                       verbose=0)
  assert qmodel.get_layer("image_quantize").scale < 25.0 / 127


# ------------------------------------------------------ unsupported layers

def test_unsupported_layers_warn_and_stay_float():
  inp = keras.Input((8, 8, 3), name="image")
  h = L.ReLU(name="r1")(L.BatchNormalization(name="bn1")(
      L.Conv2D(8, 3, padding="same", name="c1")(inp)))
  # Over the rows, not the last axis: not Int8LayerNormalization's form.
  h = L.LayerNormalization(axis=1, name="ln")(h)
  h = L.Conv2D(8, 3, padding="same", activation="softmax", name="c_soft")(h)
  # int8: its own sigmoid is split off and becomes its lookup table.
  h = L.Conv2D(8, 3, padding="same", activation="sigmoid", name="c_sig")(h)
  h = L.Conv2D(8, 3, padding="same", activation="relu", name="c2")(h)
  h = L.BatchNormalization(name="bn_after_relu")(h)  # int8: a 1x1 depthwise
  h = L.BatchNormalization(axis=1, name="bn_rows")(h)  # not the channel axis
  h = L.SeparableConv2D(8, 3, padding="same", name="sep")(h)  # int8: 2 convs
  h = L.Conv2D(4, 1, name="c3")(h)
  out = L.Dense(3, name="head")(L.Flatten(name="flat")(h))
  model = keras.Model(inp, out)
  rng = np.random.default_rng(2)
  layer_helpers.set_all_bn(model, rng)
  x = images(16, seed=4, shape=(8, 8, 3))
  with pytest.warns(quantization.QuantizationWarning) as record:
    qmodel = quantization.quantize_model(model, x, verbose=0)
  message = str(record[0].message)
  for name in ("'ln' (LayerNormalization)",
               "'c_soft' (Conv2D: activation='softmax' (the fused op has relu,",
               "'bn_rows' (BatchNormalization: it does not normalize the "
               "channel axis"):
    assert name in message, (name, message)
  assert "3 layer(s) stay float" in message and "'sep'" not in message
  for name in ("c1", "c_sig", "c2", "c3", "bn_after_relu", "sep_depthwise",
               "sep"):
    assert isinstance(qmodel.get_layer(name), QFC), name
  # c_sig's sigmoid is its table (no Activation layer left for it).
  assert qmodel.get_layer("c_sig").output_lut is not None
  assert qmodel.get_layer("c_sig").activation is None
  assert not [l for l in qmodel.layers if isinstance(l, L.Activation)]
  assert qmodel.get_layer("bn_after_relu").groups == 8
  # The head after c3 is int8: Flatten of an int8 tensor, QuantizedDense.
  assert type(qmodel.get_layer("flat")).__name__ == "Int8Flatten"
  assert isinstance(qmodel.get_layer("head"), tf_fused_int8.QuantizedDense)
  for name, cls in [("ln", L.LayerNormalization), ("c_soft", L.Conv2D),
                    ("bn_rows", L.BatchNormalization)]:
    layer = qmodel.get_layer(name)
    assert type(layer) is cls, name  # pylint: disable=unidiomatic-typecheck
    assert layer is not model.get_layer(name)  # a copy, same weights
    for a, b in zip(layer.get_weights(), model.get_layer(name).get_weights()):
      np.testing.assert_array_equal(a, b)
  want = model(x).numpy()
  got = qmodel(x).numpy()
  assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


def test_multi_input_model_and_shared_int8_tensors():
  a = keras.Input((8, 8, 3), name="a")
  b = keras.Input((8, 8, 4), name="b")
  ca = L.Conv2D(4, 3, padding="same", activation="relu", name="ca")(a)
  s = L.Add(name="add")([L.Conv2D(4, 1, name="cb")(b), ca])
  out = [L.GlobalMaxPooling2D(name="gmp")(s), L.Flatten(name="flat")(ca)]
  model = keras.Model({"a": a, "b": b}, out)
  data = {"a": images(12, seed=6, shape=(8, 8, 3)),
          "b": images(12, seed=7, shape=(8, 8, 4))}
  qmodel = layer_helpers.quantize_strict(model, data, batch_size=5, verbose=0)
  kinds = sorted(type(l).__name__ for l in qmodel.layers)
  assert kinds == sorted(["InputLayer", "InputLayer", "Quantize", "Quantize",
                          "QuantizedFusedConv2D", "QuantizedFusedConv2D",
                          "Dequantize", "Dequantize", "Int8GlobalMaxPooling2D",
                          "Int8Flatten"])
  # The max pooling of cb's int8 output runs in int8 (then dequantized).
  assert qmodel.get_layer("gmp").output.dtype == "int8"
  # ca's int8 output is cb's side input and the int8 Flatten's input (a
  # reshape, dequantized as a model output).
  assert qmodel.get_layer("cb").use_side_input
  assert qmodel.get_layer("flat").input is qmodel.get_layer("ca").output
  assert qmodel.get_layer("flat_dequantize").input is qmodel.get_layer(
      "flat").output
  assert isinstance(qmodel.input, dict) and set(qmodel.input) == {"a", "b"}
  want, got = model(data), qmodel(data)
  assert len(got) == 2
  for w, g in zip(want, got):
    assert g.dtype == tf.float32 and g.shape == w.shape
    assert np.abs(g.numpy() - w.numpy()).max() < 0.03 * np.abs(w).max()


def test_sequential_and_subclassed_models():
  seq = keras.Sequential([keras.Input((6, 6, 2)),
                          L.Conv2D(4, 3, activation="relu", name="c"),
                          L.Flatten(), L.Dense(2)])
  x = images(8, shape=(6, 6, 2))
  qseq = quantization.quantize_model(seq, x, verbose=0)
  assert isinstance(qseq.get_layer("c"), QFC)
  np.testing.assert_allclose(qseq(x).numpy(), seq(x).numpy(), atol=0.05)

  class Sub(keras.Model):

    def __init__(self):
      super().__init__()
      self.conv = L.Conv2D(4, 3)

    def call(self, inputs):
      return self.conv(inputs)

  with pytest.raises(ValueError, match="subclassed"):
    quantization.quantize_model(Sub(), x, verbose=0)


# ------------------------------------------ digits, end to end, and saving

@pytest.fixture(scope="module")
def digits():
  """The example's float CNN trained briefly on digits, and its int8 model."""
  import sklearn  # pylint: disable=g-import-not-at-top,unused-import  # requirements.txt
  example = layer_helpers.load_example("ptq_digits")
  x_train, y_train, x_test, y_test = example.load_digits_split()
  float_model = example.train_float_model(keras, x_train, y_train, epochs=4)
  int8_model = layer_helpers.quantize_strict(float_model, x_train[:256], verbose=0)
  return example, float_model, int8_model, x_test, y_test


def test_digits_int8_accuracy_within_one_point_of_float(digits):
  example, float_model, int8_model, x_test, y_test = digits
  # 6 convolutions, the global pooling and the Dense head: int8 from the
  # input to the logits (one Quantize, one Dequantize).
  assert sum(isinstance(l, QFC) for l in int8_model.layers) == 8
  assert isinstance(int8_model.get_layer("logits"), tf_fused_int8.QuantizedDense)
  kinds = [type(l).__name__ for l in int8_model.layers]
  assert kinds.count("Quantize") == kinds.count("Dequantize") == 1, kinds
  # Residual Adds on the main path; the projection shortcut feeds the side
  # input of block2_conv2.
  sides = {l.name for l in int8_model.layers
           if isinstance(l, QFC) and l.use_side_input}
  assert sides == {"block1_conv2", "block2_conv2"}
  assert int8_model.get_layer("block2_shortcut").activation is None
  assert not any(isinstance(l, (L.BatchNormalization, L.Conv2D, L.Add))
                 for l in int8_model.layers)
  r = example.compare(float_model, int8_model, x_test, y_test)
  assert r["float"] > 0.9, r  # the float model did learn
  assert r["int8"] >= r["float"] - 0.01, r
  assert r["agreement"] >= 0.98, r


def test_quantized_model_saves_exports_and_reloads(digits, tmp_path):
  _, _, int8_model, x_test, _ = digits
  x = x_test[:32]
  want = int8_model(x).numpy()
  # .keras round trip.
  path = str(tmp_path / "digits_int8.keras")
  int8_model.save(path)
  loaded = keras.models.load_model(path)
  assert isinstance(loaded.get_layer("image_quantize"), quantization.Quantize)
  assert isinstance(loaded.get_layer("block1_conv2"), QFC)
  # int8 to the logits, dequantized: the same bits.
  layer_helpers.assert_reloaded_model_agrees(int8_model, loaded, x, want)
  for a, b in zip(int8_model.get_weights(), loaded.get_weights()):
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)
  # SavedModel export, reloaded with tf.saved_model.load, any batch size.
  export_dir = str(tmp_path / "digits_int8_savedmodel")
  int8_model.export(export_dir, verbose=False)
  with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
    assert b"FusedInt8Conv2DBiasActivation" in f.read()
  restored = tf.saved_model.load(export_dir)
  layer_helpers.assert_float_close(restored.serve(tf.constant(x)).numpy(),
                                   want)
  serving = restored.signatures["serving_default"]
  got = list(serving(tf.constant(x[:5])).values())[0].numpy()
  layer_helpers.assert_float_close(got, want[:5])  # batch 5, not 32


# --------------------------------------------- int8 pooling (ResNet's stem)

def test_zero_padding_with_other_readers_is_not_folded():
  """A ZeroPadding2D read by a pooling and by something else stays a layer
  of its own (its padded tensor is needed); the pooling then pads nothing,
  and both results are the reference's bit for bit."""
  inp = keras.Input((9, 9, 3), name="image")
  h = L.Conv2D(8, 3, padding="same", activation="relu", name="c1")(inp)
  padded = L.ZeroPadding2D(1, name="pad")(h)
  p = L.MaxPooling2D(3, strides=2, name="pool")(padded)
  g = L.GlobalMaxPooling2D(name="gmp")(padded)
  out = L.Conv2D(4, 3, padding="same", activation="relu", name="c2")(p)
  model = keras.Model(inp, [out, g])
  randomize(model, np.random.default_rng(5))
  x = images(4, seed=9, shape=(9, 9, 3))
  qmodel = quantization.quantize_model(model, x, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert "Int8ZeroPadding2D" in kinds, kinds
  assert qmodel.get_layer("pool").zero_padding is None
  c1 = qmodel.get_layer("c1")
  s_in = qmodel.get_layer("image_quantize").scale
  xq = np.clip(np.rint(x / np.float32(s_in)), -128, 127).astype(np.int8)
  k, b, s = c1.get_weights()
  h1 = reference.fused_conv2d_reference(xq, k, b, conv_input_scale=s,
                                        padding="SAME", activation="Relu")
  hp = np.pad(h1, ((0, 0), (1, 1), (1, 1), (0, 0)))
  pooled = tf.nn.max_pool2d(tf.constant(hp.astype(np.float32)), 3, 2,
                            "VALID").numpy().astype(np.int8)
  k, b, s = qmodel.get_layer("c2").get_weights()
  want = reference.fused_conv2d_reference(pooled, k, b, conv_input_scale=s,
                                          padding="SAME", activation="Relu")
  got, got_max = qmodel(x)
  s2 = np.float32(qmodel.get_layer(qmodel.output[0]._keras_history.operation.name).scale)  # pylint: disable=protected-access
  np.testing.assert_array_equal(got.numpy(), want.astype(np.float32) * s2)
  s1 = np.float32(qmodel.get_layer(qmodel.output[1]._keras_history.operation.name).scale)  # pylint: disable=protected-access
  np.testing.assert_array_equal(got_max.numpy(),
                                hp.max(axis=(1, 2)).astype(np.float32) * s1)


def test_stem_pooling_stays_int8_and_exact(tmp_path):
  """conv+BN+ReLU -> ZeroPadding2D -> MaxPooling2D(3, 2) -> conv (+ a
  GlobalMaxPooling2D head), as keras.applications.ResNet50's stem: padding
  and pooling run on the int8 tensor at its scale, with no Dequantize /
  Quantize between the convolutions, and the result is the reference's
  chain bit for bit."""
  inp = keras.Input((13, 11, 3), name="image")
  h = L.ReLU(name="relu1")(L.BatchNormalization(name="bn1")(
      L.Conv2D(8, 3, strides=2, padding="same", name="c1")(inp)))
  p = L.MaxPooling2D(3, strides=2, name="pool")(L.ZeroPadding2D(1, name="pad")(h))
  q = L.MaxPooling2D(2, padding="same", name="pool_same")(p)
  out = L.Conv2D(6, 3, padding="same", activation="relu", name="c2")(q)
  model = keras.Model(inp, [out, L.GlobalMaxPooling2D(name="gmp")(out)])
  randomize(model, np.random.default_rng(11))
  x = images(6, seed=3, shape=(13, 11, 3))
  scales = quantization.calibrate(model, x, verbose=0)
  # The pooled tensor's own scale is not what c2 reads: the int8 tensor
  # keeps the scale of relu1, its producer.
  scales["pool_same"] *= 3
  qmodel = layer_helpers.quantize_strict(model, scales=scales, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1 and kinds.count("Dequantize") == 2, kinds
  for name in ("pool", "pool_same", "gmp"):
    assert qmodel.get_layer(name).output.dtype == "int8", name
  # The ZeroPadding2D feeds only the pooling: its zeros are added in the
  # pooling's one op (FusedInt8MaxPool), with no padded copy.
  assert "Int8ZeroPadding2D" not in kinds, kinds
  assert qmodel.get_layer("pool").zero_padding == ((1, 1), (1, 1))
  assert qmodel.get_layer("pool_same").zero_padding is None
  c1, c2 = qmodel.get_layer("c1"), qmodel.get_layer("c2")
  # c2 reads the pooled int8 tensor at c1's output scale: its
  # conv_input_scale is s_in * s_w / s_out with s_in = c1's output scale.
  w2 = model.get_layer("c2").kernel.numpy().astype(np.float64)
  s_w = np.abs(w2).max(axis=(0, 1, 2)) / 127
  s1, s2 = (np.float64(np.float32(scales[k])) for k in ("relu1", "c2"))
  np.testing.assert_allclose(c2.conv_input_scale.numpy(), s1 * s_w / s2,
                             rtol=1e-6)
  s_in = qmodel.get_layer("image_quantize").scale
  xq = np.clip(np.rint(x / np.float32(s_in)), -128, 127).astype(np.int8)
  k, b, s = c1.get_weights()
  h1 = reference.fused_conv2d_reference(xq, k, b, conv_input_scale=s,
                                        strides=2, padding="SAME",
                                        activation="Relu")
  hp = np.pad(h1, ((0, 0), (1, 1), (1, 1), (0, 0)))
  pooled = tf.nn.max_pool2d(tf.constant(hp), 3, 2, "VALID").numpy()
  pooled = tf.nn.max_pool2d(tf.constant(pooled), 2, 2, "SAME").numpy()
  k, b, s = c2.get_weights()
  want = reference.fused_conv2d_reference(pooled, k, b, conv_input_scale=s,
                                          padding="SAME", activation="Relu")
  got, got_max = qmodel(x)
  s2 = np.float32(qmodel.get_layer(qmodel.output[0]._keras_history.operation.name).scale)  # pylint: disable=protected-access
  np.testing.assert_array_equal(got.numpy(), want.astype(np.float32) * s2)
  np.testing.assert_array_equal(got_max.numpy(),
                                want.max(axis=(1, 2)).astype(np.float32) * s2)
  assert len(np.unique(want)) > 10
  # Close to the float model.
  want_float = model(x)[0].numpy()
  assert np.abs(got.numpy() - want_float).max() < 0.1 * np.abs(want_float).max()
  # .keras and SavedModel round trips keep the int8 pooling and the bits.
  path = str(tmp_path / "stem.keras")
  qmodel.save(path)
  loaded = keras.models.load_model(path)
  assert isinstance(loaded.get_layer("pool"), quantization.Int8MaxPooling2D)
  assert loaded.get_layer("pool").output.dtype == "int8"
  assert loaded.get_layer("pool").zero_padding == ((1, 1), (1, 1))
  for a, b in zip(loaded(x), (got, got_max)):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  export_dir = str(tmp_path / "stem_savedmodel")
  qmodel.export(export_dir, verbose=False)
  restored = tf.saved_model.load(export_dir)
  served = restored.serve(tf.constant(x))
  np.testing.assert_array_equal(served[0].numpy(), got.numpy())


def test_cropping_stays_int8_and_exact(tmp_path):
  """NASNet's reduction path: conv+BN+ReLU -> ZeroPadding2D(((0, 1), (0,
  1))) -> Cropping2D(((1, 0), (1, 0))) -> AveragePooling2D(1, strides=2) /
  a conv: the crop is a slice of the int8 tensor at its scale
  (Int8Cropping2D), so the model is one int8 region with nothing float and
  no warning (keras.applications.NASNetMobile: 5 regions and 4 float
  Cropping2D before), the conv after the crop is the reference's chain bit
  for bit, and the layer survives a .keras round trip."""
  inp = keras.Input((11, 9, 3), name="image")
  h = L.ReLU(name="relu1")(L.BatchNormalization(name="bn1")(
      L.Conv2D(8, 3, padding="same", name="c1")(inp)))
  crop = L.Cropping2D(((1, 0), (1, 0)), name="crop")(
      L.ZeroPadding2D(((0, 1), (0, 1)), name="pad")(h))
  out = L.Conv2D(6, 3, padding="same", activation="relu", name="c2")(crop)
  sub = L.AveragePooling2D(1, strides=2, padding="valid", name="sub")(crop)
  out2 = L.Conv2D(4, 1, activation="relu", name="c3")(sub)
  model = keras.Model(inp, [out, out2])
  randomize(model, np.random.default_rng(13))
  x = images(5, seed=4, shape=(11, 9, 3))
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1 and kinds.count("Dequantize") == 2, kinds
  assert isinstance(qmodel.get_layer("crop"), quantization.Int8Cropping2D)
  assert qmodel.get_layer("crop").output.dtype == "int8"
  s_in = qmodel.get_layer("image_quantize").scale
  xq = np.clip(np.rint(x / np.float32(s_in)), -128, 127).astype(np.int8)
  k, b, s = qmodel.get_layer("c1").get_weights()
  h1 = reference.fused_conv2d_reference(xq, k, b, conv_input_scale=s,
                                        padding="SAME", activation="Relu")
  cropped = np.pad(h1, ((0, 0), (0, 1), (0, 1), (0, 0)))[:, 1:, 1:, :]
  k, b, s = qmodel.get_layer("c2").get_weights()
  want = reference.fused_conv2d_reference(cropped, k, b, conv_input_scale=s,
                                          padding="SAME", activation="Relu")
  assert len(np.unique(want)) > 10
  got, got2 = qmodel(x)
  s2 = np.float32(qmodel.get_layer(qmodel.output[0]._keras_history.operation.name).scale)  # pylint: disable=protected-access
  np.testing.assert_array_equal(got.numpy(), want.astype(np.float32) * s2)
  want_float, want_float2 = (t.numpy() for t in model(x))
  assert np.abs(got.numpy() - want_float).max() < 0.1 * np.abs(want_float).max()
  assert (np.abs(got2.numpy() - want_float2).max() <
          0.1 * np.abs(want_float2).max())
  path = str(tmp_path / "crop.keras")
  qmodel.save(path)
  loaded = keras.models.load_model(path)
  assert isinstance(loaded.get_layer("crop"), quantization.Int8Cropping2D)
  for a, b in zip(loaded(x), (got, got2)):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_nearest_upsampling_stays_int8_and_exact(tmp_path):
  """A U-Net / FPN decoder: conv -> UpSampling2D (nearest, square and
  non-square factors) -> Concatenate with the encoder's tensor -> conv: the
  upsampling repeats the int8 values at their scale (Int8UpSampling2D), so
  the model is one int8 region with no warning, the conv after it is the
  reference's chain bit for bit, and the layer survives a .keras round trip;
  a bilinear UpSampling2D (it averages) stays float, with the warning."""
  inp = keras.Input((8, 6, 3), name="image")
  e1 = L.ReLU(name="e1")(L.BatchNormalization(name="bn1")(
      L.Conv2D(8, 3, padding="same", name="c1")(inp)))
  e2 = L.Conv2D(12, 3, strides=2, padding="same", activation="relu", name="c2")(e1)
  up = L.UpSampling2D(2, name="up")(e2)
  d1 = L.Conv2D(6, 3, padding="same", activation="relu", name="c3")(
      L.Concatenate(name="cat")([up, e1]))
  up2 = L.UpSampling2D((3, 2), name="up2")(d1)
  out = L.Conv2D(4, 1, name="c4")(up2)
  model = keras.Model(inp, out)
  randomize(model, np.random.default_rng(14))
  x = images(5, seed=5, shape=(8, 6, 3))
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1 and kinds.count("Dequantize") == 1, kinds
  for name in ("up", "up2"):
    assert isinstance(qmodel.get_layer(name), quantization.Int8UpSampling2D)
    assert qmodel.get_layer(name).output.dtype == "int8"
  s_in = qmodel.get_layer("image_quantize").scale
  xq = np.clip(np.rint(x / np.float32(s_in)), -128, 127).astype(np.int8)
  k, b, s = qmodel.get_layer("c1").get_weights()
  h1 = reference.fused_conv2d_reference(xq, k, b, conv_input_scale=s,
                                        padding="SAME", activation="Relu")
  k, b, s = qmodel.get_layer("c2").get_weights()
  h2 = reference.fused_conv2d_reference(h1, k, b, conv_input_scale=s, strides=2,
                                        padding="SAME", activation="Relu")
  k, b, s = qmodel.get_layer("c3").get_weights()
  h3 = reference.fused_conv2d_reference(
      np.concatenate([h2.repeat(2, axis=1).repeat(2, axis=2), h1], axis=-1), k, b,
      conv_input_scale=s, padding="SAME", activation="Relu")
  k, b, s = qmodel.get_layer("c4").get_weights()
  want = reference.fused_conv2d_reference(h3.repeat(3, axis=1).repeat(2, axis=2), k, b,
                                          conv_input_scale=s, padding="VALID",
                                          activation="None")
  assert len(np.unique(h3)) > 10 and len(np.unique(want)) > 10
  loaded = layer_helpers.assert_int8_output_exact(model, qmodel, x, want,
                                                  str(tmp_path / "up.keras"))
  assert isinstance(loaded.get_layer("up"), quantization.Int8UpSampling2D)

  # Bilinear interpolation averages: it stays float (two int8 regions).
  assert_stays_float_between_convs(
      L.UpSampling2D(2, interpolation="bilinear", name="up"), x,
      r"'up' \(UpSampling2D\)")


@pytest.mark.parametrize("size", [(1, 1), (2, 2), (1, 3), (3, 1), (3, 2)])
def test_int8_upsampling_layer_repeats_values(size):
  """Int8UpSampling2D (nearest) on int8 tensors equals numpy's repeats,
  eagerly and in a tf.function with an unknown batch (its FusedInt8Concat
  path), and on tensors it leaves to Keras (a zero size, unknown height)."""
  layer = quantization.Int8UpSampling2D(size)
  rng = np.random.default_rng(sum(size))
  for shape in ((2, 5, 3, 7), (1, 1, 1, 1), (0, 4, 4, 3), (2, 0, 3, 2), (1, 3, 4, 0)):
    x = rng.integers(-128, 128, shape).astype(np.int8)
    want = x.repeat(size[0], axis=1).repeat(size[1], axis=2)
    got = layer(tf.constant(x))
    assert got.dtype == tf.int8
    np.testing.assert_array_equal(got.numpy(), want)
  x = rng.integers(-128, 128, (3, 4, 5, 6)).astype(np.int8)
  want = x.repeat(size[0], axis=1).repeat(size[1], axis=2)
  for spec in (tf.TensorSpec((None, 4, 5, 6), tf.int8),
               tf.TensorSpec((None, None, None, 6), tf.int8)):
    f = tf.function(layer.call, input_signature=[spec])
    np.testing.assert_array_equal(f(tf.constant(x)).numpy(), want)
  types = [op.type for op in tf.function(layer.call).get_concrete_function(
      tf.TensorSpec((None, 4, 5, 6), tf.int8)).graph.get_operations()]
  assert types.count("FusedInt8Concat") == (size[0] > 1) + (size[1] > 1), types


def test_transposed_conv_with_kernel_equal_to_stride_stays_int8_and_exact(tmp_path):
  """A U-Net decoder's Conv2DTranspose(kernel = stride = b): each input pixel
  writes its own b x b block, so it is a 1x1 convolution to b * b * filters
  channels (BN and ReLU fused per channel) and a depth-to-space
  (Int8DepthToSpace): one int8 region, the reference's chain bit for bit,
  close to float, a .keras round trip; a dilated Conv2DTranspose stays
  float with the warning."""
  # Keras's convention, which the 1x1 kernel follows: out[b*i + a, b*j + c,
  # co] = sum_ci x[i, j, ci] * W[a, c, co, ci] + bias[co].
  rng = np.random.default_rng(15)
  t = L.Conv2DTranspose(3, 2, strides=2, padding="same")
  xs = rng.normal(0, 1, (2, 3, 4, 5)).astype(np.float32)
  got = t(xs).numpy()
  w, bias = (v.numpy().astype(np.float64) for v in (t.kernel, t.bias))
  want = np.einsum("nijk,acok->niajco", xs.astype(np.float64), w).reshape(2, 6, 8, 3) + bias
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

  inp = keras.Input((8, 6, 3), name="image")
  e1 = L.ReLU(name="e1")(L.BatchNormalization(name="bn1")(
      L.Conv2D(8, 3, padding="same", name="c1")(inp)))
  e2 = L.Conv2D(12, 3, strides=2, padding="same", activation="relu", name="c2")(e1)
  u = L.ReLU(name="u")(L.BatchNormalization(name="bn2")(
      L.Conv2DTranspose(8, 2, strides=2, padding="same", name="t1")(e2)))
  d = L.Conv2D(6, 3, padding="same", activation="relu", name="c3")(
      L.Concatenate(name="cat")([u, e1]))
  t2 = L.Conv2DTranspose(4, 3, strides=3, activation="relu", name="t2")(d)
  out = L.Conv2D(2, 1, name="c4")(t2)
  model = keras.Model(inp, out)
  randomize(model, np.random.default_rng(16))
  for name in ("t1", "t2"):
    layer = model.get_layer(name)
    layer.set_weights([rng.normal(0, 0.3, v.shape).astype(np.float32)
                       for v in layer.get_weights()])
  x = images(5, seed=6, shape=(8, 6, 3))
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1 and kinds.count("Dequantize") == 1, kinds
  assert kinds.count("Int8DepthToSpace") == 2, kinds

  d2s = reference.depth_to_space
  conv = lambda name, v, **kw: reference_conv(qmodel, name, v, **kw)  # pylint: disable=unnecessary-lambda-assignment

  s_in = qmodel.get_layer("image_quantize").scale
  xq = np.clip(np.rint(x / np.float32(s_in)), -128, 127).astype(np.int8)
  h1 = conv("c1", xq, padding="SAME", activation="Relu")
  h2 = conv("c2", h1, strides=2, padding="SAME", activation="Relu")
  assert qmodel.get_layer("t1").get_weights()[0].shape == (1, 1, 12, 32)
  hu = d2s(conv("t1", h2, padding="VALID", activation="Relu"), 2)
  h3 = conv("c3", np.concatenate([hu, h1], axis=-1), padding="SAME", activation="Relu")
  ht = d2s(conv("t2", h3, padding="VALID", activation="Relu"), 3)
  want = conv("c4", ht, padding="VALID", activation="None")
  assert len(np.unique(hu)) > 10 and len(np.unique(want)) > 10
  loaded = layer_helpers.assert_int8_output_exact(model, qmodel, x, want,
                                                  str(tmp_path / "t.keras"))
  assert isinstance(loaded.get_layer("t1_depth_to_space"), quantization.Int8DepthToSpace)

  # Dilation: float, with the reason.
  assert_stays_float_between_convs(
      L.Conv2DTranspose(4, 3, dilation_rate=2, padding="same", name="t"), x,
      r"'t' \(Conv2DTranspose: a Conv2DTranspose runs in int8 with dilation 1")


@pytest.mark.parametrize("kernel,stride,padding,output_padding", [
    (3, 2, "same", None), (3, 2, "valid", None), (4, 2, "same", None),
    (1, 2, "valid", None), (5, 3, "same", None), ((3, 2), 2, "same", None),
    ((2, 5), 2, "valid", None),
    # Unequal strides (a lifted Conv1DTranspose is 1 x s), stride 1, and
    # output_padding (bias-only rows past the full correlation: e steps).
    (3, (2, 1), "same", None), ((1, 4), (1, 2), "valid", None),
    ((3, 5), (3, 2), "same", None), (3, 1, "same", None), (2, 1, "valid", None),
    (3, 2, "same", 1), (3, 2, "valid", 1), (4, 2, "valid", (1, 0)),
    (4, 2, "same", 1), (5, 3, "same", (2, 1)), ((1, 3), (1, 2), "same", (0, 1)),
    (1, 3, "valid", 2)])
def test_overlapping_transposed_conv_runs_as_sub_pixel_conv(
    kernel, stride, padding, output_padding, tmp_path):
  """A Conv2DTranspose whose blocks overlap (or leave gaps: kernel 1,
  stride 2): a convolution with ceil(k / s) taps per phase, padded by
  taps - 1 (and past the end far enough for output_padding), to s_h * s_w *
  filters channels, a depth-to-space of s_h x s_w and a crop to Keras's
  output (same: from TF's padding for that size; valid: from 0): one int8
  region, the reference's chain bit for bit, close to float (so the
  rearranged kernel and the crop are Keras's convolution)."""
  inp = keras.Input((7, 6, 3), name="image")
  h = L.Conv2D(8, 3, padding="same", activation="relu", name="c1")(inp)
  t = L.Conv2DTranspose(16, kernel, strides=stride, padding=padding,
                        output_padding=output_padding, name="t")(h)
  out = L.Conv2D(3, 1, name="c2")(L.ReLU(name="relu")(L.BatchNormalization(name="bn")(t)))
  model = keras.Model(inp, out)
  rng = np.random.default_rng(17)
  randomize(model, rng)
  layer = model.get_layer("t")
  layer.set_weights([rng.normal(0, 0.3, v.shape).astype(np.float32)
                     for v in layer.get_weights()])
  x = images(4, seed=7, shape=(7, 6, 3))
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1, kinds
  kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
  sh, sw = (stride, stride) if isinstance(stride, int) else stride
  assert ("Int8DepthToSpace" in kinds) == ((sh, sw) != (1, 1)), kinds
  th, tw = -(-kh // sh), -(-kw // sw)

  conv = lambda name, v, **kw: reference_conv(qmodel, name, v, **kw)  # pylint: disable=unnecessary-lambda-assignment

  s_in = qmodel.get_layer("image_quantize").scale
  xq = np.clip(np.rint(x / np.float32(s_in)), -128, 127).astype(np.int8)
  h1 = conv("c1", xq, padding="SAME", activation="Relu")
  assert qmodel.get_layer("t").get_weights()[0].shape == (th, tw, 8, sh * sw * 16)
  # The full correlation from row 0, then a step of bias-only rows (zero
  # input) more than any output_padding reaches.
  z = conv("t", np.pad(h1, ((0, 0), (th - 1, th), (tw - 1, tw), (0, 0))),
           padding="VALID", activation="Relu")
  full = reference.depth_to_space(z, (sh, sw))
  want_shape = model.get_layer("t").output.shape[1:3]
  # Keras's output starts where TF's conv2d_transpose pads the forward
  # convolution from the output's size: half of max((L - 1) s + k - out, 0).
  top = [max((l - 1) * s_ + k - o, 0) // 2 if padding == "same" else 0
         for l, s_, k, o in zip((7, 6), (sh, sw), (kh, kw), want_shape)]
  up = full[:, top[0]:top[0] + want_shape[0], top[1]:top[1] + want_shape[1]]
  assert up.shape[1:3] == tuple(want_shape)
  want = conv("c2", up, padding="VALID", activation="None")
  assert len(np.unique(up)) > 10
  # Close to Keras's float output per image (a crop one row off is not).
  got, want_float = qmodel(x).numpy(), model(x).numpy()
  for g, f in zip(got, want_float):
    assert g.ravel() @ f.ravel() > 0.99 * np.linalg.norm(g) * np.linalg.norm(f)
  layer_helpers.assert_int8_output_exact(model, qmodel, x, want, str(tmp_path / "t.keras"))

  # fuse_conv_sequences: the whole model one sequence; where a phase reads
  # fewer taps than the sub-pixel convolution has (k > s and k % s != 0 on
  # an axis; 16 channels a phase, a whole block of them), the transposed
  # convolution is one step running only those taps (step_kinds 2), with
  # the depth-to-space and the crop inside; the
  # same bits eagerly, in a graph (twice: the step plan) and after a .keras
  # round trip.
  fused = quantization.fuse_conv_sequences(qmodel)
  seqs = [l for l in fused.layers if type(l).__name__ == "QuantizedConvSequence"]
  assert len(seqs) == 1, [type(l).__name__ for l in fused.layers]
  saves = any(k > s_ and k % s_ for k, s_ in ((kh, sh), (kw, sw)))
  kinds = seqs[0]._op_attrs.get("step_kinds", [])  # pylint: disable=protected-access
  assert (2 in kinds) == saves, kinds
  np.testing.assert_array_equal(fused(x).numpy(), got)
  fn = tf.function(fused)
  for _ in range(2):
    np.testing.assert_array_equal(fn(tf.constant(x)).numpy(), got)
  layer_helpers.assert_keras_round_trip_exact(fused, x, str(tmp_path / "f.keras"))
