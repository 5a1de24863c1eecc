"""ResourceFusedInt8Conv2DBiasActivation: the op that reads filter, bias and
conv_input_scale from resource variables in its kernel (what the Keras layers
run, one graph node per layer instead of one more per variable read).

Bit for bit against the numpy reference on the sweep (int8 and qint8, eager
and tf.function, every CPU path); what the graphs hold; variables changed
between calls, in place, sparsely and inside the same tf.function; every
kernel validation error through variables; variables that are not variables,
uninitialized or of the wrong dtype refused with a named error."""

import collections
import gc

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

import op_harness
import reference
import test_validation
import tf_fused_int8
from tf_fused_int8 import testing

OPS = tf_fused_int8.load_ops()
RAW = OPS.resource_fused_int8_conv2d_bias_activation
CASES = testing.sweep_cases(seed=3)


def op_types(fn, *args):
  graph = fn.get_concrete_function(*args).graph.as_graph_def()
  return collections.Counter(n.op for n in graph.node)


@pytest.mark.parametrize("use_function", [False, True], ids=["eager", "function"])
@pytest.mark.parametrize("dtype", [tf.int8, tf.qint8], ids=["int8", "qint8"])
def test_variables_match_reference_on_sweep(dtype, use_function):
  for i, case in enumerate(CASES):
    inputs = testing.make_inputs(case, seed=100 + i)
    want = op_harness.run_reference(case, inputs)
    got = op_harness.run_op(case, inputs, dtype=dtype,
                            use_function=use_function, variables=True)
    op_harness.assert_same_bits(got, want, case.name())


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_every_path_reads_variables(path):
  for i, case in enumerate(CASES[:12]):
    inputs = testing.make_inputs(case, seed=200 + i)
    want = op_harness.run_reference(case, inputs)
    with op_harness.forced_kernel(path):
      got = op_harness.run_op(case, inputs, variables=True)
    op_harness.assert_same_bits(got, want, f"{path} {case.name()}")


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_every_path_dense_head_pinned(path):
  """A classifier head whose kernel is a variable (1280 -> 1000 at one and
  two rows: the GEMV's shapes), called twice per input (packed under its pin,
  then used unchecked), on a signed input with -128 bytes: from_float_weights'
  weights lie in [-127, 127], so the avx2 path reads its byte packing
  (gemm_avx2.cc, GemvBytes); then with one weight -128 assigned, which
  sends it back to the GEMV that reads the filter. Same bits as the
  reference every time."""
  rng = np.random.default_rng(7)
  dense = tf_fused_int8.QuantizedDense.from_float_weights(
      rng.normal(size=(1280, 1000)).astype(np.float32),
      rng.normal(size=1000).astype(np.float32), input_scale=0.05,
      output_scale=4.0)  # outputs spread over int8, few clipped
  kernel = dense.get_weights()[0]
  assert kernel.min() >= -127, kernel.min()
  fn = tf.function(dense)
  for min_weight in (False, True):
    if min_weight:
      kernel[0, 0, 5, 3] = -128  # HWIO [1, 1, Ci, Co]
      dense.kernel.assign(kernel)
    k, b, s = dense.get_weights()
    assert (k.min() == -128) == min_weight
    for rows in (1, 2):
      x = rng.integers(-128, 128, (rows, 1280)).astype(np.int8)
      x[:, :9] = -128
      want = reference.fused_conv2d_reference(
          x.reshape(rows, 1, 1, 1280), k, b, conv_input_scale=s,
          padding="VALID", activation="None",
          output_max=dense.output_max).reshape(rows, 1000)
      with op_harness.forced_kernel(path):
        for call in range(2):
          op_harness.assert_same_bits(
              fn(tf.constant(x)).numpy(), want,
              f"{path} rows {rows} call {call} min weight {min_weight}")


def _layer(use_side_input=False, **kwargs):
  rng = np.random.default_rng(0)
  kernel = rng.normal(size=(3, 3, 8, 16)).astype(np.float32)
  bias = rng.normal(size=16).astype(np.float32)
  return tf_fused_int8.QuantizedFusedConv2D.from_float_weights(
      kernel, bias, input_scale=0.05, output_scale=0.1,
      side_input_scale=0.2 if use_side_input else None, padding="same",
      activation="relu", **kwargs)


