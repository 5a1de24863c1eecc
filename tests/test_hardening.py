"""Concurrency, memory, determinism and non-finite parameters."""

import os
import resource
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

import op_harness
import tf_fused_int8
from tf_fused_int8 import testing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Eight different small shapes (one per thread), some with side input.
CASES = [
    testing.ConvCase(1, 7, 9, 5, 3, 3, 17, padding="SAME", side_input=True),
    testing.ConvCase(2, 6, 6, 16, 1, 1, 32, padding="VALID"),
    testing.ConvCase(1, 11, 5, 3, 5, 5, 8, 2, 2, "SAME", activation="None"),
    testing.ConvCase(3, 5, 5, 33, 3, 3, 7, padding="VALID", per_channel_scale=False),
    testing.ConvCase(1, 9, 9, 8, 7, 7, 16, 3, 3, "SAME", side_input=True, activation="None"),
    testing.ConvCase(2, 4, 8, 64, 1, 1, 64, 2, 2, "SAME"),
    testing.ConvCase(1, 8, 8, 4, 3, 3, 4, dilation_h=2, dilation_w=2, padding="SAME"),
    testing.ConvCase(4, 3, 3, 12, 3, 3, 20, padding="SAME", scale_kind="pow2"),
]
INPUTS = [testing.make_inputs(c, seed=i) for i, c in enumerate(CASES)]


def assert_threads_agree(count, call, want, threads=8, calls=500):
  """`threads` threads each make `calls` calls, thread t's k-th call being
  call((t + k) % count); every result must equal want[i]."""
  errors = []

  def worker(t):
    try:
      for k in range(calls):
        i = (t + k) % count
        if not np.array_equal(np.asarray(call(i)), want[i]):
          errors.append(f"thread {t} call {k} case {i}")
          return
    except Exception as e:  # pylint: disable=broad-except
      errors.append(f"thread {t}: {e!r}")

  workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
  for w in workers:
    w.start()
  for w in workers:
    w.join()
  assert not errors, errors[:5]


def test_eight_threads_match_serial_results():
  want = [op_harness.run_reference(c, x) for c, x in zip(CASES, INPUTS)]
  assert_threads_agree(len(CASES), lambda i: op_harness.run_op(CASES[i], INPUTS[i]), want)


def test_eight_threads_share_keras_layers():
  layers, inputs, want = [], [], []
  for i, c in enumerate(CASES):
    if c.dilations != (1, 1):
      continue
    x = INPUTS[i]
    layer = tf_fused_int8.QuantizedFusedConv2D(
        c.out_channels, (c.kernel_h, c.kernel_w), strides=c.strides,
        padding=c.padding.lower(), activation="relu" if c.activation == "Relu" else None,
        use_side_input=c.side_input, per_channel_scale=c.per_channel_scale)
    layer.build(c.input_shape)
    weights = [x["filter"], x["bias"], x["conv_input_scale"]]
    if c.side_input:
      weights.append(x["side_input_scale"])
    layer.set_weights(weights)
    layers.append(layer)
    inputs.append((x["conv_input"], x["side_input"]))
    want.append(op_harness.run_reference(c, x))

  def call(i):
    x, side = inputs[i]
    return layers[i](x, side_input=side) if side is not None else layers[i](x)

  assert_threads_agree(len(layers), call, want)


