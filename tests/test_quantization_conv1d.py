"""quantize_model on 1-D models (audio, time series, text CNNs): Conv1D,
DepthwiseConv1D and SeparableConv1D with the 1-D layers after them run as
2-D layers on [N, 1, L, C] tensors (quantization._lift_1d), so they are
planned, fused and quantized as an image model's.

Checked: the lifted float model against the original for each layer kind
and option (kernel, stride, dilation, padding including causal, groups,
depth multiplier, pooling, padding, cropping, upsampling, concatenation,
Flatten, Dense); a residual Conv1D model quantized whole (one int8 region,
no warning) and its int8 output bit for bit against an independent numpy
1-D chain (causal padding, dilation, stride, the residual as side input,
max pooling) through the reference's epilogue; a .keras round trip; a
model whose 1-D tensor leaves for a layer that is not lifted; models
without 1-D convolutions left alone."""

import keras
import numpy as np
import pytest

import layer_helpers
import reference
from tf_fused_int8 import quantization

L = keras.layers


def _randomize(model, rng):
  """Random weights (N(0, 0.3)) and BN statistics for every layer."""
  for layer in model.layers:
    if isinstance(layer, L.BatchNormalization):
      layer_helpers.set_bn(layer, rng)
    elif isinstance(layer, L.LayerNormalization):
      layer.set_weights([rng.uniform(0.5, 1.5, w.shape).astype(np.float32)
                         for w in layer.get_weights()])
    elif layer.weights:
      layer.set_weights([rng.normal(0, 0.3, w.shape).astype(np.float32)
                         for w in layer.get_weights()])


def _assert_lift_matches(model, x):
  lifted = quantization._lift_1d(model)  # pylint: disable=protected-access
  assert lifted is not model
  kinds = [type(l) for l in lifted.layers]
  assert not any(k in kinds for k in (L.Conv1D, L.DepthwiseConv1D,
                                      L.SeparableConv1D, L.Conv1DTranspose)), kinds
  want = model(x)
  got = lifted(x)
  for g, w in zip(np.atleast_1d(got) if not isinstance(got, list) else got,
                  np.atleast_1d(want) if not isinstance(want, list) else want):
    g, w = keras.ops.convert_to_numpy(g), keras.ops.convert_to_numpy(w)
    assert g.shape == w.shape
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * np.abs(w).max())
  return lifted


@pytest.mark.parametrize("conv", [
    dict(kernel_size=3, padding="same"),
    dict(kernel_size=5, padding="valid", strides=2),
    dict(kernel_size=4, padding="same", strides=3),
    dict(kernel_size=3, padding="causal", dilation_rate=3),
    dict(kernel_size=1, padding="causal"),
    dict(kernel_size=3, padding="same", groups=4),
    dict(kernel_size=7, padding="valid", dilation_rate=2, use_bias=False),
])
def test_conv1d_lift_equals_float(conv):
  rng = np.random.default_rng(1)
  inp = keras.Input((37, 8))
  h = L.Conv1D(12, activation="relu", name="c", **conv)(inp)
  h = L.BatchNormalization(name="bn")(h)
  out = L.Conv1D(8, 3, padding="same", name="c2")(h)
  model = keras.Model(inp, out)
  _randomize(model, rng)
  lifted = _assert_lift_matches(model, rng.normal(size=(3, 37, 8)).astype(np.float32))
  assert lifted.get_layer("c").kernel.shape[:2] == (1, conv["kernel_size"])


