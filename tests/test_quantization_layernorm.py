"""quantize_model on ConvNeXt-style networks: LayerNormalization of an int8
tensor as Int8LayerNormalization, a per-channel multiply after a linear
Dense (ConvNeXt's LayerScale) folded into the Dense, residual `a + b`
(keras.ops.add) in int8, Activation("linear") as the identity, and nested
Sequential blocks (ConvNeXt's stem and downsampling) flattened: one int8
region end to end.

Checked: the plan (layer types, one Quantize, no QuantizationWarning but
the preprocessing), every Int8LayerNormalization bit for bit on its actual
int8 input, the float outputs within quantization error (layer scales
randomized so that the blocks matter), .keras round trip; and what stays
float (other axes, float inputs, multiplies that are not exact).
"""

import re
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_helpers
from tf_fused_int8 import quantization
from test_layer_norm_op import numpy_layer_norm

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning")

L = keras.layers


@keras.saving.register_keras_serializable(package="tests")
class Scale(L.Layer):
  """x * gamma, one value per channel (ConvNeXt's LayerScale)."""

  def __init__(self, channels, plus=0.0, **kwargs):
    super().__init__(**kwargs)
    self.channels, self.plus = channels, plus

  def build(self, _):
    self.gamma = self.add_weight(shape=(self.channels,), initializer="ones")

  def call(self, x):
    return x * self.gamma + self.plus if self.plus else x * self.gamma

  def get_config(self):
    return {**super().get_config(), "channels": self.channels, "plus": self.plus}


def block(x, c, name, plus=0.0):
  y = L.Conv2D(c, 7, padding="same", groups=c, name=f"{name}_dw")(x)
  y = L.LayerNormalization(epsilon=1e-6, name=f"{name}_ln")(y)
  y = L.Dense(4 * c, name=f"{name}_pw1")(y)
  y = L.Activation("gelu", name=f"{name}_gelu")(y)
  y = L.Dense(c, name=f"{name}_pw2")(y)
  y = Scale(c, plus=plus, name=f"{name}_scale")(y)
  y = L.Activation("linear", name=f"{name}_identity")(y)
  return x + y


def convnext_like(plus=0.0, seed=0):
  inp = keras.Input((32, 32, 3), name="image")
  stem = keras.Sequential([L.Conv2D(16, 4, strides=4, name="stem_conv"),
                           L.LayerNormalization(epsilon=1e-6, name="stem_ln")],
                          name="stem")
  x = stem(inp)
  x = block(x, 16, "b0", plus)
  x = block(x, 16, "b1")
  down = keras.Sequential([L.LayerNormalization(epsilon=1e-6, name="down_ln"),
                           L.Conv2D(32, 2, strides=2, name="down_conv")],
                          name="down")
  x = block(down(x), 32, "b2")
  feats = L.GlobalAveragePooling2D(name="gap")(x)
  logits = L.Dense(10, name="head")(L.LayerNormalization(name="head_ln")(feats))
  model = keras.Model(inp, {"features": x, "logits": logits})
  rng = np.random.default_rng(seed)
  for layer in model.layers + stem.layers + down.layers:
    if isinstance(layer, L.LayerNormalization):
      layer.gamma.assign(rng.uniform(0.5, 1.5, layer.gamma.shape))
      layer.beta.assign(rng.uniform(-0.3, 0.3, layer.beta.shape))
    if isinstance(layer, Scale):
      layer.gamma.assign(rng.uniform(0.2, 1.0, layer.gamma.shape))
  return model, rng


def int8_layer_norms_match_reference(qmodel, x):
  lns = [l for l in qmodel.layers if isinstance(l, quantization.Int8LayerNormalization)]
  probe = keras.Model(qmodel.input, [t for l in lns for t in (l.input, l.output)])
  values = [np.asarray(v) for v in probe(x)]
  for i, layer in enumerate(lns):
    q, out = values[2 * i], values[2 * i + 1]
    assert q.dtype == np.int8 and out.dtype == np.int8, layer.name
    want = numpy_layer_norm(q, layer.gamma.numpy(), layer.beta.numpy(), layer.epsilon_steps)
    np.testing.assert_array_equal(out, want, err_msg=layer.name)
    assert len(np.unique(want)) >= 8, (layer.name, "degenerate")
  return len(lns)


