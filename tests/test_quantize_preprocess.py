"""FusedInt8Quantize's preprocessing steps (quantize_to_int8(..., preprocess=)),
and quantize_model folding a model's Keras Rescaling / Normalization layers
into its Quantize.

The op is checked bit for bit against a plain numpy model (float32 steps in
order, then clip(round_half_to_even(y / scale)), NaN -> 0) and against TF's
own Mul / AddV2 / Sub / RealDiv ops, over channel counts around the kernel's
blocks and work units, scalar and per-channel steps, special values and
every CPU path; then every bad argument. The folded model is checked bit for
bit against its unfolded twin (the Keras layers computing in TF), saved and
loaded, frozen, and where folding must not happen.
"""

import os
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_fused_int8
from tf_fused_int8 import _loader
from tf_fused_int8 import quantization

import op_harness


def numpy_steps(x, steps):
  y = np.asarray(x, np.float32)
  with np.errstate(all="ignore"):
    for op, values in steps:
      v = np.asarray(values, np.float32).reshape(-1)
      if op == "mul":
        y = y * v
      elif op == "add":
        y = y + v
      elif op == "sub":
        y = y - v
      else:
        y = y / v
  return y.astype(np.float32)


def numpy_quantize(y, scale):
  with np.errstate(all="ignore"):
    v = np.asarray(y, np.float32) / np.float32(scale)
    q = np.clip(np.rint(v), -128, 127)
  return np.where(np.isnan(v), 0, q).astype(np.int8)


def tf_steps(x, steps):
  """The same steps as TF's elementwise ops (broadcast on the last axis)."""
  y = tf.constant(x)
  for op, values in steps:
    v = tf.constant(np.asarray(values, np.float32).reshape(-1))
    y = {"mul": tf.multiply, "add": tf.add, "sub": tf.subtract,
         "div": tf.divide}[op](y, v)
  return y


def mixed_images(shape, seed):
  """Pixel-like values, values far out of range, exact ties after the
  steps are not aimed at (the quantize op's own tests do that), and
  NaN / +-Inf / signed zeros / huge values."""
  rng = np.random.default_rng(seed)
  x = rng.uniform(-20, 280, shape).astype(np.float32)
  kind = rng.integers(0, 16, shape)
  x = np.where(kind == 0, np.round(x), x)
  x = np.where(kind == 1, rng.normal(0, 1e6, shape).astype(np.float32), x)
  specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4e38, -3.4e38, 255.0],
                      np.float32)
  x = np.where(kind == 2, specials[rng.integers(0, specials.size, shape)], x)
  return x.astype(np.float32)


def imagenet_steps(channels, seed=0):
  """Rescaling(1/255) + Normalization as keras.applications' EfficientNet
  has them, with per-channel values for `channels`."""
  rng = np.random.default_rng(seed)
  mean = rng.uniform(0.3, 0.6, channels).astype(np.float32)
  std = np.maximum(np.sqrt(rng.uniform(0.04, 0.06, channels).astype(np.float32)),
                   np.float32(1e-7))
  return [("mul", [np.float32(1 / 255)]), ("add", [0.0]), ("sub", mean), ("div", std)]


STEP_SETS = {
    "imagenet": lambda c: imagenet_steps(c),
    "mobilenetv3": lambda c: [("mul", [np.float32(1 / 127.5)]), ("add", [-1.0])],
    "per_channel_rescaling": lambda c: imagenet_steps(c) + [
        ("mul", np.linspace(0.5, 2.0, c).astype(np.float32))],
    "div_then_mul": lambda c: [("div", np.linspace(300.0, 70.0, c).astype(np.float32)),
                               ("mul", [0.17]), ("sub", [0.25])],
}


@pytest.mark.parametrize("steps_name", sorted(STEP_SETS))
@pytest.mark.parametrize("shape", [(1, 1), (3, 1), (5, 7, 3), (2, 17, 19, 3),
                                   (1, 224, 224, 3), (4, 341, 3), (2, 9, 4),
                                   (3, 1000), (2, 5, 1031), (1, 8193),
                                   (6, 224, 224, 3)])
