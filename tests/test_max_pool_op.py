"""FusedInt8MaxPool (tf_fused_int8.max_pool2d_int8): int8 max pooling, NHWC,
optionally after zero padding, in one op.

Checked bit for bit against a plain numpy model (zeros added, then every
window's max, SAME's own padding cells ignored) and against TF's
tf.pad + tf.nn.max_pool2d, over windows, strides, SAME / VALID, the
ZeroPadding2D forms and channel counts around the vector widths, on every
CPU path; then the layer, graphs with unknown sizes, and every bad input
(of both pooling ops: FusedInt8AvgPool's are checked here too).
"""

import re

import numpy as np
import pytest
import tensorflow as tf

import tf_fused_int8
from tf_fused_int8 import _loader
from tf_fused_int8 import quantization

import op_harness


def numpy_pool(x, ksize, strides, padding, zeros, reduce):
  """Pooling in numpy: pad with zeros, then TF's SAME / VALID windows
  (SAME's padding cells left out of the window); reduce(window) maps each
  window [n, wh, ww, c] (int64) to its [n, c] result."""
  t, b, l, r = zeros
  x = np.pad(np.asarray(x, np.int64), ((0, 0), (t, b), (l, r), (0, 0)))
  n, h, w, c = x.shape
  (kh, kw), (sh, sw) = ksize, strides
  if padding == "VALID":
    oh, ow, ph, pw = (h - kh) // sh + 1, (w - kw) // sw + 1, 0, 0
  else:
    oh, ow = -(-h // sh), -(-w // sw)
    ph = max((oh - 1) * sh + kh - h, 0) // 2
    pw = max((ow - 1) * sw + kw - w, 0) // 2
  out = np.empty((n, oh, ow, c), np.int8)
  for i in range(oh):
    for j in range(ow):
      r0, c0 = i * sh - ph, j * sw - pw
      out[:, i, j, :] = reduce(
          x[:, max(r0, 0):max(r0 + kh, 0), max(c0, 0):max(c0 + kw, 0), :])
  return out


def numpy_max_pool(x, ksize, strides, padding, zeros=(0, 0, 0, 0)):
  """The op in numpy: pad with zeros, then TF's SAME / VALID max pooling
  (SAME's padding cells never win: they are left out of the window)."""
  return numpy_pool(x, ksize, strides, padding, zeros,
                    lambda win: win.max(axis=(1, 2)))


def tf_pad_and_pool(x, ksize, strides, padding, zeros=(0, 0, 0, 0)):
  t, b, l, r = zeros
  xp = tf.pad(tf.cast(x, tf.int32), [[0, 0], [t, b], [l, r], [0, 0]])
  return tf.cast(tf.nn.max_pool2d(tf.cast(xp, tf.float32), ksize, strides,
                                  padding), tf.int8).numpy()


def cases():
  rng = np.random.default_rng(0)
  out = []
  for i in range(60):
    h, w = (int(v) for v in rng.integers(1, 12, 2))
    c = int(rng.choice([1, 3, 8, 16, 31, 32, 33, 63, 64, 65, 96, 130]))
    ksize = tuple(int(v) for v in rng.integers(1, 5, 2))
    strides = tuple(int(v) for v in rng.integers(1, 4, 2))
    zeros = tuple(int(v) for v in rng.integers(0, 3, 4)) if i % 3 == 0 else (0, 0, 0, 0)
    padding = "SAME" if i % 2 else "VALID"
    if padding == "VALID" and (h + zeros[0] + zeros[1] < ksize[0] or
                               w + zeros[2] + zeros[3] < ksize[1]):
      continue
    out.append((1 + i % 3, h, w, c, ksize, strides, padding, zeros))
  # ResNet50's stem (ZeroPadding2D(1) + MaxPooling2D(3, 2)), and a global-
  # size window.
  out.append((2, 112, 112, 64, (3, 3), (2, 2), "VALID", (1, 1, 1, 1)))
  out.append((1, 7, 7, 2048, (7, 7), (1, 1), "VALID", (0, 0, 0, 0)))
  return out


def inputs(shape, seed, lowest=False):
  if lowest:
    return np.full(shape, -128, np.int8)
  return np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_matches_numpy_and_tf_on_every_path(path):
  with op_harness.forced_kernel(path):
    for k, (n, h, w, c, ksize, strides, padding, zeros) in enumerate(cases()):
      for lowest in (False, True):
        x = inputs((n, h, w, c), seed=k, lowest=lowest and k % 4 == 0)
        got = tf_fused_int8.max_pool2d_int8(
            x, ksize, strides, padding,
            zero_padding=((zeros[0], zeros[1]), (zeros[2], zeros[3]))).numpy()
        what = f"{path} case {k} {x.shape} {ksize} {strides} {padding} {zeros}"
        np.testing.assert_array_equal(
            got, numpy_max_pool(x, ksize, strides, padding, zeros), err_msg=what)
        if k % 5 == 0:
          np.testing.assert_array_equal(
              got, tf_pad_and_pool(x, ksize, strides, padding, zeros), err_msg=what)


@pytest.mark.parametrize("path", op_harness.unavailable_paths()[:1])
def test_forced_path_this_cpu_lacks_still_pools(path):
  """A forced path this CPU lacks runs the portable loop (the same bytes),
  like the quantize op."""
  x = inputs((1, 9, 9, 70), seed=1)
  with op_harness.forced_kernel(path):
    got = tf_fused_int8.max_pool2d_int8(x, 3, 2, "SAME", zero_padding=1).numpy()
  np.testing.assert_array_equal(got, numpy_max_pool(x, (3, 3), (2, 2), "SAME", (1, 1, 1, 1)))


def test_zero_cells_win_over_negatives_but_same_padding_does_not():
  x = np.full((1, 4, 4, 5), -7, np.int8)
  zero_padded = tf_fused_int8.max_pool2d_int8(x, 3, 2, "VALID", zero_padding=1).numpy()
  assert zero_padded.shape == (1, 2, 2, 5)
  np.testing.assert_array_equal(zero_padded[0, 0, 0], 0)   # holds zero cells
  np.testing.assert_array_equal(zero_padded[0, 1, 1], -7)  # X' cells 2..4 of 0..5
  same = tf_fused_int8.max_pool2d_int8(x, 3, 2, "SAME").numpy()
  np.testing.assert_array_equal(same, -7)


def test_zero_padding_forms():
  x = inputs((1, 5, 6, 3), seed=4)
  for form, zeros in ((2, (2, 2, 2, 2)), ((1, 2), (1, 1, 2, 2)),
                      (((0, 1), (2, 0)), (0, 1, 2, 0)), (None, (0, 0, 0, 0))):
    np.testing.assert_array_equal(
        tf_fused_int8.max_pool2d_int8(x, 2, 1, "VALID", zero_padding=form).numpy(),
        numpy_max_pool(x, (2, 2), (1, 1), "VALID", zeros), err_msg=str(form))


def test_graph_with_unknown_sizes_and_static_shape():
  f = tf.function(lambda t: tf_fused_int8.max_pool2d_int8(t, 3, 2, "VALID", zero_padding=1),
                  input_signature=[tf.TensorSpec([None, None, None, 8], tf.int8)])
  x = inputs((2, 10, 7, 8), seed=5)
  np.testing.assert_array_equal(f(x).numpy(), numpy_max_pool(x, (3, 3), (2, 2), "VALID", (1, 1, 1, 1)))
  g = tf.function(lambda t: tf_fused_int8.max_pool2d_int8(t, 3, 2, "VALID", zero_padding=1))
  assert g.get_concrete_function(tf.TensorSpec([None, 112, 112, 64], tf.int8)
                                 ).structured_outputs.shape.as_list() == [None, 56, 56, 64]
  assert g.get_concrete_function(tf.TensorSpec([3, None, 9, 4], tf.int8)
                                 ).structured_outputs.shape.as_list() == [3, None, None, 4]


# The two pooling ops (name, Python function, raw op): the input checks below
# run on both (test_avg_pool_op.py checks the average pooling's results).
POOLS = [("FusedInt8MaxPool", tf_fused_int8.max_pool2d_int8, "fused_int8_max_pool"),
         ("FusedInt8AvgPool", tf_fused_int8.avg_pool2d_int8, "fused_int8_avg_pool")]
POOL_IDS = [name for name, _, _ in POOLS]


@pytest.mark.parametrize("pool", POOLS, ids=POOL_IDS)
def test_empty_batch_and_channels(pool):
  _, fn, _ = pool
  for shape in ((0, 5, 5, 4), (2, 5, 5, 0)):
    got = fn(np.zeros(shape, np.int8), 2, 2, "VALID")
    assert got.shape == (shape[0], 2, 2, shape[3])


def raw(x, op="fused_int8_max_pool", **attrs):
  kw = dict(ksize=[1, 2, 2, 1], strides=[1, 1, 1, 1], padding="VALID", zero_paddings=[])
  kw.update(attrs)
  return getattr(_loader.load_ops(), op)(input=x, **kw)


@pytest.mark.parametrize("pool", POOLS, ids=POOL_IDS)
@pytest.mark.parametrize("attrs, ours, message", [
    # TF's own attr check (eager and graph word it differently).
    (dict(ksize=[2, 2]), False, r"'ksize' .*(of 2|length 2).*minimum 4"),
    # Ours, after the op's name.
    (dict(ksize=[1, 2, 2, 1, 1]), True, re.escape("ksize must be [1, height, width, 1]")),
    (dict(ksize=[1, 0, 2, 1]), True, re.escape("ksize must be [1, height, width, 1]")),
    (dict(ksize=[2, 2, 2, 1]), True, re.escape("ksize must be [1, height, width, 1]")),
    (dict(strides=[1, 1, -1, 1]), True, re.escape("strides must be [1, height, width, 1]")),
    (dict(zero_paddings=[1, 1]), True, "zero_paddings must be empty or 4"),
    (dict(zero_paddings=[0, 0, -1, 0]), True, "zero_paddings must be empty or 4"),
    (dict(ksize=[1, 9, 2, 1]), True, "smaller than the window height"),
])
def test_bad_attrs_are_clean_errors(pool, attrs, ours, message):
  name, _, op = pool
  if ours:
    message = f"{name}: .*{message}"
  x = tf.constant(inputs((1, 4, 4, 2), seed=6))
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                     match=message):
    raw(x, op, **attrs)
  f = tf.function(lambda t: raw(t, op, **attrs),
                  input_signature=[tf.TensorSpec(None, tf.int8)])
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                     match=message):
    f(x)


