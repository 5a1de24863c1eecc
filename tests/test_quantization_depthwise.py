"""Post-training quantization of depthwise / grouped convolutions, ReLU6,
clipped ReLUs and ZeroPadding2D (MobileNetV2-style inverted-residual blocks):
the weights and the ReLU6 / ReLU(max_value=m) bounds from their formulas, the int8 graph bit for bit against the
numpy reference (tests/reference.py), a MobileNetV2-style CNN trained on
scikit-learn's digits (accuracy, per-layer bits, .keras / SavedModel), and
keras.applications.MobileNetV2 quantized end to end."""


import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_helpers
import reference
import tf_fused_int8
from tf_fused_int8 import quantization

# Keras's own saving code trips numpy 2's __array__(copy=...) deprecation.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning")

L = keras.layers
QFC = tf_fused_int8.QuantizedFusedConv2D


def randomize(model, rng, weight_std=0.3):
  for layer in model.layers:
    if isinstance(layer, L.BatchNormalization):
      layer_helpers.set_bn(layer, rng)
    elif isinstance(layer, (L.Conv2D, L.DepthwiseConv2D)):
      layer.set_weights([rng.normal(0, weight_std, w.shape).astype(np.float32)
                         for w in layer.get_weights()])


def relu6_max(scale):
  """The int8 bound of ReLU6 for an output of scale `scale` (the contract:
  round half to even of the float64 quotient, at most 127)."""
  return min(127, round(6.0 / float(scale)))


def clipped_relu_max(m, scale):
  """The int8 bound of ReLU(max_value=m) for an output of scale `scale`
  (float32): min(127, round(m / scale)), float64 quotient, half to even."""
  return min(127, round(float(m) / float(np.float32(scale))))


def ref_padding(layer):
  if isinstance(layer.padding, str):
    return layer.padding.upper()
  return [list(p) for p in layer.padding]


def layer_reference(layer, x, side=None):
  """A QuantizedFusedConv2D's int8 output from tests/reference.py (groups
  are inferred there from the kernel's shape). A QuantizedDense's input
  [..., Ci] is its rows, each one pixel of the 1x1 convolution."""
  if isinstance(layer, tf_fused_int8.QuantizedDense):
    x = np.asarray(x)
    rows = x.reshape(-1, 1, 1, x.shape[-1])
    k, b, s = layer.get_weights()
    out_max = layer.output_max
    if layer.activation == "relu6":
      out_max = min(out_max, relu6_max(layer.output_scale))
    want = reference.fused_conv2d_reference(
        rows, k, b, conv_input_scale=s, padding="VALID",
        activation="None" if layer.activation is None else "Relu",
        output_max=out_max, output_lut=layer.output_lut)
    return want.reshape(x.shape[:-1] + (k.shape[-1],))
  weights = layer.get_weights()
  k, b, s = weights[:3]
  ss = weights[3] if layer.use_side_input else 0.0
  out_max = layer.output_max  # 127 unless given (a clipped ReLU's bound)
  if layer.activation == "relu6":
    out_max = min(out_max, relu6_max(layer.output_scale))
  return reference.fused_conv2d_reference(
      x, k, b, side_input=side, conv_input_scale=s, side_input_scale=ss,
      strides=layer.strides, padding=ref_padding(layer),
      activation="None" if layer.activation is None else "Relu",
      dilations=layer.dilation_rate, output_max=out_max,
      output_lut=layer.output_lut)


def check_layers_against_reference(qmodel, x, min_unique=8):
  """Every QuantizedFusedConv2D's int8 output equals the reference computed
  on its actual int8 input(s) in the quantized model. Returns the number of
  layers checked."""
  qlayers = [l for l in qmodel.layers if isinstance(l, QFC)]
  taps = []
  for layer in qlayers:
    ins = layer.input if layer.use_side_input else [layer.input]
    taps += list(ins) + [layer.output]
  probe = keras.Model(qmodel.input, taps)
  values = [v.numpy() for v in probe(x)]
  i = 0
  for layer in qlayers:
    n = 2 if layer.use_side_input else 1
    ins, out = values[i:i + n], values[i + n]
    i += n + 1
    assert ins[0].dtype == np.int8 and out.dtype == np.int8, layer.name
    want = layer_reference(layer, ins[0], ins[1] if n == 2 else None)
    np.testing.assert_array_equal(out, want, err_msg=layer.name)
    assert len(np.unique(want)) >= min_unique, (layer.name, "degenerate")
  return len(qlayers)


