"""QuantizedConvSequence / the two sequence ops / fuse_conv_sequences.

A sequence runs several fused convolutions in one op, each step's input and
side input taken from the sequence's input or an earlier step's output. Its
result must be, bit for bit, the numpy reference (tests/reference.py) applied
step by step, on every CPU kernel path, and what the layers give one by one.
"""

import collections
import concurrent.futures
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import op_harness
import reference
import test_quantization
import tf_fused_int8
from tf_fused_int8 import _loader
from tf_fused_int8 import layers as layers_lib
from tf_fused_int8 import ops as ops_lib
from tf_fused_int8 import quantization

QFC = tf_fused_int8.QuantizedFusedConv2D
Sequence = layers_lib.QuantizedConvSequence
L = keras.layers


def _size(n, k, stride, dilation, padding):
  return reference._size_and_pad(n, k, stride, dilation, padding)[0]  # pylint: disable=protected-access


def random_chain(rng, in_shape, steps):
  """(convs, input_sources, side_sources): random QuantizedFusedConv2D
  layers with random weights, each reading a random earlier source (mostly
  the last), some with a side input of the right shape from an earlier
  source, over kernel sizes, strides, dilations, SAME / VALID / explicit
  asymmetric padding, groups and depthwise, Relu / relu6 / none, output
  bounds, scalar and per-channel scales."""
  shapes = [tuple(in_shape)]
  convs, input_sources, side_sources = [], [], []
  while len(convs) < steps:
    k = len(convs)
    src = k if rng.random() < 0.7 else int(rng.integers(0, k + 1))
    n, h, w, ci = shapes[src]
    kh, kw = (int(v) for v in rng.choice([1, 1, 2, 3, 5], 2))
    stride = int(rng.choice([1, 1, 2]))
    dilation = int(rng.choice([1, 1, 2])) if stride == 1 else 1
    pad_kind = rng.choice(["same", "valid", "explicit"])
    if pad_kind == "explicit":
      padding = tuple(tuple(int(v) for v in rng.integers(0, 3, 2))
                      for _ in range(2))
      pads = padding
    else:
      padding = str(pad_kind)
      pads = (padding.upper(), padding.upper())
    ho = _size(h, kh, stride, dilation, pads[0])
    wo = _size(w, kw, stride, dilation, pads[1])
    if ho < 1 or wo < 1:
      continue
    group_kind = rng.choice(["dense", "dense", "depthwise", "grouped"])
    if group_kind == "depthwise":
      groups, co = ci, ci * int(rng.choice([1, 2]))
    elif group_kind == "grouped" and ci % 2 == 0:
      groups, co = 2, 2 * int(rng.integers(1, 6))
    else:
      groups, co = 1, int(rng.integers(1, 13))
    out_shape = (n, ho, wo, co)
    side_choices = [j for j, s in enumerate(shapes) if s == out_shape]
    side = (int(rng.choice(side_choices))
            if side_choices and rng.random() < 0.6 else -1)
    activation = rng.choice([None, "relu", "relu6"])
    lo = int(rng.choice([-128, -128, -20, 3]))
    hi = int(rng.choice([127, 127, 90, 5]))
    if activation is not None and hi < 0:
      hi = 127
    # Some steps map their output through a table (SiLU-like and random
    # ones, negative values included: a Relu step's table output is not
    # non-negative for the next step).
    lut = None
    if rng.random() < 0.3:
      lut = (rng.integers(-128, 128, 256) if rng.random() < 0.5 else
             np.clip(np.round(np.arange(-128, 128) / (1 + np.exp(
                 -np.arange(-128, 128) / 16.0))), -128, 127)).astype(int).tolist()
    conv = QFC(co, (kh, kw), strides=stride, padding=padding,
               activation=activation, use_side_input=side >= 0,
               per_channel_scale=bool(rng.random() < 0.7),
               dilation_rate=dilation, groups=groups, output_min=lo,
               output_max=hi,
               output_scale=0.05 if activation == "relu6" else None,
               output_lut=lut)
    conv.build((n, h, w, ci))
    weights = [rng.integers(-128, 128, conv.kernel.shape).astype(np.int8),
               rng.normal(0, 8, (co,)).astype(np.float32),
               rng.uniform(2e-4, 2e-2, conv.conv_input_scale.shape).astype(
                   np.float32)]
    if side >= 0:
      weights.append(np.float32(rng.choice([0.0, 0.5, -1.25, 0.7])))
    conv.set_weights(weights)
    convs.append(conv)
    input_sources.append(src)
    side_sources.append(side)
    shapes.append(out_shape)
  return convs, input_sources, side_sources


def numpy_chain(x, convs, input_sources, side_sources):
  """The reference, step by step."""
  outs = [x]
  for conv, src, side in zip(convs, input_sources, side_sources):
    w = conv.get_weights()
    padding = (conv.padding.upper() if isinstance(conv.padding, str)
               else conv.padding)
    outs.append(reference.fused_conv2d_reference(
        outs[src], w[0], w[1],
        side_input=outs[side] if side >= 0 else None,
        conv_input_scale=w[2],
        side_input_scale=w[3] if side >= 0 else 0.0,
        strides=conv.strides, padding=padding,
        activation="None" if conv.activation is None else "Relu",
        dilations=conv.dilation_rate, output_min=conv.output_min,
        output_max=conv.effective_output_max()))
    if conv.output_lut is not None:
      outs[-1] = np.asarray(conv.output_lut, np.int8)[outs[-1].astype(int) + 128]
  return outs[-1]


def one_by_one(x, convs, input_sources, side_sources):
  outs = [tf.constant(x)]
  for conv, src, side in zip(convs, input_sources, side_sources):
    outs.append(conv(outs[src], side_input=outs[side] if side >= 0 else None))
  return outs[-1].numpy()


def _graph_ops(fn, *args):
  graph = fn.get_concrete_function(*args).graph.as_graph_def()
  return collections.Counter(n.op for n in graph.node)


@pytest.mark.parametrize("seed", range(12))
def test_random_chains_match_the_reference_and_the_layers(seed):
  rng = np.random.default_rng(seed)
  in_shape = (int(rng.choice([1, 3])), int(rng.integers(5, 12)),
              int(rng.integers(5, 12)), int(rng.choice([2, 4, 6, 8])))
  chain = random_chain(rng, in_shape, steps=int(rng.integers(2, 8)))
  x = rng.integers(-128, 128, in_shape).astype(np.int8)
  want = numpy_chain(x, *chain)
  seq = Sequence(*chain)
  op_harness.assert_same_bits(seq(tf.constant(x)).numpy(), want, "eager")
  fn = tf.function(seq)
  op_harness.assert_same_bits(fn(tf.constant(x)).numpy(), want, "graph")
  # Later calls with the shapes seen run from the step plan: new values.
  for k in range(2):
    x2 = rng.integers(-128, 128, in_shape).astype(np.int8)
    want2 = numpy_chain(x2, *chain)
    op_harness.assert_same_bits(seq(tf.constant(x2)).numpy(), want2, f"eager again {k}")
    op_harness.assert_same_bits(fn(tf.constant(x2)).numpy(), want2, f"graph again {k}")
  ops = _graph_ops(fn, tf.constant(x))
  assert ops["ResourceFusedInt8ConvSequence"] == 1, ops
  assert ops["ResourceFusedInt8Conv2DBiasActivation"] == 0, ops
  assert ops["ReadVariableOp"] == 0, ops
  # Two captured variables, whatever the number of layers.
  assert len(fn.get_concrete_function(tf.constant(x)).captured_inputs) == 2
  op_harness.assert_same_bits(one_by_one(x, *chain), want, "one by one")


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_every_cpu_path_gives_the_reference_bits(path):
  rng = np.random.default_rng(100)
  chains = [(s, random_chain(rng, s, steps=5))
            for s in [(2, 9, 8, 8), (1, 12, 7, 4), (3, 6, 6, 6)]]
  with op_harness.forced_kernel(path):
    for shape, chain in chains:
      seq = Sequence(*chain)
      # The first call validates every step, the later ones run from its
      # step plan.
      for k in range(3):
        x = rng.integers(-128, 128, shape).astype(np.int8)
        op_harness.assert_same_bits(seq(tf.constant(x)).numpy(),
                                    numpy_chain(x, *chain), f"{path} {shape} call {k}")