def test_layers_run_one_node_per_convolution():
  x = tf.constant(np.random.default_rng(1).integers(
      -128, 128, (2, 7, 7, 8)).astype(np.int8))
  plain = _layer()
  types = op_types(tf.function(plain), x)
  assert types["ResourceFusedInt8Conv2DBiasActivation"] == 1, types
  assert types["FusedInt8Conv2DBiasActivation"] == 0, types
  assert types["ReadVariableOp"] == 0, types

  side = _layer(use_side_input=True)
  s = tf.constant(np.random.default_rng(2).integers(
      -128, 128, (2, 7, 7, 16)).astype(np.int8))
  fn = tf.function(lambda a, b: side(a, side_input=b))
  types = op_types(fn, x, s)
  assert types["ResourceFusedInt8Conv2DBiasActivation"] == 1, types
  # side_input_scale stays a float input: its one read.
  assert types["ReadVariableOp"] == 1, types

  # Same bits as the reference, eagerly and in the function.
  k, b, cs, ss = [w for w in side.get_weights()]
  want = reference.fused_conv2d_reference(
      x.numpy(), k, b, side_input=s.numpy(), conv_input_scale=cs,
      side_input_scale=ss, padding="SAME", activation="Relu")
  op_harness.assert_same_bits(fn(x, s).numpy(), want, "function")
  op_harness.assert_same_bits(side(x, side_input=s).numpy(), want, "eager")
  # Their filters are variables' buffers: used pinned, unchecked.
  hits = op_harness.pinned_hits()
  op_harness.assert_same_bits(fn(x, s).numpy(), want, "function, again")
  assert (op_harness.pinned_hits() > hits
          or not op_harness.uses_packed_weights())

  dense = tf_fused_int8.QuantizedDense.from_float_weights(
      np.ones((8, 4), np.float32), input_scale=0.1, output_scale=0.1)
  rows = tf.constant(np.ones((3, 8), np.int8))
  types = op_types(tf.function(dense), rows)
  assert types["ResourceFusedInt8Conv2DBiasActivation"] == 1, types
  assert types["ReadVariableOp"] == 0, types


def test_other_arguments_run_the_tensor_op():
  """Only filter, bias and conv_input_scale all CPU variables of the right
  dtypes take the resource op; anything else reads them as tensors."""
  x = tf.constant(np.ones((1, 4, 4, 8), np.int8))
  vf = tf.Variable(np.ones((1, 1, 8, 4), np.int8))
  vb = tf.Variable(np.zeros(4, np.float32))
  vs = tf.Variable(np.float32(0.5))
  for args in [(vf, np.zeros(4, np.float32), vs), (vf, vb, 0.5),
               (tf.constant(np.ones((1, 1, 8, 4), np.int8)), vb, vs),
               # A float64 bias variable is converted, as any tensor.
               (vf, tf.Variable(np.zeros(4, np.float64)), vs)]:
    if isinstance(args[1], tf.Variable) and args[1].dtype == tf.float64:
      # convert_to_tensor refuses a float64 variable for a float32 input
      with pytest.raises((ValueError, TypeError)):
        tf_fused_int8.fused_conv2d_bias_activation(
            x, args[0], args[1], padding="VALID", conv_input_scale=args[2])
      continue
    fn = tf.function(lambda: tf_fused_int8.fused_conv2d_bias_activation(
        x, args[0], args[1], padding="VALID", conv_input_scale=args[2]))
    types = op_types(fn)
    assert types["FusedInt8Conv2DBiasActivation"] == 1, types
    assert types["ResourceFusedInt8Conv2DBiasActivation"] == 0, types
    np.testing.assert_array_equal(fn().numpy(), np.full((1, 4, 4, 4), 4, np.int8))

  # NCHW_VECT_C (the GPU kernel's layout) keeps the tensor op, so a GPU can
  # still take it.
  x5 = tf.constant(np.ones((1, 2, 4, 4, 4), np.int8))
  vf5 = tf.Variable(np.ones((4, 2, 1, 1, 4), np.int8))
  fn = tf.function(lambda: tf_fused_int8.fused_conv2d_bias_activation(
      x5, vf5, vb, padding="VALID", conv_input_scale=vs,
      data_format="NCHW_VECT_C"))
  types = op_types(fn)
  assert types["FusedInt8Conv2DBiasActivation"] == 1, types
  np.testing.assert_array_equal(fn().numpy(), np.full((1, 1, 4, 4, 4), 4, np.int8))


