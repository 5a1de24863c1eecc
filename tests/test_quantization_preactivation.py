"""BatchNormalization that follows no convolution (pre-activation ResNet /
DenseNet blocks: BN + ReLU after an Add, or on the model input) runs in int8
as a 1x1 depthwise QuantizedFusedConv2D: filter gamma / sigma per channel
(each channel's value quantizes to +-127 exactly), bias
beta - mean * gamma / sigma, the ReLU / ReLU6 after it fused.

Checked: what becomes int8 and what stays float, the layer's weights from
the BN's formula, every int8 layer bit for bit against tests/reference.py on
its actual inputs, one int8 region for a pre-activation ResNet, the float
model's outputs within quantization error, and .keras / SavedModel round
trips.
"""


import keras
import numpy as np
import pytest

import layer_helpers
import tf_fused_int8
from tf_fused_int8 import quantization
import test_quantization
from test_quantization_depthwise import check_layers_against_reference
from test_quantization_depthwise import randomize

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning")

L = keras.layers
QFC = tf_fused_int8.QuantizedFusedConv2D


def images(n, seed=1, shape=(10, 9, 3)):
  return test_quantization.images(n, seed, shape)


def preactivation_resnet(seed=0, negative_gamma=False):
  """image -> BN (on the float input) -> stem conv -> 2 pre-activation
  blocks [BN + ReLU -> conv + BN + ReLU -> conv -> Add(shortcut)], the
  second with a BN + ReLU6 and a projection shortcut from the pre-activation
  -> BN + ReLU -> GAP -> Dense."""
  inp = keras.Input((10, 9, 3), name="image")
  x = L.BatchNormalization(name="input_bn")(inp)
  x = L.Conv2D(16, 3, padding="same", name="stem")(x)
  for b in range(2):
    p = L.BatchNormalization(name=f"b{b}_preact_bn")(x)
    p = (L.ReLU(name=f"b{b}_preact_relu") if b == 0 else
         L.ReLU(6.0, name=f"b{b}_preact_relu"))(p)
    y = L.Conv2D(16, 3, padding="same", use_bias=False, name=f"b{b}_conv1")(p)
    y = L.ReLU(name=f"b{b}_relu1")(L.BatchNormalization(name=f"b{b}_bn1")(y))
    y = L.Conv2D(16, 3, padding="same", name=f"b{b}_conv2")(y)
    short = x if b == 0 else L.Conv2D(16, 1, name=f"b{b}_proj")(p)
    x = L.Add(name=f"b{b}_add")([short, y])
  x = L.ReLU(name="post_relu")(L.BatchNormalization(name="post_bn")(x))
  logits = L.Dense(5, name="head")(L.GlobalAveragePooling2D(name="gap")(x))
  model = keras.Model(inp, {"features": x, "logits": logits})
  randomize(model, np.random.default_rng(seed), weight_std=0.25)
  if negative_gamma:
    for layer in model.layers:
      if isinstance(layer, L.BatchNormalization):
        w = layer.get_weights()
        w[0] = w[0] * np.where(np.arange(w[0].size) % 3 == 0, -1, 1)
        layer.set_weights(w)
  return model


@pytest.fixture(scope="module", params=[False, True], ids=["gamma", "neg_gamma"])
def quantized(request):
  model = preactivation_resnet(negative_gamma=request.param)
  qmodel = layer_helpers.quantize_strict(model, images(24), verbose=0)
  return model, qmodel


def test_every_batch_norm_is_int8_and_one_region(quantized):
  model, qmodel = quantized
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert "BatchNormalization" not in kinds and "ReLU" not in kinds, kinds
  assert kinds.count("Quantize") == 1, kinds  # one int8 region
  # The features and the logits (the int8 global pooling reads the
  # features' int8 tensor).
  assert kinds.count("Dequantize") == 2, kinds
  for name in ("input_bn", "b0_preact_bn", "b1_preact_bn", "post_bn"):
    layer = qmodel.get_layer(name)
    assert isinstance(layer, QFC), name
    assert layer.kernel_size == (1, 1) and layer.groups == 16 or (
        name == "input_bn" and layer.groups == 3), name
  assert qmodel.get_layer("b0_preact_bn").activation == "relu"
  assert qmodel.get_layer("b1_preact_bn").activation == "relu6"
  assert qmodel.get_layer("input_bn").activation is None


def test_batch_norm_layer_weights_follow_the_formula(quantized):
  model, qmodel = quantized
  scales = quantization.calibrate(model, images(24), verbose=0)
  for name, src in [("b0_preact_bn", "stem"), ("b1_preact_bn", "b0_add"),
                    ("post_bn", "b1_add")]:
    bn = model.get_layer(name)
    f64 = lambda v: np.asarray(v, np.float64)
    f = f64(bn.gamma.numpy()) / np.sqrt(f64(bn.moving_variance.numpy()) + bn.epsilon)
    shift = f64(bn.beta.numpy()) - f64(bn.moving_mean.numpy()) * f
    layer = qmodel.get_layer(name)
    kernel, bias, s = layer.get_weights()[:3]
    assert kernel.shape == (1, 1, 1, f.size)
    np.testing.assert_array_equal(kernel.reshape(-1), np.where(f > 0, 127, -127))
    s_in = np.float32(scales[src])
    out_name = name.replace("_bn", "_relu")
    s_out = np.float32(scales[out_name])
    np.testing.assert_allclose(s, np.float32(s_in * (np.abs(f) / 127.0) / s_out),
                               rtol=1e-6)
    np.testing.assert_allclose(bias, np.float32(shift / s_out), rtol=1e-6,
                               atol=1e-6)


