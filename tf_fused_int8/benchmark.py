"""Benchmark CLI: our fused int8 conv vs TensorFlow's own kernels, side by side.

    python -m tf_fused_int8.benchmark                      # everything below
    python -m tf_fused_int8.benchmark --batches=1 --threads=2 --layers=0,3
    python -m tf_fused_int8.benchmark --paths=avx2,avxvnni,avx512vnni
    python -m tf_fused_int8.benchmark --paths=neon,dotprod,i8mm   # aarch64
    python -m tf_fused_int8.benchmark --suite=mobilenet_v2_dw  # depthwise 3x3

For each ResNet-50 layer of ``tf_fused_int8.testing.resnet50_cases`` (inputs
from ``testing.make_inputs``), each batch size and each thread count, in one
run, it times:

  * ours:     this package's op (CPU kernel picked automatically), plus each
              path in ``--paths`` forced with TF_FUSED_INT8_CPU_KERNEL;
  * tf-int8:  TensorFlow's built-in int8 ``_FusedConv2D`` CPU kernel (which
              casts to float and runs a float contraction);
  * fp32:     ``tf.nn.conv2d`` + ``bias_add`` + ``relu`` in a ``tf.function``
              on the same values as float32 (TF may fuse these itself);

With ``--suite=mobilenet_v2_dw`` the layers are MobileNetV2's depthwise 3x3
convolutions (``testing.mobilenet_v2_depthwise_cases``; our op with groups =
channels). TensorFlow has no int8 depthwise kernel, so tf-int8 is "-" and fp32
is ``tf.nn.depthwise_conv2d`` + ``bias_add`` + ``relu``; the check column then
compares our output with TF's float depthwise accumulators (exact: |partial
sums| <= 9 * 2^14 < 2^24) put through the contract's epilogue in numpy
float32 (no side input: scale multiply, bias add, round half to even, clip).

It prints milliseconds per call (best of ``--repeats``, each repeat running
at least ``--min_time`` seconds; the three are interleaved so that load from
other processes hits them alike), effective GOPS (2 * MACs / time), and the
speedups ours vs tf-int8 and ours vs fp32 (their time / our time). The check
column compares our output with TF's int8 kernel bit for bit: "exact" when
equal; TF accumulates in float, which is exact while partial sums stay within
2^24 (Kh*Kw*Ci <= 1024 guarantees it), so a difference there is a bug
("MISMATCH"), while a few differences beyond that are TF's rounding ("~N").

Our op and TF's int8 kernel are both dispatched with one eager
``execute.execute`` call on prepared tensors, so that per-call overhead is
the same for both.

Thread counts are set with tf.config.threading before TensorFlow starts, which
is only possible once per process, so each thread count runs in a child
process (this module re-invoked with --_child) and the parent prints one table.
numpy's OpenBLAS pool is pinned to one thread (its idle workers spin and would
steal a core from the kernels being timed). Times include one eager op
dispatch (a tf.function call for fp32).
"""

import gc
import json
import os
import platform
import subprocess
import sys
import time

# Before numpy loads (tf_fused_int8.testing imports it).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from absl import app
from absl import flags

from tf_fused_int8 import testing

FLAGS = flags.FLAGS

flags.DEFINE_list("batches", ["1", "8"], "Batch sizes.")
flags.DEFINE_enum("suite", "resnet50", ["resnet50", "mobilenet_v2_dw"],
                  "Layer set: ResNet-50's convolutions or MobileNetV2's "
                  "depthwise 3x3 layers.")
flags.DEFINE_list("threads", ["1", "2"],
                  "Intra-op thread counts (one child process each).")
flags.DEFINE_list(
    "layers", [],
    "Layers to run: indices into the --suite's layers, or custom "
    "'HxWxCi:KhxKwxCo:stride[:gGROUPS]' specs (groups as tf.nn.conv2d; "
    "gCi is depthwise). Default: all of the suite's layers.")
flags.DEFINE_list("paths", [],
                  "Extra columns: CPU kernel paths to force (e.g. "
                  "avx2,avxvnni,avx512vnni,portable; on aarch64 "
                  "neon,dotprod,i8mm).")
flags.DEFINE_integer("repeats", 5, "Timed repeats (best is reported).")
flags.DEFINE_float("min_time", 0.2, "Minimum seconds per timed repeat.")
flags.DEFINE_bool("tf_int8", True, "Time TF's built-in int8 _FusedConv2D.")
flags.DEFINE_bool("fp32", True, "Time TF fp32 conv2d + bias_add + relu.")
flags.DEFINE_bool("check", True,
                  "Compare our output with TF's int8 kernel, bit for bit.")