def _conv(x, f, b, s):
  return tf_fused_int8.fused_conv2d_bias_activation(
      x, f, b, padding="SAME", conv_input_scale=s, activation_mode="None")


def _want(x, f, b, s):
  return reference.fused_conv2d_reference(
      np.asarray(x), np.asarray(f), np.asarray(b), conv_input_scale=np.asarray(s),
      padding="SAME", activation="None")


# A small filter (checked against a copy by a memcmp) and one over 512 KiB
# (checked while computing) when unpinned; pinned (the variable's buffer,
# held by the cache) both are used unchecked, and every kind of write must
# still be seen: TF copies a variable's buffer before writing while the
# cache holds it.
@pytest.mark.parametrize("shape", [(3, 3, 16, 8), (3, 3, 256, 256)],
                         ids=["small", "large"])
def test_variable_updates_are_seen(shape):
  rng = np.random.default_rng(3)
  co = shape[3]
  # Enough pixels for several M tiles: the cached (pinned) packing, not the
  # on-the-fly one of a single tile.
  x = rng.integers(-128, 128, (2, 12, 12, shape[2])).astype(np.int8)
  f0 = rng.integers(-128, 128, shape).astype(np.int8)
  vf = tf.Variable(f0)
  vb = tf.Variable(rng.normal(size=co).astype(np.float32))
  vs = tf.Variable(np.full(co, 1e-3, np.float32))
  fn = tf.function(lambda a: _conv(a, vf, vb, vs))
  op_harness.assert_same_bits(fn(x).numpy(), _want(x, f0, vb.numpy(), vs.numpy()), "first")
  hits = op_harness.pinned_hits()
  op_harness.assert_same_bits(fn(x).numpy(), _want(x, f0, vb.numpy(), vs.numpy()), "again")
  assert (op_harness.pinned_hits() > hits
          or not op_harness.uses_packed_weights()), (
      "the variable's filter was not used pinned")

  # assign: a whole new value.
  f1 = rng.integers(-128, 128, shape).astype(np.int8)
  vf.assign(f1)
  vb.assign(rng.normal(size=co).astype(np.float32))
  vs.assign(np.full(co, 2e-3, np.float32))
  op_harness.assert_same_bits(fn(x).numpy(), _want(x, f1, vb.numpy(), vs.numpy()), "assign")
  op_harness.assert_same_bits(_conv(x, vf, vb, vs).numpy(),
                              _want(x, f1, vb.numpy(), vs.numpy()), "assign, eager")

  # assign_add: updated in place in the variable's buffer.
  vf.assign_add(np.ones(shape, np.int8))
  f2 = (f1.astype(np.int16) + 1).astype(np.int8)  # wraps as int8 addition does
  assert np.array_equal(vf.numpy(), f2)
  op_harness.assert_same_bits(fn(x).numpy(), _want(x, f2, vb.numpy(), vs.numpy()), "assign_add")

  # assign_sub and a sliced assignment: the other in-place writers.
  vf.assign_sub(np.full(shape, 3, np.int8))
  f2 = (f2.astype(np.int16) - 3).astype(np.int8)
  op_harness.assert_same_bits(fn(x).numpy(), _want(x, f2, vb.numpy(), vs.numpy()), "assign_sub")
  vf[1:2].assign(np.full((1,) + shape[1:], 7, np.int8))
  f2[1:2] = 7
  assert np.array_equal(vf.numpy(), f2)
  op_harness.assert_same_bits(fn(x).numpy(), _want(x, f2, vb.numpy(), vs.numpy()), "slice assign")

  # A sparse update puts the variable in copy-on-read mode.
  vf.scatter_nd_update([[0, 0, 0, 0]], np.array([-128], np.int8))
  f3 = f2.copy()
  f3[0, 0, 0, 0] = -128
  op_harness.assert_same_bits(fn(x).numpy(), _want(x, f3, vb.numpy(), vs.numpy()), "scatter")
  vf.scatter_nd_add([[0, 0, 1, 1]], np.array([5], np.int8))
  f3[0, 0, 1, 1] = (np.int16(f3[0, 0, 1, 1]) + 5).astype(np.int8)
  op_harness.assert_same_bits(fn(x).numpy(), _want(x, f3, vb.numpy(), vs.numpy()), "scatter add")
  vf.assign(f0)  # whole assignment in copy-on-read mode
  op_harness.assert_same_bits(fn(x).numpy(), _want(x, f0, vb.numpy(), vs.numpy()), "assign again")