# ------------------------------------ hand-made block, explicit scales

def inverted_residual_model(seed=0):
  """image -> expand(1x1)+BN+ReLU(6) -> ZeroPadding2D + depthwise(stride 2)
  +BN+Activation(relu6) -> project(1x1)+BN -> [depthwise x2 (relu6) ->
  grouped 1x1 (groups=2)+BN] -> Add(project) ; BN statistics random."""
  inp = keras.Input((9, 8, 4), name="image")
  h = L.ReLU(6.0, name="expand_relu")(L.BatchNormalization(name="expand_bn")(
      L.Conv2D(12, 1, use_bias=False, name="expand")(inp)))
  h = L.ZeroPadding2D(((0, 1), (1, 0)), name="pad")(h)
  h = L.Activation("relu6", name="dw_relu")(L.BatchNormalization(
      name="dw_bn")(L.DepthwiseConv2D(3, strides=2, use_bias=False,
                                      name="dw")(h)))
  p = L.BatchNormalization(name="project_bn")(
      L.Conv2D(6, 1, name="project")(h))
  h2 = L.DepthwiseConv2D(3, padding="same", depth_multiplier=2,
                         activation="relu6", name="dw2")(p)
  g = L.BatchNormalization(name="gproj_bn")(
      L.Conv2D(6, 1, groups=2, name="gproj")(h2))
  out = L.Add(name="add")([p, g])
  logits = L.Dense(3, name="head")(L.GlobalAveragePooling2D(name="gap")(out))
  model = keras.Model(inp, {"features": out, "logits": logits})
  randomize(model, np.random.default_rng(seed))
  return model


def folded(conv, bn):
  """(kernel, bias) of conv + BN in float64, a depthwise kernel
  [Kh, Kw, Ci, M] laid out as [Kh, Kw, 1, Ci * M] (channel c * M + m)."""
  f64 = lambda v: np.asarray(v, np.float64)
  w = f64(conv.kernel.numpy())
  if isinstance(conv, L.DepthwiseConv2D):
    kh, kw, ci, m = w.shape
    grouped = np.zeros((kh, kw, 1, ci * m))
    for c in range(ci):
      for j in range(m):
        grouped[:, :, 0, c * m + j] = w[:, :, c, j]
    w = grouped
  b = f64(conv.bias.numpy()) if conv.use_bias else np.zeros(w.shape[-1])
  if bn is None:
    return w, b
  f = f64(bn.gamma.numpy()) / np.sqrt(f64(bn.moving_variance.numpy()) +
                                      bn.epsilon)
  return w * f, (b - f64(bn.moving_mean.numpy())) * f + f64(bn.beta.numpy())


