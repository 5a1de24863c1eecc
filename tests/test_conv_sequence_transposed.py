"""Transposed convolution steps of the sequence ops (step_kinds 2).

quantize_model runs a Conv2DTranspose as its sub-pixel form: a stride-1
QuantizedFusedConv2D to s_h * s_w * filters channels, an Int8DepthToSpace and
an Int8Cropping2D (tests/test_quantization.py checks that form against
numpy, bit for bit). fuse_conv_sequences makes the three one sequence step
that runs each phase over only the taps it reads
(cc/core/transposed_conv.h). These tests hold that step to the three
layers' bits on every CPU path, through every way the sequence runs (eager,
graph, step plans, batch slices, the image-by-image prefix, single ops, the
runner), and check its weights API and its errors.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_helpers
import op_harness
import tf_fused_int8
from tf_fused_int8 import _loader
from tf_fused_int8 import layers as layers_lib
from tf_fused_int8 import ops as ops_lib
from tf_fused_int8 import quantization

L = keras.layers

# (kernel, strides, padding, output_padding): k % s != 0 with k > s on at
# least one axis, so that some phase reads fewer taps.
CONFIGS = [
    (3, 2, "same", None),
    (5, 2, "same", None),
    (3, 2, "valid", None),
    ((3, 5), (3, 2), "same", (2, 1)),
    (3, (2, 1), "valid", None),
    ((5, 2), (2, 2), "same", 1),
]


def _fused(config, seed=0, shape=(7, 6, 5), filters=16):
  """(qmodel, fused, x): Conv2D -> Conv2DTranspose(config, filters) -> BN ->
  ReLU -> Conv2D, quantized on x and fused into one sequence."""
  kernel, stride, padding, output_padding = config
  inp = keras.Input(shape, name="image")
  h = L.Conv2D(8, 3, padding="same", activation="relu", name="c1")(inp)
  t = L.Conv2DTranspose(filters, kernel, strides=stride, padding=padding,
                        output_padding=output_padding, name="t")(h)
  out = L.Conv2D(4, 1, name="c2")(L.ReLU(name="r")(L.BatchNormalization(name="bn")(t)))
  model = keras.Model(inp, out)
  rng = np.random.default_rng(seed)
  layer_helpers.randomize_model(model, rng)
  x = rng.uniform(-1, 1, (4,) + shape).astype(np.float32)
  qmodel = layer_helpers.quantize_strict(model, x, verbose=0)
  fused = quantization.fuse_conv_sequences(qmodel)
  return qmodel, fused, x


def _same(got, want, what):
  """The same bits (the models' outputs: their int8 outputs dequantized)."""
  np.testing.assert_array_equal(got, want, err_msg=what)


def _sequence(fused):
  seqs = [l for l in fused.layers if isinstance(l, layers_lib.QuantizedConvSequence)]
  assert len(seqs) == 1, [type(l).__name__ for l in fused.layers]
  return seqs[0]


def _graph_ops(fn, *args):
  ops = {}
  for op in fn.get_concrete_function(*args).graph.get_operations():
    ops[op.type] = ops.get(op.type, 0) + 1
  return ops


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_transposed_steps_give_the_sub_pixel_bits_on_every_path(path):
  """Each configuration's fused model equals the unfused one (whose
  convolution runs on the reference kernel) bit for bit: eagerly, in a
  graph (calls 2 and 3 from the step plan), at batch 1, 2 (two batch
  slices on a pool of two threads) and 3; the graph has one sequence op and
  no depth-to-space or pad op."""
  for i, config in enumerate(CONFIGS):
    qmodel, fused, x = _fused(config, seed=i)
    seq = _sequence(fused)
    assert 2 in seq._op_attrs["step_kinds"], config  # pylint: disable=protected-access
    fn = tf.function(fused)
    for n in (1, 2, 3, 2):
      xb = tf.constant(x[:n])
      with op_harness.forced_kernel("reference"):
        want = qmodel(xb).numpy()
      assert len(np.unique(want)) > 20
      with op_harness.forced_kernel(path):
        _same(fused(xb).numpy(), want, f"{config} {path} eager n={n}")
        _same(fn(xb).numpy(), want, f"{config} {path} graph n={n}")
    ops = _graph_ops(fn, tf.constant(x[:2]))
    assert ops.get("ResourceFusedInt8ConvSequence") == 1, ops
    assert not ops.get("FusedInt8DepthToSpace") and not ops.get("FusedInt8Pad2D"), ops


def test_transposed_step_by_image_and_in_the_runner(monkeypatch):
  """The image-by-image prefix forced through the transposed step
  (TF_FUSED_INT8_SEQUENCE_PREFIX, read when the kernel is made) and the
  InferenceRunner (the frozen tensor op) give the same bits."""
  qmodel, fused, x = _fused(CONFIGS[1], seed=7)
  want = qmodel(x).numpy()
  monkeypatch.setenv("TF_FUSED_INT8_SEQUENCE_PREFIX", "2")
  monkeypatch.setenv("TF_FUSED_INT8_SEQUENCE_BATCH_SPLIT", "0")
  fn = tf.function(fused)
  for _ in range(2):
    _same(fn(tf.constant(x)).numpy(), want, "by image")
  monkeypatch.delenv("TF_FUSED_INT8_SEQUENCE_PREFIX")
  monkeypatch.delenv("TF_FUSED_INT8_SEQUENCE_BATCH_SPLIT")
  runner = tf_fused_int8.InferenceRunner(fused)
  for _ in range(2):
    _same(np.asarray(runner(x)), want, "runner")


def test_transposed_steps_fall_back_to_single_ops(monkeypatch):
  """Where the weights are not CPU variables the layer runs each phase as a
  FusedInt8Conv2DBiasActivation on its slice of the filter vector, then one
  depth-to-space and the crop: the same bits."""
  for i, config in enumerate(CONFIGS[:4]):
    qmodel, fused, x = _fused(config, seed=10 + i)
    want = qmodel(x).numpy()
    seq = _sequence(fused)
    monkeypatch.setattr(ops_lib, "_cpu_variable", lambda *a: False)
    _same(fused(x).numpy(), want, f"{config} single ops")
    fn = tf.function(seq)
    ops = _graph_ops(fn, tf.TensorSpec((None,) + tuple(seq.input.shape[1:]), tf.int8))
    assert ops.get("ResourceFusedInt8ConvSequence") is None, ops
    assert ops.get("FusedInt8DepthToSpace") == 1, ops
    monkeypatch.undo()


def test_transposed_step_weights_and_config(tmp_path):
  """conv_weights gives the sub-pixel kernel back (zeros outside the
  phases' taps), set_conv_weights takes it, a kernel with a weight outside
  them is refused, the config names the phases, and a .keras round trip and
  a rebuilt sequence give the same bits."""
  qmodel, fused, x = _fused(CONFIGS[0], seed=20)
  seq = _sequence(fused)
  k = seq._op_attrs["step_kinds"].index(2)  # pylint: disable=protected-access
  sub = qmodel.get_layer("t")
  for got, want in zip(seq.conv_weights(k), sub.get_weights()):
    np.testing.assert_array_equal(got, want)
  config = seq.get_config()["convs"][k]["transposed"]
  # 3x3 stride 2 'same': two taps per axis, phase 1 reads the second only.
  assert tuple(config["block"]) == (2, 2)
  assert [tuple(b) for b in config["rows"]] == [(0, 2), (1, 1)], config
  assert [tuple(b) for b in config["cols"]] == [(0, 2), (1, 1)], config
  assert tuple(config["crop"]) == (0, 2, 0, 2), config  # 2 (L + 1) rows -> 2 L
  want = fused(x).numpy()
  w = seq.conv_weights(k)
  kernel = w[0].copy()
  kernel[0, 0, 0, -1] = 5  # phase (1, 1) reads tap (1, 1) only
  with pytest.raises(ValueError, match=r"is a transposed convolution whose phases read "
                     r"rows \(\(0, 2\), \(1, 1\)\) .* not zero outside them"):
    seq.set_conv_weights(k, [kernel] + w[1:])
  w[1] = w[1] + 1.0
  seq.set_conv_weights(k, w)
  assert not np.array_equal(fused(x).numpy(), want)
  w[1] = w[1] - 1.0
  seq.set_conv_weights(k, w)
  np.testing.assert_array_equal(fused(x).numpy(), want)
  again = layers_lib.QuantizedConvSequence.from_config(seq.get_config())
  again.build(seq.input.shape)
  again.set_weights(seq.get_weights())
  xq = fused.layers[1](x)
  np.testing.assert_array_equal(again(xq).numpy(), seq(xq).numpy())
  layer_helpers.assert_keras_round_trip_exact(fused, x, str(tmp_path / "f.keras"))


def test_transposed_step_arguments_are_checked():
  _, fused, _ = _fused(CONFIGS[0], seed=21)
  seq = _sequence(fused)
  k = seq._op_attrs["step_kinds"].index(2)  # pylint: disable=protected-access
  convs = seq.get_config()["convs"]
  ins, sides = seq.input_sources, seq.side_sources
  bad = [dict(c) for c in convs]
  step = dict(bad[k]["transposed"])
  bad[k] = {"transposed": dict(step, rows=[(0, 2)])}
  with pytest.raises(ValueError, match="one .start >= 0, taps >= 1. per phase row"):
    layers_lib.QuantizedConvSequence(bad, ins, sides)
  bad[k] = {"transposed": dict(step, block=(2,))}
  with pytest.raises(ValueError, match="needs blocks >= 1"):
    layers_lib.QuantizedConvSequence(bad, ins, sides)
  bad[k] = {"transposed": {"conv": step["conv"]}}
  with pytest.raises(ValueError, match="must be a transposed convolution"):
    layers_lib.QuantizedConvSequence(bad, ins, sides)
  bad[k] = {"transposed": dict(step, rows=[(0, 2), (1, 2)])}
  with pytest.raises(ValueError, match=r"step \d's phases read rows .* must lie inside it"):
    layers_lib.QuantizedConvSequence(bad, ins, sides).build(seq.input.shape)
  bad[k] = {"transposed": dict(step, conv=dict(step["conv"], padding="same"))}
  with pytest.raises(ValueError, match="explicit padding"):
    layers_lib.QuantizedConvSequence(bad, ins, sides)
  bad[k] = {"transposed": dict(step, crop=(0, 99, 0, 1))}
  with pytest.raises(ValueError, match=r"crop \(0, 99, 0, 1\) is larger than"):
    layers_lib.QuantizedConvSequence(bad, ins, sides).build(seq.input.shape)


def _bad(seq, x, match, **changes):
  raw = _loader.load_ops().fused_int8_conv_sequence
  args = dict(seq._op_attrs, filters=tf.constant(seq.filters.numpy()),  # pylint: disable=protected-access
              epilogue=tf.constant(seq.epilogue.numpy()))
  args.update(changes)
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=match):
    raw(conv_input=tf.constant(x), **args)