def test_matches_numpy_and_tf_ops(steps_name, shape):
  steps = STEP_SETS[steps_name](shape[-1])
  x = mixed_images(shape, seed=sum(shape))
  scale = 0.0213
  y = numpy_steps(x, steps)
  want = numpy_quantize(y, scale)
  # TF's own ops give the same floats (the contract of the steps).
  got_tf = tf_steps(x, steps).numpy()
  np.testing.assert_array_equal(np.isnan(got_tf), np.isnan(y))
  np.testing.assert_array_equal(np.nan_to_num(got_tf), np.nan_to_num(y))
  got = tf_fused_int8.quantize_to_int8(x, scale, preprocess=steps)
  assert got.dtype == tf.int8 and tuple(got.shape) == shape
  np.testing.assert_array_equal(got.numpy(), want)
  f = tf.function(lambda t: tf_fused_int8.quantize_to_int8(t, scale, preprocess=steps))
  np.testing.assert_array_equal(f(tf.constant(x)).numpy(), want)
  # Many values land inside the clip (the test would not see a wrong step
  # otherwise).
  if want.size >= 64:
    assert np.mean(np.abs(want.astype(int)) < 127) > 0.3, steps_name


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_every_cpu_path(path):
  """The steps' loops compiled for each instruction set (quantize.cc,
  quantize_avx2.cc, quantize_avx512vnni.cc), lengths around their vector
  widths and the 1024-element blocks."""
  with op_harness.forced_kernel(path):
    for channels in (1, 3, 16, 33):
      steps = STEP_SETS["per_channel_rescaling"](channels)
      for pixels in (1, 5, 31, 342, 343, 2731, 200003):
        x = mixed_images((pixels, channels), seed=pixels + channels)
        np.testing.assert_array_equal(
            tf_fused_int8.quantize_to_int8(x, 0.05, preprocess=steps).numpy(),
            numpy_quantize(numpy_steps(x, steps), 0.05),
            err_msg=f"{path} pixels={pixels} channels={channels}")


def test_same_bits_on_one_and_many_threads():
  x = mixed_images((8, 224, 224, 3), seed=5)
  steps = imagenet_steps(3)
  want = numpy_quantize(numpy_steps(x, steps), 0.03)
  f = tf.function(lambda t: tf_fused_int8.quantize_to_int8(t, 0.03, preprocess=steps))
  for _ in range(3):
    np.testing.assert_array_equal(f(tf.constant(x)).numpy(), want)


def test_unknown_shape_in_a_graph():
  steps = imagenet_steps(3)
  f = tf.function(lambda t: tf_fused_int8.quantize_to_int8(t, 0.05, preprocess=steps),
                  input_signature=[tf.TensorSpec(None, tf.float32)])
  for shape in [(3,), (2, 5, 5, 3)]:
    x = mixed_images(shape, seed=1)
    np.testing.assert_array_equal(f(x).numpy(),
                                  numpy_quantize(numpy_steps(x, steps), 0.05))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"x's last dimension must be 3 .*got shape \[2,5\]"):
    f(np.zeros((2, 5), np.float32))


@pytest.mark.parametrize("preprocess, match", [
    ([("pow", [2.0])], r"op must be one of \('mul', 'add', 'sub', 'div'\), got 'pow'"),
    ([("mul",)], r"preprocess\[0\] must be an \(op, values\) pair"),
    ([("mul", [])], r"values must be one number or one per channel"),
    ([("mul", [1.0, 2.0, 3.0]), ("sub", [1.0, 2.0])],
     r"preprocess\[1\]: values must be one number or one per channel .* 3\), got 2"),
])
def test_bad_preprocess_is_a_value_error(preprocess, match):
  with pytest.raises(ValueError, match=match):
    tf_fused_int8.quantize_to_int8(np.ones((2, 3), np.float32), 0.1,
                                   preprocess=preprocess)


def test_last_dimension_must_match_the_per_channel_values():
  with pytest.raises(ValueError, match=r"x's last dimension must be 3 .*got shape \(2, 4\)"):
    tf_fused_int8.quantize_to_int8(np.ones((2, 4), np.float32), 0.1,
                                   preprocess=[("sub", [1.0, 2.0, 3.0])])
  with pytest.raises(ValueError, match="last dimension must be 3"):
    tf_fused_int8.quantize_to_int8(np.float32(1.0), 0.1,
                                   preprocess=[("sub", [1.0, 2.0, 3.0])])