def test_inverted_residual_weights_relu6_bound_and_int8_graph():
  model = inverted_residual_model()
  dw2 = model.get_layer("dw2")  # larger weights: its ReLU6 clips too
  dw2.set_weights([dw2.kernel.numpy() * 8, dw2.bias.numpy()])
  rng = np.random.default_rng(3)
  x = rng.uniform(-8, 8, (3, 9, 8, 4)).astype(np.float32)
  # The conv body with hand-set scales (the head stays float: dense=False;
  # tests/test_quantization_head.py covers the int8 head).
  scales = quantization.calibrate(model, x, verbose=0, dense=False)
  assert sorted(scales) == sorted(["image", "expand_relu", "dw_relu",
                                   "project_bn", "dw2", "add"])
  # Calibrated ReLU6 outputs have s <= 6 / 127, so the bound would be the
  # int8 saturation at 127; larger scales make every ReLU6 bound < 127.
  scales.update(expand_relu=0.1, dw_relu=0.09, dw2=0.07)
  s = {k: float(np.float32(v)) for k, v in scales.items()}
  qmodel = layer_helpers.quantize_strict(model, scales=scales, verbose=0, dense=False)
  kinds = {l.name: type(l).__name__ for l in qmodel.layers}
  assert kinds == {
      "image": "InputLayer", "image_quantize": "Quantize",
      **{n: "QuantizedFusedConv2D" for n in ("expand", "dw", "project", "dw2",
                                             "gproj")},
      "add_dequantize": "Dequantize", "gap": "GlobalAveragePooling2D",
      "head": "Dense"}
  q = {n: qmodel.get_layer(n) for n in ("expand", "dw", "project", "dw2",
                                        "gproj")}
  # Geometry: depthwise -> groups = input channels; ZeroPadding2D + "valid"
  # -> explicit padding; Conv2D(groups=2) -> groups=2.
  assert [q[n].groups for n in q] == [1, 12, 1, 6, 2]
  assert q["dw"].padding == ((0, 1), (1, 0)) and q["dw"].strides == (2, 2)
  assert q["dw2"].padding == "same" and q["dw2"].filters == 12
  assert [q[n].activation for n in q] == ["relu6", "relu6", None, "relu6",
                                          None]
  assert q["gproj"].use_side_input and not q["project"].use_side_input
  # ReLU6 -> output_max = round(6 / s_out) (60, 67, 86 here: all < 127).
  for n, key in (("expand", "expand_relu"), ("dw", "dw_relu"),
                 ("dw2", "dw2")):
    assert q[n].output_scale == s[key], n
    assert q[n].effective_output_max() == relu6_max(s[key]) < 127, n

  # Weights: BN folded in float64, symmetric per output channel, then
  # conv_input_scale = s_in * s_w / s_out, bias = b / s_out,
  # side_input_scale = s_side / s_out.
  fl = model.get_layer
  for n, bn, s_in, s_out, s_side in [
      ("expand", "expand_bn", s["image"], s["expand_relu"], None),
      ("dw", "dw_bn", s["expand_relu"], s["dw_relu"], None),
      ("project", "project_bn", s["dw_relu"], s["project_bn"], None),
      ("dw2", None, s["project_bn"], s["dw2"], None),
      ("gproj", "gproj_bn", s["dw2"], s["add"], s["project_bn"])]:
    w, b = folded(fl(n), bn and fl(bn))
    s_w = np.max(np.abs(w), axis=(0, 1, 2)) / 127
    weights = q[n].get_weights()
    assert weights[0].shape == w.shape, n
    np.testing.assert_array_equal(
        weights[0], np.clip(np.rint(w / s_w), -127, 127).astype(np.int8))
    np.testing.assert_array_equal(weights[1], (b / s_out).astype(np.float32))
    np.testing.assert_array_equal(weights[2],
                                  (s_in * s_w / s_out).astype(np.float32))
    if s_side is not None:
      assert weights[3] == np.float32(s_side / s_out)

  # The whole int8 graph, bit for bit, chained through the reference.
  xq = np.clip(np.rint(x / np.float32(s["image"])), -128, 127).astype(np.int8)
  h1 = layer_reference(q["expand"], xq)
  h = layer_reference(q["dw"], h1)
  p = layer_reference(q["project"], h)
  h2 = layer_reference(q["dw2"], p)
  out = layer_reference(q["gproj"], h2, side=p)
  got = qmodel(x)
  np.testing.assert_array_equal(got["features"].numpy(),
                                out.astype(np.float32) * np.float32(s["add"]))
  # The ReLU6 bounds are reached (so they are really tested).
  assert (h1 == relu6_max(s["expand_relu"])).any()
  assert (h2 == relu6_max(s["dw2"])).any()
  assert (h1 == 0).any() and len(np.unique(out)) > 20
  # And the int8 model approximates the float one.
  want = model(x)["features"].numpy()
  err = np.abs(got["features"].numpy() - want)
  assert np.median(err) < 2 * s["add"] and err.max() < 0.1 * np.abs(want).max()


