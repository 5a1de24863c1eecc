"""Concatenate in int8 (DenseNet / Inception blocks): every tensor a
channel-axis Concatenate joins, when one of them is int8, shares one scale
(the largest calibrated one), so the concatenation is a copy of int8 bytes;
float inputs are quantized at that scale, max-pooled inputs keep their
source's scale, and so do average-pooled ones whose windows reach SAME's
padding (Int8AveragePooling2D).

Checked: the shared scales, the int8 graph (every QuantizedFusedConv2D bit
for bit against tests/reference.py on its actual inputs, every
Int8Concatenate the concatenation of its int8 inputs, every
Int8AveragePooling2D the numpy average of its int8 input), the number of int8
regions, what stays float (with the warning), closeness to the float model,
and .keras / SavedModel round trips.
"""

import os

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


def images(n, seed=1, shape=(12, 12, 3)):
  return test_quantization.images(n, seed, shape)


def dense_inception_model(seed=0):
  """stem conv -> a dense block of 3 layers (BN + ReLU + conv, concatenated
  onto the running features) -> an Inception-like block: [1x1 conv, 3x3
  conv, max pool of the input, average pool + 1x1 conv] concatenated ->
  GAP -> Dense."""
  inp = keras.Input((12, 12, 3), name="image")
  x = L.Conv2D(8, 3, padding="same", activation="relu", name="stem")(inp)
  for i in range(3):
    h = L.ReLU(name=f"d{i}_relu")(L.BatchNormalization(name=f"d{i}_bn")(x))
    h = L.Conv2D(4, 3, padding="same", name=f"d{i}_conv")(h)
    x = L.Concatenate(name=f"d{i}_concat")([x, h])
  b1 = L.Conv2D(6, 1, activation="relu", name="i_1x1")(x)
  b2 = L.Conv2D(5, 3, padding="same", activation="relu", name="i_3x3")(x)
  b3 = L.MaxPooling2D(3, strides=1, padding="same", name="i_pool")(x)
  b4 = L.Conv2D(3, 1, activation="relu", name="i_avg_conv")(
      L.AveragePooling2D(3, strides=1, padding="same", name="i_avg")(x))
  y = L.Concatenate(name="i_concat")([b1, b2, b3, b4])
  logits = L.Dense(4, name="head")(L.GlobalAveragePooling2D(name="gap")(y))
  model = keras.Model(inp, {"features": y, "logits": logits})
  randomize(model, np.random.default_rng(seed))
  return model


@pytest.fixture(scope="module")
def quantized():
  model = dense_inception_model()
  return (model,) + layer_helpers.quantized_with_scales(model, images(24))


def test_concatenates_run_in_int8_with_shared_scales(quantized):
  model, qmodel, scales = quantized
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Int8Concatenate") == 4, kinds
  assert "Concatenate" not in kinds and "BatchNormalization" not in kinds
  # The image only: the 3x3 'same' average pooling (its border windows
  # reach SAME's padding) runs in int8 at its input's scale.
  assert kinds.count("Quantize") == 1, kinds
  assert type(qmodel.get_layer("i_avg")) is quantization.Int8AveragePooling2D  # pylint: disable=unidiomatic-typecheck
  for name in ("d0_concat", "d1_concat", "d2_concat", "i_concat"):
    assert qmodel.get_layer(name).output.dtype == "int8", name
  # One scale class: the dense block's features (stem, d*_conv) and, through
  # the max pool of those features, the Inception branches: all share the
  # largest of their calibrated scales. Each producer's conv_input_scale is
  # s_in * s_w / shared.
  producers = ["stem", "d0_conv", "d1_conv", "d2_conv", "i_1x1", "i_3x3",
               "i_avg_conv"]
  shared = max(np.float64(np.float32(scales[k])) for k in producers)
  s_in = {"stem": qmodel.get_layer("image_quantize").scale}
  for i in range(3):
    s_in[f"d{i}_conv"] = np.float32(scales[f"d{i}_relu"])
  # They read the shared features (i_avg_conv through the average pooling,
  # at its input's scale).
  s_in["i_1x1"] = s_in["i_3x3"] = s_in["i_avg_conv"] = shared
  for k in producers:
    w = model.get_layer(k).kernel.numpy().astype(np.float64)
    s_w = np.abs(w).max(axis=(0, 1, 2)) / 127
    np.testing.assert_allclose(qmodel.get_layer(k).conv_input_scale.numpy(),
                               np.float64(s_in[k]) * s_w / shared, rtol=1e-6,
                               err_msg=k)
  # The float reader of the features (the output); the dense block's
  # features have none left (the average pooling reads them in int8).
  assert qmodel.get_layer("i_concat_dequantize").scale == np.float32(shared)
  assert "d2_concat_dequantize" not in [l.name for l in qmodel.layers]