# The caches keep what they packed or prepared from a variable's buffer for
# as long as the variable lives, outside their LRU bounds (bounded_lru.h):
# more live filters than a cache's 256 unpinned entries are each packed
# once (several models in one process had evicted each other's packings on
# every call), and the entries go, with the buffers they hold, once their
# variables do.
@pytest.mark.parametrize("kind", ["gemm", "depthwise"])
def test_live_variables_keep_their_packed_weights(kind):
  if not op_harness.uses_packed_weights():
    pytest.skip("the portable and reference paths cache nothing")
  stats = (op_harness.packed_weights_stats if kind == "gemm"
           else op_harness.depthwise_cache_stats)
  rng = np.random.default_rng(8)
  n, c = 300, 16
  x = rng.integers(-128, 128, (1, 6, 6, c)).astype(np.int8)
  fshape = (1, 1, c, c) if kind == "gemm" else (3, 3, 1, c)

  def variables():
    return (tf.Variable(rng.integers(-128, 128, fshape).astype(np.int8)),
            tf.Variable(rng.normal(0, 20, c).astype(np.float32)),
            tf.Variable(np.full(c, 1e-2, np.float32)))

  weights = [variables() for _ in range(n)]

  def run_all(what):
    for i, (vf, vb, vs) in enumerate(weights):
      got = _conv(x, vf, vb, vs).numpy()
      if i % 37 == 0:
        op_harness.assert_same_bits(
            got, _want(x, vf.numpy(), vb.numpy(), vs.numpy()), f"{what} {i}")

  before = stats()
  run_all("first")
  first = stats()
  # (Earlier tests' entries whose variables are gone may be released here.)
  assert first["pinned_entries"] >= n, (before, first)
  assert first["evictions"] == before["evictions"], (before, first)
  run_all("again")
  again = stats()
  assert again["pinned_hits"] - first["pinned_hits"] >= n, (first, again)
  assert again["misses"] == first["misses"], (first, again)

  # Half the variables go; the next insertion drops their entries.
  del weights[: n // 2]
  gc.collect()
  vf, vb, vs = variables()
  op_harness.assert_same_bits(_conv(x, vf, vb, vs).numpy(),
                              _want(x, vf.numpy(), vb.numpy(), vs.numpy()), "new")
  after = stats()
  assert after["released"] - again["released"] >= n // 2, (again, after)
  assert after["pinned_entries"] <= again["pinned_entries"] - n // 2 + 1, (again, after)
  run_all("rest")
  assert stats()["misses"] == after["misses"]
  # The pins' registry forgets buffers whose pins have all gone: the first
  # new call's insertion drops the entries (their pins go), the second's
  # new pins prune the registry.
  del weights[:]
  gc.collect()
  for _ in range(2):
    vf, vb, vs = variables()
    _conv(x, vf, vb, vs).numpy()
  assert op_harness.pinned_buffers() < n, op_harness.pinned_buffers()


def test_depthwise_variable_updates_are_seen():
  """A depthwise filter with its bias and scale in variables: all three
  pinned, the prepared weights are used without comparing them, and every
  write to any of them (in place, sliced, sparse) is still seen."""
  rng = np.random.default_rng(5)
  c = 32
  x = rng.integers(-128, 128, (1, 9, 9, c)).astype(np.int8)
  vf = tf.Variable(rng.integers(-128, 128, (3, 3, 1, c)).astype(np.int8))
  vb = tf.Variable(rng.normal(0, 20, c).astype(np.float32))
  vs = tf.Variable(np.full(c, 1e-2, np.float32))
  fn = tf.function(lambda a: _conv(a, vf, vb, vs))

  def check(what):
    op_harness.assert_same_bits(fn(x).numpy(),
                                _want(x, vf.numpy(), vb.numpy(), vs.numpy()), what)

  check("first")
  op_harness.assert_depthwise_used_pinned(lambda: check("again"))
  vb.assign_add(np.full(c, 3.0, np.float32))
  check("bias assign_add")
  vs.assign_sub(np.full(c, 2.5e-3, np.float32))
  check("scale assign_sub")
  vb[4:6].assign([100.0, -100.0])
  check("bias slice assign")
  vf.assign_add(np.ones((3, 3, 1, c), np.int8))
  check("filter assign_add")
  vs.scatter_nd_update([[7]], np.array([0.5], np.float32))  # copy-on-read mode
  check("scale scatter")
  vs.assign(np.full(c, 2e-2, np.float32))
  check("scale assign in copy-on-read mode")


def test_assign_then_convolve_in_one_function():
  """Automatic control dependencies order the read after the assignment."""
  rng = np.random.default_rng(4)
  x = rng.integers(-128, 128, (2, 6, 6, 8)).astype(np.int8)
  vf = tf.Variable(np.zeros((3, 3, 8, 8), np.int8))
  vb = tf.Variable(np.zeros(8, np.float32))
  vs = tf.Variable(np.float32(0.01))

  @tf.function
  def fn(a, f, b):
    before = _conv(a, vf, vb, vs)
    vf.assign(f)
    vb.assign(b)
    return before, _conv(a, vf, vb, vs)

  f = rng.integers(-128, 128, (3, 3, 8, 8)).astype(np.int8)
  b = rng.normal(size=8).astype(np.float32) * 10
  before, after = fn(x, f, b)
  op_harness.assert_same_bits(before.numpy(), _want(x, np.zeros_like(f), np.zeros(8, np.float32), vs.numpy()), "before")
  op_harness.assert_same_bits(after.numpy(), _want(x, f, b, vs.numpy()), "after")


def _variables(args):
  """test_validation's good() arguments with filter, bias and
  conv_input_scale as variables."""
  args = dict(args)
  for name in ("filter", "bias", "conv_input_scale"):
    args[name] = tf.Variable(args[name]).handle
  return args


def test_good_call_works():
  out = RAW(**_variables(test_validation.good())).numpy()
  assert out.shape == (2, 6, 6, 4)
  assert out[0, 2, 2, 0] == 14


@pytest.mark.parametrize("what,over,error,match", test_validation.ERRORS,
                         ids=[e[0] for e in test_validation.ERRORS])
def test_kernel_rejects_through_variables(what, over, error, match):
  del what
  with pytest.raises(error, match=match):
    RAW(**_variables(test_validation.good(**over)))


WRONG_VARIABLES = [
    ("float filter", "filter", np.ones((3, 3, 3, 4), np.float32),
     "filter and side_input must have conv_input's dtype int8, got filter float"),
    ("int32 bias", "bias", np.zeros(4, np.int32),
     "bias, conv_input_scale and side_input_scale must be float32, got int32"),
    ("float64 scale", "conv_input_scale", np.float64(0.5),
     "must be float32, got float, double"),
]


@pytest.mark.parametrize("what,name,value,match", WRONG_VARIABLES,
                         ids=[w[0] for w in WRONG_VARIABLES])
def test_wrong_variable_dtypes_are_refused(what, name, value, match):
  del what
  args = _variables(test_validation.good())
  args[name] = tf.Variable(value).handle
  # Eagerly, in the kernel.
  with pytest.raises(tf.errors.InvalidArgumentError, match=match):
    RAW(**args)
  # In a graph, the shape function knows the variable's dtype already.
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError),
                     match=f"{name} must be a resource variable of"):
    tf.function(lambda: RAW(**args))()


