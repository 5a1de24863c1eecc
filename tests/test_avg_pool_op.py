"""FusedInt8AvgPool (tf_fused_int8.avg_pool2d_int8): int8 average pooling,
NHWC, at the input's scale, optionally after zero padding, in one op.

Checked bit for bit against a plain numpy model (zeros added, then every
window's int64 sum over its cell count, SAME's own padding cells left out,
rounded half to even) and within half a step of TF's tf.pad +
tf.nn.avg_pool2d of the same values, over windows, strides, SAME / VALID,
ties, extremes, the ZeroPadding2D forms and channel counts around the
vector widths, on every CPU path; then the layer and graphs with unknown
sizes. Its bad inputs and empty tensors are checked with the max pooling's,
for both ops, in test_max_pool_op.py.
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_fused_int8
from tf_fused_int8 import quantization

import op_harness
from test_max_pool_op import cases
from test_max_pool_op import inputs
from test_max_pool_op import numpy_pool


def numpy_avg_pool(x, ksize, strides, padding, zeros=(0, 0, 0, 0)):
  """The op in numpy: pad with zeros (they count), then TF's SAME / VALID
  windows (SAME's padding cells do not count); the exact int64 sum over the
  count, rounded half to even (np.round)."""

  def average(win):
    count = win.shape[1] * win.shape[2]
    # |sum| < 2^31 and count < 2^16 here: the float64 quotient rounds as
    # the exact rational does.
    return np.round(win.sum(axis=(1, 2)) / count)

  return numpy_pool(x, ksize, strides, padding, zeros, average)


def tf_pad_and_pool(x, ksize, strides, padding, zeros=(0, 0, 0, 0)):
  """TF's float average of the same int8 values."""
  t, b, l, r = zeros
  xp = tf.pad(tf.cast(x, tf.float32), [[0, 0], [t, b], [l, r], [0, 0]])
  return tf.nn.avg_pool2d(xp, ksize, strides, padding).numpy()


def small_inputs(shape, seed):
  """Values in [-3, 3]: many windows average to an exact half."""
  return np.random.default_rng(seed).integers(-3, 4, shape).astype(np.int8)


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_matches_numpy_and_tf_on_every_path(path):
  with op_harness.forced_kernel(path):
    for k, (n, h, w, c, ksize, strides, padding, zeros) in enumerate(cases()):
      for kind in ("random", "small", "extreme"):
        shape = (n, h, w, c)
        x = (inputs(shape, seed=k) if kind == "random" else
             small_inputs(shape, seed=k) if kind == "small" else
             np.full(shape, 127 if k % 2 else -128, np.int8))
        got = tf_fused_int8.avg_pool2d_int8(
            x, ksize, strides, padding,
            zero_padding=((zeros[0], zeros[1]), (zeros[2], zeros[3]))).numpy()
        what = f"{path} {kind} case {k} {x.shape} {ksize} {strides} {padding} {zeros}"
        want = numpy_avg_pool(x, ksize, strides, padding, zeros)
        np.testing.assert_array_equal(got, want, err_msg=what)
        if k % 4 == 0:
          ref = tf_pad_and_pool(x, ksize, strides, padding, zeros)
          assert np.max(np.abs(got - ref)) <= 0.5 + 1e-4, what


def test_ties_round_to_even():
  # Two cells per window (VALID 1x2): sums 1, 3, -1, -3, 5, -5, -255.
  a = np.array([0, 1, 0, -1, 2, -2, -128], np.int8)
  b = np.array([1, 2, -1, -2, 3, -3, -127], np.int8)
  x = np.stack([a, b])[None, None]  # [1, 1, 2, 7]
  got = tf_fused_int8.avg_pool2d_int8(x, (1, 2), 1, "VALID").numpy().ravel()
  np.testing.assert_array_equal(got, [0, 2, 0, -2, 2, -2, -128])


@pytest.mark.parametrize("path", op_harness.unavailable_paths()[:1])
def test_forced_path_this_cpu_lacks_still_pools(path):
  x = inputs((1, 9, 9, 70), seed=1)
  with op_harness.forced_kernel(path):
    got = tf_fused_int8.avg_pool2d_int8(x, 3, 2, "SAME", zero_padding=1).numpy()
  np.testing.assert_array_equal(got, numpy_avg_pool(x, (3, 3), (2, 2), "SAME", (1, 1, 1, 1)))


def test_zero_cells_count_but_same_padding_does_not():
  x = np.full((1, 4, 4, 5), 90, np.int8)
  zero_padded = tf_fused_int8.avg_pool2d_int8(x, 3, 2, "VALID", zero_padding=1).numpy()
  np.testing.assert_array_equal(zero_padded[0, 0, 0], 40)  # 4 * 90 / 9
  np.testing.assert_array_equal(zero_padded[0, 1, 1], 90)  # X' cells 2..4 of 0..5
  np.testing.assert_array_equal(tf_fused_int8.avg_pool2d_int8(x, 3, 2, "SAME").numpy(), 90)


def test_large_windows_past_the_vector_bodies():
  """Windows of more than 255 cells (sums past int16) on every path."""
  for path in op_harness.expected_paths():
    with op_harness.forced_kernel(path):
      for fill in (127, -128, None):
        x = (inputs((1, 18, 20, 70), seed=2) if fill is None else
             np.full((1, 18, 20, 70), fill, np.int8))
        got = tf_fused_int8.avg_pool2d_int8(x, (16, 17), (2, 3), "SAME").numpy()
        np.testing.assert_array_equal(
            got, numpy_avg_pool(x, (16, 17), (2, 3), "SAME"), err_msg=f"{path} {fill}")


def test_graph_with_unknown_sizes_and_static_shape():
  f = tf.function(lambda t: tf_fused_int8.avg_pool2d_int8(t, 3, 1, "SAME"),
                  input_signature=[tf.TensorSpec([None, None, None, 8], tf.int8)])
  x = inputs((2, 10, 7, 8), seed=5)
  np.testing.assert_array_equal(f(x).numpy(), numpy_avg_pool(x, (3, 3), (1, 1), "SAME"))
  g = tf.function(lambda t: tf_fused_int8.avg_pool2d_int8(t, 3, 1, "SAME"))
  assert g.get_concrete_function(tf.TensorSpec([None, 35, 35, 192], tf.int8)
                                 ).structured_outputs.shape.as_list() == [None, 35, 35, 192]
  assert g.get_concrete_function(tf.TensorSpec([3, None, 9, 4], tf.int8)
                                 ).structured_outputs.shape.as_list() == [3, None, None, 4]


def test_layer():
  """Int8AveragePooling2D: the op on channels_last int8, the Keras output
  shape, get_config / from_config, a tf.function, and Keras's float answer
  on a float input."""
  layer = quantization.Int8AveragePooling2D(3, strides=1, padding="same")
  x = inputs((2, 9, 8, 16), seed=8)
  want = numpy_avg_pool(x, (3, 3), (1, 1), "SAME")
  np.testing.assert_array_equal(layer(x).numpy(), want)
  assert layer(x).dtype == tf.int8
  assert layer.compute_output_shape((None, 9, 8, 16)) == (None, 9, 8, 16)
  clone = quantization.Int8AveragePooling2D.from_config(layer.get_config())
  np.testing.assert_array_equal(tf.function(clone)(tf.constant(x)).numpy(), want)
  padded = quantization.Int8AveragePooling2D(3, strides=2, zero_padding=1)
  np.testing.assert_array_equal(
      padded(x).numpy(), numpy_avg_pool(x, (3, 3), (2, 2), "VALID", (1, 1, 1, 1)))
  xf = x.astype(np.float32)
  np.testing.assert_allclose(layer(xf).numpy(), tf.nn.avg_pool2d(xf, 3, 1, "SAME").numpy())