def test_int8_graph_bit_exact_and_close_to_float(quantized):
  model, qmodel, _ = quantized
  x = images(5, seed=7)
  # 10 convolutions, the int8 global pooling and the QuantizedDense head.
  assert check_layers_against_reference(qmodel, x, min_unique=4) == 12
  concats = [qmodel.get_layer(n) for n in ("d0_concat", "d1_concat", "d2_concat",
                                           "i_concat")]
  taps = []
  for c in concats:
    taps += list(c.input) + [c.output]
  values = [v.numpy() for v in keras.Model(qmodel.input, taps)(x)]
  i = 0
  for c in concats:
    n = len(c.input)
    ins, out = values[i:i + n], values[i + n]
    i += n + 1
    assert out.dtype == np.int8 and all(v.dtype == np.int8 for v in ins)
    np.testing.assert_array_equal(out, np.concatenate(ins, axis=-1), c.name)
  check_average_poolings(qmodel, x, expected=1)
  # Closeness on calibration images (other images may exceed a calibrated
  # max|x|, which clips, shared scale or not).
  xc = images(24)[:6]
  want, got = model(xc), qmodel(xc)
  fw, fg = want["features"].numpy(), got["features"].numpy()
  # One scale for a whole chain of concatenations is coarser for its early
  # features than each concatenation's own (this adversarial model's
  # activations grow 4x along the chain): max error 8.9%, rms 4.8% of the
  # features here, against 4.9% / 2.8% with float concatenations, while the
  # logits err 1.1% (rms 0.9%) against 2.0% (1.8%).
  assert np.abs(fg - fw).max() < 0.12 * np.abs(fw).max()
  assert np.sqrt(np.mean((fg - fw) ** 2) / np.mean(fw ** 2)) < 0.06
  lw, lg = want["logits"].numpy().ravel(), got["logits"].numpy().ravel()
  assert lw @ lg / (np.linalg.norm(lw) * np.linalg.norm(lg)) > 0.995


def test_float_only_or_other_axis_concatenates_stay_float():
  inp = keras.Input((6, 6, 4), name="image")
  a = L.Conv2D(4, 3, padding="same", name="a")(inp)
  rows = L.Concatenate(axis=1, name="rows")([a, a])  # not the channel axis
  f1 = L.AveragePooling2D(2, name="avg1")(inp)
  f2 = L.AveragePooling2D(2, name="avg2")(inp)
  both_float = L.Concatenate(name="both_float")([f1, f2])  # no int8 input
  out = [L.Conv2D(2, 1, name="b")(rows), L.Conv2D(2, 1, name="c")(both_float)]
  model = keras.Model(inp, out)
  x = images(8, seed=2, shape=(6, 6, 4))
  with pytest.warns(quantization.QuantizationWarning) as record:
    qmodel = quantization.quantize_model(model, x, verbose=0)
  message = str(record[0].message)
  assert "'rows' (Concatenate)" in message and "'both_float' (Concatenate)" in message
  assert type(qmodel.get_layer("rows")) is L.Concatenate  # pylint: disable=unidiomatic-typecheck
  assert type(qmodel.get_layer("both_float")) is L.Concatenate  # pylint: disable=unidiomatic-typecheck
  for w, g in zip(model(x), qmodel(x)):
    w, g = w.numpy(), g.numpy()
    assert np.abs(g - w).max() < 0.06 * np.abs(w).max()


def test_round_trips(quantized, tmp_path):
  _, qmodel, _ = quantized
  again = layer_helpers.assert_keras_and_saved_model_round_trip(
      qmodel, images(3, seed=5), tmp_path)
  assert isinstance(again.get_layer("i_concat"), quantization.Int8Concatenate)


