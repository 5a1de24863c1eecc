"""SeparableConv2D in int8 (Xception): each becomes its depthwise part
(`<name>_depthwise`, a depthwise QuantizedFusedConv2D with an int8 output at
its own calibrated scale) and its pointwise part (a 1x1 QuantizedFusedConv2D
named after the layer, with the bias, the activation and a following BN /
ReLU / residual Add fused as for any Conv2D).

Checked: the split float model equals the original; the plan (names,
groups, strides, dilation, depth multiplier, what is folded, one int8
region); every fused layer bit for bit against tests/reference.py on its
actual int8 inputs; closeness to the float model; calibration keys; the
user's model is not touched; .keras round trip.
"""


import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_helpers
import tf_fused_int8
from tf_fused_int8 import quantization
from test_quantization import images
from test_quantization_depthwise import check_layers_against_reference

L = keras.layers
QFC = tf_fused_int8.QuantizedFusedConv2D

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning")


def xception_like(seed=0):
  """stem conv + BN + ReLU -> [sep (no bias) + BN + ReLU -> sep (M=2) + BN
  -> max pool] + 1x1 stride-2 shortcut (Add) -> sep (dilation 2, relu) ->
  sep (stride 2, bias, linear) -> GAP -> Dense."""
  inp = keras.Input((20, 19, 3), name="image")
  x = L.ReLU(name="r0")(L.BatchNormalization(name="bn0")(
      L.Conv2D(8, 3, name="stem")(inp)))
  short = L.Conv2D(16, 1, strides=2, padding="same", name="short")(x)
  y = L.SeparableConv2D(16, 3, padding="same", use_bias=False, name="sep1")(x)
  y = L.ReLU(name="r1")(L.BatchNormalization(name="bn1")(y))
  y = L.SeparableConv2D(16, 3, padding="same", depth_multiplier=2,
                        name="sep2")(y)
  y = L.BatchNormalization(name="bn2")(y)
  y = L.MaxPooling2D(3, 2, padding="same", name="pool")(y)
  y = L.Add(name="add")([y, short])
  z = L.SeparableConv2D(12, 3, activation="relu", dilation_rate=2,
                        name="sep3")(y)
  z = L.SeparableConv2D(10, 2, strides=2, name="sep4")(z)
  out = L.Dense(4, name="head")(L.GlobalAveragePooling2D(name="gap")(z))
  model = keras.Model(inp, {"logits": out, "features": z})
  rng = np.random.default_rng(seed)
  for layer in model.layers:
    if isinstance(layer, L.BatchNormalization):
      layer_helpers.set_bn(layer, rng)
    elif isinstance(layer, (L.SeparableConv2D, L.Conv2D, L.Dense)):
      # Glorot-like sizes (the float values stay O(1) along the chain).
      layer.set_weights([
          rng.normal(0, 1 / np.sqrt(np.prod(w.shape[:-1])), w.shape).astype(
              np.float32) for w in layer.get_weights()])
  return model


def test_split_model_computes_the_same_float_values():
  model = xception_like()
  nodes_before = {l.name: len(l._inbound_nodes) for l in model.layers}  # pylint: disable=protected-access
  split = quantization._split_layers(model)  # pylint: disable=protected-access
  assert split is not model
  kinds = {l.name: type(l).__name__ for l in split.layers}
  for name in ("sep1", "sep2", "sep3", "sep4"):
    assert kinds[name] == "Conv2D" and kinds[name + "_depthwise"] == (
        "DepthwiseConv2D"), name
    sep, dw, pw = (model.get_layer(name), split.get_layer(name + "_depthwise"),
                   split.get_layer(name))
    assert dw.depth_multiplier == sep.depth_multiplier and not dw.use_bias
    assert dw.strides == sep.strides and dw.padding == sep.padding
    assert dw.dilation_rate == sep.dilation_rate
    assert pw.kernel_size == (1, 1) and pw.use_bias == sep.use_bias
  x = images(4, shape=(20, 19, 3))
  want, got = model(x), split(x)
  for key in ("logits", "features"):
    np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-4,
                               atol=1e-5 * np.abs(want[key]).max())
  # The user's layers gained no nodes (the split model uses copies).
  assert {l.name: len(l._inbound_nodes) for l in model.layers} == nodes_before  # pylint: disable=protected-access
  # A model without SeparableConv2D is returned as it is.
  inp = keras.Input((4, 4, 2))
  plain = keras.Model(inp, L.Conv2D(2, 1)(inp))
  assert quantization._split_layers(plain) is plain  # pylint: disable=protected-access


