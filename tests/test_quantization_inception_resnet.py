"""quantize_model on InceptionResNetV2's scaled residuals: keras.applications'
CustomScaleLayer computes x + r * scale; where r is a linear convolution read
by that layer alone, the convolution takes x as its side input with the scale
folded into its kernel and bias (one int8 region instead of one per block).
The scale formulas and the int8 graph bit for bit against the numpy
reference, the cases that must stay float, and the keras.applications model.
"""

import warnings

import keras
import numpy as np
import pytest

import layer_helpers
import reference
from tf_fused_int8 import quantization
from tf_fused_int8.layers import quantize_kernel

# Keras's own saving code trips numpy 2's __array__(copy=...) deprecation.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning")

L = keras.layers
CustomScaleLayer = pytest.importorskip(
    "keras.src.applications.inception_resnet_v2").CustomScaleLayer


def block_model(scale, activation="relu", up_activation=None, up_read_twice=False,
                seed=0):
  """image -> c0+bn0+relu "x" -> c1 (1x1)+bn1+relu "branch" -> up (1x1, bias,
  linear unless up_activation) -> CustomScaleLayer(scale)([x, up]) "scaled"
  [-> Activation(activation) "out"] -> GAP -> Dense: one Inception-ResNet
  block. Outputs {"logits", "features"} (and "up" when up_read_twice)."""
  inp = keras.Input((9, 7, 3), name="image")
  x = L.ReLU(name="x")(L.BatchNormalization(epsilon=1e-3, name="bn0")(
      L.Conv2D(8, 3, padding="same", name="c0")(inp)))
  branch = L.ReLU(name="branch")(L.BatchNormalization(epsilon=1e-3, name="bn1")(
      L.Conv2D(6, 1, name="c1")(x)))
  up = L.Conv2D(8, 1, activation=up_activation, name="up")(branch)
  out = CustomScaleLayer(scale, name="scaled")([x, up])
  if activation is not None:
    out = L.Activation(activation, name="out")(out)
  logits = L.Dense(5, name="head")(L.GlobalAveragePooling2D(name="gap")(out))
  outputs = {"logits": logits, "features": out}
  if up_read_twice:
    outputs["up"] = up
  model = keras.Model(inp, outputs)
  layer_helpers.randomize_model(model, np.random.default_rng(seed))
  return model


def images(n, seed=1):
  return np.random.default_rng(seed).uniform(-1, 1, (n, 9, 7, 3)).astype(np.float32)


@pytest.mark.parametrize("scale,activation", [(0.17, "relu"), (-0.5, "relu"),
                                              (1.0, None), (2, "relu")])
def test_scaled_residual_is_a_side_input_exactly(scale, activation):
  model = block_model(scale, activation)
  out_name = "out" if activation else "scaled"
  scales = {"image": 0.0125, "x": 0.04, "branch": 0.05, out_name: 0.0625}
  s_in, s_x, s_branch, s_out = (float(np.float32(scales[k]))
                                for k in ("image", "x", "branch", out_name))
  qmodel = layer_helpers.quantize_strict(model, scales=scales, verbose=0, dense=False)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert "CustomScaleLayer" not in kinds and kinds.count("Quantize") == 1, kinds
  up = qmodel.get_layer("up")
  assert up.use_side_input
  assert up.activation == ("relu" if activation else None), up.activation

  # The scale folded in float64: w' = scale * w, b' = scale * b; then the
  # formulas of any conv with a side input (test_quantization.py).
  f64 = lambda v: v.numpy().astype(np.float64)
  w = f64(model.get_layer("up").kernel) * scale
  b = f64(model.get_layer("up").bias) * scale
  s_w = np.max(np.abs(w), axis=(0, 1, 2)) / 127
  kernel, bias, conv_scale, side_scale = up.get_weights()
  np.testing.assert_array_equal(kernel, np.clip(np.rint(w / s_w), -127, 127).astype(np.int8))
  np.testing.assert_array_equal(kernel, quantize_kernel(w)[0])
  np.testing.assert_array_equal(bias, (b / s_out).astype(np.float32))
  np.testing.assert_array_equal(conv_scale, (s_branch * s_w / s_out).astype(np.float32))
  assert side_scale == np.float32(s_x / s_out)

  # The int8 graph, bit for bit: quantize, c0, c1, up with x as its side
  # input, dequantize.
  xs = images(4)
  got = qmodel(xs)
  q = np.clip(np.rint(xs / np.float32(s_in)), -128, 127).astype(np.int8)
  k0, b0, cs0 = qmodel.get_layer("c0").get_weights()
  h0 = reference.fused_conv2d_reference(q, k0, b0, conv_input_scale=cs0,
                                        padding="SAME", activation="Relu")
  k1, b1, cs1 = qmodel.get_layer("c1").get_weights()
  h1 = reference.fused_conv2d_reference(h0, k1, b1, conv_input_scale=cs1,
                                        padding="VALID", activation="Relu")
  y = reference.fused_conv2d_reference(
      h1, kernel, bias, side_input=h0, conv_input_scale=conv_scale,
      side_input_scale=side_scale, padding="VALID",
      activation="Relu" if activation else "None")
  features = y.astype(np.float32) * np.float32(s_out)
  np.testing.assert_array_equal(got["features"].numpy(), features)
  assert len(np.unique(y)) > 20
  # And it approximates the float block.
  err = np.abs(features - model(xs)["features"].numpy())
  assert err.max() < 3 * s_out, err.max()


@pytest.mark.parametrize("case", ["up_relu", "zero_scale", "up_read_twice"])
def test_scaled_residuals_that_cannot_fold_stay_float(case):
  """A ReLU inside the branch (x + relu(r) * s is not a linear stack's side
  input), a zero scale, or r also read elsewhere: the layer stays float,
  with the warning, and the model still approximates the float one."""
  model = block_model(0.0 if case == "zero_scale" else 0.3,
                      up_activation="relu" if case == "up_relu" else None,
                      up_read_twice=case == "up_read_twice")
  xs = images(8)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", quantization.QuantizationWarning)
    qmodel = quantization.quantize_model(model, xs, verbose=0)
  messages = [str(w.message) for w in caught
              if issubclass(w.category, quantization.QuantizationWarning)]
  assert any("'scaled' (CustomScaleLayer)" in m for m in messages), messages
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert "CustomScaleLayer" in kinds, kinds
  layer_helpers.assert_outputs_close(model, qmodel, xs, min_cosine=0.99)


def test_keras_applications_inception_resnet_v2_is_one_region():
  """keras.applications InceptionResNetV2 (75x75, the smallest it takes): its
  40 scaled residuals become side inputs, so the whole network is one int8
  region (41 before), nothing left in float, logits close to float."""
  model, qmodel, rng = layer_helpers.applications_model_quantized(
      keras.applications.InceptionResNetV2, 75, classes=10,
      classifier_activation=None)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1 and kinds.count("Dequantize") == 1, kinds
  assert "CustomScaleLayer" not in kinds
  convs = [l for l in qmodel.layers if type(l).__name__ == "QuantizedFusedConv2D"]
  assert sum(l.use_side_input for l in convs) == 40
  x = rng.uniform(-1, 1, (4, 75, 75, 3)).astype(np.float32)
  w = np.asarray(model(x, training=False))
  g = np.asarray(qmodel(x))
  cosine = np.sum(w * g, 1) / np.linalg.norm(w, axis=1) / np.linalg.norm(g, axis=1)
  assert cosine.min() > 0.99, cosine