# ------------------------------------------- AveragePooling2D (transitions)

def check_average_poolings(qmodel, x, expected):
  """Every Int8AveragePooling2D of qmodel, on its actual int8 input, equals
  the numpy average pooling (exact sum over the window's cells, rounded half
  to even); returns how many were checked."""
  from test_avg_pool_op import numpy_avg_pool  # pylint: disable=g-import-not-at-top
  pools = [l for l in qmodel.layers if isinstance(l, quantization.Int8AveragePooling2D)]
  assert len(pools) == expected, [l.name for l in pools]
  for layer in pools:
    got_in, got_out = (v.numpy() for v in keras.Model(
        qmodel.input, [layer.input, layer.output])(x))
    assert got_in.dtype == np.int8 and got_out.dtype == np.int8, layer.name
    k, st = tuple(layer.pool_size), tuple(layer.strides)
    np.testing.assert_array_equal(
        got_out, numpy_avg_pool(got_in, k, st, layer.padding.upper()), layer.name)
  return len(pools)


def test_unpadded_average_pooling_runs_in_int8():
  """A DenseNet transition (conv -> AveragePooling2D(2, 2)) and a 'same'
  pooling that pads nothing become depthwise QuantizedFusedConv2D layers
  (filter 1 / (kh * kw), quantized to 127); poolings whose windows reach
  into padding (Keras divides those by their valid elements) run as
  Int8AveragePooling2D at their input's scale."""
  inp = keras.Input((8, 8, 3), name="image")
  c = L.Conv2D(6, 3, padding="same", activation="relu", name="c")(inp)
  p1 = L.AveragePooling2D(2, name="trans_pool")(c)                # 4x4
  c2 = L.Conv2D(6, 1, activation="relu", name="c2")(p1)
  p2 = L.AveragePooling2D(2, strides=2, padding="same", name="same_pool")(c2)  # no pad
  p3 = L.AveragePooling2D(3, strides=1, padding="same", name="padded_pool")(c2)
  p4 = L.AveragePooling2D((3, 2), strides=(1, 2), name="rect_pool")(c2)  # 2x2
  out = [L.Conv2D(4, 1, name=f"h{i}")(p) for i, p in enumerate((p2, p3, p4))]
  model = keras.Model(inp, out)
  randomize(model, np.random.default_rng(4))
  x = images(16, seed=3, shape=(8, 8, 3))
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  scales = quantization.calibrate(model, x, verbose=0)
  for name, k in (("trans_pool", (2, 2)), ("same_pool", (2, 2)), ("rect_pool", (3, 2))):
    layer = qmodel.get_layer(name)
    assert isinstance(layer, QFC) and layer.groups == 6, name
    kernel, bias, s = layer.get_weights()[:3]
    assert kernel.shape == k + (1, 6)
    np.testing.assert_array_equal(kernel, 127)
    np.testing.assert_array_equal(bias, 0)
    src = "c" if name == "trans_pool" else "c2"
    want = np.float32(scales[src]) * (1.0 / (k[0] * k[1]) / 127) / np.float32(scales[name])
    np.testing.assert_allclose(s, np.full(6, want, np.float32), rtol=1e-6)
  assert type(qmodel.get_layer("padded_pool")) is quantization.Int8AveragePooling2D  # pylint: disable=unidiomatic-typecheck
  assert sum(type(l).__name__ == "Quantize" for l in qmodel.layers) == 1
  check_average_poolings(qmodel, x[:5], expected=1)
  check_layers_against_reference(qmodel, x[:5], min_unique=4)
  for w, g in zip(model(x[:6]), qmodel(x[:6])):
    w, g = w.numpy(), g.numpy()
    assert np.abs(g - w).max() < 0.06 * np.abs(w).max()