flags.DEFINE_string("json", "", "Also write the results to this JSON file.")
flags.DEFINE_bool("_child", False, "Internal: run one thread count here.")

KERNEL_ENV = "TF_FUSED_INT8_CPU_KERNEL"
_RESULT_TAG = "BENCHMARK_RESULT "


# ----------------------------------------------------------------- the cases

def _parse_triple(text, what):
  parts = text.lower().split("x")
  if len(parts) != 3:
    raise ValueError(f"{what} must look like AxBxC, got {text!r}")
  return tuple(int(p) for p in parts)


def suite_cases(suite, batch):
  if suite == "mobilenet_v2_dw":
    return testing.mobilenet_v2_depthwise_cases(batch)
  return testing.resnet50_cases(batch)


def layer_cases(layer_specs, batch, suite="resnet50"):
  """ConvCases for the --layers specs (all of the suite's layers by default)."""
  known = suite_cases(suite, batch)
  if not layer_specs:
    return known
  cases = []
  for spec in layer_specs:
    spec = spec.strip()
    if spec.isdigit():
      cases.append(known[int(spec)])
      continue
    try:
      parts = spec.split(":")
      if len(parts) not in (3, 4):
        raise ValueError("expected 3 or 4 ':'-separated parts")
      image, kernel, stride = parts[:3]
      h, w, ci = _parse_triple(image, "image")
      kh, kw, co = _parse_triple(kernel, "kernel")
      s = int(stride)
      groups = 1
      if len(parts) == 4:
        if not parts[3].lower().startswith("g"):
          raise ValueError("the groups part must look like g<GROUPS>")
        groups = int(parts[3][1:])
        if groups < 1 or ci % groups or co % groups:
          raise ValueError(f"groups {groups} must divide Ci {ci} and Co {co}")
    except ValueError as e:
      raise app.UsageError(
          f"--layers entry {spec!r}: expected an index 0-"
          f"{len(known) - 1} or HxWxCi:KhxKwxCo:stride[:gGROUPS] ({e})")
    cases.append(testing.ConvCase(batch=batch, height=h, width=w,
                                  in_channels=ci, kernel_h=kh, kernel_w=kw,
                                  out_channels=co, stride_h=s, stride_w=s,
                                  padding="SAME", groups=groups))
  return cases


def layer_name(case):
  name = (f"{case.height}x{case.width}x{case.in_channels} "
          f"{case.kernel_h}x{case.kernel_w}x{case.out_channels} "
          f"s{case.stride_h}")
  if case.groups == case.in_channels and case.groups > 1:
    name += " dw"
  elif case.groups > 1:
    name += f" g{case.groups}"
  return name


def _is_depthwise(case):
  return case.groups > 1 and case.groups == case.in_channels


# ------------------------------------------------------- the three callables

def _our_op(tf, case, inputs):
  """Our op, dispatched like TF's kernel below (one eager execute call)."""
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
  from tensorflow.python.eager import execute  # pylint: disable=g-import-not-at-top
  from tf_fused_int8 import _loader  # pylint: disable=g-import-not-at-top
  _loader.load_ops()  # registers the op
  tensors = [tf.constant(inputs["conv_input"]), tf.constant(inputs["filter"]),
             tf.constant(inputs["bias"]), tf.zeros([0], tf.int8),
             tf.constant(inputs["conv_input_scale"]),
             tf.constant(inputs["side_input_scale"])]
  attrs = ("T", tf.int8.as_datatype_enum,
           "strides", [1, case.stride_h, case.stride_w, 1],
           "padding", case.padding.encode(), "data_format", b"NHWC",
           "filter_format", b"HWIO",
           "activation_mode", case.activation.encode(),
           "dilations", [1, case.dilation_h, case.dilation_w, 1])
  ctx = context.context()
  ctx.ensure_initialized()

  def fn():
    return execute.execute(b"FusedInt8Conv2DBiasActivation", 1, tensors,
                           attrs, ctx)[0]
  return fn