@pytest.mark.parametrize("kernel,stride,size,zero_pads,padding,want", [
    # ZeroPadding2D + "valid": the ZeroPadding2D's pads.
    (3, 2, (8, 8), ((0, 1), (0, 1)), "valid", ((0, 1), (0, 1))),
    # + "same", stride 1: TF's pads (K - 1, the odd one after) added.
    (3, 1, (None, None), ((1, 2), (0, 0)), "same", ((2, 3), (1, 1))),
    (4, 1, (None, 5), ((0, 0), (3, 0)), "same", ((1, 2), (4, 2))),
    # + "same", stride 2, known size: pads of the padded size.
    (3, 2, (7, 8), ((1, 0), (0, 0)), "same", ((1, 1), (0, 1))),
])
def test_zero_padding_becomes_explicit_padding(kernel, stride, size,
                                               zero_pads, padding, want):
  inp = keras.Input(size + (3,), name="image")
  h = L.ZeroPadding2D(zero_pads, name="zp")(inp)
  h = L.Conv2D(5, kernel, strides=stride, padding=padding, name="conv")(h)
  model = keras.Model(inp, h)
  randomize(model, np.random.default_rng(1))
  hw = tuple(8 if d is None else d for d in size)
  x = np.random.default_rng(2).uniform(-1, 1, (2,) + hw + (3,)).astype(
      np.float32)
  scales = quantization.calibrate(model, x, verbose=0)
  qmodel = layer_helpers.quantize_strict(model, scales=scales, verbose=0)
  assert "zp" not in [l.name for l in qmodel.layers]
  layer = qmodel.get_layer("conv")
  assert layer.padding == want
  s_in, s_out = np.float32(scales["image"]), np.float32(scales["conv"])
  xq = np.clip(np.rint(x / s_in), -128, 127).astype(np.int8)
  got = qmodel(x).numpy()
  np.testing.assert_array_equal(
      got, layer_reference(layer, xq).astype(np.float32) * s_out)
  # Same geometry as the float model (and close to its values).
  want_float = model(x).numpy()
  assert got.shape == want_float.shape
  assert np.abs(got - want_float).max() < 0.05 * np.abs(want_float).max()


def test_zero_padding_that_cannot_be_merged_stays_float_quietly():
  # SAME with stride 2 after ZeroPadding2D on an unknown size: the pads
  # depend on the size, so the ZeroPadding2D runs in float (exact, no
  # warning); a ZeroPadding2D with two users stays float too.
  inp = keras.Input((None, None, 3), name="image")
  z = L.ZeroPadding2D(1, name="zp")(inp)
  a = L.Conv2D(4, 3, strides=2, padding="same", name="a")(z)
  z2 = L.ZeroPadding2D(((1, 0), (0, 1)), name="zp2")(inp)
  b = L.Conv2D(4, 2, name="b")(z2)
  c = L.GlobalMaxPooling2D(name="gmp")(z2)
  model = keras.Model(inp, [a, b, c])
  randomize(model, np.random.default_rng(3))
  x = np.random.default_rng(4).uniform(-1, 1, (2, 7, 6, 3)).astype(np.float32)
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  assert type(qmodel.get_layer("zp")) is L.ZeroPadding2D  # pylint: disable=unidiomatic-typecheck
  assert type(qmodel.get_layer("zp2")) is L.ZeroPadding2D  # pylint: disable=unidiomatic-typecheck
  assert qmodel.get_layer("a").padding == "same"
  assert qmodel.get_layer("b").padding == "valid"
  for w, g in zip(model(x), qmodel(x)):
    assert g.shape == w.shape
    assert np.abs(g.numpy() - w.numpy()).max() < 0.05 * np.abs(w).max()