def test_pooled_features_concatenate_in_int8():
  """A classifier head that joins pooled branches (a text CNN's, or two
  global poolings): the [N, C] concatenation runs in int8 as well, so the
  Dense after it is a QuantizedDense and the model dequantizes once, at
  its logits; every fused op bit for bit, the concatenation the bytes of
  its inputs."""
  inp = keras.Input((8, 8, 3), name="image")
  a = L.Conv2D(6, 3, padding="same", activation="relu", name="a")(inp)
  b = L.Conv2D(5, 3, padding="same", activation="relu", name="b")(a)
  pa = L.GlobalMaxPooling2D(name="pa")(a)
  pb = L.GlobalMaxPooling2D(name="pb")(b)
  joined = L.Concatenate(name="joined")([pa, pb])
  logits = L.Dense(4, name="head")(joined)
  model = keras.Model(inp, logits)
  randomize(model, np.random.default_rng(9))
  x = images(12, seed=7, shape=(8, 8, 3))
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Dequantize") == 1 and kinds.count("Quantize") == 1, kinds
  joined_q = qmodel.get_layer("joined")
  assert isinstance(joined_q, quantization.Int8Concatenate)
  assert joined_q.output.dtype == "int8" and joined_q.output.shape[-1] == 11
  assert isinstance(qmodel.get_layer("head"), tf_fused_int8.QuantizedDense)
  assert check_layers_against_reference(qmodel, x[:4], min_unique=3) == 3
  probe = keras.Model(qmodel.input, [qmodel.get_layer("pa").output,
                                     qmodel.get_layer("pb").output,
                                     joined_q.output])
  qa, qb, qj = (v.numpy() for v in probe(x[:4]))
  assert qa.dtype == qb.dtype == np.int8 and qa.shape == (4, 6)
  np.testing.assert_array_equal(qj, np.concatenate([qa, qb], axis=-1))
  w, g = model(x).numpy(), qmodel(x).numpy()
  assert np.abs(g - w).max() < 0.06 * np.abs(w).max()


def test_concatenate_edge_cases(tmp_path):
  """The same tensor twice, the model input beside an int8 tensor, a
  concatenation that is a model output and feeds a conv, and a shared
  Concatenate layer called twice."""
  inp = keras.Input((6, 5, 3), name="image")
  a = L.Conv2D(4, 3, padding="same", activation="relu", name="a")(inp)
  twice = L.Concatenate(name="twice")([a, a])
  with_input = L.Concatenate(name="with_input")([inp, a])
  shared = L.Concatenate(name="shared")
  s1 = shared([twice, with_input])
  b = L.Conv2D(5, 1, name="b")(s1)
  s2 = shared([b, a])
  model = keras.Model(inp, [s1, L.Conv2D(2, 1, name="c")(s2)])
  randomize(model, np.random.default_rng(8))
  x = images(12, seed=6, shape=(6, 5, 3))
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  # Four int8 concatenations, by three layers: the shared one stays shared.
  assert kinds.count("Int8Concatenate") == 3 and "Concatenate" not in kinds, kinds
  assert len(qmodel.get_layer("shared_int8")._inbound_nodes) == 2  # pylint: disable=protected-access
  assert kinds.count("Quantize") == 1, kinds  # the image, once
  check_layers_against_reference(qmodel, x[:4], min_unique=3)
  for w, g in zip(model(x[:6]), qmodel(x[:6])):
    w, g = w.numpy(), g.numpy()
    assert np.abs(g - w).max() < 0.06 * np.abs(w).max()
  path = os.path.join(tmp_path, "m.keras")
  qmodel.save(path)
  again = keras.models.load_model(path)
  for w, g in zip(again(x[:3]), qmodel(x[:3])):
    np.testing.assert_array_equal(w.numpy(), g.numpy())



def test_keras_applications_inception_v3_is_one_region():
  """keras.applications InceptionV3 (75x75, the smallest it takes): its nine
  3x3 'same' average poolings run as Int8AveragePooling2D, so the whole
  network is one int8 region; each pooling is exact on its real input and
  the logits stay close to float."""
  model, qmodel, rng = layer_helpers.applications_model_quantized(
      keras.applications.InceptionV3, 75, classes=10,
      classifier_activation=None)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1, kinds
  assert "AveragePooling2D" not in kinds and "Concatenate" not in kinds
  x = rng.uniform(-1, 1, (4, 75, 75, 3)).astype(np.float32)
  assert check_average_poolings(qmodel, x, expected=9) == 9
  w = np.asarray(model(x, training=False))
  g = np.asarray(qmodel(x))
  cosine = np.sum(w * g, 1) / np.linalg.norm(w, axis=1) / np.linalg.norm(g, axis=1)
  assert cosine.min() > 0.99, cosine