def test_other_1d_layers_lift_equal_float():
  """Each lifted 1-D layer kind after a Conv1D, with unknown length too."""
  rng = np.random.default_rng(2)
  for length in (40, None):
    inp = keras.Input((length, 6))
    a = L.Conv1D(16, 3, padding="same", activation="relu", name="a")(inp)
    b = L.DepthwiseConv1D(3, depth_multiplier=2, padding="same", name="dw")(a)
    b = L.SeparableConv1D(16, 5, padding="same", depth_multiplier=2,
                          activation="relu", name="sep")(b)
    h = L.Add(name="add")([a, b])
    h = L.SpatialDropout1D(0.3, name="sdrop")(L.Dropout(0.2, name="drop")(h))
    h = L.MaxPooling1D(3, strides=2, padding="same", name="maxp")(h)
    h = L.AveragePooling1D(2, name="avgp")(h)
    h = L.ZeroPadding1D((2, 1), name="zpad")(h)
    h = L.Cropping1D((1, 2), name="crop")(h)
    h = L.UpSampling1D(3, name="up")(h)
    c = L.Conv1D(8, 3, padding="same", name="c")(h)
    h = L.Concatenate(name="cat")([h, c])
    h = L.Dense(10, activation="relu", name="dense")(h)
    h = L.LayerNormalization(axis=2 if length else -1, name="ln")(h)
    gap = L.GlobalAveragePooling1D(name="gap")(h)
    gmp = L.GlobalMaxPooling1D(keepdims=True, name="gmp")(h)
    seq = L.Conv1D(4, 1, name="seq")(h)
    model = keras.Model(inp, [gap, gmp, seq])
    _randomize(model, rng)
    x = rng.normal(size=(2, 40, 6)).astype(np.float32)
    lifted = _assert_lift_matches(model, x)
    assert isinstance(lifted.get_layer("up"), L.UpSampling2D)
    assert isinstance(lifted.get_layer("sep"), L.SeparableConv2D)
    assert list(lifted.get_layer("ln").axis) in ([-1], [3])
  # Flatten of the lifted [N, 1, L, C] keeps the [N, L, C] order.
  inp = keras.Input((9, 5))
  out = L.Dense(3, name="head")(L.Flatten(name="flat")(
      L.Conv1D(4, 3, name="c")(inp)))
  model = keras.Model(inp, out)
  _randomize(model, rng)
  _assert_lift_matches(model, rng.normal(size=(4, 9, 5)).astype(np.float32))


def _conv1d_int32(x, w, stride=1, dilation=1, pad=(0, 0)):
  """Exact int64 sums of a 1-D convolution: x [N, L, Ci] int8, w [k, Ci,
  Co] int8, zeros padded (left, right)."""
  x = np.pad(x.astype(np.int64), ((0, 0), pad, (0, 0)))
  k = w.shape[0]
  span = (k - 1) * dilation + 1
  out_len = (x.shape[1] - span) // stride + 1
  acc = np.zeros((x.shape[0], out_len, w.shape[2]), np.int64)
  for t in range(k):
    xs = x[:, t * dilation: t * dilation + (out_len - 1) * stride + 1: stride]
    acc += np.einsum("nlc,cd->nld", xs, w[t].astype(np.int64))
  return acc