def _block_chain(rng, c=8, expand=3):
  """A MobileNetV2 inverted residual (1x1 expand, 3x3 depthwise, 1x1
  project + the block's input as side input) twice, at extreme scales."""
  convs, ins, sides = [], [], []
  for b in range(2):
    entry = len(convs)
    for conv, side in (
        (QFC(c * expand, 1, activation="relu6", output_scale=0.02), -1),
        (QFC(c * expand, 3, padding="same", groups=c * expand,
             activation="relu6", output_scale=0.02), -1),
        (QFC(c, 1, use_side_input=True), entry)):
      convs.append(conv)
      ins.append(len(convs) - 1)
      sides.append(side)
    del b
  shapes = [(2, 7, 7, c)]
  for conv, src in zip(convs, ins):
    conv.build(shapes[src])
    shapes.append(conv.compute_output_shape(shapes[src]))
    weights = [rng.choice([-128, 127, -1, 0], conv.kernel.shape).astype(
        np.int8), rng.normal(0, 3, conv.bias.shape).astype(np.float32),
               np.full(conv.conv_input_scale.shape, 1e-4, np.float32)]
    if conv.use_side_input:
      weights.append(np.float32(1.0))
    conv.set_weights(weights)
  return convs, ins, sides


def test_residual_blocks_at_extreme_values():
  rng = np.random.default_rng(7)
  chain = _block_chain(rng)
  for x in (np.full((2, 7, 7, 8), -128, np.int8),
            np.full((2, 7, 7, 8), 127, np.int8),
            rng.integers(-128, 128, (2, 7, 7, 8)).astype(np.int8)):
    op_harness.assert_same_bits(Sequence(*chain)(tf.constant(x)).numpy(),
                                numpy_chain(x, *chain))


def _built(chain, in_shape):
  seq = Sequence(*chain)
  seq.build(in_shape)
  return seq


def _tensor_op_args(seq):
  """FusedInt8ConvSequence's arguments (weights as tensors) for a built
  QuantizedConvSequence."""
  return dict(seq._op_attrs, filters=tf.constant(seq.filters.numpy()),  # pylint: disable=protected-access
              epilogue=tf.constant(seq.epilogue.numpy()))


def test_tensor_op_gives_the_same_bits():
  rng = np.random.default_rng(3)
  chain = random_chain(rng, (2, 8, 8, 6), steps=6)
  x = rng.integers(-128, 128, (2, 8, 8, 6)).astype(np.int8)
  raw = _loader.load_ops().fused_int8_conv_sequence
  args = _tensor_op_args(_built(chain, (2, 8, 8, 6)))
  got = raw(conv_input=tf.constant(x), **args)
  op_harness.assert_same_bits(got.numpy(), numpy_chain(x, *chain))
  got = tf.function(lambda t: raw(conv_input=t, **args))(tf.constant(x))
  op_harness.assert_same_bits(got.numpy(), numpy_chain(x, *chain), "graph")


def test_step_plans_follow_the_shapes_and_keep_the_errors():
  """After a call has validated a sequence's steps for its input shape, the
  later calls with that shape run from its step plan (the geometry kept,
  the outputs of the steps in one arena): the reference's bits through
  shapes that come and go (more than the kernel keeps plans for, so the
  first shapes' are made again), in eager and graph calls of both ops,
  with residuals read several steps later and side inputs (the block
  chain's at extreme values), and from four threads at once; a call with a
  shape that fails still fails as it would first, naming the step; and
  TF_FUSED_INT8_SEQUENCE_PLAN=0 gives the same bits."""
  rng = np.random.default_rng(31)
  # Seed 32: source 1 read by steps 1 and 2, source 3 by step 6, a side
  # input (scale 0.5); seed 35: conv_input read again by step 4, a side
  # input at -1.25.
  chains = [(random_chain(np.random.default_rng(seed), (1, 10, 9, 6), steps=7),
             (10, 9, 6)) for seed in (32, 35)]
  chains.append((_block_chain(rng), (7, 7, 8)))
  for chain, (h, w, c) in chains:
    seq = _built(chain, (1, h, w, c))
    raw = _loader.load_ops().fused_int8_conv_sequence
    args = _tensor_op_args(seq)
    fn = tf.function(seq)
    tensor_fn = tf.function(lambda t, args=args: raw(conv_input=t, **args))
    shapes = [(1, h, w, c), (2, h, w, c), (1, h + 1, w + 3, c), (3, h, w, c)]
    shapes += [(n, h + n, w + 1, c) for n in range(1, 8)] + shapes[:2]
    for k, shape in enumerate(shapes + shapes[::-1]):
      x = rng.integers(-128, 128, shape).astype(np.int8)
      if k % 5 == 0:
        x[...] = -128
      want = numpy_chain(x, *chain)
      op_harness.assert_same_bits(seq(tf.constant(x)).numpy(), want, f"eager {shape}")
      op_harness.assert_same_bits(fn(tf.constant(x)).numpy(), want, f"graph {shape}")
      op_harness.assert_same_bits(tensor_fn(tf.constant(x)).numpy(), want,
                                  f"tensor op {shape}")
  # The kernel's own check, after plans for other shapes: depth 4 where
  # step 0 reads 6 (the tensor op, eagerly: no Keras check before it).
  chain = chains[0][0]
  args = _tensor_op_args(_built(chain, (1, 10, 9, 6)))
  for shape in [(1, 10, 9, 6)] * 2 + [(1, 10, 9, 4), (1, 10, 9, 6)]:
    x = rng.integers(-128, 128, shape).astype(np.int8)
    if shape[3] == 4:
      with pytest.raises(tf.errors.InvalidArgumentError,
                         match="step 0: conv_input depth 4"):
        raw(conv_input=tf.constant(x), **args)
    else:
      op_harness.assert_same_bits(raw(conv_input=tf.constant(x), **args).numpy(),
                                  numpy_chain(x, *chain), f"eager tensor op {shape}")
  # Calls from several threads at once (each its own arena; plans made
  # and found under the kernel's lock), two shapes interleaved.
  chain, (h, w, c) = chains[2]
  fn = tf.function(_built(chain, (1, h, w, c)))
  cases = []
  for k in range(24):
    x = rng.integers(-128, 128, (1 + k % 2, h, w, c)).astype(np.int8)
    cases.append((x, numpy_chain(x, *chain)))

  def run(j):
    for x, want in cases[j::4]:
      for _ in range(3):
        op_harness.assert_same_bits(fn(tf.constant(x)).numpy(), want, f"thread {j}")

  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    for f in [pool.submit(run, j) for j in range(4)]:
      f.result()
  source = r"""
import json, sys
import numpy as np
import tensorflow as tf
import test_conv_sequence as t
rng = np.random.default_rng(32)
chain = t.random_chain(rng, (2, 8, 8, 4), steps=6)
fn = tf.function(t.Sequence(*chain))
outs = []
for k in range(3):
  x = rng.integers(-128, 128, (2, 8, 8, 4)).astype(np.int8)
  got = fn(tf.constant(x)).numpy()
  assert (got == t.numpy_chain(x, *chain)).all(), k
  outs.append(got.tolist())
print("RESULT " + json.dumps(outs))
"""
  assert (_child_result(source, 1, TF_FUSED_INT8_SEQUENCE_PLAN="0") ==
          _child_result(source, 1, TF_FUSED_INT8_SEQUENCE_PLAN=None))


