"""FusedInt8DepthToSpace (tf_fused_int8.depth_to_space_int8): depth-to-space
of an int8 NHWC tensor, the copy after the convolution quantize_model makes
of a Conv2DTranspose (quantization.Int8DepthToSpace).

Checked bit for bit against a numpy definition (and TF's own
tf.nn.depth_to_space) over block sizes, channel counts around the copy's
piece sizes, batches and empty tensors, eagerly and in tf.functions with
unknown sizes; the shape function's output and errors; the kernel's own
errors for bad input (called past the shape function)."""

import numpy as np
import pytest
import tensorflow as tf

import reference
import tf_fused_int8
from tf_fused_int8 import _loader


def _random(rng, shape):
  return rng.integers(-128, 128, size=shape, dtype=np.int8)


@pytest.mark.parametrize("block", [2, 3, 4, 5, 1])
def test_matches_numpy_and_tf(block):
  rng = np.random.default_rng(block)
  # Per-pixel pieces of block * c bytes: 2 .. 1290, across CopyPiece's
  # size classes and memcpy's.
  for c in (1, 2, 3, 7, 8, 16, 33, 64, 129, 258):
    for n, h, w in ((1, 1, 1), (1, 3, 5), (2, 4, 3), (3, 7, 2)):
      x = _random(rng, (n, h, w, block * block * c))
      got = tf_fused_int8.depth_to_space_int8(x, block).numpy()
      want = reference.depth_to_space(x, block)
      np.testing.assert_array_equal(got, want, f"c={c} {n}x{h}x{w}")
      if block > 1:  # TF's needs a block of at least 2
        np.testing.assert_array_equal(
            got, tf.nn.depth_to_space(x, block).numpy(), f"c={c} {n}x{h}x{w}")


@pytest.mark.parametrize("block", [(2, 1), (1, 2), (3, 2), (2, 3), (1, 4),
                                   (4, 3), (1, 1)])
def test_non_square_blocks(block):
  """bh x bw blocks (a Conv2DTranspose with unequal strides, a lifted
  Conv1DTranspose's 1 x s), against the numpy definition."""
  rng = np.random.default_rng(sum(block))
  bh, bw = block
  for c in (1, 3, 8, 17, 64, 130):
    for n, h, w in ((1, 1, 1), (2, 3, 5), (1, 6, 2)):
      x = _random(rng, (n, h, w, bh * bw * c))
      np.testing.assert_array_equal(
          tf_fused_int8.depth_to_space_int8(x, block).numpy(),
          reference.depth_to_space(x, block), f"c={c} {n}x{h}x{w}")
  f = tf.function(lambda x: tf_fused_int8.depth_to_space_int8(x, list(block)))
  x = _random(rng, (2, 3, 4, bh * bw * 5))
  np.testing.assert_array_equal(f(x).numpy(), reference.depth_to_space(x, block))


def test_large_parallel():
  # Big enough for the pool to split the rows (U-Net decoder sizes).
  rng = np.random.default_rng(7)
  for shape in ((1, 112, 112, 64), (2, 56, 56, 128), (1, 14, 14, 512)):
    x = _random(rng, shape)
    np.testing.assert_array_equal(
        tf_fused_int8.depth_to_space_int8(x, 2).numpy(),
        reference.depth_to_space(x, 2), str(shape))


def test_empty():
  for shape in ((0, 3, 4, 8), (2, 0, 4, 8), (2, 3, 0, 8), (2, 3, 4, 0)):
    x = np.zeros(shape, np.int8)
    got = tf_fused_int8.depth_to_space_int8(x, 2)
    assert got.shape.as_list() == list(reference.depth_to_space(x, 2).shape)


def test_graph_unknown_sizes_and_shape_fn():
  rng = np.random.default_rng(3)
  f = tf.function(lambda x: tf_fused_int8.depth_to_space_int8(x, 3),
                  input_signature=[tf.TensorSpec([None, None, None, None],
                                                 tf.int8)])
  for shape in ((1, 2, 3, 9), (2, 5, 1, 45)):
    x = _random(rng, shape)
    np.testing.assert_array_equal(f(x).numpy(), reference.depth_to_space(x, 3))
  with tf.Graph().as_default():
    ph = lambda shape: tf.compat.v1.placeholder(tf.int8, shape)  # pylint: disable=unnecessary-lambda-assignment
    d2s = tf_fused_int8.depth_to_space_int8
    assert d2s(ph((2, 3, 4, 8)), 2).shape.as_list() == [2, 6, 8, 2]
    assert d2s(ph((None, 3, None, 18)), 3).shape.as_list() == [None, 9, None, 2]
    assert d2s(ph((2, 3, 4, None)), 2).shape.as_list() == [2, 6, 8, None]
    assert d2s(ph(None), 2).shape.rank == 4
    assert d2s(ph((2, 3, 4, 12)), (2, 3)).shape.as_list() == [2, 6, 12, 2]
    with pytest.raises(ValueError, match="multiple of block_height"):
      d2s(ph((2, 3, 4, 12)), 3)
    with pytest.raises(ValueError, match="rank"):
      d2s(ph((2, 3, 4)), 2)
    with pytest.raises(ValueError, match="overflows"):
      d2s(ph((None, 2**62, 1, None)), 2)