def test_uninitialized_variable_is_refused():
  args = _variables(test_validation.good())
  v = resource_variable_ops.UninitializedVariable(shape=[3, 3, 3, 4], dtype=tf.int8)
  args["filter"] = v.handle
  with pytest.raises(tf.errors.FailedPreconditionError,
                     match="filter is an uninitialized resource variable"):
    RAW(**args)


def test_a_resource_that_is_not_a_variable_is_refused():
  args = _variables(test_validation.good())
  args["bias"] = tf.raw_ops.MutexV2()
  with pytest.raises(tf.errors.FailedPreconditionError,
                     match="bias must be a resource variable that exists"):
    RAW(**args)


def test_shape_function_uses_the_variables_shapes():
  args = _variables(test_validation.good())

  @tf.function
  def fn():
    out = RAW(**args)
    assert out.shape.as_list() == [2, 6, 6, 4], out.shape
    return out

  fn()
  args["bias"] = tf.Variable(np.zeros(3, np.float32)).handle
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError),
                     match="bias length"):
    tf.function(lambda: RAW(**args))()


def test_function_graph_lists_the_variables_and_freezes_to_the_tensor_op():
  """The function graph records the variables the op reads (as a
  ReadVariableOp would), and TF's freezing turns the op into
  FusedInt8Conv2DBiasActivation on constants, with the same bits."""
  from tensorflow.python.framework import convert_to_constants  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  first, second = _layer(), _layer(use_side_input=True)
  inp = keras.Input((7, 7, 8), dtype="int8")
  model = keras.Model(inp, second(inp, side_input=first(inp)))
  rng = np.random.default_rng(5)
  x = tf.constant(rng.integers(-128, 128, (2, 7, 7, 8)).astype(np.int8))
  want = model(x).numpy()

  fn = tf.function(model).get_concrete_function(x)
  listed = {id(v) for v in fn.graph.variables}
  for layer in (first, second):
    for w in layer.weights:
      assert id(w.value) in listed, w.path
  frozen = convert_to_constants.convert_variables_to_constants_v2(fn)
  graph_def = frozen.graph.as_graph_def()
  types = collections.Counter(n.op for n in graph_def.node)
  assert types["ResourceFusedInt8Conv2DBiasActivation"] == 0, types
  assert types["FusedInt8Conv2DBiasActivation"] == 2, types
  assert types["ReadVariableOp"] == 0, types
  # Each of the six weights a FusedInt8WeightConstant (what keeps the
  # packed weights pinned: cc/tf/weight_constant.h), none a plain Const.
  assert types["FusedInt8WeightConstant"] == 6, types
  consts = {n.name for n in graph_def.node if n.op == "FusedInt8WeightConstant"}
  for n in graph_def.node:
    if n.op == "FusedInt8Conv2DBiasActivation":
      assert {n.input[i] for i in (1, 2, 4)} <= consts, n
  op_harness.assert_same_bits(frozen(x)[0].numpy(), want, "frozen")
  if op_harness.uses_packed_weights():
    before = op_harness.pinned_hits()
    op_harness.assert_same_bits(frozen(x)[0].numpy(), want, "frozen again")
    assert op_harness.pinned_hits() >= before + 2

  # The frozen GraphDef in a TF1 Session, as graph tools run it.
  graph = tf.Graph()
  with graph.as_default():
    tf.graph_util.import_graph_def(graph_def, name="")
  with tf.compat.v1.Session(graph=graph) as sess:
    for _ in range(2):
      got = sess.run(frozen.outputs[0].name, {frozen.inputs[0].name: x.numpy()})
      op_harness.assert_same_bits(got, want, "session")


