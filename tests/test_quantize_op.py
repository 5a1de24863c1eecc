"""FusedInt8Quantize (tf_fused_int8.quantize_to_int8): float -> int8 in one op.

Checked bit for bit against a plain numpy model of
clip(round_half_to_even(x / scale), -128, 127) with NaN -> 0, and against the
six TF elementwise ops the Quantize layer ran before (the same bits), over
sizes around the SIMD width and the kernel's work unit, ranks 0 to 5,
power-of-two and other scales, exact ties, the clip edges and non-finite
values; then dtypes, graphs with unknown shapes, and every bad input.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_fused_int8
from tf_fused_int8 import _loader

import op_harness


def numpy_quantize(x, scale):
  """The contract of the op in numpy (float32 division, rint = half to even)."""
  x = np.asarray(x, np.float32)
  with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
    v = x / np.float32(scale)
    q = np.clip(np.rint(v), -128, 127)
  return np.where(np.isnan(v), 0, q).astype(np.int8)


def tf_six_ops(x, scale):
  """What the Quantize layer computed with TF's own ops before this op."""
  q = tf.round(x / tf.constant(scale, tf.float32))
  not_nan = tf.cast(tf.equal(q, q), tf.int8)
  return tf.cast(tf.clip_by_value(q, -128.0, 127.0), tf.int8) * not_nan


def mixed_values(n, scale, seed):
  """In-range values, exact multiples and ties of the scale, values beyond
  the clip, NaN, +-Inf, signed zeros and tiny values."""
  rng = np.random.default_rng(seed)
  s = np.float32(scale)
  x = rng.uniform(-140, 140, n).astype(np.float32) * s
  kind = rng.integers(0, 12, n)
  x = np.where(kind == 0, np.round(x / s) * s, x)
  x = np.where(kind == 1, (np.floor(x / s) + np.float32(0.5)) * s, x)
  x = np.where(kind == 2, rng.normal(0, 1e4, n).astype(np.float32) * s, x)
  specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-38, -1e-38,
                       3.4e38, -3.4e38], np.float32)
  x = np.where(kind == 3, specials[rng.integers(0, specials.size, n)], x)
  return x.astype(np.float32)


SCALES = [0.5, 0.0078125, 1 / 127.5, 0.0123456, 3.0, 1e-20]


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("n", [1, 7, 15, 16, 17, 33, 8191, 8192, 8193, 3 * 8192 + 5,
                               150528, 602112 + 3])
def test_matches_numpy_and_tf_ops(scale, n):
  x = mixed_values(n, scale, seed=n)
  want = numpy_quantize(x, scale)
  got = tf_fused_int8.quantize_to_int8(x, scale).numpy()
  assert got.dtype == np.int8 and got.shape == x.shape
  np.testing.assert_array_equal(got, want)
  graph = tf.function(lambda t: tf_fused_int8.quantize_to_int8(t, scale))
  np.testing.assert_array_equal(graph(tf.constant(x)).numpy(), want)
  np.testing.assert_array_equal(tf_six_ops(tf.constant(x), np.float32(scale)).numpy(), want)


def test_every_tie_and_clip_edge():
  # k + 0.5 for every k in [-140, 140]: half to even, then the clip.
  k = np.arange(-140, 141)
  x = ((k + 0.5) * 0.25).astype(np.float32)
  even = np.where(k % 2 == 0, k, k + 1)
  np.testing.assert_array_equal(tf_fused_int8.quantize_to_int8(x, 0.25).numpy(),
                                np.clip(even, -128, 127).astype(np.int8))
  x = np.array([126.5, 127.4999, 127.5, 128, -127.5, -128.4999, -128.5, -129,
                np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
  np.testing.assert_array_equal(
      tf_fused_int8.quantize_to_int8(x, 1.0).numpy(),
      [126, 127, 127, 127, -128, -128, -128, -128, 0, 0, 127, -128, 0, 0])


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (2, 3), (1, 4, 5, 3),
                                   (2, 7, 9, 3, 2)])
def test_shapes(shape):
  x = mixed_values(int(np.prod(shape)), 0.1, seed=len(shape)).reshape(shape)
  got = tf_fused_int8.quantize_to_int8(x, 0.1)
  assert tuple(got.shape) == shape and got.dtype == tf.int8
  np.testing.assert_array_equal(got.numpy(), numpy_quantize(x, 0.1))


