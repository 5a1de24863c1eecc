"""FusedInt8Pad2D (what Int8ZeroPadding2D and Int8Cropping2D run): zero
padding (positive paddings) and cropping (negative) of an int8 NHWC tensor's
rows and columns in one op.

Checked bit for bit against numpy (np.pad, then a slice) over every mix of
padded, cropped and untouched sides, crops down to an empty output, empty
inputs and tensors big enough to split over the threads; the two layers
against Keras's own ZeroPadding2D / Cropping2D on the same int8 values; the
shape function with unknown sizes; every bad input, in the kernel too.
"""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_fused_int8 import _loader
from tf_fused_int8 import ops
from tf_fused_int8 import quantization


def numpy_pad_crop(x, pads):
  t, b, l, r = pads
  x = np.pad(x, ((0, 0), (max(t, 0), max(b, 0)), (max(l, 0), max(r, 0)), (0, 0)))
  h, w = x.shape[1], x.shape[2]
  return x[:, max(-t, 0):h - max(-b, 0), max(-l, 0):w - max(-r, 0)]


def test_matches_numpy():
  rng = np.random.default_rng(0)
  for n, h, w, c in [(1, 5, 6, 3), (2, 1, 1, 1), (3, 4, 7, 17), (1, 9, 2, 64)]:
    x = rng.integers(-128, 128, (n, h, w, c)).astype(np.int8)
    for pads in itertools.product((-2, 0, 1, 3), repeat=4):
      if h + pads[0] + pads[1] < 0 or w + pads[2] + pads[3] < 0:
        continue
      got = ops._pad2d_int8(x, pads).numpy()  # pylint: disable=protected-access
      want = numpy_pad_crop(x, pads)
      assert got.shape == want.shape, pads
      np.testing.assert_array_equal(got, want, err_msg=str(pads))
  # Crops to nothing, an empty input, a padding-only output.
  x = rng.integers(-128, 128, (2, 3, 4, 5)).astype(np.int8)
  assert ops._pad2d_int8(x, (-2, -1, 0, 0)).shape == (2, 0, 4, 5)  # pylint: disable=protected-access
  np.testing.assert_array_equal(
      ops._pad2d_int8(x, (0, 0, -4, 2)).numpy(), np.zeros((2, 3, 2, 5), np.int8))  # pylint: disable=protected-access
  e = np.zeros((0, 3, 4, 5), np.int8)
  assert ops._pad2d_int8(e, (1, 1, 1, 1)).shape == (0, 5, 6, 5)  # pylint: disable=protected-access


def test_large_tensors_split_over_threads():
  rng = np.random.default_rng(1)
  for shape, pads in [((1, 111, 111, 11), (1, 1, 1, 1)), ((2, 56, 56, 22), (0, 1, 0, 1)),
                      ((1, 112, 112, 32), (-1, 0, -1, 0)), ((2, 28, 28, 264), (1, -1, -1, 1))]:
    x = rng.integers(-128, 128, shape).astype(np.int8)
    np.testing.assert_array_equal(ops._pad2d_int8(x, pads).numpy(),  # pylint: disable=protected-access
                                  numpy_pad_crop(x, pads), str(pads))


def test_layers_match_keras():
  rng = np.random.default_rng(2)
  x = rng.integers(-128, 128, (2, 7, 6, 5)).astype(np.int8)
  for padding in [1, (2, 0), ((0, 1), (0, 1)), ((3, 1), (2, 0))]:
    ours = quantization.Int8ZeroPadding2D(padding)(x).numpy()
    want = keras.layers.ZeroPadding2D(padding)(x.astype(np.float32)).numpy()
    np.testing.assert_array_equal(ours, want.astype(np.int8), str(padding))
  for cropping in [1, (2, 0), ((1, 0), (1, 0)), ((0, 3), (2, 1))]:
    ours = quantization.Int8Cropping2D(cropping)(x).numpy()
    want = keras.layers.Cropping2D(cropping)(x.astype(np.float32)).numpy()
    np.testing.assert_array_equal(ours, want.astype(np.int8), str(cropping))
  # In a graph the layers run the op (no Pad, no StridedSlice).
  f = tf.function(lambda v: quantization.Int8Cropping2D(((1, 0), (1, 0)))(
      quantization.Int8ZeroPadding2D(((0, 1), (0, 1)))(v)))
  types = [op.type for op in f.get_concrete_function(
      tf.TensorSpec((None, 7, 6, 5), tf.int8)).graph.get_operations()]
  assert types.count("FusedInt8Pad2D") == 2 and "Pad" not in types, types
  assert "StridedSlice" not in types, types


def test_shape_function():
  g = tf.Graph()
  with g.as_default():
    ph = tf.compat.v1.placeholder
    raw = _loader.load_ops().fused_int8_pad2d
    assert raw(input=ph(tf.int8, (2, 5, 6, 3)), paddings=[1, 2, -1, 0]).shape.as_list() == [
        2, 8, 5, 3]
    assert raw(input=ph(tf.int8, (None, None, 6, None)),
               paddings=[1, 2, -1, 0]).shape.as_list() == [None, None, 5, None]
    with pytest.raises(ValueError, match="would leave width -1 < 0"):
      raw(input=ph(tf.int8, (2, 5, 6, 3)), paddings=[0, 0, -4, -3])
    with pytest.raises(ValueError, match="must have 4 entries"):
      raw(input=ph(tf.int8, (2, 5, 6, 3)), paddings=[1, 1])
    with pytest.raises(ValueError, match="must be rank 4"):
      raw(input=ph(tf.int8, (5, 6, 3)), paddings=[1, 1, 1, 1])
    # Past the kernel's range, refused before the sizes are added (the
    # sum of two such attrs would overflow), known or unknown sizes alike.
    for bad in (2**62, -2**62, 2**40, -2**40):
      for shape in ((2, 5, 6, 3), (None, None, None, 3)):
        with pytest.raises(ValueError, match=r"paddings\[2\] out of range"):
          raw(input=ph(tf.int8, shape), paddings=[0, 0, bad, bad])
    assert raw(input=ph(tf.int8, (1, 1, 1, 1)),
               paddings=[2**40 - 1, 0, 0, 0]).shape.as_list() == [1, 2**40, 1, 1]


def test_bad_inputs_in_the_kernel():
  raw = _loader.load_ops().fused_int8_pad2d
  x = np.zeros((2, 5, 6, 3), np.int8)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"would leave an output of 5x-1 from input shape \[2,5,6,3\]"):
    raw(input=x, paddings=[0, 0, -4, -3])
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"must be \[batch, height, width"):
    raw(input=np.zeros((5, 6, 3), np.int8), paddings=[1, 1, 1, 1])
  with pytest.raises(tf.errors.InvalidArgumentError, match="must have 4 entries"):
    raw(input=x, paddings=[1, 1, 1])
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"paddings\[1\] out of range"):
    raw(input=x, paddings=[0, 2**62, 0, 0])
  with pytest.raises((TypeError, tf.errors.InvalidArgumentError)):
    raw(input=tf.constant(x.astype(np.float32)), paddings=[1, 1, 1, 1])
  with pytest.raises(TypeError, match="must be int8"):
    ops._pad2d_int8(x.astype(np.float32), (1, 1, 1, 1))  # pylint: disable=protected-access