@pytest.fixture(scope="module")
def quantized():
  model = xception_like()
  return (model,) + layer_helpers.quantized_with_scales(
      model, images(24, shape=(20, 19, 3)))


def test_separable_layers_become_two_fused_convolutions(quantized):
  model, qmodel, scales = quantized
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1, kinds  # one int8 region
  assert "SeparableConv2D" not in kinds and "BatchNormalization" not in kinds
  for name, m, folded in [("sep1", 1, "bn1"), ("sep2", 2, "bn2"),
                          ("sep3", 1, None), ("sep4", 1, None)]:
    sep = model.get_layer(name)
    dw, pw = qmodel.get_layer(name + "_depthwise"), qmodel.get_layer(name)
    ci = sep.input.shape[-1]
    assert isinstance(dw, QFC) and isinstance(pw, QFC), name
    assert dw.groups == ci and dw.filters == ci * m, name
    assert dw.strides == sep.strides and dw.dilation_rate == sep.dilation_rate
    assert dw.activation is None and not dw.use_side_input
    assert pw.kernel_size == (1, 1) and pw.groups == 1
    assert pw.filters == sep.filters
    # The depthwise output has its own calibrated scale: the pointwise
    # conv's input scale.
    assert name + "_depthwise" in scales
    s_w = np.abs(sep.depthwise_kernel.numpy().reshape(
        sep.kernel_size + (1, ci * m))).max(axis=(0, 1, 2)) / 127
    s_in = np.float32(scales["r0" if name == "sep1" else {
        "sep2": "r1", "sep3": "add", "sep4": "sep3"}[name]])
    np.testing.assert_allclose(
        dw.conv_input_scale.numpy(),
        np.float64(s_in) * s_w / np.float32(scales[name + "_depthwise"]),
        rtol=1e-6, err_msg=name)
    del folded
  assert qmodel.get_layer("sep1").activation == "relu"   # + BN + ReLU
  assert qmodel.get_layer("sep3").activation == "relu"   # its own relu
  assert qmodel.get_layer("sep4").activation is None
  # sep2 + BN feeds the max pool; the shortcut conv takes the pooled tensor
  # as its side input (the Add).
  assert qmodel.get_layer("short").use_side_input


def test_separable_int8_graph_bit_exact_and_close_to_float(quantized):
  model, qmodel, _ = quantized
  x = images(5, seed=7, shape=(20, 19, 3))
  # stem, short, 4 x 2 separable parts, the global pooling, the head.
  assert check_layers_against_reference(qmodel, x, min_unique=3) == 12
  want, got = model(x), qmodel(x)
  for key in ("logits", "features"):
    w, g = want[key].numpy(), got[key].numpy()
    assert np.abs(g - w).max() < 0.06 * np.abs(w).max(), key
    cos = (w * g).sum() / np.linalg.norm(w) / np.linalg.norm(g)
    assert cos > 0.99, (key, cos)


def test_separable_round_trip(quantized, tmp_path):
  _, qmodel, _ = quantized
  layer_helpers.assert_keras_round_trip_exact(
      qmodel, images(3, seed=2, shape=(20, 19, 3)),
      str(tmp_path / "sep_int8.keras"), keys=("logits", "features"))


def test_keras_applications_xception_is_one_int8_region():
  model, qmodel, rng = layer_helpers.applications_model_quantized(
      keras.applications.Xception, 71, batch=4, classes=10,
      classifier_activation=None)
  kinds = [type(l).__name__ for l in qmodel.layers]
  n_sep = sum(isinstance(l, L.SeparableConv2D) for l in model.layers)
  assert n_sep == 34
  assert kinds.count("Quantize") == 1 and kinds.count("Dequantize") == 1
  assert not {"SeparableConv2D", "Conv2D", "BatchNormalization", "Add",
              "Activation", "Dense"} & set(kinds), kinds
  xt = rng.uniform(-1, 1, (2, 71, 71, 3)).astype(np.float32)
  w, g = model(xt).numpy(), qmodel(xt).numpy()
  cos = (w * g).sum() / np.linalg.norm(w) / np.linalg.norm(g)
  assert cos > 0.99, cos