def test_unknown_shape_in_a_graph():
  f = tf.function(lambda t: tf_fused_int8.quantize_to_int8(t, 0.05),
                  input_signature=[tf.TensorSpec(None, tf.float32)])
  for shape in [(3,), (2, 5, 5, 3), ()]:
    x = mixed_values(int(np.prod(shape)), 0.05, seed=1).reshape(shape)
    np.testing.assert_array_equal(f(x).numpy(), numpy_quantize(x, 0.05))
  out = f.get_concrete_function().structured_outputs
  assert out.dtype == tf.int8 and out.shape.rank is None


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float64, tf.int32])
def test_other_input_dtypes_are_cast_to_float32(dtype):
  x = tf.cast(tf.constant(np.linspace(-40, 40, 97, dtype=np.float32)), dtype)
  want = numpy_quantize(tf.cast(x, tf.float32).numpy(), 0.25)
  np.testing.assert_array_equal(tf_fused_int8.quantize_to_int8(x, 0.25).numpy(), want)


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_every_cpu_path(path):
  """Each path's vector body (cc/core/cpu/quantize/: SSE2 baseline, AVX2,
  AVX-512), lengths around its vector widths, forced the way
  TF_FUSED_INT8_CPU_KERNEL forces the convolutions."""
  with op_harness.forced_kernel(path):
    for scale in (0.0123456, 0.5):
      for n in (1, 31, 32, 33, 63, 64, 65, 129, 8192 + 37, 150528):
        x = mixed_values(n, scale, seed=n)
        np.testing.assert_array_equal(
            tf_fused_int8.quantize_to_int8(x, scale).numpy(), numpy_quantize(x, scale),
            err_msg=f"{path} n={n} scale={scale}")


def near_ties(scale):
  """Every tie (k + 0.5) * scale for k in [-130, 130] and the 6 float32
  values on each side of it."""
  s = np.float32(scale)
  with np.errstate(over="ignore"):  # 2e38 * 130 is inf
    ties = ((np.arange(-130, 131) + np.float32(0.5)) * s).astype(np.float32)
  xs = [ties]
  up, down = ties, ties
  for _ in range(6):
    up = np.nextafter(up, np.float32(np.inf))
    down = np.nextafter(down, np.float32(-np.inf))
    xs += [up, down]
  return np.concatenate(xs)


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_values_near_a_rounding_boundary_on_every_path(path):
  """The vector bodies multiply by 1 / scale and divide only where the
  product lies near a rounding boundary (cc/core/cpu/quantize/). Around
  every tie, at many scales, each value must still come out as x / scale
  does; for some of them x * (1 / scale) rounds elsewhere (asserted, so the
  sweep would catch a body that never divided). A scale of 2e38, whose
  reciprocal is below FLT_MIN, takes the division throughout."""
  rng = np.random.default_rng(11)
  scales = [1 / 127.5, 1 / 255, 0.0123456, 3.0, 2e38] + list(
      np.exp2(rng.uniform(-12, 4, 24)))
  apart = 0
  with op_harness.forced_kernel(path):
    for scale in scales:
      s = np.float32(scale)
      x = near_ties(s)
      want = numpy_quantize(x, s)
      with np.errstate(over="ignore", invalid="ignore"):
        product = np.clip(np.rint(x * (np.float32(1) / s)), -128, 127).astype(np.int8)
      apart += int(np.sum(product != want))
      np.testing.assert_array_equal(tf_fused_int8.quantize_to_int8(x, s).numpy(), want,
                                    err_msg=f"{path} scale={scale!r}")
  assert apart > 0


@pytest.mark.parametrize("path", op_harness.unavailable_paths()[:2])
def test_forced_path_this_cpu_lacks_still_quantizes(path):
  """The convolutions reject a forced path this CPU lacks; the quantize op
  runs its baseline loop (the same bits) rather than failing."""
  x = mixed_values(1000, 0.25, seed=3)
  with op_harness.forced_kernel(path):
    got = tf_fused_int8.quantize_to_int8(x, 0.25).numpy()
  np.testing.assert_array_equal(got, numpy_quantize(x, 0.25))


def test_same_bits_on_one_and_many_threads():
  x = mixed_values(8 * 224 * 224 * 3, 0.0123456, seed=5).reshape(8, 224, 224, 3)
  want = numpy_quantize(x, 0.0123456)
  f = tf.function(lambda t: tf_fused_int8.quantize_to_int8(t, 0.0123456))
  for _ in range(3):
    np.testing.assert_array_equal(f(tf.constant(x)).numpy(), want)


@pytest.mark.parametrize("scale", [0.0, -1.0, np.inf, -np.inf, np.nan, 1e-50, 1e39,
                                   "a", None])
def test_bad_scale_is_a_value_error(scale):
  with pytest.raises(ValueError, match="scale must be a positive finite float32"):
    tf_fused_int8.quantize_to_int8(np.ones(3, np.float32), scale)


@pytest.mark.parametrize("scale", [0.0, -2.0, float("inf"), float("nan")])
def test_raw_op_checks_its_scale_in_the_kernel(scale):
  raw = _loader.load_ops()
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="FusedInt8Quantize: scale must be a positive finite"):
    raw.fused_int8_quantize(x=tf.ones([4]), scale=scale)


def test_raw_op_takes_float32_only():
  raw = _loader.load_ops()
  for x in (tf.ones([4], tf.int8), tf.ones([4], tf.float64)):
    with pytest.raises((TypeError, tf.errors.InvalidArgumentError)):
      raw.fused_int8_quantize(x=x, scale=1.0)