def _same_pad(length, k, stride, dilation=1):
  out = -(-length // stride)
  total = max((out - 1) * stride + (k - 1) * dilation + 1 - length, 0)
  return total // 2, total - total // 2


def test_residual_conv1d_model_is_one_region_and_exact(tmp_path):
  """Conv1D (causal, dilated) + BN + ReLU -> Conv1D + BN + residual Add +
  ReLU -> MaxPooling1D -> Conv1D stride 2 -> Conv1D 1 (linear): one int8
  region, no warning, each convolution the contract's bits on a numpy 1-D
  chain."""
  rng = np.random.default_rng(3)
  inp = keras.Input((50, 6), name="signal")
  h1 = L.ReLU(name="r1")(L.BatchNormalization(name="bn1")(
      L.Conv1D(16, 3, padding="causal", dilation_rate=2, name="c1")(inp)))
  h2 = L.BatchNormalization(name="bn2")(L.Conv1D(16, 5, padding="same",
                                                 name="c2")(h1))
  h2 = L.ReLU(name="r2")(L.Add(name="add")([h2, h1]))
  p = L.MaxPooling1D(2, name="pool")(h2)
  h3 = L.Conv1D(24, 3, strides=2, padding="same", activation="relu",
                name="c3")(p)
  out = L.Conv1D(5, 1, name="c4")(h3)
  model = keras.Model(inp, out)
  _randomize(model, rng)
  x = rng.normal(size=(6, 50, 6)).astype(np.float32)
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1 and kinds.count("Dequantize") == 1, kinds
  assert kinds.count("QuantizedFusedConv2D") == 4, kinds
  assert tuple(qmodel.output.shape) == (None, 13, 5)

  s_in = np.float32(qmodel.get_layer("signal_as_2d_quantize").scale)
  xq = np.clip(np.rint(x / s_in), -128, 127).astype(np.int8)
  k, b, s = qmodel.get_layer("c1").get_weights()
  a1 = reference.epilogue(_conv1d_int32(xq, k[0], dilation=2, pad=(4, 0)), s, b,
                          activation="Relu")
  k, b, s, ss = qmodel.get_layer("c2").get_weights()
  a2 = reference.epilogue(_conv1d_int32(a1, k[0], pad=_same_pad(50, 5, 1)), s, b,
                          side_input=a1, side_input_scale=ss, activation="Relu")
  pooled = a2.reshape(6, 25, 2, 16).max(axis=2)
  k, b, s = qmodel.get_layer("c3").get_weights()
  a3 = reference.epilogue(_conv1d_int32(pooled, k[0], stride=2,
                                        pad=_same_pad(25, 3, 2)), s, b,
                          activation="Relu")
  k, b, s = qmodel.get_layer("c4").get_weights()
  want = reference.epilogue(_conv1d_int32(a3, k[0]), s, b, activation="None")
  assert len(np.unique(a2)) > 20 and len(np.unique(want)) > 20
  layer_helpers.assert_int8_output_exact(model, qmodel, x, want,
                                         str(tmp_path / "conv1d.keras"))
  fused = quantization.fuse_conv_sequences(qmodel)
  np.testing.assert_array_equal(fused(x).numpy(), qmodel(x).numpy())


def test_lifted_stretch_leaves_for_other_layers():
  """A Conv1D stretch read by a layer that is not lifted (an LSTM) and by
  the model output: Reshapes back to [N, L, C]; the int8 part is one region
  and the outputs are close to the float model's."""
  rng = np.random.default_rng(4)
  inp = keras.Input((30, 4))
  h = L.Conv1D(8, 3, padding="same", activation="relu", name="c1")(inp)
  h = L.Conv1D(8, 3, padding="same", activation="relu", name="c2")(h)
  rnn = L.LSTM(6, name="lstm")(h)
  model = keras.Model(inp, [rnn, h])
  _randomize(model, rng)
  x = rng.normal(size=(5, 30, 4)).astype(np.float32)
  lifted = _assert_lift_matches(model, x)
  assert sum(isinstance(l, L.Reshape) for l in lifted.layers) == 2
  qmodel = quantization.quantize_model(model, x, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("QuantizedFusedConv2D") == 2, kinds
  for got, want in zip(qmodel(x), model(x)):
    got, want = keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(want)
    assert got.shape == want.shape
    cos = (got.ravel() @ want.ravel()) / np.linalg.norm(got) / np.linalg.norm(want)
    assert cos > 0.99


def test_models_without_1d_convolutions_are_left_alone():
  inp = keras.Input((20, 4))
  model = keras.Model(inp, L.MaxPooling1D(2)(L.Dense(3)(inp)))
  assert quantization._lift_1d(model) is model  # pylint: disable=protected-access
  inp = keras.Input((8, 8, 3))
  model = keras.Model(inp, L.Conv2D(4, 3)(inp))
  assert quantization._lift_1d(model) is model  # pylint: disable=protected-access
  # channels_first Conv1D is not lifted.
  inp = keras.Input((4, 20))
  model = keras.Model(inp, L.Conv1D(3, 3, data_format="channels_first")(inp))
  assert quantization._lift_1d(model) is model  # pylint: disable=protected-access


def test_text_cnn_and_sequential():
  """A text CNN (Embedding -> three Conv1D branches -> GlobalMaxPooling1D
  -> Concatenate -> Dense, unknown length) and a Sequential Conv1D model:
  every convolution int8, the outputs close to the float model's."""
  rng = np.random.default_rng(5)
  inp = keras.Input((None,), dtype="int32")
  e = L.Embedding(500, 24)(inp)
  branches = [L.GlobalMaxPooling1D()(L.Conv1D(12, k, activation="relu")(e))
              for k in (3, 4, 5)]
  model = keras.Model(inp, L.Dense(2)(L.Concatenate()(branches)))
  x = rng.integers(0, 500, (8, 40)).astype(np.int32)
  seq = keras.Sequential([
      keras.Input((60, 3)), L.Conv1D(8, 5, activation="relu"),
      L.MaxPooling1D(), L.Conv1D(8, 3, padding="causal"), L.Flatten(),
      L.Dense(4)])
  xs = rng.normal(size=(8, 60, 3)).astype(np.float32)
  for m, data, convs in ((model, x, 3), (seq, xs, 2)):
    qmodel = quantization.quantize_model(m, data, verbose=0)
    kinds = [type(l).__name__ for l in qmodel.layers]
    assert kinds.count("QuantizedFusedConv2D") == convs, kinds
    assert "Conv1D" not in kinds
    got, want = qmodel(data).numpy(), m(data).numpy()
    cos = (got.ravel() @ want.ravel()) / np.linalg.norm(got) / np.linalg.norm(want)
    assert cos > 0.99
  # Another length than the calibration's.
  qtext = quantization.quantize_model(model, x, verbose=0)
  assert qtext(x[:3, :17]).shape == (3, 2)


@pytest.mark.parametrize("kernel,stride,padding,output_padding", [
    (2, 2, "same", None), (3, 2, "same", None), (3, 2, "valid", 1),
    (4, 2, "same", 1), (5, 3, "valid", None), (3, 1, "same", None)])
def test_conv1d_transpose_decoder(kernel, stride, padding, output_padding,
                                  tmp_path):
  """A 1-D encoder-decoder (Conv1D stride 2, Conv1DTranspose back, skip
  concatenation): the transposed convolution lifted to a Conv2DTranspose
  with strides 1 x s, then the sub-pixel form (a convolution, an
  Int8DepthToSpace of 1 x s, a crop): one int8 region, no warning, close
  to float per sample; the lifted float model equals the original; a
  .keras round trip keeps the bits."""
  rng = np.random.default_rng(6)
  inp = keras.Input((24, 4), name="signal")
  e = L.Conv1D(8, 3, padding="same", activation="relu", name="enc")(inp)
  d = L.Conv1D(16, 3, strides=2, padding="same", activation="relu", name="down")(e)
  u = L.Conv1DTranspose(8, kernel, strides=stride, padding=padding,
                        output_padding=output_padding, name="up")(d)
  u = L.ReLU(name="up_relu")(L.BatchNormalization(name="up_bn")(u))
  if u.shape[1] != 24:
    u = L.Conv1D(8, 1, name="fit")(u)  # lengths differ: no skip
    h = u
  else:
    h = L.Concatenate(name="cat")([u, e])
  out = L.Conv1D(3, 3, padding="same", name="head")(h)
  model = keras.Model(inp, out)
  _randomize(model, rng)
  x = rng.normal(size=(6, 24, 4)).astype(np.float32)
  _assert_lift_matches(model, x)
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1 and kinds.count("Dequantize") == 1, kinds
  assert ("Int8DepthToSpace" in kinds) == (stride > 1), kinds
  got, want = qmodel(x).numpy(), model(x).numpy()
  assert got.shape == want.shape
  for g, f in zip(got, want):
    assert g.ravel() @ f.ravel() > 0.99 * np.linalg.norm(g) * np.linalg.norm(f)
  path = str(tmp_path / "t1d.keras")
  qmodel.save(path)
  np.testing.assert_array_equal(keras.models.load_model(path)(x).numpy(), got)