def test_relu_beside_a_residual_runs_in_int8():
  """Xception's middle flow: the block input feeds both the residual Add and
  a ReLU before the first separable conv, so no conv absorbs the ReLU: it
  runs as Int8ReLU at its input's scale (ReLU6 / ReLU(m): clip at
  round(m / s)). A ReLU of the float model input stays float."""
  inp = keras.Input((10, 9, 4), name="image")
  x = L.Conv2D(8, 3, padding="same", name="stem")(inp)
  raw = L.ReLU(name="on_input")(inp)  # float: the input is float
  for b, act in enumerate([L.Activation("relu"), L.ReLU(6.0),
                           L.ReLU(max_value=0.5)]):
    act.name = f"b{b}_act"
    y = L.SeparableConv2D(8, 3, padding="same", name=f"b{b}_sep")(act(x))
    y = L.BatchNormalization(name=f"b{b}_bn")(y)
    x = L.Add(name=f"b{b}_add")([y, x])
  out = L.GlobalAveragePooling2D(name="gap")(x)
  model = keras.Model(inp, [out, L.Flatten(name="raw_flat")(raw)])
  layer_helpers.set_all_bn(model, np.random.default_rng(4))
  data = images(16, shape=(10, 9, 4))
  qmodel = layer_helpers.quantize_strict(model, data, verbose=0)
  scales = quantization.calibrate(model, data, verbose=0)
  kinds = {l.name: type(l).__name__ for l in qmodel.layers}
  assert [kinds[f"b{b}_act"] for b in range(3)] == ["Int8ReLU"] * 3, kinds
  assert kinds["on_input"] == "ReLU" and kinds["raw_flat"] == "Flatten"
  assert list(kinds.values()).count("Quantize") == 1  # the image, once
  # The bounds: 127 for relu; round(m / s) at the input's (the Add's) scale.
  assert qmodel.get_layer("b0_act").output_max == 127
  for b, m in [(1, 6.0), (2, 0.5)]:
    s = float(np.float32(scales[f"b{b - 1}_add"]))
    assert qmodel.get_layer(f"b{b}_act").output_max == min(127, round(m / s))
  assert qmodel.get_layer("b2_act").output_max < 127  # the clip matters
  # Int8ReLU is the clip of its int8 input, exactly.
  x = images(3, seed=5, shape=(10, 9, 4))
  acts = [qmodel.get_layer(f"b{b}_act") for b in range(3)]
  probe = keras.Model(qmodel.input, [t for a in acts for t in (a.input,
                                                               a.output)])
  vals = [v.numpy() for v in probe(x)]
  for a, (q_in, q_out) in zip(acts, zip(vals[::2], vals[1::2])):
    assert q_in.dtype == q_out.dtype == np.int8
    np.testing.assert_array_equal(q_out, np.clip(q_in, 0, a.output_max))
    assert (q_in < 0).any()
  assert check_layers_against_reference(qmodel, x, min_unique=3) == 8
  want, got = model(x), qmodel(x)
  np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())  # float
  w, g = want[0].numpy(), got[0].numpy()
  assert np.abs(g - w).max() < 0.05 * np.abs(w).max()


@pytest.mark.parametrize("output_max", [0, 1, 40, 126, 127])
def test_int8_relu_is_the_clip_on_every_input(output_max):
  """Int8ReLU on a 4-D int8 tensor runs the fused op as an identity 1x1
  depthwise convolution: every int8 value (-128 .. 127 at every position
  of channel blocks and tails, 1 to 70 channels, batch 1-2) gives
  clip(q, 0, output_max), eagerly (cached operands per channel count) and
  in a tf.function, whose graph has the op and no Maximum / Minimum."""
  relu = quantization.Int8ReLU(output_max=output_max)
  relu.build(None)
  rng = np.random.default_rng(output_max)
  fn = tf.function(relu.call)
  for channels in (1, 3, 16, 17, 64, 70):
    for shape in ((1, 4, 64, channels), (2, 3, 5, channels)):
      q = np.resize(np.arange(-128, 128, dtype=np.int8),
                    int(np.prod(shape))).reshape(shape)
      q = rng.permuted(q, axis=2)
      want = np.clip(q, 0, output_max)
      np.testing.assert_array_equal(relu(tf.constant(q)).numpy(), want)
      np.testing.assert_array_equal(fn(tf.constant(q)).numpy(), want)
  graph = fn.get_concrete_function(tf.TensorSpec([1, 2, 2, 5], tf.int8)).graph
  types = {op.type for op in graph.get_operations()}
  assert "FusedInt8Conv2DBiasActivation" in types, types
  assert not types & {"Maximum", "Minimum", "ClipByValue"}, types