def test_relu_variants_and_what_stays_float():
  inp = keras.Input((6, 6, 4), name="image")
  a = L.Conv2D(4, 3, padding="same", activation="relu6", name="a")(inp)
  b = L.ReLU(max_value=6.0, name="b_relu")(
      L.DepthwiseConv2D(3, padding="same", name="b")(a))
  c = L.Activation(keras.activations.relu6, name="c_relu")(
      L.Conv2D(4, 1, name="c")(b))
  d = L.ReLU(max_value=4.0, name="d_relu4")(L.Conv2D(4, 1, name="d")(c))
  e = L.DepthwiseConv2D(3, padding="same", activation="tanh", name="e")(d)
  f = L.Activation("relu6", name="f_relu")(L.Add(name="f_add")([
      L.Conv2D(4, 1, name="f")(e), e]))
  g = L.DepthwiseConv2D(3, padding="same", activation="softmax", name="g")(f)
  model = keras.Model(inp, g)
  randomize(model, np.random.default_rng(5))
  x = np.random.default_rng(6).uniform(-3, 3, (4, 6, 6, 4)).astype(np.float32)
  with pytest.warns(quantization.QuantizationWarning) as record:
    qmodel = quantization.quantize_model(model, x, verbose=0)
  message = str(record[0].message)
  assert "1 layer(s) stay float" in message, message
  assert "'g' (DepthwiseConv2D: activation='softmax'" in message, message
  acts = {n: qmodel.get_layer(n).activation for n in "abcdf"}
  # ReLU(max_value=4) is a clipped ReLU: Relu with output_max from s_out.
  assert acts == {"a": "relu6", "b": "relu6", "c": "relu6", "d": "relu",
                  "f": "relu6"}
  s_d = quantization.calibrate(model, x, verbose=0)["d_relu4"]
  assert qmodel.get_layer("d").output_max == clipped_relu_max(4.0, s_d)
  assert qmodel.get_layer("f").use_side_input
  assert "d_relu4" not in [l.name for l in qmodel.layers]
  # e's own tanh is split off and becomes its lookup table; g's softmax
  # (not element-wise) keeps it float.
  assert isinstance(qmodel.get_layer("e"), QFC) and qmodel.get_layer("e").groups == 4
  assert qmodel.get_layer("e").output_lut is not None
  assert type(qmodel.get_layer("g")) is L.DepthwiseConv2D  # pylint: disable=unidiomatic-typecheck
  assert qmodel.get_layer("b").groups == 4
  want, got = model(x).numpy(), qmodel(x).numpy()
  assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


# ----------------------------------------- clipped ReLU(max_value=m)

def clipped_relu_model(seed=0):
  """Conv2D -> ReLU(1.5) -> Conv2D(1x1) -> ReLU(4) -> DepthwiseConv2D ->
  ReLU(2.53125) -> Conv2D(1x1) + Add(the ReLU(4) output) -> ReLU(3)."""
  inp = keras.Input((8, 7, 3), name="image")
  h = L.ReLU(max_value=1.5, name="c1_relu")(
      L.Conv2D(6, 3, padding="same", name="c1")(inp))
  h4 = L.ReLU(max_value=4.0, name="c2_relu")(L.Conv2D(6, 1, name="c2")(h))
  h = L.ReLU(max_value=2.53125, name="dw_relu")(
      L.DepthwiseConv2D(3, padding="same", name="dw")(h4))
  out = L.ReLU(max_value=3.0, name="add_relu")(L.Add(name="add")([
      L.Conv2D(6, 1, name="c3")(h), h4]))
  model = keras.Model(inp, out)
  randomize(model, np.random.default_rng(seed), weight_std=0.6)
  c2 = model.get_layer("c2")  # larger weights: its ReLU(4) clips too
  c2.set_weights([c2.kernel.numpy() * 2, c2.bias.numpy()])
  return model