# Layers large enough that the op splits them across the intra-op pool's
# threads (cc/tf/pool_parallel_for.cc). From several Python threads at once,
# calls meet in its one lock-free range (FastSlot) and fall back to posted
# ranges when it is taken; TF_FUSED_INT8_SPLIT_SLOT=0 posts every range,
# so that helpers run units of posted ranges too.
SPLIT_SCRIPT = r"""
import sys, threading
import numpy as np
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(2)
import op_harness
from tf_fused_int8 import testing
cases = [
    testing.ConvCase(1, 28, 28, 32, 3, 3, 32, padding="SAME", side_input=True),
    testing.ConvCase(1, 14, 14, 64, 1, 1, 384, padding="VALID"),
    testing.ConvCase(2, 28, 28, 48, 3, 3, 40, 2, 2, "SAME", activation="None"),
    testing.ConvCase(1, 56, 56, 24, 1, 1, 144, padding="SAME", per_channel_scale=False),
]
inputs = [testing.make_inputs(c, seed=20 + i) for i, c in enumerate(cases)]
want = [op_harness.run_reference(c, x) for c, x in zip(cases, inputs)]
errors = []
def worker(t, calls):
  for k in range(calls):
    i = (t + k) % len(cases)
    if not np.array_equal(np.asarray(op_harness.run_op(cases[i], inputs[i])), want[i]):
      errors.append(f"threads {threads} thread {t} call {k} case {i}")
      return
for threads in (1, 4):
  workers = [threading.Thread(target=worker, args=(t, 120)) for t in range(threads)]
  for w in workers:
    w.start()
  for w in workers:
    w.join()
print("ERRORS", errors[:5] if errors else "none")
"""


@pytest.mark.parametrize("slot", ["1", "0"])
def test_split_calls_from_one_and_four_threads(slot):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_FUSED_INT8_SPLIT_SLOT=slot,
             PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
  r = subprocess.run([sys.executable, "-c", SPLIT_SCRIPT], env=env,
                     capture_output=True, text=True, timeout=600)
  assert "ERRORS none" in r.stdout, r.stdout + r.stderr[-3000:]


# Shapes that run the amx path's tiles: a padded-input 3x3, a pointwise
# GEMM read in place, a gathered strided 3x3, and K over several panels.
AMX_CASES = [
    testing.ConvCase(1, 14, 14, 64, 3, 3, 48, padding="SAME", side_input=True),
    testing.ConvCase(2, 8, 8, 128, 1, 1, 80, padding="VALID"),
    testing.ConvCase(1, 9, 9, 96, 3, 3, 40, 2, 2, "SAME", activation="None"),
    testing.ConvCase(1, 6, 6, 320, 3, 3, 36, padding="SAME", per_channel_scale=False),
]
AMX_INPUTS = [testing.make_inputs(c, seed=40 + i) for i, c in enumerate(AMX_CASES)]


@pytest.mark.skipif("amx" not in op_harness.expected_paths(),
                    reason="this CPU has no AMX-INT8 (amx_tile, amx_int8 in /proc/cpuinfo)")
def test_amx_tile_state_with_eight_threads_and_onednn_bfloat16():
  """Eight threads call the op on the amx path while each also runs TF's
  own bfloat16 matmuls (oneDNN, which may configure AMX tiles its own way on
  the same pool threads): every result must stay exact. The kernel loads
  its tile configuration per call and releases the tiles after."""
  rng = np.random.default_rng(5)
  a = tf.constant(rng.standard_normal((192, 256)).astype(np.float32), tf.bfloat16)
  b = tf.constant(rng.standard_normal((256, 160)).astype(np.float32), tf.bfloat16)
  want = [op_harness.run_reference(c, x) for c, x in zip(AMX_CASES, AMX_INPUTS)]
  cases = len(AMX_CASES)

  def call(i):
    # Calls cases .. 2 * cases - 1 run a bfloat16 matmul first.
    if i >= cases:
      tf.linalg.matmul(a, b).numpy()
    return op_harness.run_op(AMX_CASES[i % cases], AMX_INPUTS[i % cases])

  with op_harness.forced_kernel("amx"):
    assert_threads_agree(2 * cases, call, want + want, calls=120)


def rss_mb():
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024.0
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def test_ten_thousand_calls_do_not_grow_memory():
  rng = np.random.default_rng(0)
  # New filters every call too: the packed-weight cache must stay bounded.
  filters = [rng.integers(-128, 128, c.filter_shape, dtype=np.int8) for c in CASES]

  def call(k):
    i = k % len(CASES)
    x = dict(INPUTS[i])
    if k % 3 == 0:
      x["filter"] = np.roll(filters[i], k)
    op_harness.run_op(CASES[i], x)

  for k in range(1000):
    call(k)
  before = rss_mb()
  for k in range(10000):
    call(k)
  after = rss_mb()
  assert after - before < 20.0, (before, after)


