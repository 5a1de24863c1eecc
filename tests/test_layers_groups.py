"""QuantizedFusedConv2D with groups (grouped and depthwise convolutions) and
explicit padding: outputs bit for bit against the numpy reference
(tests/reference.py), shape inference against the op's C++ shape function,
from_float_weights / from_float_depthwise_weights, config, .keras and
SavedModel round trips, and the errors."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_helpers
import reference
import tf_fused_int8
from tf_fused_int8 import layers as qlayers

# Keras's own saving code trips numpy 2's __array__(copy=...) deprecation.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning")

QFC = tf_fused_int8.QuantizedFusedConv2D


def _ref_padding(layer):
  """The layer's padding as tests/reference.py takes it."""
  if isinstance(layer.padding, str):
    return layer.padding.upper()
  return [list(p) for p in layer.padding]


def _reference(layer, x, side=None):
  """The layer's output computed by tests/reference.py from its weights."""
  weights = layer.get_weights()
  k, b, s = weights[:3]
  ss = weights[3] if layer.use_side_input else 0.0
  assert k.shape[2] * layer.groups == x.shape[-1]
  out_max = layer.output_max
  if layer.activation == "relu6":
    out_max = min(out_max, min(127, round(6.0 / float(layer.output_scale))))
  return reference.fused_conv2d_reference(
      x, k, b, side_input=side, conv_input_scale=s, side_input_scale=ss,
      strides=layer.strides, padding=_ref_padding(layer),
      activation="None" if layer.activation is None else "Relu",
      dilations=layer.dilation_rate, output_min=layer.output_min,
      output_max=out_max)


def _random_layer(rng, ci, **kwargs):
  """A built layer with random int8 weights and scales that keep the
  outputs spread over the int8 range."""
  layer = QFC(**kwargs)
  layer.build((None, None, None, ci))
  kh, kw, cig, co = layer.kernel.shape
  k = rng.integers(-127, 128, (kh, kw, cig, co)).astype(np.int8)
  fan_in = kh * kw * cig
  shape = (co,) if layer.per_channel_scale else ()
  # acc has a standard deviation of about sqrt(fan_in) * 74^2.
  scale = 50.0 / (np.sqrt(fan_in) * 74.0**2 * rng.uniform(0.7, 1.4, shape))
  weights = [k, rng.uniform(-10, 10, co).astype(np.float32),
             scale.astype(np.float32)]
  if layer.use_side_input:
    weights.append(np.float32(rng.uniform(0.2, 0.8)))
  layer.set_weights(weights)
  return layer


# ------------------------------------ the depthwise <-> grouped convention

def test_depthwise_to_grouped_kernel_is_tf_depthwise_order():
  """depthwise_to_grouped_kernel + groups=Ci (as the reference computes it)
  equals tf.nn.depthwise_conv2d, exactly (integer data in float64)."""
  rng = np.random.default_rng(0)
  for ci, m in [(3, 1), (4, 3), (1, 2)]:
    x = rng.integers(-128, 128, (2, 7, 6, ci))
    dw = rng.integers(-127, 128, (3, 2, ci, m))
    want = tf.nn.depthwise_conv2d(x.astype(np.float64), dw.astype(np.float64),
                                  [1, 2, 2, 1], "SAME").numpy()
    grouped = qlayers.depthwise_to_grouped_kernel(dw.astype(np.int8))
    assert grouped.shape == (3, 2, 1, ci * m) and grouped.dtype == np.int8
    for c in range(ci):
      for j in range(m):
        np.testing.assert_array_equal(grouped[:, :, 0, c * m + j],
                                      dw[:, :, c, j])
    got = reference.conv2d_int32(x.astype(np.int8), grouped, strides=2,
                                 padding="SAME")
    np.testing.assert_array_equal(got, want.astype(np.int64))
  with pytest.raises(ValueError, match=r"\[Kh, Kw, Ci, M\]"):
    qlayers.depthwise_to_grouped_kernel(np.zeros((3, 3, 4)))