def test_convnext_like_model_is_one_int8_region(tmp_path):
  model, rng = convnext_like()
  x = rng.uniform(-1, 1, (8, 32, 32, 3)).astype(np.float32)
  qmodel, _ = layer_helpers.quantized_with_scales(model, x)  # no warning
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1, kinds
  assert kinds.count("Int8LayerNormalization") == 6, kinds  # stem, 3 blocks, down, head
  assert kinds.count("QuantizedDense") == 7, kinds  # 2 per block + head
  for float_kind in ("LayerNormalization", "Dense", "Scale", "Add", "Sequential",
                     "Activation"):
    assert float_kind not in kinds, kinds
  # The LayerScale is folded into pw2: its int8 output is the scaled one.
  pw2 = qmodel.get_layer("b0_pw2")
  assert isinstance(pw2, quantization.QuantizedDense)
  xt = rng.uniform(-1, 1, (4, 32, 32, 3)).astype(np.float32)
  assert int8_layer_norms_match_reference(qmodel, xt) == 6
  layer_helpers.assert_outputs_close(model, qmodel, xt, min_cosine=0.99)
  # Every layer name is a valid name scope, so that the model runs in a
  # graph: the Dequantize of a tensor from a layer's second call (`add:1:0`)
  # was named after it, colons included, and the model failed in any
  # tf.function (its export too). The graph's bits are the eager call's.
  for layer in qmodel.layers:
    assert re.fullmatch(r"[A-Za-z0-9_.\\/>-]+", layer.name), layer.name
  eager = keras.Model.__call__(qmodel, xt)
  graph = tf.function(qmodel)(xt)
  for key in ("features", "logits"):
    np.testing.assert_array_equal(graph[key].numpy(), eager[key].numpy(), err_msg=key)
  layer_helpers.assert_keras_and_saved_model_round_trip(qmodel, xt, tmp_path)


def test_what_stays_float():
  """A multiply that is not exactly x * w, a LayerNormalization over another
  axis, and one of a float tensor stay float (and are reported)."""
  model, rng = convnext_like(plus=0.25)
  inp = model.input
  other = L.LayerNormalization(axis=1, name="ln_axis1")(model.output["features"])
  model = keras.Model(inp, {"features": other, "logits": model.output["logits"]})
  x = rng.uniform(-1, 1, (4, 32, 32, 3)).astype(np.float32)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", quantization.QuantizationWarning)
    qmodel = quantization.quantize_model(model, x, verbose=0)
  text = " ".join(str(w.message) for w in caught)
  assert "'b0_scale' (Scale)" in text and "'ln_axis1' (LayerNormalization)" in text, text
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert "Scale" in kinds and "LayerNormalization" in kinds
  layer_helpers.assert_outputs_close(model, qmodel, x, min_cosine=0.99)
  # A float input to the model: the LayerNormalization of it stays float.
  inp = keras.Input((6, 8))
  y = L.Dense(8)(L.LayerNormalization(name="ln_float")(inp))
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", quantization.QuantizationWarning)
    q2 = quantization.quantize_model(keras.Model(inp, y),
                                     rng.standard_normal((4, 6, 8)).astype(np.float32),
                                     verbose=0)
  assert "Int8LayerNormalization" not in [type(l).__name__ for l in q2.layers]


def test_keras_applications_convnext_tiny():
  model = keras.applications.ConvNeXtTiny(weights=None, input_shape=(32, 32, 3),
                                          classifier_activation=None)
  rng = np.random.default_rng(0)
  for layer in model.layers:  # blocks that matter (the default scale is 1e-6)
    if type(layer).__name__ == "LayerScale":
      layer.gamma.assign(rng.uniform(0.2, 1.0, layer.gamma.shape))
  x = rng.uniform(-1, 1, (8, 32, 32, 3)).astype(np.float32)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", quantization.QuantizationWarning)
    qmodel = quantization.quantize_model(model, x, verbose=0)
  messages = [str(w.message) for w in caught]
  # Its preprocessing Normalization runs in the Quantize op (folded): no
  # layer stays float.
  assert not messages, messages
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1 and "Normalization" not in kinds
  (quant,) = [l for l in qmodel.layers if type(l).__name__ == "Quantize"]
  assert [op for op, _ in quant.preprocess] == ["sub", "div"]
  assert kinds.count("Int8LayerNormalization") == 23  # 18 blocks, stem, 3 down, head
  assert kinds.count("QuantizedDense") == 37
  xt = rng.uniform(-1, 1, (4, 32, 32, 3)).astype(np.float32)
  want, got = np.asarray(model(xt)), np.asarray(qmodel(xt))
  cosine = np.sum(want * got, 1) / np.linalg.norm(want, axis=1) / np.linalg.norm(got, axis=1)
  assert cosine.min() > 0.99, cosine