DETERMINISM_SCRIPT = r"""
import hashlib, os, sys
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
tf.config.threading.set_inter_op_parallelism_threads(1)
import op_harness
from tf_fused_int8 import testing
cases = testing.sweep_cases(seed=3)[::4] + testing.resnet50_cases(1)[1:3]
for path in sys.argv[2:]:
  h = hashlib.sha256()
  with op_harness.forced_kernel(path):
    for rep in range(2):
      for i, c in enumerate(cases):
        h.update(op_harness.run_op(c, testing.make_inputs(c, seed=i)).tobytes())
  print("DIGEST", path, h.hexdigest())
"""


def test_identical_outputs_for_1_2_4_threads():
  """Every fast path, repeated runs and intra-op pools of 1, 2 and 4 threads."""
  paths = op_harness.expected_paths()[1:]
  runs = {}
  for threads in (1, 2, 4):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    r = subprocess.run([sys.executable, "-c", DETERMINISM_SCRIPT, str(threads)] + paths,
                       env=env, capture_output=True, text=True, timeout=600)
    lines = [l.split() for l in r.stdout.splitlines() if l.startswith("DIGEST")]
    assert len(lines) == len(paths), r.stdout + r.stderr[-3000:]
    runs[threads] = {path: digest for _, path, digest in lines}
  assert runs[1] == runs[2] == runs[4], runs
  assert len(set(runs[1].values())) == 1, runs  # and every path the same bits


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_nonfinite_scale_and_bias_are_deterministic(path):
  """NaN y gives the lower bound (0 Relu, -128 None); +Inf 127; -Inf lo."""
  case = testing.ConvCase(1, 5, 5, 8, 3, 3, 19, padding="SAME", activation="None")
  x = testing.make_inputs(case, seed=1)
  co = case.out_channels
  scale = np.full(co, 0.01, np.float32)
  scale[0], scale[1], scale[2] = np.nan, np.inf, -np.inf
  bias = np.zeros(co, np.float32)
  bias[3], bias[4], bias[5] = np.nan, np.inf, -np.inf
  bias[1] = 0.0
  x.update(conv_input_scale=scale, bias=bias)
  for activation, lo in (("None", -128), ("Relu", 0)):
    c = testing.ConvCase(1, 5, 5, 8, 3, 3, 19, padding="SAME", activation=activation)
    with op_harness.forced_kernel(path):
      got = op_harness.run_op(c, x)
    op_harness.assert_same_bits(got, op_harness.run_reference(c, x), path)
    assert (got[..., 0] == lo).all()   # NaN scale
    assert (got[..., 3] == lo).all()   # NaN bias
    assert (got[..., 4] == 127).all()  # +Inf bias
    assert (got[..., 5] == lo).all()   # -Inf bias


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_filter_changed_in_place_is_never_served_stale(path):
  """A tf.Variable filter assigned new values keeps its buffer: the packed
  weight cache must notice the new contents (and a single changed byte)."""
  case = testing.ConvCase(1, 8, 8, 16, 3, 3, 32, padding="SAME")
  x = testing.make_inputs(case, seed=2)
  var = tf.Variable(x["filter"])
  rng = np.random.default_rng(9)

  def run():
    return tf_fused_int8.fused_conv2d_bias_activation(
        x["conv_input"], var, x["bias"], padding="SAME",
        conv_input_scale=x["conv_input_scale"]).numpy()

  with op_harness.forced_kernel(path):
    for step in range(6):
      want = op_harness.run_reference(case, dict(x, filter=var.numpy()))
      op_harness.assert_same_bits(run(), want, f"{path} step {step}")
      op_harness.assert_same_bits(run(), want, f"{path} step {step} again")
      new = var.numpy().copy()
      if step % 2:
        new = rng.integers(-128, 128, new.shape, dtype=np.int8)
      else:  # one byte, somewhere in the middle
        idx = tuple(int(rng.integers(0, d)) for d in new.shape)
        new[idx] = np.int8(-int(new[idx]) - 1)
      var.assign(new)