def test_keras_grouped_conv2d_channel_order_is_the_references():
  """keras.layers.Conv2D(groups=G) (what quantize_model maps onto groups)
  computes what the reference computes for the same kernel."""
  rng = np.random.default_rng(1)
  conv = keras.layers.Conv2D(6, 3, groups=3, padding="same", use_bias=False,
                             dtype="float64")
  x = rng.integers(-128, 128, (2, 5, 5, 9))
  conv.build((None, 5, 5, 9))
  k = rng.integers(-127, 128, (3, 3, 3, 6))
  conv.set_weights([k.astype(np.float64)])
  got = conv(x.astype(np.float64)).numpy()
  want = reference.conv2d_int32(x.astype(np.int8), k.astype(np.int8),
                                padding="SAME")
  np.testing.assert_array_equal(got, want.astype(np.float64))


# ------------------------------------------------- outputs vs reference

GROUPED = [
    # (ci, h, w, layer kwargs)
    (8, 9, 7, dict(filters=6, kernel_size=3, groups=2, padding="same")),
    (12, 8, 8, dict(filters=8, kernel_size=3, groups=4, padding="valid",
                    strides=2, activation="relu")),
    # depthwise, multiplier 1 and 3
    (16, 10, 9, dict(filters=16, kernel_size=3, groups=16, padding="same",
                     activation="relu6", output_scale=0.1)),
    (5, 7, 8, dict(filters=15, kernel_size=(3, 5), groups=5,
                   padding=((0, 2), (4, 1)), strides=(2, 1))),
    (6, 11, 11, dict(filters=6, kernel_size=3, groups=6, padding=1,
                     dilation_rate=2, use_side_input=True)),
    (32, 6, 6, dict(filters=32, kernel_size=3, groups=32, padding="same",
                    per_channel_scale=False, use_side_input=True,
                    activation="relu")),
    (9, 5, 6, dict(filters=12, kernel_size=1, groups=3, padding="valid",
                   output_min=-20, output_max=30)),
    (4, 3, 3, dict(filters=8, kernel_size=3, groups=4, padding=(3, 0),
                   strides=(1, 2))),
]


@pytest.mark.parametrize("ci,h,w,kwargs", GROUPED,
                         ids=[str(i) for i in range(len(GROUPED))])