def test_clipped_relu_bound_and_int8_graph():
  model = clipped_relu_model()
  x = np.random.default_rng(7).uniform(-3, 3, (4, 8, 7, 3)).astype(np.float32)
  scales = quantization.calibrate(model, x, verbose=0)
  assert sorted(scales) == sorted(["image", "c1_relu", "c2_relu", "dw_relu",
                                   "add_relu"])
  # Calibrated scales would put every bound at 127 (s <= m / 127); these
  # make them 50, 80, 40 and 75. 2.53125 / 0.0625 = 40.5 exactly: half to
  # even gives 40 (round half up would give 41).
  bounds = {"c1": ("c1_relu", 1.5, 0.03), "c2": ("c2_relu", 4.0, 0.05),
            "dw": ("dw_relu", 2.53125, 0.0625),
            "c3": ("add_relu", 3.0, 0.04)}
  scales.update({key: s for key, _, s in bounds.values()})
  qmodel = layer_helpers.quantize_strict(model, scales=scales, verbose=0)
  kinds = {l.name: type(l).__name__ for l in qmodel.layers}
  assert kinds == {"image": "InputLayer", "image_quantize": "Quantize",
                   **{n: "QuantizedFusedConv2D" for n in bounds},
                   "add_relu_dequantize": "Dequantize"}
  want_max = {n: clipped_relu_max(m, s) for n, (_, m, s) in bounds.items()}
  assert want_max == {"c1": 50, "c2": 80, "dw": 40, "c3": 75}
  for n in bounds:
    layer = qmodel.get_layer(n)
    assert layer.activation == "relu", n
    assert layer.output_max == layer.effective_output_max() == want_max[n], n
    # The bound is in the layer's config (saving / from_config keep it).
    again = QFC.from_config(layer.get_config())
    assert again.effective_output_max() == want_max[n], n
  assert qmodel.get_layer("dw").groups == 6
  assert qmodel.get_layer("c3").use_side_input

  # Every layer's int8 output equals the reference (with output_max) on its
  # actual int8 inputs in the quantized model ...
  assert check_layers_against_reference(qmodel, x) == 4
  # ... and each bound is reached (so the clip is really exercised), and 0.
  probe = keras.Model(qmodel.input,
                      {n: qmodel.get_layer(n).output for n in bounds})
  outs = {n: v.numpy() for n, v in probe(x).items()}
  for n in bounds:
    assert outs[n].max() == want_max[n], (n, outs[n].max())
    assert outs[n].min() == 0, n
    assert (outs[n] == want_max[n]).sum() >= 3, n
  # The int8 model approximates the float one (which clips at the same m).
  want, got = model(x).numpy(), qmodel(x).numpy()
  assert got.max() <= 3.0 + 0.04 / 2
  assert np.abs(got - want).max() < 0.15 * np.abs(want).max()


@pytest.mark.parametrize("relu_kwargs", [
    dict(max_value=4.0, negative_slope=0.1),
    dict(max_value=4.0, threshold=0.5),
    dict(max_value=0.0),
])
def test_leaky_thresholded_or_zero_clipped_relu_stays_float(relu_kwargs):
  inp = keras.Input((6, 6, 3), name="image")
  h = L.ReLU(name="r", **relu_kwargs)(L.Conv2D(4, 3, name="c")(inp))
  model = keras.Model(inp, L.Conv2D(2, 1, name="c2")(h))
  randomize(model, np.random.default_rng(8))
  x = np.random.default_rng(9).uniform(-3, 3, (2, 6, 6, 3)).astype(np.float32)
  # A ReLU the op cannot compute is an ordinary float layer (like any
  # unfused ReLU: not listed by the QuantizationWarning).
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  c = qmodel.get_layer("c")
  assert isinstance(c, QFC) and c.activation is None and c.output_max == 127
  r = qmodel.get_layer("r")
  assert type(r) is L.ReLU  # pylint: disable=unidiomatic-typecheck
  assert (r.max_value, r.negative_slope, r.threshold) == (
      relu_kwargs.get("max_value"), relu_kwargs.get("negative_slope", 0.0),
      relu_kwargs.get("threshold", 0.0))
  assert [type(l).__name__ for l in qmodel.layers] == [
      "InputLayer", "Quantize", "QuantizedFusedConv2D", "Dequantize", "ReLU",
      "Quantize", "QuantizedFusedConv2D", "Dequantize"]
  # The float ReLU runs as before, on the dequantized int8 conv output.
  probe = keras.Model(qmodel.input, [r.input, r.output])
  r_in, r_out = probe(x)
  np.testing.assert_array_equal(r_out.numpy(),
                                model.get_layer("r")(r_in).numpy())
  assert qmodel(x).shape == model(x).shape