def test_int8_layers_bit_exact_and_close_to_float(quantized):
  model, qmodel = quantized
  x = images(6, seed=9)
  # 10 convolutions, the int8 global pooling and the QuantizedDense head.
  assert check_layers_against_reference(qmodel, x, min_unique=4) == 12
  want = model(x)
  got = qmodel(x)
  feat_w, feat_g = want["features"].numpy(), got["features"].numpy()
  assert np.abs(feat_g - feat_w).max() < 0.06 * np.abs(feat_w).max()
  lw, lg = want["logits"].numpy().ravel(), got["logits"].numpy().ravel()
  cosine = lw @ lg / (np.linalg.norm(lw) * np.linalg.norm(lg))
  assert cosine > 0.995, cosine


def test_batch_norm_used_twice_or_not_on_channels_stays_correct():
  inp = keras.Input((6, 6, 8), name="image")
  c = L.Conv2D(8, 3, padding="same", activation="relu", name="c")(inp)
  bn = L.BatchNormalization(name="bn_two_users")(c)  # ReLU is not its only user
  r = L.ReLU(name="r")(bn)
  s = L.Conv2D(8, 1, name="c2")(r)
  t = L.Add(name="add")([s, bn])
  rows = L.BatchNormalization(axis=1, name="bn_rows")(t)  # stays float
  out = L.Conv2D(4, 1, name="c3")(rows)
  model = keras.Model(inp, out)
  rng = np.random.default_rng(3)
  layer_helpers.set_all_bn(model, rng)
  x = images(16, seed=2, shape=(6, 6, 8))
  with pytest.warns(quantization.QuantizationWarning, match="'bn_rows'"):
    qmodel = quantization.quantize_model(model, x, verbose=0)
  layer = qmodel.get_layer("bn_two_users")
  assert isinstance(layer, QFC) and layer.activation is None
  assert type(qmodel.get_layer("r")) is L.ReLU or isinstance(  # pylint: disable=unidiomatic-typecheck
      qmodel.get_layer("c2"), QFC)
  assert type(qmodel.get_layer("bn_rows")) is L.BatchNormalization  # pylint: disable=unidiomatic-typecheck
  check_layers_against_reference(qmodel, x, min_unique=4)
  want, got = model(x).numpy(), qmodel(x).numpy()
  assert np.abs(got - want).max() < 0.06 * np.abs(want).max()


def test_round_trips(quantized, tmp_path):
  _, qmodel = quantized
  layer_helpers.assert_keras_and_saved_model_round_trip(
      qmodel, images(3, seed=5), tmp_path)


def test_add_of_two_int8_tensors_runs_in_int8():
  """An Add that no conv can take as its side input (both inputs ReLU'd
  convs; a max-pooled tensor plus a concatenation) is the identity 1x1
  depthwise QuantizedFusedConv2D of its first input with the second as
  side input (filter 1 -> 127, conv_input_scale s_a / (127 s_out),
  side_input_scale s_b / s_out), a ReLU after it fused."""
  inp = keras.Input((10, 9, 3), name="image")
  a = L.Conv2D(8, 3, padding="same", activation="relu", name="ca")(inp)
  b = L.Conv2D(8, 1, activation="relu", name="cb")(inp)
  s = L.ReLU(name="sum_relu")(L.Add(name="sum")([a, b]))
  p = L.MaxPooling2D(3, 1, padding="same", name="pool")(s)
  c = L.Concatenate(name="cat")([
      L.Conv2D(4, 1, name="c1")(s), L.Conv2D(4, 3, padding="same", name="c2")(s)])
  y = L.Add(name="mix")([p, c])
  out = L.Conv2D(5, 1, name="out")(y)
  model = keras.Model(inp, out)
  randomize(model, np.random.default_rng(3))
  x = images(24)
  qmodel, scales = layer_helpers.quantized_with_scales(model, x)
  kinds = {l.name: type(l).__name__ for l in qmodel.layers}
  assert list(kinds.values()).count("Quantize") == 1, kinds  # one region
  assert "Add" not in kinds.values() and "sum_relu" not in kinds
  for name, first, second, relu in [("sum", "ca", "cb", "relu"),
                                    ("mix", "pool", "cat", None)]:
    layer = qmodel.get_layer(name)
    assert isinstance(layer, QFC) and layer.use_side_input, name
    assert layer.kernel_size == (1, 1) and layer.groups == 8
    assert layer.activation == relu, name
    kernel, bias, cis, sis = layer.get_weights()
    assert (kernel == 127).all() and (bias == 0).all()
    out_key = "sum_relu" if name == "sum" else name
    s_a, s_b, s_out = (np.float64(np.float32(scales[k]))
                       for k in (first if first != "pool" else "sum_relu",
                                 second, out_key))
    np.testing.assert_allclose(cis, s_a / (127 * s_out), rtol=1e-6)
    np.testing.assert_allclose(sis, s_b / s_out, rtol=1e-6)
  xt = images(4, seed=5)
  # ca, cb, sum, c1, c2, mix, out.
  assert check_layers_against_reference(qmodel, xt, min_unique=4) == 7
  want, got = model(xt).numpy(), qmodel(xt).numpy()
  assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