@pytest.mark.parametrize("pool", POOLS, ids=POOL_IDS)
@pytest.mark.parametrize("shape", [(4, 4, 2), (1, 4, 4, 2, 1), ()])
def test_bad_rank_is_a_clean_error(pool, shape):
  name, _, op = pool
  f = tf.function(lambda t: raw(t, op), input_signature=[tf.TensorSpec(None, tf.int8)])
  with pytest.raises(tf.errors.InvalidArgumentError, match=f"{name}: input must be rank 4"):
    f(tf.zeros(shape, tf.int8))


@pytest.mark.parametrize("pool", POOLS, ids=POOL_IDS)
def test_python_argument_errors(pool):
  _, fn, op = pool
  x = inputs((1, 4, 4, 2), seed=7)
  with pytest.raises((TypeError, tf.errors.InvalidArgumentError), match="int8"):
    raw(tf.zeros((1, 4, 4, 2), tf.float32), op)
  with pytest.raises(TypeError, match="x must be int8"):
    fn(x.astype(np.float32), 2, 1, "VALID")
  with pytest.raises(ValueError, match="padding must be one of"):
    fn(x, 2, 1, "EXPLICIT")
  with pytest.raises(ValueError, match="zero_padding must be non-negative"):
    fn(x, 2, 1, "VALID", zero_padding=-1)
  with pytest.raises(ValueError, match="zero_padding must be"):
    fn(x, 2, 1, "VALID", zero_padding=(1, 2, 3))


def test_layer_with_zero_padding():
  """Int8MaxPooling2D(zero_padding=...): the op on channels_last int8, the
  Keras output shape, get_config / from_config, and a tf.function."""
  layer = quantization.Int8MaxPooling2D(3, strides=2, zero_padding=1)
  x = inputs((2, 9, 8, 16), seed=8)
  want = numpy_max_pool(x, (3, 3), (2, 2), "VALID", (1, 1, 1, 1))
  np.testing.assert_array_equal(layer(x).numpy(), want)
  assert layer.compute_output_shape((None, 9, 8, 16)) == want.shape[:0] + (None,) + want.shape[1:]
  clone = quantization.Int8MaxPooling2D.from_config(layer.get_config())
  assert clone.zero_padding == ((1, 1), (1, 1))
  np.testing.assert_array_equal(tf.function(clone)(tf.constant(x)).numpy(), want)
  # Without zero padding: the plain Keras layer's answer.
  plain = quantization.Int8MaxPooling2D(2, padding="same")
  np.testing.assert_array_equal(plain(x).numpy(), numpy_max_pool(x, (2, 2), (2, 2), "SAME"))
