"""FusedInt8Concat (tf_fused_int8.concat_int8): int8 tensors joined along
their last axis, in one op.

Checked bit for bit against numpy's concatenate (and TF's own tf.concat)
over ranks 1-5, one to six pieces whose widths straddle the copy's size
classes (0-3 bytes, the 4- and 8-byte pairs, 16-byte chunks, memcpy past
256), empty batches and tensors big enough to split over the threads;
eagerly, in graphs with unknown sizes (the shape function), and through
Int8Concatenate in a quantized model; then every bad input, caught in the
kernel too (the raw op, past the Python checks).
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_fused_int8
from tf_fused_int8 import _loader
from tf_fused_int8 import quantization

WIDTHS = (0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 44, 64, 100, 255,
          256, 257, 300)


def _pieces(rng, lead, widths):
  return [rng.integers(-128, 128, lead + (w,)).astype(np.int8) for w in widths]


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_matches_numpy_and_tf_concat(rank):
  rng = np.random.default_rng(rank)
  leads = {1: [()], 2: [(1,), (7,), (300,)], 3: [(2, 3), (1, 1)],
           4: [(1, 5, 4), (2, 3, 7), (0, 3, 3)], 5: [(2, 1, 3, 2)]}[rank]
  for lead in leads:
    for trial in range(12):
      count = 1 + trial % 6
      widths = [WIDTHS[rng.integers(len(WIDTHS))] for _ in range(count)]
      xs = _pieces(rng, lead, widths)
      got = tf_fused_int8.concat_int8(xs).numpy()
      want = np.concatenate(xs, axis=-1)
      assert got.dtype == np.int8 and got.shape == want.shape, (lead, widths)
      np.testing.assert_array_equal(got, want, err_msg=f"{lead} {widths}")
      np.testing.assert_array_equal(got, tf.concat(xs, axis=-1).numpy())


def test_large_tensors_split_over_threads():
  # DenseNet121's and Inception's shapes at batch 1 and 2: large enough for
  # the pool to split the rows (cc/tf/pool_parallel_for.cc).
  rng = np.random.default_rng(3)
  for lead, widths in [((1, 56, 56), (128, 32)), ((2, 28, 28), (64, 96, 32, 64)),
                       ((1, 14, 14), (960, 32)), ((2, 17, 17), (192, 192, 192, 192)),
                       ((1, 35, 35), (3, 250, 1, 17))]:
    xs = _pieces(rng, lead, widths)
    np.testing.assert_array_equal(tf_fused_int8.concat_int8(xs).numpy(),
                                  np.concatenate(xs, axis=-1), str(widths))


def test_graph_shapes_and_tf_function():
  g = tf.Graph()
  with g.as_default():
    ph = tf.compat.v1.placeholder
    a = ph(tf.int8, (2, 3, 4, 5))
    b = ph(tf.int8, (2, 3, 4, 7))
    c = ph(tf.int8, (None, 3, None, None))
    assert tf_fused_int8.concat_int8([a, b]).shape.as_list() == [2, 3, 4, 12]
    assert tf_fused_int8.concat_int8([a, c]).shape.as_list() == [2, 3, 4, None]
    assert tf_fused_int8.concat_int8([c, c]).shape.as_list() == [None, 3, None, None]
    assert tf_fused_int8.concat_int8([a, ph(tf.int8, None)]).shape.rank is None
    with pytest.raises(ValueError, match="Dimension 2 in both shapes must be equal"):
      tf_fused_int8.concat_int8([a, ph(tf.int8, (2, 3, 5, 7))])
    with pytest.raises(ValueError, match="must be rank 4"):
      tf_fused_int8.concat_int8([a, ph(tf.int8, (2, 3, 7))])
  f = tf.function(lambda a, b: tf_fused_int8.concat_int8([a, b]),
                  input_signature=[tf.TensorSpec((None, 3, 4, None), tf.int8)] * 2)
  rng = np.random.default_rng(4)
  for n, wa, wb in [(1, 5, 7), (3, 16, 1), (0, 2, 2), (2, 0, 300)]:
    xa, xb = _pieces(rng, (n, 3, 4), (wa, wb))
    np.testing.assert_array_equal(f(xa, xb).numpy(), np.concatenate([xa, xb], -1))


def test_bad_inputs():
  rng = np.random.default_rng(5)
  a, b = _pieces(rng, (2, 3, 4), (5, 7))
  with pytest.raises(TypeError, match=r"values\[1\] must be int8, got float32"):
    tf_fused_int8.concat_int8([a, b.astype(np.float32)])
  with pytest.raises(ValueError, match="non-empty list"):
    tf_fused_int8.concat_int8([])
  with pytest.raises(ValueError, match="non-empty list"):
    tf_fused_int8.concat_int8(tf.constant(a))
  # The kernel checks what the raw op lets through eagerly.
  raw = _loader.load_ops().fused_int8_concat
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"values\[1\] must have shape \[2, 3, 4, any\].*\[2,3,5,7\]"):
    raw(values=[a, np.zeros((2, 3, 5, 7), np.int8)])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"values\[1\] must have shape \[2, 3, 4, any\].*\[2,3,7\]"):
    raw(values=[a, np.zeros((2, 3, 7), np.int8)])
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"values\[0\] must have rank 1"):
    raw(values=[np.int8(3), np.int8(4)])
  with pytest.raises((TypeError, tf.errors.InvalidArgumentError)):
    raw(values=[tf.constant(a.astype(np.float32))])


def test_int8_concatenate_runs_the_op():
  """Int8Concatenate along the last axis runs FusedInt8Concat (no ConcatV2
  in its graph) with tf.concat's bytes; along another axis, Keras's."""
  rng = np.random.default_rng(6)
  xs = _pieces(rng, (2, 5, 6), (3, 17, 32))
  last = quantization.Int8Concatenate(axis=-1)
  f = tf.function(lambda *v: last(list(v)))
  cf = f.get_concrete_function(*[tf.TensorSpec(x.shape, tf.int8) for x in xs])
  types = [op.type for op in cf.graph.get_operations()]
  assert "FusedInt8Concat" in types and "ConcatV2" not in types, types
  np.testing.assert_array_equal(cf(*xs).numpy(), np.concatenate(xs, -1))
  np.testing.assert_array_equal(last(xs).numpy(), np.concatenate(xs, -1))
  ys = [rng.integers(-128, 128, (2, w, 6, 4)).astype(np.int8) for w in (1, 3)]
  rows = quantization.Int8Concatenate(axis=1)
  np.testing.assert_array_equal(rows(ys).numpy(), np.concatenate(ys, 1))