def _tf_int8_op(tf, case, inputs):
  """TF's built-in int8 _FusedConv2D CPU kernel (not in tf.raw_ops).

  Same call form as tests/tf_builtin.py (which documents it): inputs
  (input, filter, bias, side_input or empty, conv_input_scale,
  side_input_scale), T=int8, fused_ops BiasAdd[+Relu], NHWC / HWIO.
  """
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
  from tensorflow.python.eager import execute  # pylint: disable=g-import-not-at-top
  if case.dilations != (1, 1) or case.groups != 1:
    return None  # TF's int8 kernel has no dilation and no groups
  int8, f32 = tf.int8, tf.float32
  scale = inputs["conv_input_scale"]
  tensors = [tf.constant(inputs["conv_input"]), tf.constant(inputs["filter"]),
             tf.constant(inputs["bias"]), tf.zeros([0], int8),
             tf.constant(scale.reshape(()) if scale.size == 1 else scale),
             tf.constant(inputs["side_input_scale"])]
  fused_ops = [b"BiasAdd", b"Relu"] if case.activation == "Relu" else [b"BiasAdd"]
  attrs = ("T", int8.as_datatype_enum,
           "TArgs", [f32.as_datatype_enum, int8.as_datatype_enum],
           "num_args", 2, "num_host_args", 2,
           "strides", [1, case.stride_h, case.stride_w, 1],
           "padding", case.padding.encode(), "explicit_paddings", [],
           "data_format", b"NHWC", "filter_format", b"HWIO",
           "dilations", [1, 1, 1, 1], "use_cudnn_on_gpu", False,
           "fused_ops", fused_ops, "epsilon", 1e-4, "leakyrelu_alpha", 0.2)
  ctx = context.context()
  ctx.ensure_initialized()

  def fn():
    return execute.execute(b"_FusedConv2D", 1, tensors, attrs, ctx)[0]
  return fn


def _fp32_conv(tf, case, x, w):
  """TF's float convolution of `case` (depthwise: tf.nn.depthwise_conv2d)."""
  strides = [1, case.stride_h, case.stride_w, 1]
  if _is_depthwise(case):
    mult = case.out_channels // case.in_channels
    w = tf.reshape(w, [case.kernel_h, case.kernel_w, case.in_channels, mult])
    dil = (case.dilation_h, case.dilation_w)
    return tf.nn.depthwise_conv2d(x, w, strides, case.padding,
                                  dilations=None if dil == (1, 1) else dil)
  return tf.nn.conv2d(x, w, strides=strides, padding=case.padding,
                      dilations=[1, case.dilation_h, case.dilation_w, 1])


def _fp32_op(tf, case, inputs):
  x = tf.constant(inputs["conv_input"].astype("float32"))
  w = tf.constant(inputs["filter"].astype("float32"))
  b = tf.constant(inputs["bias"])

  @tf.function
  def fn():
    return tf.nn.relu(tf.nn.bias_add(_fp32_conv(tf, case, x, w), b))
  if case.groups > 1 and not _is_depthwise(case):
    try:
      fn()
    except Exception:  # pylint: disable=broad-except
      return None  # TF's CPU conv2d may refuse grouped filters
  return fn