def test_only_weight_constants_pin_the_packed_weights():
  """The tensor op pins its packed weights (no check of the filter bytes)
  only for a FusedInt8WeightConstant's own buffer: not for a plain Const,
  nor for a fed filter, even one fed from the same numpy buffer written
  again between runs (a TF1 feed may wrap that memory), whose new bytes
  must be seen. Sessions over one GraphDef: a weight constant, a Const and
  a placeholder as the filter of three ops."""
  if not op_harness.uses_packed_weights():
    pytest.skip("this path packs no weights")
  rng = np.random.default_rng(9)
  w = rng.integers(-128, 128, (3, 3, 8, 16)).astype(np.int8)
  bias = rng.normal(0, 5, 16).astype(np.float32)
  scale = np.full(16, 0.02, np.float32)
  x = rng.integers(-128, 128, (2, 9, 9, 8)).astype(np.int8)
  raw = OPS.fused_int8_conv2d_bias_activation

  def reference_of(filt):
    return reference.fused_conv2d_reference(
        x, filt, bias, conv_input_scale=scale, strides=(1, 1),
        padding="SAME", activation="Relu")

  graph = tf.Graph()
  with graph.as_default():
    xin = tf.compat.v1.placeholder(tf.int8, x.shape)
    fed = tf.compat.v1.placeholder(tf.int8, w.shape)
    const = tf.constant(w)
    outs = []
    for filt in (const, fed, const):
      outs.append(raw(conv_input=xin, filter=filt, bias=tf.constant(bias),
                      side_input=tf.zeros([0], tf.int8),
                      conv_input_scale=tf.constant(scale),
                      side_input_scale=tf.constant(0.0), strides=[1, 1, 1, 1],
                      padding="SAME", activation_mode="Relu"))
  graph_def = graph.as_graph_def()
  # The third op's filter as the freezing hook makes it.
  for n in graph_def.node:
    if n.name == const.op.name:
      weight = graph_def.node.add()
      weight.CopyFrom(n)
      weight.name = n.name + "_weight"
      weight.op = "FusedInt8WeightConstant"
  for n in graph_def.node:
    if n.name == outs[2].op.name:
      n.input[1] = const.op.name + "_weight"
  run_graph = tf.Graph()
  with run_graph.as_default():
    tf.graph_util.import_graph_def(graph_def, name="")
  names = [o.name for o in outs]
  with tf.compat.v1.Session(graph=run_graph) as sess:
    feed_w = w.copy()
    for k in range(3):
      if k == 2:
        feed_w[...] = -feed_w - 1  # the same buffer, new bytes
      pins = op_harness.pinned_hits()
      got = sess.run(names, {xin.name: x, fed.name: feed_w})
      op_harness.assert_same_bits(got[0], reference_of(w), f"const {k}")
      op_harness.assert_same_bits(got[1], reference_of(feed_w), f"fed {k}")
      op_harness.assert_same_bits(got[2], reference_of(w), f"weight constant {k}")
      # One pinned use a run (the weight constant's); from the second run on
      # it hits its own pinned packing.
      if k > 0:
        assert op_harness.pinned_hits() == pins + 1, (k, pins)