def test_weights_are_laid_out_as_documented():
  """conv_sequence_layout: filters at multiples of 64 with zeros between,
  bias / scale / side scale packed; conv_weights gives each layer's weights
  back and set_conv_weights changes exactly that layer's."""
  rng = np.random.default_rng(12)
  chain = random_chain(rng, (1, 9, 9, 6), steps=5)
  seq = _built(chain, (1, 9, 9, 6))
  f = seq.filters.numpy()
  ends = []
  for k, conv in enumerate(chain[0]):
    l = seq._layout[k]  # pylint: disable=protected-access
    assert l["filter"] % 64 == 0
    assert not f[ends[-1] if ends else 0:l["filter"]].any()
    ends.append(l["filter"] + conv.kernel.numpy().size)
    for got, want in zip(seq.conv_weights(k), conv.get_weights()):
      np.testing.assert_array_equal(got, want)
  assert ends[-1] == f.size
  new = [w.copy() for w in chain[0][2].get_weights()]
  new[0] = -new[0].clip(-127, 127)
  new[1] = new[1] + 1
  seq.set_conv_weights(2, new)
  for k, conv in enumerate(chain[0]):
    want = new if k == 2 else conv.get_weights()
    for got, w in zip(seq.conv_weights(k), want):
      np.testing.assert_array_equal(got, w)
  with pytest.raises(ValueError, match="int8-valued"):
    seq.set_conv_weights(0, [new[0] + 0.5] + new[1:3])


def test_updates_of_the_weight_vectors_are_seen():
  """The op pins both weight vectors (the variables' buffers): the
  depthwise steps then use their prepared weights without comparing them
  with the vectors, and every write to a vector (sliced, in place) must
  still be seen: TF copies a variable's buffer before writing while the
  caches hold it."""
  rng = np.random.default_rng(21)
  chain = _block_chain(rng)
  convs = chain[0]
  seq = _built(chain, (2, 7, 7, 8))
  x = tf.constant(rng.integers(-128, 128, (2, 7, 7, 8)).astype(np.int8))
  fn = tf.function(seq)

  def check(what):
    # The layers' own weights follow the vectors, for the numpy chain.
    for k, conv in enumerate(convs):
      conv.set_weights(seq.conv_weights(k))
    op_harness.assert_same_bits(fn(x).numpy(), numpy_chain(x.numpy(), *chain), what)

  check("first")
  op_harness.assert_depthwise_used_pinned(lambda: check("again"))
  for k in (1, 4):  # the two depthwise steps
    l = seq._layout[k]  # pylint: disable=protected-access
    co = convs[k].bias.shape[0]
    # A sliced assignment of the bias (in place in the vector's buffer).
    seq.epilogue[l["bias"]:l["bias"] + co].assign(
        rng.normal(0, 3, co).astype(np.float32))
    check(f"step {k}: bias slice")
    # assign_add of the scale (in place).
    delta = np.zeros(seq.epilogue.shape, np.float32)
    delta[l["scale"]:l["scale"] + l["scale_size"]] = 5e-5
    seq.epilogue.assign_add(delta)
    check(f"step {k}: scale assign_add")
    # One filter byte (in place in the filters' vector).
    i = l["filter"] + int(rng.integers(0, convs[k].kernel.numpy().size))
    seq.filters[i:i + 1].assign([-int(seq.filters[i].numpy()) // 2])
    check(f"step {k}: filter byte")


def test_the_two_ops_differ_only_in_resource_inputs():
  op_harness.assert_ops_differ_only_in_resource_inputs(
      "FusedInt8ConvSequence", "ResourceFusedInt8ConvSequence",
      ("filters", "epilogue"))


def _bad(seq, x, match, **changes):
  raw = _loader.load_ops().fused_int8_conv_sequence
  args = _tensor_op_args(seq)
  args.update(changes)
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                     match=match):
    raw(conv_input=tf.constant(x), **args)


def test_bad_programs_and_weights_are_clear_errors():
  rng = np.random.default_rng(4)
  chain = _block_chain(rng)
  x = rng.integers(-128, 128, (2, 7, 7, 8)).astype(np.int8)
  seq = _built(chain, x.shape)
  n = len(chain[0])
  _bad(seq, x, r"input_sources\[1\] must be 0 \(conv_input\) or an earlier",
       input_sources=[0, 2] + list(range(2, n)))
  _bad(seq, x, r"side_sources\[2\] must be -1",
       side_sources=[-1, -1, 4, -1, -1, 3])
  _bad(seq, x, "strides must have 2 entries per step",
       strides=[1] * (2 * n - 1))
  _bad(seq, x, "padding must be SAME, VALID or EXPLICIT",
       paddings=["SAME"] * (n - 1) + ["FULL"])
  _bad(seq, x, "explicit_paddings must be 0 unless",
       explicit_paddings=[1] + [0] * (4 * n - 1))
  _bad(seq, x, "step 0: output_min and output_max must satisfy",
       output_mins=[10] + [-128] * (n - 1), output_maxes=[5] + [127] * (n - 1))
  _bad(seq, x, "step 1: filter_shapes must be 4 positive sizes",
       filter_shapes=[1, 1, 8, 24, 0, 3, 1, 24] + [1] * (4 * n - 8))
  # A side input read without its scale slot: the epilogue is one short.
  _bad(seq, x, r"epilogue must be float32 \[",
       side_sources=[-1, -1, 0, -1, -1, -1])
  table = list(range(-128, 128))
  _bad(seq, x, r"lut_steps must be increasing step indices in \[0, 6\), got 1 at "
       r"position 1", lut_steps=[2, 1], output_luts=table * 2)
  _bad(seq, x, r"lut_steps must be increasing step indices in \[0, 6\), got 6",
       lut_steps=[6], output_luts=table)
  _bad(seq, x, r"lut_steps must be increasing .* got -1", lut_steps=[-1],
       output_luts=table)
  _bad(seq, x, r"output_luts must have 256 entries per lut_steps entry \(512\), got 256",
       lut_steps=[0, 3], output_luts=table)
  _bad(seq, x, r"step 3: output_lut entries must be int8 values in \[-128, 127\], got "
       r"output_lut\[255\] = 128", lut_steps=[3], output_luts=table[1:] + [128])
  args = _tensor_op_args(seq)
  _bad(seq, x, r"filters must be int8 \[", filters=args["filters"][:-1])
  _bad(seq, x, "int8", filters=tf.cast(args["filters"], tf.float32))
  _bad(seq, x, r"epilogue must be float32 \[",
       epilogue=tf.concat([args["epilogue"], [0.0]], 0))
  # Geometry: a step whose filter depth is not its input's, a side input of
  # another shape than its step's output.
  _bad(seq, x[..., :4], "step 0: .*conv_input depth")
  # Step 4 (the second depthwise) VALID: 5x5 outputs, and step 5's side
  # input (the block's 7x7 input) no longer has its output's shape.
  _bad(seq, x, "step 5: .*side_input",
       paddings=["SAME"] * 4 + ["VALID", "SAME"])


def test_resource_op_checks_its_variables():
  rng = np.random.default_rng(5)
  chain = _block_chain(rng)
  x = tf.constant(rng.integers(-128, 128, (2, 7, 7, 8)).astype(np.int8))
  seq = _built(chain, x.shape)
  attrs = seq._op_attrs  # pylint: disable=protected-access
  got = ops_lib._conv_sequence(x, seq.filters.value, seq.epilogue.value, attrs)  # pylint: disable=protected-access
  op_harness.assert_same_bits(got.numpy(), numpy_chain(x.numpy(), *chain))
  short = tf.Variable(seq.filters.numpy()[:-3])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"filters must be int8 \["):
    ops_lib._conv_sequence(x, short, seq.epilogue.value, attrs)  # pylint: disable=protected-access
  wrong = tf.Variable(seq.epilogue.numpy().astype(np.float64))
  with pytest.raises(tf.errors.InvalidArgumentError, match="epilogue"):
    ops_lib._conv_sequence(x, seq.filters.value, wrong, attrs)  # pylint: disable=protected-access