def _depthwise_expected(tf, case, inputs):
  """The contract's output from TF's float depthwise accumulators (exact for
  3x3 int8: |partial sums| < 2^24) and a float32 numpy epilogue (no side
  input: y = f32(acc) * scale + bias, round half to even, clip)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  acc = _fp32_conv(tf, case, tf.constant(inputs["conv_input"].astype("float32")),
                   tf.constant(inputs["filter"].astype("float32"))).numpy()
  y = acc.astype(np.float32) * inputs["conv_input_scale"].astype(np.float32)
  y = y + inputs["bias"].astype(np.float32)
  lo = 0.0 if case.activation == "Relu" else -128.0
  return np.clip(np.rint(y), lo, 127).astype(np.int8)


# ------------------------------------------------------------------ timing

def _calibrate(fn, min_time):
  """Iterations per repeat so that one repeat lasts about min_time."""
  n = 1
  while True:
    t0 = time.perf_counter()
    for _ in range(n):
      fn()
    dt = time.perf_counter() - t0
    if dt >= min_time or n >= 1 << 20:
      return n
    n = max(n + 1, min(n * 10, int(n * min_time / max(dt, 1e-7) * 1.1) + 1))


def _time_interleaved(fns, repeats, min_time):
  """Best seconds per call of each fn (None entries stay None).

  Python's garbage collector is off while timing (as in timeit): a full
  collection of TensorFlow's object graph would land in whichever loop
  happens to trigger it.
  """
  gc_was_enabled = gc.isenabled()
  gc.disable()
  try:
    return _time_interleaved_no_gc(fns, repeats, min_time)
  finally:
    if gc_was_enabled:
      gc.enable()


def _time_interleaved_no_gc(fns, repeats, min_time):
  live = {k: f for k, f in fns.items() if f is not None}
  for f in live.values():
    f()  # warm up: weight packing, kernel caches, tracing
  iters = {k: _calibrate(f, min_time) for k, f in live.items()}
  best = {k: float("inf") for k in live}
  for _ in range(max(1, repeats)):
    for k, f in live.items():
      n = iters[k]
      t0 = time.perf_counter()
      for _ in range(n):
        f()
      best[k] = min(best[k], (time.perf_counter() - t0) / n)
  return {k: best.get(k) for k in fns}


def _forced(path, fn):
  def run():
    old = os.environ.get(KERNEL_ENV)
    os.environ[KERNEL_ENV] = path
    try:
      return fn()
    finally:
      if old is None:
        os.environ.pop(KERNEL_ENV, None)
      else:
        os.environ[KERNEL_ENV] = old
  return run


def _auto_path_guess():
  """The path the op's auto dispatch picks, from /proc/cpuinfo (display only):
  the x86 "flags" line, or on aarch64 the "Features" line."""
  try:
    with open("/proc/cpuinfo") as f:
      flags = next((l.split(":", 1)[1].split() for l in f
                    if l.split(":", 1)[0].strip() in ("flags", "Features")), [])
  except OSError:
    return "unknown CPU"
  flags = set(flags)
  if platform.machine().lower() in ("aarch64", "arm64"):
    # dispatch.cc: HWCAP2_I8MM (with dot product), HWCAP_ASIMDDP, HWCAP_ASIMD.
    if {"asimd", "asimddp", "i8mm"} <= flags:
      return "i8mm"
    if {"asimd", "asimddp"} <= flags:
      return "dotprod"
    return "neon" if "asimd" in flags else "portable"
  if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "fma"} <= flags:
    return "avx512vnni"
  if {"avx2", "fma", "avx_vnni"} <= flags:
    return "avxvnni"
  if {"avx2", "fma"} <= flags:
    return "avx2"
  return "portable"


def _check(case, ours, theirs):
  if theirs is None:
    return "n/a"
  a = ours.numpy().view("int8")
  b = theirs.view("int8") if hasattr(theirs, "view") else theirs.numpy().view("int8")
  diffs = int((a != b).sum())
  if diffs == 0:
    return "exact"
  depth = case.kernel_h * case.kernel_w * (case.in_channels // case.groups)
  return "MISMATCH" if depth <= 1024 else f"~{diffs}"


def run_child(threads):
  """Runs every case at one thread count; prints one JSON line per result."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  from tf_fused_int8 import _loader  # pylint: disable=g-import-not-at-top
  library = _loader.library_path()
  kernel = os.environ.get(KERNEL_ENV) or f"auto ({_auto_path_guess()})"
  with tf.device("/CPU:0"):
    for batch in (int(b) for b in FLAGS.batches):
      for case in layer_cases(FLAGS.layers, batch, FLAGS.suite):
        inputs = testing.make_inputs(case, seed=0)
        ours = _our_op(tf, case, inputs)
        fns = {"ours": ours}
        for path in FLAGS.paths:
          fns["path:" + path] = _forced(path, ours)
        fns["tf_int8"] = _tf_int8_op(tf, case, inputs) if FLAGS.tf_int8 else None
        fns["fp32"] = _fp32_op(tf, case, inputs) if FLAGS.fp32 else None
        theirs = None
        if fns["tf_int8"] is not None:
          try:
            theirs = fns["tf_int8"]()
          except Exception as e:  # pylint: disable=broad-except
            print(f"TF's int8 _FusedConv2D is unavailable here: {e}",
                  file=sys.stderr)
            fns["tf_int8"] = None
        check = "n/a"
        if FLAGS.check and theirs is None and _is_depthwise(case):
          theirs = _depthwise_expected(tf, case, inputs)
        if FLAGS.check and theirs is not None:
          check = _check(case, ours(), theirs)
        times = _time_interleaved(fns, FLAGS.repeats, FLAGS.min_time)
        result = dict(layer=layer_name(case), batch=batch, threads=threads,
                      macs=case.macs(), check=check, library=library,
                      kernel=kernel,
                      seconds={k: v for k, v in times.items()})
        print(_RESULT_TAG + json.dumps(result), flush=True)