# ------------------------------------------ MobileNetV2-style, on digits

def mobilenet_v2_digits_model():
  """A small MobileNetV2-style CNN for 8x8x1 images: Conv-BN-ReLU6 stem,
  three inverted-residual blocks (1x1 expand + ReLU6, 3x3 depthwise + ReLU6,
  linear 1x1 project; a residual Add where the shape allows; the stride-2
  block pads with ZeroPadding2D as keras.applications.MobileNetV2 does),
  1x1 Conv-BN-ReLU6, global pooling, Dense."""

  def conv_bn(x, filters, kernel, name, act="relu6", strides=1,
              padding="same"):
    if filters is None:
      x = L.DepthwiseConv2D(kernel, strides=strides, padding=padding,
                            use_bias=False, name=name)(x)
    else:
      x = L.Conv2D(filters, kernel, strides=strides, padding=padding,
                   use_bias=False, name=name)(x)
    x = L.BatchNormalization(momentum=0.9, name=name + "_bn")(x)
    if act == "relu6":
      x = L.ReLU(6.0, name=name + "_relu")(x)
    elif act == "activation":
      x = L.Activation("relu6", name=name + "_relu")(x)
    return x

  def block(x, expand, out, stride, name):
    cin = x.shape[-1]
    h = conv_bn(x, cin * expand, 1, name + "_expand")
    if stride == 2:
      h = L.ZeroPadding2D(((0, 1), (0, 1)), name=name + "_pad")(h)
      h = conv_bn(h, None, 3, name + "_dw", act="activation", strides=2,
                  padding="valid")
    else:
      h = conv_bn(h, None, 3, name + "_dw")
    h = conv_bn(h, out, 1, name + "_project", act=None)
    if stride == 1 and cin == out:
      h = L.Add(name=name + "_add")([x, h])
    return h

  inp = keras.Input((8, 8, 1), name="image")
  x = conv_bn(inp, 16, 3, "stem")
  x = block(x, 4, 16, 1, "block1")
  x = block(x, 4, 24, 2, "block2")
  x = block(x, 4, 24, 1, "block3")
  x = conv_bn(x, 64, 1, "head")
  x = L.GlobalAveragePooling2D(name="pool")(x)
  return keras.Model(inp, L.Dense(10, name="logits")(x),
                     name="digits_mobilenet_v2")


