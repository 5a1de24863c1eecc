"""Where a fused model's time goes: each convolution step's wall time inside
the sequence op, beside the whole call's.

    python -m tf_fused_int8.benchmark.step_times MODEL.keras \\
        [--batch=1] [--threads=2] [--calls=500] [--input=images.npy]

MODEL.keras is a quantized model (quantize_model's); its convolution runs
are fused (fuse_conv_sequences) if they are not already. The model runs in a
tf.function with TF_FUSED_INT8_STEP_TIMES=1, which makes every
FusedInt8ConvSequence node time each step (cc/tf/step_times.h); the table
gives each step's microseconds per call and share of the steps' sum, then
the sum, the whole call's median and what lies outside the steps (TF's call
cost, the layers that are not in a sequence). At a batch that the thread
count divides (2 threads: batch 2, 4, 8), the sequence runs as batch slices,
one per thread, each through every step (cc/tf/conv_sequence_kernel.cc):
the steps' times are then those of the calling thread's slice (the others
run at the same time), each row still named with the whole batch. It is a
profiler for finding work, not a benchmark: compare with peers with
``--suite=models``.
Set TF_FUSED_INT8_CPU_KERNEL to look at a forced path.
"""

import ctypes
import os
import time

import numpy as np

ENV = "TF_FUSED_INT8_STEP_TIMES"


def _lib():
  from tf_fused_int8 import _loader  # pylint: disable=g-import-not-at-top
  lib = ctypes.CDLL(_loader.library_path())
  lib.tf_fused_int8_step_times.restype = ctypes.c_char_p
  lib.tf_fused_int8_step_times.argtypes = [ctypes.c_int]
  return lib


def read_step_times(clear=False):
  """[{node, step, calls, total_ns, what}] recorded so far in this process."""
  text = _lib().tf_fused_int8_step_times(1 if clear else 0).decode()
  rows = []
  for line in text.splitlines():
    node, step, calls, total, what = line.split("\t", 4)
    rows.append(dict(node=node, step=int(step), calls=int(calls),
                     total_ns=int(total), what=what))
  return rows


def measure(model, x, calls=500, warmup=20, runner=False):
  """Runs tf.function(model)(x) `calls` times with the step timing on
  (runner=True: through tf_fused_int8.InferenceRunner, x as numpy).

  Returns (step rows with "us" per call, the call's median in us). The
  sequence kernels must be made while TF_FUSED_INT8_STEP_TIMES=1, so the
  function is traced here, after the variable is set.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  old = os.environ.get(ENV)
  os.environ[ENV] = "1"
  try:
    if runner:
      import tf_fused_int8  # pylint: disable=g-import-not-at-top
      f = tf_fused_int8.InferenceRunner(model)
      x = np.asarray(x)
    else:
      f = tf.function(model)
    for _ in range(warmup):
      f(x)
    read_step_times(clear=True)
    ts = []
    for _ in range(calls):
      t = time.perf_counter()
      f(x)
      ts.append(time.perf_counter() - t)
    rows = read_step_times(clear=True)
  finally:
    if old is None:
      os.environ.pop(ENV, None)
    else:
      os.environ[ENV] = old
  for r in rows:
    r["us"] = r["total_ns"] / max(r["calls"], 1) / 1e3
  return rows, float(np.median(ts)) * 1e6


def format_table(rows, call_us):
  total = sum(r["us"] for r in rows)
  lines = [f"{'node':<28} {'step':>4}  {'us':>8}  {'%':>5}  step"]
  for r in rows:
    lines.append(f"{r['node'][-28:]:<28} {r['step']:>4}  {r['us']:8.1f}  "
                 f"{100 * r['us'] / total if total else 0:5.1f}  {r['what']}")
  lines.append(f"steps: {len(rows)}, their sum {total:.1f} us per call; "
               f"whole call median {call_us:.1f} us; outside the steps "
               f"{call_us - total:.1f} us")
  return "\n".join(lines)


def main(argv=None):
  import argparse  # pylint: disable=g-import-not-at-top
  p = argparse.ArgumentParser(
      prog="python -m tf_fused_int8.benchmark.step_times",
      description=__doc__.split("\n\n")[0])
  p.add_argument("model", help="a quantized .keras model")
  p.add_argument("--batch", type=int, default=1)
  p.add_argument("--threads", type=int, default=2)
  p.add_argument("--calls", type=int, default=500)
  p.add_argument("--runner", action="store_true",
                 help="call the model through tf_fused_int8.InferenceRunner "
                      "instead of a tf.function")
  p.add_argument("--input", default="",
                 help=".npy images (float, the model's input shape); "
                      "default: uniform random in [-1, 1]")
  args = p.parse_args(argv)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(args.threads)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  import keras  # pylint: disable=g-import-not-at-top
  import tf_fused_int8  # pylint: disable=g-import-not-at-top,unused-import
  from tf_fused_int8 import layers  # pylint: disable=g-import-not-at-top
  from tf_fused_int8 import quantization  # pylint: disable=g-import-not-at-top
  model = keras.models.load_model(args.model, compile=False)
  if not any(isinstance(l, layers.QuantizedConvSequence)
             for l in model.layers):
    model = quantization.fuse_conv_sequences(model)
  if args.input:
    x = np.load(args.input)[:args.batch].astype(np.float32)
  else:
    shape = (args.batch,) + tuple(model.inputs[0].shape[1:])
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
  rows, call_us = measure(model, tf.constant(x), calls=args.calls,
                          runner=args.runner)
  if not rows:
    raise SystemExit("step_times: the model has no FusedInt8ConvSequence "
                     "node on the CPU (nothing to time)")
  print(format_table(rows, call_us))


if __name__ == "__main__":
  main()