@pytest.mark.parametrize("attrs, match", [
    (dict(preprocess_ops=["mul"], preprocess_sizes=[], preprocess_values=[1.0]),
     "preprocess_sizes must have one entry per preprocess_ops entry"),
    (dict(preprocess_ops=["exp"], preprocess_sizes=[1], preprocess_values=[1.0]),
     r'preprocess_ops\[0\] must be "mul", "add", "sub" or "div", got "exp"'),
    (dict(preprocess_ops=["mul"], preprocess_sizes=[0], preprocess_values=[]),
     r"preprocess_sizes\[0\] must be 1 or the channel count"),
    (dict(preprocess_ops=["mul", "sub"], preprocess_sizes=[3, 2],
          preprocess_values=[1.0] * 5),
     r"preprocess_sizes\[1\] must be 1 or the channel count C of every per-channel "
     r"step \(3\), got 2"),
    (dict(preprocess_ops=["mul"], preprocess_sizes=[3], preprocess_values=[1.0] * 4),
     r"preprocess_values must hold the sum of preprocess_sizes \(3\) values, got 4"),
    (dict(preprocess_ops=["mul"], preprocess_sizes=[4], preprocess_values=[1.0] * 4),
     r"x's last dimension must be 4 \(the per-channel preprocess values\), got shape "
     r"\[2,3\]"),
])
def test_raw_op_checks_its_preprocess_attrs_in_the_kernel(attrs, match):
  raw = _loader.load_ops()
  with pytest.raises(tf.errors.InvalidArgumentError, match=match):
    raw.fused_int8_quantize(x=tf.ones([2, 3]), scale=0.5, **attrs)


# ------------------------------------------------------- quantize_model

def preprocessed_model(prefix, channels=3, size=20):
  """Input -> the Keras preprocessing layers `prefix` builds -> a small
  conv stack (Conv + ReLU, depthwise, residual Add, GAP, Dense)."""
  L = keras.layers
  inp = keras.Input((size, size, channels))
  x = prefix(inp)
  h = L.Conv2D(8, 3, strides=2, padding="same", activation="relu")(x)
  d = L.DepthwiseConv2D(3, padding="same", activation="relu")(h)
  y = L.Add()([L.Conv2D(8, 1)(d), h])
  y = L.GlobalAveragePooling2D()(L.ReLU()(y))
  return keras.Model(inp, L.Dense(5)(y))


def efficientnet_prefix(x):
  """keras.applications EfficientNet's (imagenet weights: the third,
  per-channel Rescaling)."""
  L = keras.layers
  x = L.Rescaling(1.0 / 255.0)(x)
  x = L.Normalization(axis=-1, mean=[0.485, 0.456, 0.406],
                      variance=[0.229 ** 2, 0.224 ** 2, 0.225 ** 2])(x)
  return L.Rescaling([1.0 / np.sqrt(s) for s in (0.229, 0.224, 0.225)])(x)


PREFIXES = {
    "efficientnet": efficientnet_prefix,
    "mobilenetv3": lambda x: keras.layers.Rescaling(1.0 / 127.5, offset=-1.0)(x),
    "normalization_only": lambda x: keras.layers.Normalization(
        mean=[100.0, 120.0, 90.0], variance=[3000.0, 2500.0, 0.0])(x),
    "scalar_normalization": lambda x: keras.layers.Normalization(
        axis=None, mean=110.0, variance=3600.0)(x),
}


def quantize_both(model, seed=0):
  """(folded, unfolded) quantize_model results from the same calibration."""
  cal = np.random.default_rng(seed).uniform(0, 255, (8,) + model.input_shape[1:])
  folded = quantization.quantize_model(model, cal.astype(np.float32))
  quantization._FOLD_PREPROCESSING = False  # pylint: disable=protected-access
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", quantization.QuantizationWarning)
      unfolded = quantization.quantize_model(model, cal.astype(np.float32))
  finally:
    quantization._FOLD_PREPROCESSING = True  # pylint: disable=protected-access
  return folded, unfolded


def layer_types(model):
  return [type(l).__name__ for l in model.layers]