def test_python_errors():
  x = np.zeros((1, 2, 2, 4), np.int8)
  for bad in (0, -2, 65537, 2.0, True, "2", (2,), (2, 0), (2, 3, 1),
              (2.0, 2)):
    with pytest.raises(ValueError, match="block_size"):
      tf_fused_int8.depth_to_space_int8(x, bad)
  with pytest.raises(TypeError, match="int8"):
    tf_fused_int8.depth_to_space_int8(x.astype(np.float32), 2)


def test_kernel_errors():
  # The raw op, eagerly: the kernel's own checks.
  raw = _loader.load_ops().fused_int8_depth_to_space
  with pytest.raises(tf.errors.InvalidArgumentError, match="multiple of block_height"):
    raw(input=np.zeros((1, 2, 2, 6), np.int8), block_height=2, block_width=2)
  with pytest.raises(tf.errors.InvalidArgumentError, match="rank 4"):
    raw(input=np.zeros((2, 2, 4), np.int8), block_height=2, block_width=2)
  for bh, bw, which in ((0, 2, "block_height"), (2, -1, "block_width"),
                        (65537, 2, "block_height"), (2, 2**40, "block_width")):
    with pytest.raises(tf.errors.InvalidArgumentError, match=which):
      raw(input=np.zeros((1, 2, 2, 4), np.int8), block_height=bh, block_width=bw)
  with pytest.raises(tf.errors.InvalidArgumentError, match="overflows"):
    raw(input=np.zeros((1, 2**62, 1, 0), np.int8), block_height=4, block_width=1)


def test_int8_depth_to_space_layer_runs_the_op():
  """quantization.Int8DepthToSpace on int8 runs FusedInt8DepthToSpace (no
  TF DepthToSpace in its graph), with TF's bytes; other dtypes TF's op."""
  from tf_fused_int8 import quantization  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(9)
  layer = quantization.Int8DepthToSpace(2)
  x = _random(rng, (2, 5, 6, 12))
  f = tf.function(layer)
  cf = f.get_concrete_function(tf.TensorSpec([None, 5, 6, 12], tf.int8))
  types = [op.type for op in cf.graph.get_operations()]
  assert "FusedInt8DepthToSpace" in types and "DepthToSpace" not in types, types
  assert cf.output_shapes.as_list() == [None, 10, 12, 3]
  np.testing.assert_array_equal(cf(x).numpy(), reference.depth_to_space(x, 2))
  np.testing.assert_array_equal(layer(x).numpy(), reference.depth_to_space(x, 2))
  xf = x.astype(np.float32)
  np.testing.assert_array_equal(layer(xf).numpy(), reference.depth_to_space(xf, 2))


def test_int8_depth_to_space_layer_blocks():
  """Int8DepthToSpace's block: a pair (bh, bw) (a pair of equal sizes is
  stored as the int), through get_config / from_config; bad blocks are a
  ValueError."""
  from tf_fused_int8 import quantization  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(12)
  x = _random(rng, (2, 3, 4, 18))
  for block, stored in (((2, 3), [2, 3]), ((3, 3), 3), ([1, 2], [1, 2]), (3, 3)):
    layer = quantization.Int8DepthToSpace(block)
    assert layer.get_config()["block_size"] == stored
    again = quantization.Int8DepthToSpace.from_config(layer.get_config())
    want = reference.depth_to_space(  # 18 channels: every block divides them
        x, tuple(block) if isinstance(block, (tuple, list)) else block)
    np.testing.assert_array_equal(again(x).numpy(), want)
  for bad in (1, (1, 1), (0, 2), (2, 2, 2), (2,)):
    with pytest.raises(ValueError, match="block_size"):
      quantization.Int8DepthToSpace(bad)