# ------------------------------------------------------------------- table

def _fmt_ms(s):
  return "-" if s is None else f"{s * 1e3:.3f}"


def _fmt_gops(macs, s):
  return "-" if s is None else f"{2 * macs / s / 1e9:.0f}"


def _fmt_ratio(num, den):
  return "-" if num is None or den is None else f"{num / den:.2f}x"


def format_table(results, paths):
  header = ["layer", "batch", "thr", "ours ms", "ours GOPS"]
  for p in paths:
    header += [f"{p} ms", f"{p} GOPS"]
  header += ["tf-int8 ms", "tf-int8 GOPS", "fp32 ms", "fp32 GOPS",
             "vs tf-int8", "vs fp32", "check"]
  rows = []
  for r in results:
    s = r["seconds"]
    macs = r["macs"]
    row = [r["layer"], str(r["batch"]), str(r["threads"]),
           _fmt_ms(s["ours"]), _fmt_gops(macs, s["ours"])]
    for p in paths:
      t = s.get("path:" + p)
      row += [_fmt_ms(t), _fmt_gops(macs, t)]
    row += [_fmt_ms(s.get("tf_int8")), _fmt_gops(macs, s.get("tf_int8")),
            _fmt_ms(s.get("fp32")), _fmt_gops(macs, s.get("fp32")),
            _fmt_ratio(s.get("tf_int8"), s["ours"]),
            _fmt_ratio(s.get("fp32"), s["ours"]), r["check"]]
    rows.append(row)
  widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
            for i, h in enumerate(header)]
  lines = ["  ".join(h.rjust(w) if i else h.ljust(w)
                     for i, (h, w) in enumerate(zip(header, widths)))]
  lines.append("  ".join("-" * w for w in widths))
  for row in rows:
    lines.append("  ".join(c.rjust(w) if i else c.ljust(w)
                           for i, (c, w) in enumerate(zip(row, widths))))
  return "\n".join(lines)


def _child_args(threads):
  args = [sys.executable, "-m", "tf_fused_int8.benchmark", "--_child",
          f"--threads={threads}", f"--batches={','.join(FLAGS.batches)}",
          f"--repeats={FLAGS.repeats}", f"--min_time={FLAGS.min_time}",
          f"--tf_int8={FLAGS.tf_int8}", f"--fp32={FLAGS.fp32}",
          f"--check={FLAGS.check}", f"--suite={FLAGS.suite}"]
  if FLAGS.layers:
    args.append(f"--layers={','.join(FLAGS.layers)}")
  if FLAGS.paths:
    args.append(f"--paths={','.join(FLAGS.paths)}")
  return args


def run_parent():
  results = []
  for threads in (int(t) for t in FLAGS.threads):
    proc = subprocess.run(_child_args(threads), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, check=False)
    got = [json.loads(line[len(_RESULT_TAG):])
           for line in proc.stdout.splitlines() if line.startswith(_RESULT_TAG)]
    if proc.returncode != 0:
      sys.stderr.write(proc.stderr)
      raise SystemExit(f"benchmark child (--threads={threads}) failed with "
                       f"exit code {proc.returncode}")
    results += got
  order = {}
  for r in results:
    order.setdefault(r["layer"], len(order))
  results.sort(key=lambda r: (r["batch"], order[r["layer"]], r["threads"]))
  print(f"tf_fused_int8 benchmark: ms per call (best of {FLAGS.repeats}), "
        f"GOPS = 2*MACs/time; 'vs' = speedup of ours (their time / ours)")
  for lib in sorted({r.get("library", "?") for r in results}):
    print(f"op library: {lib}; CPU kernel: "
          f"{', '.join(sorted({r.get('kernel', '?') for r in results}))}")
  print(format_table(results, FLAGS.paths))
  if FLAGS.json:
    with open(FLAGS.json, "w") as f:
      json.dump(results, f, indent=1)
  return results


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if FLAGS._child:  # pylint: disable=protected-access
    if len(FLAGS.threads) != 1:
      raise app.UsageError("--_child runs exactly one --threads value")
    run_child(int(FLAGS.threads[0]))
  else:
    run_parent()


if __name__ == "__main__":
  app.run(main)