def test_the_two_ops_have_the_same_signature_but_resource_inputs():
  op_harness.assert_ops_differ_only_in_resource_inputs(
      "FusedInt8Conv2DBiasActivation", "ResourceFusedInt8Conv2DBiasActivation",
      ("filter", "bias", "conv_input_scale"))


def test_cpu_variable_verdict_per_device_string():
  """ops._cpu_variable (which op an eager call or a trace picks): a CPU
  resource variable of the dtype yes; a tensor, another dtype or a variable
  on another device no; the verdict per device string is cached, and a
  cached verdict is the same as the first."""
  from tf_fused_int8 import ops as ops_lib  # pylint: disable=g-import-not-at-top

  def placed(device):
    class Placed(resource_variable_ops.ResourceVariable):
      @property
      def device(self):
        return device
    return Placed(np.zeros((1, 1, 4, 4), np.int8))

  v = tf.Variable(np.zeros((1, 1, 4, 4), np.int8))
  gpu = placed("/job:localhost/replica:0/task:0/device:GPU:0")
  cpu = placed("/job:localhost/replica:0/task:0/device:CPU:0")
  for _ in range(2):
    assert ops_lib._cpu_variable(v, tf.int8)
    assert not ops_lib._cpu_variable(v, tf.float32)
    assert not ops_lib._cpu_variable(tf.constant(v), tf.int8)
    assert not ops_lib._cpu_variable(gpu, tf.int8)
    assert ops_lib._cpu_variable(cpu, tf.int8)
  assert ops_lib._DEVICE_ON_CPU[
      "/job:localhost/replica:0/task:0/device:GPU:0"] is False