@pytest.mark.parametrize("prefix", sorted(PREFIXES))
def test_quantize_model_folds_preprocessing_bit_for_bit(prefix):
  model = preprocessed_model(PREFIXES[prefix])
  with warnings.catch_warnings():
    warnings.simplefilter("error", quantization.QuantizationWarning)
    folded, unfolded = quantize_both(model)
  types = layer_types(folded)
  assert "Rescaling" not in types and "Normalization" not in types, types
  assert any(t in layer_types(unfolded) for t in ("Rescaling", "Normalization"))
  (quant,) = [l for l in folded.layers if isinstance(l, quantization.Quantize)]
  assert quant.preprocess
  for batch, seed in ((1, 1), (3, 2)):
    x = mixed_images((batch, 20, 20, 3), seed)
    np.testing.assert_array_equal(folded(x).numpy(), unfolded(x).numpy())
    f = tf.function(lambda t: folded(t, training=False))
    np.testing.assert_array_equal(f(tf.constant(x)).numpy(), unfolded(x).numpy())
  # uint8 images, as a pipeline hands them over (cast to float32 first).
  xu = np.random.default_rng(3).integers(0, 256, (2, 20, 20, 3)).astype(np.uint8)
  np.testing.assert_array_equal(folded(tf.constant(xu)).numpy(),
                                unfolded(tf.constant(xu)).numpy())


def test_folded_quantize_saves_loads_and_freezes(tmp_path):
  model = preprocessed_model(efficientnet_prefix)
  folded, unfolded = quantize_both(model)
  x = mixed_images((2, 20, 20, 3), seed=7)
  want = unfolded(x).numpy()
  path = os.path.join(tmp_path, "folded.keras")
  folded.save(path)
  loaded = keras.models.load_model(path, compile=False)
  (quant,) = [l for l in loaded.layers if isinstance(l, quantization.Quantize)]
  assert [op for op, _ in quant.preprocess] == ["mul", "add", "sub", "div", "mul", "add"]
  np.testing.assert_array_equal(loaded(x).numpy(), want)
  runner = tf_fused_int8.InferenceRunner(quantization.fuse_conv_sequences(loaded))
  np.testing.assert_array_equal(runner(x), want)


def test_preprocessing_also_read_elsewhere_stays_correct():
  """The normalized image also feeds a float branch: that branch keeps the
  Keras layers, the Quantize computes from the input."""
  L = keras.layers
  inp = keras.Input((12, 12, 3))
  n = L.Normalization(mean=[100.0, 120.0, 90.0], variance=[3000.0, 2500.0, 2000.0])(
      L.Rescaling(0.5)(inp))
  a = L.GlobalAveragePooling2D()(L.Conv2D(4, 3, activation="relu")(n))
  b = L.GlobalAveragePooling2D()(n)
  model = keras.Model(inp, L.Concatenate()([a, b]))
  folded, unfolded = quantize_both(model)
  x = mixed_images((2, 12, 12, 3), seed=4)
  np.testing.assert_array_equal(folded(x).numpy(), unfolded(x).numpy())
  assert "Normalization" in layer_types(folded)  # the float branch's


@pytest.mark.parametrize("make", [
    # Normalization over another axis than the last: not a per-channel step.
    lambda x: keras.layers.Normalization(axis=1, mean=np.arange(20.0),
                                         variance=np.full(20, 400.0))(x),
    # invert=True computes mean + x * std.
    lambda x: keras.layers.Normalization(mean=[1.0, 2.0, 3.0], variance=[4.0, 4.0, 4.0],
                                         invert=True)(x),
    # Computing in float64: not the op's float32 steps.
    lambda x: keras.layers.Normalization(mean=[1.0, 2.0, 3.0], variance=[4.0, 4.0, 4.0],
                                         dtype="float64")(x),
])
def test_what_is_not_folded_stays_float_and_correct(make):
  model = preprocessed_model(make)
  folded, unfolded = quantize_both(model)
  assert "Normalization" in layer_types(folded)
  (quant,) = [l for l in folded.layers if isinstance(l, quantization.Quantize)]
  assert quant.preprocess is None
  x = mixed_images((2, 20, 20, 3), seed=9)
  np.testing.assert_array_equal(folded(x).numpy(), unfolded(x).numpy())