def test_layer_arguments_are_checked():
  convs = [QFC(4, 1), QFC(4, 1, use_side_input=True)]
  with pytest.raises(ValueError, match="one entry per layer"):
    Sequence(convs, [0], [-1, 0])
  with pytest.raises(ValueError, match=r"input_sources\[1\] must be 0"):
    Sequence(convs, [0, 2], [-1, 0])
  with pytest.raises(ValueError, match=r"side_sources\[1\] is -1 but"):
    Sequence(convs, [0, 1], [-1, -1])
  with pytest.raises(ValueError, match="must be a QuantizedFusedConv2D"):
    Sequence([tf_fused_int8.QuantizedDense(4)], [0], [-1])
  with pytest.raises(ValueError, match="at least one"):
    Sequence([], [], [])


def test_layers_run_one_by_one_where_weights_are_not_cpu_variables(
    monkeypatch):
  rng = np.random.default_rng(6)
  chain = _block_chain(rng)
  x = rng.integers(-128, 128, (2, 7, 7, 8)).astype(np.int8)
  monkeypatch.setattr(ops_lib, "_cpu_variable", lambda v, dtype: False)
  seq = Sequence(*chain)
  fn = tf.function(seq)
  op_harness.assert_same_bits(fn(tf.constant(x)).numpy(),
                              numpy_chain(x, *chain))
  ops = _graph_ops(fn, tf.constant(x))
  assert ops["ResourceFusedInt8ConvSequence"] == 0, ops
  assert ops["FusedInt8Conv2DBiasActivation"] == 6, ops
  assert ops["ReadVariableOp"] == 2, ops


def _mobilenet_like(c=8):
  """Stem conv, two inverted residual blocks, one strided block, GAP head."""
  inp = keras.Input((12, 10, 3), name="image")
  h = L.ReLU(6.0)(L.BatchNormalization()(
      L.Conv2D(c, 3, strides=2, padding="same", use_bias=False)(inp)))
  for b in range(3):
    e = L.ReLU(6.0)(L.BatchNormalization()(L.Conv2D(3 * c, 1)(h)))
    d = L.ReLU(6.0)(L.BatchNormalization()(L.DepthwiseConv2D(
        3, strides=2 if b == 2 else 1, padding="same")(e)))
    p = L.BatchNormalization()(L.Conv2D(c, 1, use_bias=False)(d))
    h = L.Add()([h, p]) if b < 2 else p
  logits = L.Dense(5)(L.GlobalAveragePooling2D()(h))
  model = keras.Model(inp, {"logits": logits, "features": h})
  test_quantization.randomize(model, np.random.default_rng(0))
  return model


def _resnet_like(c=8):
  """Stem conv + max pool, then a projection block and an identity block."""
  inp = keras.Input((15, 13, 3), name="image")
  h = L.ReLU()(L.BatchNormalization()(L.Conv2D(c, 3, strides=2)(inp)))
  h = L.MaxPooling2D(3, strides=2, padding="same")(h)
  for b in range(2):
    short = (L.BatchNormalization()(L.Conv2D(2 * c, 1)(h)) if b == 0 else h)
    y = L.ReLU()(L.BatchNormalization()(L.Conv2D(c, 1)(h)))
    y = L.ReLU()(L.BatchNormalization()(L.Conv2D(c, 3, padding="same")(y)))
    y = L.BatchNormalization()(L.Conv2D(2 * c, 1)(y))
    h = L.ReLU()(L.Add()([short, y]))
  logits = L.Dense(5)(L.GlobalAveragePooling2D()(h))
  model = keras.Model(inp, {"logits": logits, "features": h})
  test_quantization.randomize(model, np.random.default_rng(1))
  return model