@pytest.fixture(scope="module")
def digits_mobilenet():
  import sklearn  # pylint: disable=g-import-not-at-top,unused-import  # requirements.txt
  example = layer_helpers.load_example("ptq_digits")
  x_train, y_train, x_test, y_test = example.load_digits_split()
  keras.utils.set_random_seed(example.SEED)
  model = mobilenet_v2_digits_model()
  model.compile(
      optimizer=keras.optimizers.Adam(3e-3),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(x_train, y_train, batch_size=32, epochs=4, verbose=0)
  scales = quantization.calibrate(model, x_train[:256], verbose=0)
  int8_model = layer_helpers.quantize_strict(model, scales=scales, verbose=0)
  return example, model, int8_model, scales, x_test, y_test


def test_digits_mobilenet_v2_int8_accuracy(digits_mobilenet):
  example, model, int8_model, _, x_test, y_test = digits_mobilenet
  qconvs = {l.name: l for l in int8_model.layers if isinstance(l, QFC)}
  # 11 convolutions, the global pooling (a 4x4 depthwise window) and the
  # Dense head (QuantizedDense): int8 from the input to the logits.
  assert len(qconvs) == 13
  assert isinstance(qconvs["logits"], tf_fused_int8.QuantizedDense)
  assert qconvs["pool"].kernel_size == (4, 4)
  assert {n: l.groups for n, l in qconvs.items() if l.groups > 1} == {
      "block1_dw": 64, "block2_dw": 64, "block3_dw": 96, "pool": 64}
  assert qconvs["block2_dw"].padding == ((0, 1), (0, 1))
  # The residual Adds are the side inputs of the linear projections.
  assert {n for n, l in qconvs.items() if l.use_side_input} == {
      "block1_project", "block3_project"}
  assert not any(isinstance(l, (L.BatchNormalization, L.Conv2D,
                                L.DepthwiseConv2D, L.Add, L.ReLU,
                                L.ZeroPadding2D, L.Activation))
                 for l in int8_model.layers)
  r = example.compare(model, int8_model, x_test, y_test)
  assert r["float"] > 0.9, r  # the float model did learn
  assert r["int8"] >= r["float"] - 0.01, r
  assert r["agreement"] >= 0.98, r


def test_digits_mobilenet_v2_layers_match_reference(digits_mobilenet):
  _, _, int8_model, scales, x_test, _ = digits_mobilenet
  # ReLU6 layers carry the calibrated scale of their output; the bound is
  # round(6 / s) (127 here: min/max calibration gives s <= 6 / 127).
  for layer in int8_model.layers:
    if isinstance(layer, QFC) and layer.activation == "relu6":
      assert layer.output_scale == scales[layer.name + "_relu"], layer.name
      assert layer.effective_output_max() == relu6_max(layer.output_scale)
  assert check_layers_against_reference(int8_model, x_test[:16]) == 13


def test_digits_mobilenet_v2_saves_and_exports(digits_mobilenet, tmp_path):
  _, _, int8_model, _, x_test, _ = digits_mobilenet
  x = x_test[:24]
  want = int8_model(x).numpy()
  path = str(tmp_path / "mobilenet_int8.keras")
  int8_model.save(path)
  loaded = keras.models.load_model(path)
  assert loaded.get_layer("block2_dw").groups == 64
  assert loaded.get_layer("block2_dw").padding == ((0, 1), (0, 1))
  # int8 to the logits, which are dequantized: the same bits.
  layer_helpers.assert_reloaded_model_agrees(int8_model, loaded, x, want)
  export_dir = str(tmp_path / "mobilenet_int8_savedmodel")
  int8_model.export(export_dir, verbose=False)
  restored = tf.saved_model.load(export_dir)
  layer_helpers.assert_float_close(restored.serve(tf.constant(x)).numpy(),
                                   want)


# ------------------------------------------- keras.applications.MobileNetV2

def test_keras_applications_mobilenet_v2_quantizes_end_to_end():
  model, qmodel, rng = layer_helpers.applications_model_quantized(
      keras.applications.MobileNetV2, 32, alpha=0.35, classes=10)
  x = rng.uniform(-1, 1, (8, 32, 32, 3)).astype(np.float32)
  float_kinds = [type(l).__name__ for l in qmodel.layers
                 if not isinstance(l, QFC)]
  # The global pooling runs in int8 (a 1x1 window here, 32 / 32); the
  # softmax classifier stays float.
  assert sorted(float_kinds) == sorted(
      ["InputLayer", "Quantize", "Int8Reshape", "Dequantize", "Dense"]), (
          float_kinds)
  gap_name, = [l.name for l in model.layers
               if isinstance(l, L.GlobalAveragePooling2D)]  # Keras numbers it
  qconvs = [l for l in qmodel.layers if isinstance(l, QFC) and
            l.name != gap_name]
  n_dw = sum(isinstance(l, L.DepthwiseConv2D) for l in model.layers)
  n_conv = sum(type(l) is L.Conv2D for l in model.layers)  # pylint: disable=unidiomatic-typecheck
  assert len(qconvs) == n_dw + n_conv
  depthwise = [l for l in qconvs if l.groups > 1]
  assert len(depthwise) == n_dw
  assert all(l.groups == l.input_channels == l.filters for l in depthwise)
  n_pad = sum(isinstance(l, L.ZeroPadding2D) for l in model.layers)
  assert sum(not isinstance(l.padding, str) for l in qconvs) == n_pad > 0
  assert sum(l.use_side_input for l in qconvs) == sum(
      isinstance(l, L.Add) for l in model.layers)
  # Every fused layer, the global pooling included.
  assert check_layers_against_reference(qmodel, x[:2], min_unique=2) == len(
      qconvs) + 1