def test_bad_transposed_records_are_clear_errors():
  """The op's own checks of step_kinds 2 and transpose_steps (the kernel's
  and the shape function's), whatever a graph holds."""
  _, fused, x = _fused(CONFIGS[0], seed=22)
  seq = _sequence(fused)
  xq = fused.layers[1](x).numpy()
  attrs = seq._op_attrs  # pylint: disable=protected-access
  kinds, rec = list(attrs["step_kinds"]), list(attrs["transpose_steps"])
  k = kinds.index(2)
  assert rec[:7] == [k, 2, 2, 0, 2, 0, 2], rec
  _bad(seq, xq, r"step \d: a transposed convolution step \(step_kinds 2\) needs a "
       r"transpose_steps record", transpose_steps=[])
  _bad(seq, xq, r"transpose_steps record 0 \(from entry 0\): needs at least 7 entries",
       transpose_steps=rec[:5])
  _bad(seq, xq, r"needs 8 box entries", transpose_steps=rec[:-1])
  _bad(seq, xq, r"its step must be in \[0, 3\)", transpose_steps=[7] + rec[1:])
  _bad(seq, xq, r"block_h and block_w must be in \[1, 65536\], got 0",
       transpose_steps=rec[:1] + [0] + rec[2:])
  _bad(seq, xq, r"the crops must be in \[0, 2\^40\], got -1",
       transpose_steps=rec[:3] + [-1] + rec[4:])
  _bad(seq, xq, r"step 0: has a transpose_steps record but step_kinds\[0\] is 0",
       step_kinds=[0] * len(kinds), transpose_steps=[0] + rec[1:])
  # A box reaching past the 2-tap filter (the phase filters' sizes kept),
  # and one that needs a negative padding (no column of padding before it).
  assert rec[7:] == [0, 2, 1, 1, 0, 2, 1, 1], rec
  _bad(seq, xq, r"phase row 1 reads taps \[2, 2 \+ 1\) of a filter of 2",
       transpose_steps=rec[:9] + [2] + rec[10:])
  _bad(seq, xq, r"phase column 1 .* would need a negative padding: the convolution's "
       r"padding is 0 before",
       explicit_paddings=[v if j % 4 != 2 or j // 4 != k else 0
                          for j, v in enumerate(attrs["explicit_paddings"])])
  _bad(seq, xq, r"crop .* must be non-negative and within",
       transpose_steps=rec[:4] + [10 ** 6] + rec[5:])
  _bad(seq, xq, r"is its sub-pixel convolution: no side input",
       strides=[v if j // 2 != k else 2 for j, v in enumerate(attrs["strides"])])
  _bad(seq, xq, r"filters must be int8 \[", filters=tf.constant(
      np.concatenate([seq.filters.numpy(), np.zeros(64, np.int8)])))
  # The input's channels: the step reads the first conv's 8.
  one = layers_lib.QuantizedConvSequence(
      [seq.get_config()["convs"][k]], [0], [-1])
  one.build((None, 7, 6, 8))
  one.set_weights([np.asarray(w) for w in one.get_weights()])
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                     match=r"must be int8 \[N, H, W, 8\]|expects|channel"):
    _loader.load_ops().fused_int8_conv_sequence(
        conv_input=tf.zeros((1, 7, 6, 5), tf.int8),
        filters=tf.constant(one.filters.numpy()),
        epilogue=tf.constant(one.epilogue.numpy()), **one._op_attrs)  # pylint: disable=protected-access


def test_fusion_leaves_a_kernel_equal_to_the_stride_alone():
  """Where every phase reads every tap (kernel = stride: 1 x 1, 4 x 4 / 2),
  or a phase has so few channels that its block of them would be mostly
  zeros (3 x 3 / 2 to 4 channels: 9 taps of one block apart, 4 taps of one
  block together), fuse_conv_sequences keeps the sub-pixel convolution a
  plain step and the depth-to-space a node of its own."""
  for config, filters in (((2, 2, "same", None), 16), ((4, 2, "same", None), 16),
                          ((3, 2, "same", None), 4)):
    qmodel, fused, x = _fused(config, seed=30, filters=filters)
    kinds = [type(l).__name__ for l in fused.layers]
    assert "Int8DepthToSpace" in kinds, kinds
    for l in fused.layers:
      if isinstance(l, layers_lib.QuantizedConvSequence):
        assert 2 not in l._op_attrs.get("step_kinds", []), config  # pylint: disable=protected-access
    np.testing.assert_array_equal(fused(x).numpy(), qmodel(x).numpy())