def _inception_like(c=8):
  """Stem conv, an Inception-A-like block (four branches from one tensor,
  concatenated) and an Inception-E-like split (one 1x1 read by a 1x3 and a
  3x1 conv, concatenated)."""
  inp = keras.Input((13, 11, 3), name="image")

  def conv(h, ch, k, **kw):
    return L.ReLU()(L.BatchNormalization()(
        L.Conv2D(ch, k, padding="same", use_bias=False, **kw)(h)))

  h = conv(inp, c, 3, strides=2)
  b1 = conv(h, c, 1)
  b5 = conv(conv(h, c // 2, 1), c, 3)
  b3 = conv(conv(conv(h, c, 1), c, 3), c, 3)
  bp = conv(L.AveragePooling2D(3, strides=1, padding="same")(h), c // 2, 1)
  h = L.Concatenate()([b1, b5, b3, bp])
  s = conv(h, c, 1)
  h = L.Concatenate()([conv(s, c, (1, 3)), conv(s, c, (3, 1))])
  logits = L.Dense(5)(L.GlobalAveragePooling2D()(h))
  model = keras.Model(inp, {"logits": logits, "features": h})
  test_quantization.randomize(model, np.random.default_rng(3))
  return model


def _nasnet_like(c=8):
  """Stem conv, then twice: a 1x1 conv whose output a ReLU reads beside the
  block's residual (so no conv absorbs the ReLU: an Int8ReLU), the ReLU's
  output through a 3x3 and a 1x1 conv added to the residual (NASNet's and
  Xception's pre-activation ReLUs)."""
  inp = keras.Input((12, 11, 3), name="image")
  h = L.ReLU()(L.BatchNormalization()(
      L.Conv2D(c, 3, strides=2, padding="same", use_bias=False)(inp)))
  for _ in range(2):
    t = L.BatchNormalization()(L.Conv2D(c, 1, use_bias=False)(h))
    y = L.ReLU()(t)
    y = L.ReLU()(L.BatchNormalization()(
        L.Conv2D(c, 3, padding="same", use_bias=False)(y)))
    y = L.BatchNormalization()(L.Conv2D(c, 1, use_bias=False)(y))
    h = L.Add()([t, y])
  logits = L.Dense(5)(L.GlobalAveragePooling2D()(h))
  model = keras.Model(inp, {"logits": logits, "features": h})
  test_quantization.randomize(model, np.random.default_rng(4))
  return model


def _nasnet_fork_like(c=8):
  """Stem conv, a 1x1 conv whose output two ReLUs read (NASNet's separable
  branches each start with their own), each ReLU through a 3x3 (5x5) and a
  1x1 conv, the two branches concatenated."""
  inp = keras.Input((12, 11, 3), name="image")
  h = L.ReLU()(L.BatchNormalization()(
      L.Conv2D(c, 3, strides=2, padding="same", use_bias=False)(inp)))
  t = L.BatchNormalization()(L.Conv2D(c, 1, use_bias=False)(h))
  branches = []
  for k in (3, 5):
    y = L.ReLU()(t)
    y = L.ReLU()(L.BatchNormalization()(
        L.Conv2D(c, k, padding="same", use_bias=False)(y)))
    branches.append(L.BatchNormalization()(L.Conv2D(c, 1, use_bias=False)(y)))
  h = L.Concatenate()(branches)
  logits = L.Dense(5)(L.GlobalAveragePooling2D()(h))
  model = keras.Model(inp, {"logits": logits, "features": h})
  test_quantization.randomize(model, np.random.default_rng(5))
  return model


def _quantized(model):
  shape = model.inputs[0].shape[1:]
  q = quantization.quantize_model(
      model, test_quantization.images(16, seed=2, shape=shape), verbose=0)
  return q, test_quantization.images(3, seed=9, shape=shape)


def _sequences(model):
  return [l for l in model.layers if isinstance(l, Sequence)]


def _assert_same_outputs(a, b, x):
  want, got = a(x), b(x)
  for k in want:
    np.testing.assert_array_equal(got[k].numpy(), want[k].numpy(), err_msg=k)


# The Inception-like model: its branches 1x1 -> 3x3 and 1x1 -> 3x3 -> 3x3
# are a sequence each (the 1x1 branch, the pooling branch's 1x1 and the
# split's three convolutions, whose outputs are read by a concatenation or
# by two convolutions, stay single ops). The NASNet-like one: its two
# Int8ReLUs are steps (identity 1x1 depthwise convs) of the one sequence
# with every conv but the head's (without them: a sequence of 2 convs, the
# two Int8ReLUs and six convs single ops). The NASNet-fork-like one: the
# stem and the 1x1 conv whose output both ReLUs read, then each ReLU's
# branch (without splitting at that fork: the stem and the 1x1, and two
# convs of one branch; the two Int8ReLUs and the other two convs single).
@pytest.mark.parametrize("builder,runs,convs,relus", [
    (_mobilenet_like, 1, 10, 0), (_resnet_like, 1, 7, 0),
    (_inception_like, 2, 5, 0), (_nasnet_like, 1, 9, 2),
    (_nasnet_fork_like, 3, 8, 2)])
def test_fuse_conv_sequences_keeps_the_bits(builder, runs, convs, relus,
                                            tmp_path):
  qmodel, x = _quantized(builder())
  n_relu = sum(type(l) is quantization.Int8ReLU for l in qmodel.layers)  # pylint: disable=unidiomatic-typecheck
  assert n_relu == relus
  fused = quantization.fuse_conv_sequences(qmodel)
  seqs = _sequences(fused)
  assert len(seqs) == runs, [l.name for l in fused.layers]
  assert sum(len(s.conv_configs) for s in seqs) == convs
  n_conv = sum(type(l) is QFC for l in qmodel.layers)  # pylint: disable=unidiomatic-typecheck
  left = sum(type(l) is QFC for l in fused.layers)  # pylint: disable=unidiomatic-typecheck
  assert left == n_conv - (convs - relus), (left, n_conv)
  assert not any(type(l) is quantization.Int8ReLU for l in fused.layers)  # pylint: disable=unidiomatic-typecheck
  _assert_same_outputs(qmodel, fused, x)
  ops = _graph_ops(tf.function(fused), tf.constant(x))
  assert ops["ResourceFusedInt8ConvSequence"] == runs, ops
  # The convolutions left out (the global pooling, which reads the features
  # output) and the QuantizedDense head run as single ops.
  dense = sum(isinstance(l, tf_fused_int8.QuantizedDense)
              for l in fused.layers)
  assert ops["ResourceFusedInt8Conv2DBiasActivation"] == left + dense, ops
  # Saved and reloaded (.keras), exported and served (SavedModel).
  path = os.path.join(tmp_path, "fused.keras")
  fused.save(path)
  again = keras.models.load_model(path)
  assert len(_sequences(again)) == runs
  _assert_same_outputs(qmodel, again, x)
  export = os.path.join(tmp_path, "sm")
  fused.export(export, verbose=False)
  served = tf.saved_model.load(export)
  out = served.serve(tf.constant(x))
  np.testing.assert_array_equal(out["features"].numpy(),
                                qmodel(x)["features"].numpy())


def test_freezing_turns_the_sequence_into_the_tensor_op():
  from tensorflow.python.framework import convert_to_constants  # pylint: disable=g-import-not-at-top
  qmodel, x = _quantized(_mobilenet_like())
  fused = quantization.fuse_conv_sequences(qmodel)
  fn = tf.function(fused).get_concrete_function(tf.constant(x))
  frozen = convert_to_constants.convert_variables_to_constants_v2(fn)
  ops = collections.Counter(n.op for n in frozen.graph.as_graph_def().node)
  assert ops["FusedInt8ConvSequence"] == 1, ops
  assert ops["ResourceFusedInt8ConvSequence"] == 0, ops
  # Its two weight vectors as FusedInt8WeightConstant nodes: pinned packed
  # weights, as the resource op's variables (cc/tf/weight_constant.h).
  (seq_node,) = [n for n in frozen.graph.as_graph_def().node
                 if n.op == "FusedInt8ConvSequence"]
  sources = {n.name: n.op for n in frozen.graph.as_graph_def().node}
  assert [sources[i] for i in seq_node.input[1:3]] == [
      "FusedInt8WeightConstant"] * 2, seq_node
  got = frozen(tf.constant(x))
  if op_harness.uses_packed_weights():
    before = op_harness.pinned_hits()
    frozen(tf.constant(x))
    assert op_harness.pinned_hits() > before
  want = qmodel(x)
  # The outputs in the flattened dict's order (features, logits).
  assert len(got) == 2, got
  for g, key in zip(got, sorted(want)):
    np.testing.assert_array_equal(g.numpy(), want[key].numpy(), err_msg=key)


def test_runs_end_where_an_inner_output_is_read_outside():
  """A conv whose output is also a model output (or read by a non-conv
  layer) ends its run there, and the convs after it may start another;
  a layer with a lookup table is a step like any other."""
  inp = keras.Input((8, 8, 4), dtype="int8")
  a = QFC(6, 1, name="a")(inp)
  b = QFC(6, 3, padding="same", name="b")(a)
  c = QFC(6, 1, name="c", use_side_input=True)(b, side_input=a)
  d = QFC(6, 1, name="d")(c)
  e = QFC(6, 1, name="e", output_lut=list(range(127, -129, -1)))(d)
  f = QFC(6, 1, name="f")(e)
  g = QFC(6, 1, name="g")(f)
  model = keras.Model(inp, [b, g])
  rng = np.random.default_rng(8)
  for layer in model.layers[1:]:
    w = layer.get_weights()
    w[0] = rng.integers(-128, 128, w[0].shape).astype(np.int8)
    w[2] = np.full(w[2].shape, 0.01, np.float32)
    layer.set_weights(w)
  fused = quantization.fuse_conv_sequences(model)
  seqs = {tuple(c["name"] for c in s.conv_configs)
          for s in _sequences(fused)}
  # b is a model output, so a run ending after b cannot hold it, and [a, b]
  # cannot be one either: c reads a. c (input b, side input a) cannot start
  # a run; d..g (e with its table) is one.
  assert seqs == {("d", "e", "f", "g")}, seqs
  x = rng.integers(-128, 128, (2, 8, 8, 4)).astype(np.int8)
  for got, want in zip(fused(x), model(x)):
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_shared_layers_and_two_model_inputs():
  """A layer called on two tensors is a step of two runs (each sequence has
  its own copy of its weights); a model with two inputs keeps both."""
  a, b = (keras.Input((6, 6, 4), dtype="int8", name=n) for n in "ab")
  shared = QFC(4, 3, padding="same", name="shared", activation="relu")
  tail = QFC(4, 1, name="tail", use_side_input=True)
  ya = tail(shared(a), side_input=a)
  yb = QFC(5, 1, name="other")(shared(b))
  model = keras.Model({"a": a, "b": b}, [ya, yb])
  rng = np.random.default_rng(13)
  for layer in model.layers:
    if isinstance(layer, QFC):
      w = layer.get_weights()
      w[0] = rng.integers(-128, 128, w[0].shape).astype(np.int8)
      w[2] = np.full(w[2].shape, 0.01, np.float32)
      layer.set_weights(w)
  fused = quantization.fuse_conv_sequences(model)
  seqs = sorted(tuple(c["name"] for c in s.conv_configs)
                for s in _sequences(fused))
  assert seqs == [("shared", "other"), ("shared", "tail")], seqs
  x = {k: rng.integers(-128, 128, (2, 6, 6, 4)).astype(np.int8) for k in "ab"}
  for got, want in zip(tf.function(fused)(x), model(x)):
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def _child_result(source, threads, **env_changes):
  """Runs `source` in a child Python with `threads` as its argument (TF's
  thread count is fixed once per process) and env_changes applied (None
  removes a variable); returns the JSON of its "RESULT " line."""
  tests = os.path.dirname(os.path.abspath(__file__))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  for k, v in env_changes.items():
    if v is None:
      env.pop(k, None)
    else:
      env[k] = v
  env["PYTHONPATH"] = os.pathsep.join(
      [tests, os.path.dirname(tests), env.get("PYTHONPATH", "")])
  r = subprocess.run([sys.executable, "-c", source, str(threads)], env=env,
                     capture_output=True, text=True, timeout=900, check=False)
  assert r.returncode == 0, r.stderr[-3000:]
  (line,) = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
  return json.loads(line[len("RESULT "):])


_BATCH_SLICES_CHILD = r"""
import ctypes, json, sys
import numpy as np
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
import op_harness
import test_conv_sequence as t
from tf_fused_int8 import _loader
lib = ctypes.CDLL(_loader.library_path())
lib.tf_fused_int8_sequence_batch_splits.restype = ctypes.c_int64
rng = np.random.default_rng(11)
chains = [t._block_chain(rng)] + [
    t.random_chain(rng, (1, 9, 8, c), steps=5) for c in (4, 8)]
splits = {}
for k, chain in enumerate(chains):
  seq = t.Sequence(*chain)
  fn = tf.function(seq)
  for batch in (1, 2, 3, 4, 6):
    shape = (batch, 7, 7, 8) if k == 0 else (batch, 9, 8, 4 if k == 1 else 8)
    for x in (rng.integers(-128, 128, shape).astype(np.int8),
              np.full(shape, -128, np.int8)):
      want = t.numpy_chain(x, *chain)
      before = lib.tf_fused_int8_sequence_batch_splits()
      op_harness.assert_same_bits(seq(tf.constant(x)).numpy(), want,
                                  f"eager {k} {shape}")
      op_harness.assert_same_bits(fn(tf.constant(x)).numpy(), want,
                                  f"graph {k} {shape}")
      splits.setdefault(batch, set()).add(
          lib.tf_fused_int8_sequence_batch_splits() - before)
# A bad program at batch 4: its error names the whole batch's shapes.
chain = t._block_chain(rng)
x = rng.integers(-128, 128, (4, 7, 7, 8)).astype(np.int8)
args = t._tensor_op_args(t._built(chain, x.shape))
args["paddings"] = ["SAME"] * 4 + ["VALID", "SAME"]
try:
  _loader.load_ops().fused_int8_conv_sequence(conv_input=tf.constant(x), **args)
  error = ""
except tf.errors.InvalidArgumentError as e:
  error = e.message
print("RESULT " + json.dumps({"splits": {b: sorted(v) for b, v in splits.items()},
                              "error": error}))
"""


@pytest.mark.parametrize("threads,split,sliced", [
    (2, "1", {2, 4, 6}), (3, "1", {3, 6}), (2, "0", set())])
def test_batch_slices_give_the_same_bits(threads, split, sliced):
  """A batch that the intra-op pool's thread count divides runs as one
  slice per thread (each through every step, serially): the reference's
  bits, with side inputs and at -128 everywhere, in eager and graph
  calls; the other batches, and every batch with
  TF_FUSED_INT8_SEQUENCE_BATCH_SPLIT=0, run unsplit. A failing step is
  reported as the whole batch gives it. In a child process: TF's thread
  count is fixed once per process."""
  got = _child_result(_BATCH_SLICES_CHILD, threads,
                      TF_FUSED_INT8_SEQUENCE_BATCH_SPLIT=split)
  # Both calls (eager, graph) of every input of a batch split, or neither.
  want = {str(b): [2 if b in sliced else 0] for b in (1, 2, 3, 4, 6)}
  assert got["splits"] == want, got["splits"]
  assert ("step 5: side_input must be empty or have the output shape "
          "[4,5,5,8], got [4,7,7,8]") in got["error"], got["error"]


def _wide_chain(rng, n=3):
  """Wide early steps, a weight-heavy one later, residuals that cross every
  step boundary: ImagePrefix's rule picks a prefix that depends on the L2
  size, somewhere before step 6 (the 3x3 64 -> 128 on 12x12, whose filter
  outweighs one image's activations)."""
  specs = [  # (layer, input source, side source)
      (QFC(48, 1, activation="relu"), 0, -1),
      (QFC(48, 3, padding="same", groups=48, activation="relu"), 1, -1),
      (QFC(16, 1, use_side_input=True), 2, 0),
      (QFC(32, 3, strides=2, padding="same", activation="relu"), 3, -1),
      (QFC(32, 1, use_side_input=True), 4, 4),
      (QFC(64, 3, strides=2, padding="same", activation="relu"), 5, -1),
      (QFC(128, 3, strides=2, padding="same"), 6, -1),
      (QFC(8, 1), 7, -1)]
  shapes = [(n, 96, 96, 16)]
  for conv, src, _ in specs:
    conv.build(shapes[src])
    shapes.append(tuple(conv.compute_output_shape(shapes[src])))
    weights = [rng.integers(-128, 128, conv.kernel.shape).astype(np.int8),
               rng.normal(0, 3, conv.bias.shape).astype(np.float32),
               np.full(conv.conv_input_scale.shape, 2e-4, np.float32)]
    if conv.use_side_input:
      weights.append(np.float32(0.5))
    conv.set_weights(weights)
  return ([c for c, _, _ in specs], [i for _, i, _ in specs],
          [sd for _, _, sd in specs]), shapes


def _expected_prefix(chain, shapes, l2_bytes):
  """ImagePrefix's rule, restated: steps run image by image up to the
  first one whose filter outweighs one image's input and output (and side
  input), or whose activations for all the images fit in half the L2."""
  convs, ins, sides = chain
  n = shapes[0][0]
  per_image = lambda s: int(np.prod(s[1:]))  # pylint: disable=unnecessary-lambda-assignment
  for i, (conv, src, side) in enumerate(zip(convs[:-1], ins, sides)):
    act = per_image(shapes[src]) + per_image(shapes[i + 1]) * (2 if side >= 0 else 1)
    if int(np.prod(conv.kernel.shape)) > act or n * act <= l2_bytes // 2:
      return i
  return len(convs) - 1


_IMAGE_PREFIX_CHILD = r"""
import json, os, sys
import numpy as np
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
import op_harness
import test_conv_sequence as t
from tf_fused_int8.benchmark import step_times
rng = np.random.default_rng(5)
wide, wide_shapes = t._wide_chain(rng)
chains = [(t._block_chain(rng), (3, 7, 7, 8)),
          (t.random_chain(rng, (1, 9, 8, 4), steps=6), (4, 9, 8, 4)),
          (wide, wide_shapes[0])]
import subprocess
# What the kernel reads: glibc's sysconf(_SC_LEVEL2_CACHE_SIZE), which
# getconf prints; 1 MiB where it says nothing.
got = subprocess.run(["getconf", "LEVEL2_CACHE_SIZE"], capture_output=True,
                     text=True, check=False).stdout.strip()
l2 = int(got) if got.isdigit() and int(got) > 0 else 1 << 20
result = {"by_image": [], "expected_auto": t._expected_prefix(wide, wide_shapes, l2)}
for k, (chain, shape) in enumerate(chains):
  steps = len(chain[0])
  modes = ["0", "auto"] + [str(m) for m in range(1, steps + 2)]
  xs = [rng.integers(-128, 128, shape).astype(np.int8),
        np.full(shape, -128, np.int8)]
  wants = [t.numpy_chain(x, *chain) for x in xs]
  seq = t.Sequence(*chain)
  for mode in modes:
    if mode == "auto":
      os.environ.pop("TF_FUSED_INT8_SEQUENCE_PREFIX", None)
    else:
      os.environ["TF_FUSED_INT8_SEQUENCE_PREFIX"] = mode
    fn = tf.function(seq)  # a new kernel, made under this setting
    step_times.read_step_times(clear=True)
    for x, want in zip(xs, wants):
      op_harness.assert_same_bits(fn(tf.constant(x)).numpy(), want,
                                  f"chain {k} prefix {mode}")
    whats = [r["what"] for r in step_times.read_step_times(clear=True)]
    assert len(whats) == steps, whats
    result["by_image"].append([k, mode, [w.endswith(" by image") for w in whats],
                               whats[0]])
print("RESULT " + json.dumps(result))
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_image_prefix_gives_the_same_bits(threads):
  """Where one thread runs every step on several images (a pool of one
  thread, or a batch slice), the first steps run image by image
  (ImagePrefix), their outputs that later steps read gathered back into
  whole-batch tensors: the reference's bits for every prefix forced with
  TF_FUSED_INT8_SEQUENCE_PREFIX (every step boundary, residuals crossing
  it, past the end), off, and the rule's own choice, which is the restated
  rule's on a chain wide enough to use it. Two threads: batches 4 and the
  wide chain's 3 run as slices (4) or split per step (3: no prefix). The
  step-times table marks each step run by image. In a child process: TF's
  thread count is fixed once per process."""
  got = _child_result(_IMAGE_PREFIX_CHILD, threads, TF_FUSED_INT8_STEP_TIMES="1",
                      TF_FUSED_INT8_SEQUENCE_PREFIX=None)
  batches = {0: 3, 1: 4, 2: 3}
  for k, mode, marks, first in got["by_image"]:
    steps = len(marks)
    images = batches[k]
    # The images one thread runs: all of them on one thread; a slice of
    # images / threads where the thread count divides the batch; none
    # (each step split across the threads) otherwise.
    per_thread = images if threads == 1 else (
        images // threads if images % threads == 0 else 1)
    if mode == "0" or per_thread < 2:
      want = 0
    elif mode == "auto":
      want = got["expected_auto"] if k == 2 else None
    else:
      want = min(int(mode), steps - 1)
    if want is None:
      continue  # the small chains: whatever the rule gives, the bits above
    assert marks == [i < want for i in range(steps)], (k, mode, marks)
    # Described with the whole batch's (or slice's) image count.
    assert first.startswith(f"{images}x"), (k, mode, first)
  if threads == 1:
    assert 0 < got["expected_auto"] < 6, got["expected_auto"]


def test_step_times_are_recorded_only_when_asked(tmp_path):
  """TF_FUSED_INT8_STEP_TIMES=1 (tf_fused_int8.benchmark.step_times): every
  step of the sequence timed on every call, named by its shapes; nothing
  recorded without it; the command line on a saved, unfused int8 model."""
  from tf_fused_int8.benchmark import step_times  # pylint: disable=g-import-not-at-top
  q, x = _quantized(_mobilenet_like())
  fused = quantization.fuse_conv_sequences(q)
  (seq,) = _sequences(fused)
  step_times.read_step_times(clear=True)
  tf.function(fused)(x)
  assert step_times.read_step_times() == []
  rows, call_us = step_times.measure(fused, tf.constant(x), calls=4, warmup=1)
  assert "TF_FUSED_INT8_STEP_TIMES" not in os.environ
  assert [r["step"] for r in rows] == list(range(10))
  assert len({r["node"] for r in rows}) == 1
  assert all(r["calls"] == 4 and r["total_ns"] > 0 for r in rows)
  what = [r["what"] for r in rows]
  # stem, then per block: expand 1x1, depthwise 3x3 (24 groups), project
  # 1x1 (with the residual side input in the first two blocks).
  assert what[:4] == ["3x12x10x3 3x3x3x8 s2",
                      "3x6x5x8 1x1x8x24", "3x6x5x24 3x3x1x24 g24",
                      "3x6x5x24 1x1x24x8 +side"], what
  assert what[8] == "3x6x5x24 3x3x1x24 s2 g24", what
  assert sum(r["us"] for r in rows) < call_us
  assert "steps: 10, their sum" in step_times.format_table(rows, call_us)
  # Through InferenceRunner (--runner): the same steps, timed there.
  rows, call_us = step_times.measure(fused, tf.constant(x), calls=3, warmup=1,
                                     runner=True)
  assert "TF_FUSED_INT8_STEP_TIMES" not in os.environ
  assert [r["what"] for r in rows] == what
  assert all(r["calls"] == 3 and r["total_ns"] > 0 for r in rows)
  assert sum(r["us"] for r in rows) < call_us
  del seq

  path = str(tmp_path / "q.keras")
  q.save(path)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  env["PYTHONPATH"] = (os.path.dirname(os.path.dirname(__file__)) + os.pathsep
                       + env.get("PYTHONPATH", ""))
  r = subprocess.run([sys.executable, "-m", "tf_fused_int8.benchmark.step_times",
                      path, "--batch=2", "--threads=1", "--calls=3"],
                     env=env, capture_output=True, text=True, timeout=600,
                     check=False)
  assert r.returncode == 0, r.stderr[-3000:]
  lines = r.stdout.splitlines()
  assert len([l for l in lines if " 3x3x1x24 " in l]) == 3, r.stdout
  assert "2x12x10x3 3x3x3x8 s2" in r.stdout
  assert lines[-1].startswith("steps: 10, their sum"), r.stdout


def _channel_scale_chain(rng, c=24, gate_scale=0.0078125, ratio=1.7):
  """x -> a (3x3 conv) -> squeeze (a global average as a uniform depthwise
  conv, [N, 1, 1, c]) -> gate (1x1 conv with a sigmoid-like table) ->
  channel scale of a by the gate -> project (1x1) with a's output as side
  input -> a second channel scale of the projection by the same gate."""
  table = np.clip(np.round(127 / (1 + np.exp(-np.arange(-128, 128) / 24.0))),
                  -128, 127).astype(int).tolist()
  convs = [QFC(c, 3, padding="same", activation="relu"),
           QFC(c, (6, 5), padding="valid", groups=c),
           QFC(c, 1, output_lut=table),
           {"channel_scale": {"channels": c, "gate_scale": gate_scale,
                              "ratio": ratio}},
           QFC(c, 1, use_side_input=True),
           {"channel_scale": {"channels": c, "gate_scale": gate_scale,
                              "ratio": -ratio}}]
  ins, sides = [0, 1, 2, 1, 4, 5], [-1, -1, -1, 3, 1, 3]
  shapes = {0: (2, 6, 5, 8), 1: (2, 6, 5, c), 2: (2, 1, 1, c), 3: (2, 1, 1, c),
            4: (2, 6, 5, c)}
  for k, conv in enumerate(convs):
    if isinstance(conv, dict):
      continue
    conv.build(shapes[ins[k]])
    w = [rng.integers(-128, 128, conv.kernel.shape).astype(np.int8),
         rng.normal(0, 4, (c,)).astype(np.float32),
         rng.uniform(2e-4, 4e-3, conv.conv_input_scale.shape).astype(np.float32)]
    if k == 1:  # a global average: one weight per channel
      w[0] = np.broadcast_to(rng.integers(-128, 128, (1, 1, 1, c)),
                             w[0].shape).astype(np.int8)
    if conv.use_side_input:
      w.append(np.float32(0.5))
    conv.set_weights(w)
  return convs, ins, sides


def numpy_channel_scale_chain(x, convs, ins, sides):
  outs = [x]
  for conv, src, side in zip(convs, ins, sides):
    if isinstance(conv, dict):
      step = conv["channel_scale"]
      g = outs[side].astype(np.float32) * np.float32(step["gate_scale"])
      m = g * np.float32(step["ratio"])
      with np.errstate(all="ignore"):
        y = np.clip(np.rint(outs[src].astype(np.float32) * m), -128, 127)
      outs.append(y.astype(np.int8))
    else:
      outs.append(numpy_chain(outs[src], [conv], [0], [-1]) if side < 0 else
                  numpy_chain_with_side(outs[src], conv, outs[side]))
  return outs[-1]


def numpy_chain_with_side(x, conv, side):
  w = conv.get_weights()
  return reference.fused_conv2d_reference(
      x, w[0], w[1], side_input=side, conv_input_scale=w[2],
      side_input_scale=w[3], strides=conv.strides, padding=conv.padding.upper(),
      activation="None" if conv.activation is None else "Relu",
      dilations=conv.dilation_rate, output_min=conv.output_min,
      output_max=conv.effective_output_max())


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_channel_scale_steps_match_the_reference(path):
  """Channel scale steps (the op's step_kinds 1) between conv steps, the
  gate from a table step, read by two of them (one of negative ratio),
  eagerly, in a graph, from the step plan (calls 2 and 3) and with the
  layers' fallback of single ops; batch 2 (slices on two threads) and 3."""
  rng = np.random.default_rng(31)
  chain = _channel_scale_chain(rng)
  seq = Sequence(*chain)
  fn = tf.function(seq)
  with op_harness.forced_kernel(path):
    for n in (2, 3, 2):
      x = rng.integers(-128, 128, (n, 6, 5, 8)).astype(np.int8)
      want = numpy_channel_scale_chain(x, *chain)
      assert len(np.unique(want)) > 30
      op_harness.assert_same_bits(seq(tf.constant(x)).numpy(), want, f"{path} eager n={n}")
      op_harness.assert_same_bits(fn(tf.constant(x)).numpy(), want, f"{path} graph n={n}")
  ops = _graph_ops(fn, tf.constant(x))
  assert ops["ResourceFusedInt8ConvSequence"] == 1 and ops["FusedInt8ChannelScale"] == 0


def test_channel_scale_steps_fall_back_to_single_ops(monkeypatch):
  rng = np.random.default_rng(32)
  chain = _channel_scale_chain(rng)
  seq = Sequence(*chain)
  x = rng.integers(-128, 128, (2, 6, 5, 8)).astype(np.int8)
  want = numpy_channel_scale_chain(x, *chain)
  monkeypatch.setattr(ops_lib, "_cpu_variable", lambda *a: False)
  op_harness.assert_same_bits(seq(tf.constant(x)).numpy(), want, "single ops")


def test_channel_scale_steps_are_checked():
  rng = np.random.default_rng(33)
  convs, ins, sides = _channel_scale_chain(rng)
  with pytest.raises(ValueError, match="its input_sources and side_sources"):
    Sequence(convs, ins, sides[:3] + [-1] + sides[4:])
  bad = list(convs)
  bad[3] = {"channel_scale": {"channels": 24, "gate_scale": 0.1}}
  with pytest.raises(ValueError, match="must be a channel scale"):
    Sequence(bad, ins, sides)
  bad[3] = {"channel_scale": {"channels": 24, "gate_scale": 0.1, "ratio": np.inf}}
  with pytest.raises(ValueError, match="finite gate_scale and ratio"):
    Sequence(bad, ins, sides)
  # The gate must be [N, 1, 1, C]: here the 3x3 conv's output.
  with pytest.raises(ValueError, match=r"step 3 \(a channel scale of 24 channels\) needs"):
    Sequence(convs, ins, sides[:3] + [1] + sides[4:]).build((2, 6, 5, 8))
  seq = Sequence(convs, ins, sides)
  x = rng.integers(-128, 128, (2, 6, 5, 8)).astype(np.int8)
  seq.build(x.shape)
  kinds = seq._op_attrs["step_kinds"]  # pylint: disable=protected-access
  assert kinds == [0, 0, 0, 1, 0, 1]
  _bad(seq, x, r"step_kinds\[3\] must be 0 \(a convolution\), 1 \(a channel scale\) "
       r"or 2 \(a transposed convolution\), got 3", step_kinds=kinds[:3] + [3] + kinds[4:])
  _bad(seq, x, r"step 3: a transposed convolution step \(step_kinds 2\) needs a "
       r"transpose_steps record", step_kinds=kinds[:3] + [2] + kinds[4:])
  _bad(seq, x, "step_kinds must have 1 entry per step", step_kinds=kinds[:5])
  _bad(seq, x, r"step 2: a channel scale step \(step_kinds 1\) needs its gate",
       step_kinds=[0, 0, 1, 1, 0, 1])
  # The gate source at run time: the 3x3 conv's output, not [N, 1, 1, C].
  args = _tensor_op_args(seq)
  shapes = list(args["filter_shapes"])
  _bad(seq, x, r"step 3: channel scale: its gate \(source 1\) must be int8 \[2, 1, 1, 24\]",
       side_sources=sides[:3] + [1] + sides[4:])
  del shapes