def test_grouped_layer_matches_reference(ci, h, w, kwargs):
  rng = np.random.default_rng(ci * 100 + h)
  layer = _random_layer(rng, ci, **kwargs)
  assert tuple(layer.kernel.shape) == (
      layer.kernel_size + (ci // layer.groups, layer.filters))
  x = rng.integers(-128, 128, (2, h, w, ci)).astype(np.int8)
  out_shape = layer.compute_output_shape(x.shape)
  side = (rng.integers(-128, 128, out_shape).astype(np.int8)
          if layer.use_side_input else None)
  got = layer(x) if side is None else layer(x, side_input=side)
  assert got.dtype == tf.int8 and tuple(got.shape) == out_shape
  want = _reference(layer, x, side)
  np.testing.assert_array_equal(got.numpy(), want)
  assert len(np.unique(want)) > 10, "degenerate test case"


EXPLICIT_FORMS = [
    (2, ((2, 2), (2, 2))),
    ((1, 3), ((1, 1), (3, 3))),
    (((0, 3), (2, 1)), ((0, 3), (2, 1))),
    ([[0, 0], [4, 0], [0, 5], [0, 0]], ((4, 0), (0, 5))),
    ([[1, 2], [0, 0]], ((1, 2), (0, 0))),
]


@pytest.mark.parametrize("padding,pairs", EXPLICIT_FORMS, ids=str)
def test_explicit_padding_forms_match_reference(padding, pairs):
  rng = np.random.default_rng(7)
  layer = _random_layer(rng, 5, filters=7, kernel_size=(3, 2), strides=(2, 1),
                        padding=padding, activation="relu")
  assert layer.padding == pairs
  assert layer.op_padding == "EXPLICIT"
  assert layer.explicit_paddings == [0, 0, *pairs[0], *pairs[1], 0, 0]
  x = rng.integers(-128, 128, (3, 6, 5, 5)).astype(np.int8)
  got = layer(x).numpy()
  k, b, s = layer.get_weights()
  want = reference.fused_conv2d_reference(
      x, k, b, conv_input_scale=s, strides=(2, 1),
      padding=[list(pairs[0]), list(pairs[1])], activation="Relu")
  np.testing.assert_array_equal(got, want)
  (top, bottom), (left, right) = pairs
  assert got.shape == (3, (6 + top + bottom - 3) // 2 + 1,
                       (5 + left + right - 2) // 1 + 1, 7)


def test_explicit_padding_equals_zero_padding2d_then_valid():
  """padding=p is keras.layers.ZeroPadding2D(p) followed by 'valid'."""
  rng = np.random.default_rng(8)
  pads = ((2, 0), (1, 3))
  layer = _random_layer(rng, 4, filters=6, kernel_size=3, padding=pads,
                        groups=2)
  valid = QFC(6, 3, padding="valid", groups=2)
  valid.build((None, None, None, 4))
  valid.set_weights(layer.get_weights())
  x = rng.integers(-128, 128, (2, 5, 6, 4)).astype(np.int8)
  padded = keras.layers.ZeroPadding2D(pads)(x)
  np.testing.assert_array_equal(layer(x).numpy(), valid(padded).numpy())


# ------------------------------------------------------- shape inference

SHAPE_LAYERS = [
    dict(filters=6, kernel_size=3, padding=((0, 3), (2, 1)), strides=2),
    dict(filters=4, kernel_size=(3, 2), padding=(0, 4), dilation_rate=(2, 3)),
    dict(filters=6, kernel_size=3, padding=5, strides=(3, 1)),
    dict(filters=6, kernel_size=3, padding="same", groups=3, strides=2),
    dict(filters=12, kernel_size=3, padding="valid", groups=6),
    dict(filters=6, kernel_size=(5, 3), padding=((1, 0), (0, 2)), groups=6,
         dilation_rate=(1, 2)),
]
INPUT_SPECS = [(None, None, None, 6), (None, 17, None, 6), (2, None, 12, 6),
               (4, 9, 10, 6), (1, 5, 6, 6)]


@pytest.mark.parametrize("kwargs", SHAPE_LAYERS, ids=str)
def test_shape_inference_agrees_with_op(kwargs):
  layer = QFC(**kwargs)
  layer.build((None, None, None, 6))
  layer_helpers.check_shape_inference(layer, INPUT_SPECS)


def test_explicit_padding_too_small_input_is_an_error_like_the_op():
  layer = QFC(4, 5, padding=((1, 0), (2, 2)))
  layer.build((None, None, None, 3))
  assert layer.compute_output_shape((None, 4, 9, 3))[1] == 1
  with pytest.raises(ValueError, match=r"input height 3 padded by \(1, 0\)"):
    layer.compute_output_shape((None, 3, 9, 3))
  with pytest.raises(Exception):  # the op's shape function agrees
    layer_helpers.op_static_shape(layer, (None, 3, 9, 3))


# -------------------------------------------------------------- errors

def test_groups_errors():
  with pytest.raises(ValueError, match=r"filters \(6\) must be a multiple of "
                     r"groups \(4\)"):
    QFC(6, 3, groups=4)
  for bad in (0, -2, 1.5, True, "2"):
    with pytest.raises(ValueError, match="groups must be a positive int"):
      QFC(6, 3, groups=bad)
  layer = QFC(6, 3, groups=3)
  with pytest.raises(ValueError, match=r"groups=3: the input channel count "
                     r"must be a multiple of 3"):
    layer(keras.Input((8, 8, 4), dtype="int8"))
  layer = QFC(6, 3, groups=3, padding="same")
  layer(keras.Input((4, 4, 9), dtype="int8"))
  with pytest.raises(ValueError, match=r"int8 \[batch, height, width, 9\] "
                     r"\(NHWC\) \(the kernel has 3 input channels per "
                     r"group, 3 groups\)"):
    layer(keras.Input((4, 4, 6), dtype="int8"))
  # A grouped kernel whose output channels do not split into the groups.
  with pytest.raises(ValueError, match="multiple of groups"):
    QFC.from_float_weights(np.ones((3, 3, 2, 5)), groups=2)
  with pytest.raises(ValueError, match="groups from the depthwise kernel"):
    QFC.from_float_depthwise_weights(np.ones((3, 3, 4, 1)), groups=4)


def test_padding_errors():
  for bad in ("causal", "explicit", -1, (1, -2), ((0, 1), (2,)),
              (1, 2, 3), [[1, 0], [1, 1], [1, 1], [0, 0]], 1.5, True, None,
              ((0, 1), (2, 3), (4, 5))):
    with pytest.raises(ValueError, match="padding"):
      QFC(4, 3, padding=bad)


# ------------------------------------------------------ from float weights

def test_from_float_weights_grouped():
  rng = np.random.default_rng(4)
  w = rng.normal(0, 0.2, (3, 3, 3, 8))  # Ci = 6, groups = 2
  b = rng.normal(0, 0.5, 8)
  s_in, s_out = 0.02, 0.05
  layer = QFC.from_float_weights(w, b, input_scale=s_in, output_scale=s_out,
                                 groups=2, padding="same", activation="relu")
  assert layer.groups == 2 and layer.input_channels == 6
  assert tuple(layer.kernel.shape) == (3, 3, 3, 8)
  k, bias, scale = layer.get_weights()
  s_w = np.max(np.abs(w), axis=(0, 1, 2)) / 127
  np.testing.assert_array_equal(
      k, np.clip(np.rint(w / s_w), -127, 127).astype(np.int8))
  np.testing.assert_array_equal(scale, (s_in * s_w / s_out).astype(np.float32))
  np.testing.assert_array_equal(bias, (b / s_out).astype(np.float32))
  xq = rng.integers(-100, 101, (2, 8, 8, 6)).astype(np.int8)
  got = layer(xq).numpy()
  np.testing.assert_array_equal(got, _reference(layer, xq))
  # It approximates the float grouped convolution it was made from.
  want = np.maximum(tf.nn.conv2d(xq.astype(np.float64) * s_in, w, 1,
                                 "SAME").numpy() + b, 0)
  err = np.abs(got * s_out - want)[want < 127 * s_out]
  assert err.max() < 4 * s_out and err.mean() < s_out


@pytest.mark.parametrize("multiplier", [1, 2])
def test_from_float_depthwise_weights(multiplier):
  rng = np.random.default_rng(5 + multiplier)
  ci = 6
  dw = rng.normal(0, 0.3, (3, 3, ci, multiplier))
  dw[..., 1, 0] *= 0.01  # a small channel: per-channel scales matter
  b = rng.normal(0, 0.2, ci * multiplier)
  s_in, s_out = 0.03, 0.02
  layer = QFC.from_float_depthwise_weights(
      dw, b, input_scale=s_in, output_scale=s_out, strides=2, padding="same",
      activation="relu6", name="dw")
  assert layer.groups == ci and layer.filters == ci * multiplier
  assert layer.input_channels == ci and layer.output_scale == s_out
  assert layer.effective_output_max() == min(127, round(6 / s_out))
  k, bias, scale = layer.get_weights()
  assert k.shape == (3, 3, 1, ci * multiplier)
  # Output channel c * M + m is depthwise channel (c, m), one scale each.
  for c in range(ci):
    for m in range(multiplier):
      o = c * multiplier + m
      s_w = np.max(np.abs(dw[..., c, m])) / 127
      np.testing.assert_array_equal(
          k[..., 0, o], np.clip(np.rint(dw[..., c, m] / s_w), -127, 127))
      assert scale[o] == np.float32(s_in * s_w / s_out)
  np.testing.assert_array_equal(bias, (b / s_out).astype(np.float32))
  xq = rng.integers(-128, 128, (2, 9, 9, ci)).astype(np.int8)
  got = layer(xq).numpy()
  np.testing.assert_array_equal(got, _reference(layer, xq))
  want = np.clip(tf.nn.depthwise_conv2d(
      xq.astype(np.float64) * s_in, dw, [1, 2, 2, 1], "SAME").numpy() + b,
                 0, 6)
  inside = want < 127 * s_out
  assert inside.mean() > 0.5
  err = np.abs(got * s_out - want)[inside]
  assert err.max() < 4 * s_out and err.mean() < s_out


# ------------------------------------------------ config, .keras, SavedModel

def test_config_round_trip_with_groups_and_explicit_padding():
  layer = QFC(12, (3, 5), strides=(2, 1), padding=((0, 2), (1, 3)), groups=4,
              activation="relu6", output_scale=0.05, use_side_input=True,
              name="gconv")
  config = layer.get_config()
  assert config["groups"] == 4 and config["padding"] == ((0, 2), (1, 3))
  clone = QFC.from_config(config)
  assert clone.get_config() == config
  again = keras.saving.deserialize_keras_object(
      keras.saving.serialize_keras_object(layer))
  assert isinstance(again, QFC) and again.get_config() == config
  # Lists (as from JSON) are normalized to the same config.
  listed = dict(config, padding=[[0, 2], [1, 3]])
  assert QFC.from_config(listed).get_config() == config
  assert QFC(4, 3).get_config()["groups"] == 1


def _grouped_model(seed=0):
  rng = np.random.default_rng(seed)
  inp = keras.Input((None, None, 8), dtype="int8", name="x_q")
  expand = QFC.from_float_weights(
      rng.normal(0, 0.3, (1, 1, 8, 16)), rng.normal(0, 0.1, 16),
      input_scale=1 / 64, output_scale=1 / 32, activation="relu6",
      name="expand")
  dw = QFC.from_float_depthwise_weights(
      rng.normal(0, 0.3, (3, 3, 16, 1)), rng.normal(0, 0.1, 16),
      input_scale=1 / 32, output_scale=1 / 32, strides=2,
      padding=((0, 1), (0, 1)), activation="relu6", name="dw")
  project = QFC.from_float_weights(
      rng.normal(0, 0.3, (1, 1, 4, 8)), rng.normal(0, 0.1, 8),
      input_scale=1 / 32, output_scale=1 / 64, groups=4, name="project")
  h = project(dw(expand(inp)))
  pooled = keras.layers.GlobalAveragePooling2D(name="gap")(
      keras.layers.Rescaling(1 / 64, name="dequant")(h))
  return keras.Model(inp, {"features": h, "pooled": pooled})


def _model_reference(model, x):
  h = x
  for name in ("expand", "dw", "project"):
    h = _reference(model.get_layer(name), h)
  return h


def test_grouped_model_keras_file_round_trip(tmp_path):
  model = _grouped_model()
  x = np.random.default_rng(1).integers(-128, 128, (3, 8, 10, 8)).astype(
      np.int8)
  want = _model_reference(model, x)
  assert len(np.unique(want)) > 20, "degenerate test network"
  out = model(x)
  np.testing.assert_array_equal(out["features"].numpy(), want)
  path = str(tmp_path / "grouped.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  for name, groups in (("expand", 1), ("dw", 16), ("project", 4)):
    layer = loaded.get_layer(name)
    assert isinstance(layer, QFC) and layer.groups == groups, name
  assert loaded.get_layer("dw").padding == ((0, 1), (0, 1))
  assert loaded.get_layer("dw").activation == "relu6"
  again = loaded(x)
  np.testing.assert_array_equal(again["features"].numpy(), want)
  layer_helpers.assert_float_close(again["pooled"].numpy(),
                                   out["pooled"].numpy())
  for a, b in zip(model.get_weights(), loaded.get_weights()):
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)


def test_grouped_model_saved_model_export(tmp_path):
  model = _grouped_model(seed=2)
  rng = np.random.default_rng(3)
  export_dir = str(tmp_path / "exported")
  model.export(export_dir, verbose=False)
  with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
    assert b"FusedInt8Conv2DBiasActivation" in f.read()
  restored = tf.saved_model.load(export_dir)
  # Any batch and spatial size through one endpoint.
  for shape in [(1, 8, 8, 8), (4, 7, 12, 8)]:
    x = rng.integers(-128, 128, shape).astype(np.int8)
    got = restored.serve(tf.constant(x))
    np.testing.assert_array_equal(got["features"].numpy(),
                                  _model_reference(model, x))
  # tf.saved_model.save of a module serving the model works too.
  module_dir = str(tmp_path / "module")
  module = _ServingModule(model)
  tf.saved_model.save(module, module_dir,
                      signatures={"serving_default": module.serve})
  x = rng.integers(-128, 128, (2, 6, 6, 8)).astype(np.int8)
  served = tf.saved_model.load(module_dir).signatures["serving_default"](
      tf.constant(x))
  np.testing.assert_array_equal(served["features"].numpy(),
                                _model_reference(model, x))


class _ServingModule(tf.Module):

  def __init__(self, model):
    super().__init__()
    self.model = model

  @tf.function(input_signature=[tf.TensorSpec([None, None, None, 8], tf.int8,
                                              name="x_q")])
  def serve(self, x):
    return self.model(x)
