"""The benchmark CLI's parent process: workers, interleaved timing, tables.

See the package docstring (tf_fused_int8/benchmark/__init__.py) for what is
measured and how; this module only orchestrates.
"""

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import flags

from tf_fused_int8 import testing
from tf_fused_int8.benchmark import cases as cases_lib
from tf_fused_int8.benchmark import tables
from tf_fused_int8.benchmark.workers import exactness
from tf_fused_int8.benchmark.workers import protocol

FLAGS = flags.FLAGS

SUITES = ("resnet50", "mobilenet_v2", "mobilenet_v2_dw", "models")
# impl -> worker family. "ours@PATH" rows belong to "ours" too.
FAMILY = {
    "ours": "ours", "ours_eager": "ours", "ours_runner": "ours",
    "ours_concrete": "ours",
    "tf_int8": "ours", "tf_fp32": "ours",
    "litert": "litert",
    "onnxruntime_u8": "onnxruntime", "onnxruntime_s8": "onnxruntime",
    "torch_x86": "torch", "torch_onednn": "torch",
    "openvino_fp32": "openvino", "openvino_int8": "openvino",
}
# The models suite's other ways of calling our model: impl -> its rows' mode.
OURS_MODES = {"ours_concrete": "concrete", "ours_runner": "runner",
              "ours_eager": "eager"}
PEER_ALIASES = {
    "onnxruntime": ("onnxruntime_u8", "onnxruntime_s8"),
    "torch": ("torch_x86", "torch_onednn"),
    "openvino": ("openvino_fp32", "openvino_int8"),
}
PEERS = ("litert", "onnxruntime_u8", "onnxruntime_s8", "torch_x86",
         "torch_onednn", "openvino_fp32", "openvino_int8")
# Families that run in the peers' venv (no TensorFlow there).
PEER_VENV_FAMILIES = ("onnxruntime", "torch", "openvino")
# The throughput loop each of our paths is measured against (--peak).
PATH_PEAK = {"avx2": "vpmaddwd_ymm", "avx2_direct": "vpmaddwd_ymm",
             "avx2_winograd": "vpmaddwd_ymm", "avxvnni": "vpdpbusd_ymm",
             "avx512vnni": "vpdpbusd_zmm", "amx": "tdpbssd"}
# On a layer whose inputs are in [0, 127] (--layer_inputs=model, a ReLU's
# output) the avx2 GEMM multiplies with VPMADDUBSW (gemm_avx2.cc); its
# Winograd (3x3 stride 1 layers on avx2, see peak_for) keeps VPMADDWD.
NON_NEGATIVE_PATH_PEAK = dict(PATH_PEAK, avx2="vpmaddubsw_ymm",
                              avx2_direct="vpmaddubsw_ymm")
# Depthwise rows use the int16 pair instructions (exact VPMADDWD/VPDPWSSD).
DEPTHWISE_PEAK = {"avx2": "vpmaddwd_ymm", "avxvnni": "vpmaddwd_ymm",
                  "avx512vnni": "vpdpwssd_zmm"}
# The contract epilogue each path's kernels run (--peak: one op an output,
# cc/core/cpu/peak/peak.h): a layer's limit (%lim) is its MACs at its
# PATH_PEAK loop plus its outputs at this loop.
PATH_EPILOGUE = {"avx2": "epilogue_ymm", "avx2_direct": "epilogue_ymm",
                 "avx2_winograd": "epilogue_ymm", "avxvnni": "epilogue_ymm",
                 "avx512vnni": "epilogue_zmm", "amx": "epilogue_zmm"}
# The memory limit (--peak): the copy loop (cc/core/cpu/peak/peak.h) reading
# and writing this many bytes (all threads together) each way, far beyond
# the caches. Depthwise rows are set against it (%mem) and against the same
# loop moving the layer's own input and output bytes (%copy).
MEMORY_COPY_BYTES = 256 << 20
MEMORY_LIMIT = "copy_memory"

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
WORKER_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "workers", "worker.py")
SETUP_PEERS = "tools/setup_bench_peers.sh"


def define_flags():
  flags.DEFINE_enum("suite", "resnet50", SUITES,
                    "resnet50: ResNet-50's convolutions; mobilenet_v2: each "
                    "distinct MobileNetV2 convolution; mobilenet_v2_dw: "
                    "MobileNetV2's depthwise 3x3 layers; models: whole "
                    "keras.applications models (--models).")
  flags.DEFINE_list("batches", ["1", "8"], "Batch sizes.")
  flags.DEFINE_list("threads", ["1", "2"],
                    "Thread counts (each implementation gets the same).")
  flags.DEFINE_list(
      "layers", [],
      "Layers to run: indices into the --suite's layers, or custom "
      "'HxWxCi:KhxKwxCo:stride[:gGROUPS]' specs (groups as tf.nn.conv2d; "
      "gCi is depthwise). Default: all of the suite's layers.")
  flags.DEFINE_list("paths", [],
                    "Extra columns: our CPU kernel paths forced with "
                    "TF_FUSED_INT8_CPU_KERNEL (e.g. avx2,avx512vnni,portable; "
                    "on aarch64 neon,dotprod,i8mm).")
  flags.DEFINE_list(
      "peers", [],
      "Peers to run beside ours: litert, onnxruntime (= onnxruntime_u8,"
      "onnxruntime_s8), torch (= torch_x86,torch_onednn), openvino "
      "(= openvino_fp32,openvino_int8; models suite), or all. The peers "
      f"but litert need the venv of {SETUP_PEERS}.")
  flags.DEFINE_enum(
      "layer_inputs", "model", ["model", "uniform"],
      "Layer suites' inputs: uniform int8, or (model) as the layer reads "
      "them in its model: max(x, 0) of the same random x for a layer that "
      "reads a ReLU's output there (every ResNet-50 layer but the stem; "
      "MobileNetV2's depthwise layers and 1x1 projections), uniform for the "
      "rest and for custom --layers specs. Our avx2 path multiplies inputs "
      "in [0, 127] with exact VPMADDUBSW, faster than on signed ones.")
  flags.DEFINE_list("models", ["ResNet50", "MobileNetV2"],
                    "--suite=models: keras.applications models by name "
                    "(ResNet50, MobileNetV2, ...), the 1-D models M5Audio "
                    "(raw audio) and TCN (time series), or the transposed-"
                    "convolution models DCGAN (TF's DCGAN tutorial's "
                    "generator) and ConvAutoencoder (Keras's denoising "
                    "example at 224 x 224).")
  flags.DEFINE_integer("calibration_images", 8,
                       "--suite=models: random calibration images.")
  flags.DEFINE_integer("repeats", 5, "Timed repeats (best is reported).")
  flags.DEFINE_float("min_time", 0.2, "Minimum seconds per timed repeat.")
  flags.DEFINE_bool("tf_int8", True, "Time TF's built-in int8 _FusedConv2D.")
  flags.DEFINE_bool("fp32", True, "Time TF fp32 conv2d + bias_add + relu.")
  flags.DEFINE_enum("fp32_max_isa", "", ["", "SSE41", "AVX", "AVX2",
                                         "AVX2_VNNI", "AVX512_CORE",
                                         "AVX512_CORE_VNNI"],
                    "Limit TF's oneDNN (tf_fp32, tf_int8) to this instruction "
                    "set (ONEDNN_MAX_CPU_ISA in our worker), e.g. AVX2 to "
                    "compare --paths=avx2 with float as a CPU without "
                    "AVX-512 runs it. Our kernels do not use oneDNN.")
  flags.DEFINE_enum("peer_isa", "", ["", "avx2", "avxvnni", "avx512vnni"],
                    "Show the peers (their workers only) a CPU whose widest "
                    "int8 instructions are these: CPUID answers without "
                    "AVX-512, VNNI or AMX (avx2), without AVX-512 or AMX but "
                    "with AVX-VNNI (avxvnni: Intel Alder Lake-class client "
                    "cores), or without AMX "
                    "(avx512vnni), so XNNPACK, MLAS and oneDNN pick the "
                    "kernels they run on such a CPU, to compare with "
                    "--paths=avx2 / avxvnni / avx512vnni. x86-64 Linux CPUs with CPUID "
                    "faulting (the 'cpuid_fault' flag, also in KVM guests); "
                    "workers/cpuid_mask.c, compiled with cc. Our rows: "
                    "--paths. TF's (tf_fp32, tf_int8): oneDNN limited to the "
                    "same unless --fp32_max_isa says otherwise.")
  flags.DEFINE_bool("check", True,
                    "Compare our output with TF's int8 kernel, bit for bit.")
  flags.DEFINE_bool("probes", True,
                    "Decide the exactness column (two probes per layer and "
                    "implementation).")
  flags.DEFINE_bool("peak", False,
                    "Measure this CPU's instruction limits (C++ loops, 1 and "
                    "N threads) and show each ours row's % of its path's.")
  flags.DEFINE_float("peak_time", 0.3, "Seconds per --peak measurement.")
  flags.DEFINE_integer("graph_ops", 16,
                       "Ops per tf.function call for the in-graph rows; each "
                       "is also timed with twice as many, and a row is the "
                       "difference over graph_ops (one more op's cost).")
  flags.DEFINE_string("json", "", "Also write one JSON object per row here "
                      "(a JSON array).")
  flags.DEFINE_string("plot", "", "Also plot ours / best peer per row to "
                      "this PNG (needs matplotlib in .venv or the peers venv).")
  flags.DEFINE_string("peers_python", "",
                      "Python of the peers' venv (default: "
                      "$TF_FUSED_INT8_PEERS_PYTHON or <repo>/.venv-peers).")
  flags.DEFINE_string("work_dir", "", "Keep data, logs and converted models "
                      "here, and reuse the models suite's prepared models "
                      "(default: a temporary directory, removed).")


# ------------------------------------------------------------------ workers

class WorkerError(RuntimeError):
  pass


class Worker:
  """One worker process (workers/worker.py) and its command channel."""

  def __init__(self, family, python, threads, work_dir, env):
    self.family = family
    self.log_path = os.path.join(work_dir, f"worker_{family}_t{threads}.log")
    self._log = open(self.log_path, "w")  # pylint: disable=consider-using-with
    self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
        [python, WORKER_PY, f"--family={family}", f"--threads={threads}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
        text=True, env=env, cwd=work_dir)
    first = self._read()
    if not first.get("ok"):
      self.close()
      raise WorkerError(first.get("error", "failed to start"))
    self.info = first.get("info", {})

  def _read(self):
    while True:
      line = self.proc.stdout.readline()
      if not line:
        self._log.flush()
        with open(self.log_path) as f:
          tail = f.read()[-2000:]
        raise WorkerError(f"worker {self.family} exited "
                          f"(rc {self.proc.poll()}); log tail:\n{tail}")
      reply = protocol.parse_reply(line)
      if reply is not None:
        return reply

  def call(self, op, **msg):
    msg["op"] = op
    try:
      self.proc.stdin.write(json.dumps(msg) + "\n")
      self.proc.stdin.flush()
    except OSError:
      pass  # it died: _read reports how, from its log
    reply = self._read()
    if not reply.get("ok"):
      raise WorkerError(reply.get("error", "?"))
    return reply

  def close(self):
    if self.proc.poll() is None:
      try:
        self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=30)
      except (OSError, subprocess.TimeoutExpired):
        self.proc.kill()
    self._log.close()


def peers_python():
  if FLAGS.peers_python:
    return FLAGS.peers_python
  env = os.environ.get("TF_FUSED_INT8_PEERS_PYTHON")
  if env:
    return env
  return os.path.join(ROOT, ".venv-peers", "bin", "python")


def selected_impls():
  """Requested implementations, in table order."""
  impls = ["ours", "ours_eager"] + [f"ours@{p}" for p in FLAGS.paths]
  if FLAGS.tf_int8:
    impls.append("tf_int8")
  if FLAGS.fp32:
    impls.append("tf_fp32")
  for p in FLAGS.peers:
    p = p.strip()
    if not p:
      continue
    names = PEERS if p == "all" else PEER_ALIASES.get(p, (p,))
    for name in names:
      if name not in PEERS:
        raise ValueError(
            f"--peers: unknown peer {p!r}; known: all, litert, onnxruntime, "
            f"torch, openvino, {', '.join(PEERS)}")
      if name not in impls:
        impls.append(name)
  if FLAGS.suite == "models":
    # ours_concrete: the same tf.function's concrete function for the
    # input's signature, called directly (models only, auto path);
    # ours_runner: the same model through InferenceRunner (models only),
    # also with each --paths path forced; ours_eager: the model called
    # eagerly, model(x, training=False) (auto path).
    impls.insert(1, "ours_concrete")
    impls.insert(2, "ours_runner")
    impls += [f"ours_runner@{p}" for p in FLAGS.paths]
    impls = [i for i in impls if i in ("ours", "tf_fp32", "litert",
                                       "openvino_fp32", "openvino_int8")
             or i in OURS_MODES or i.startswith(("ours@", "ours_runner@"))]
  else:
    impls = [i for i in impls if not i.startswith("openvino")]
  return impls


def family_of(impl):
  return FAMILY[impl.split("@")[0]]


# --peer_isa's default for --fp32_max_isa: TF's own columns are peers too.
PEER_ISA_ONEDNN = {"avx2": "AVX2", "avxvnni": "AVX2_VNNI",
                   "avx512vnni": "AVX512_CORE_VNNI"}
CPUID_MASK_SRC = os.path.join(os.path.dirname(WORKER_PY), "cpuid_mask.c")
CPUID_MASK_STATES = {
    0: "the library was not loaded (LD_PRELOAD ignored?)",
    -1: "unknown instruction-set name",
    -2: "this CPU or kernel cannot make CPUID fault (no 'cpuid_fault' in "
        "/proc/cpuinfo's flags)",
    -3: "sigaction(SIGSEGV) failed",
    -4: "a library the peer loaded replaced the SIGSEGV handler that "
        "answers CPUID",
}


class PeerIsaError(RuntimeError):
  """--peer_isa cannot limit a peer here: the run stops (its table would
  compare ours on a small instruction set with peers on the full one)."""


def cpuid_mask_library(work_dir):
  """Compiles workers/cpuid_mask.c into work_dir; returns the .so's path."""
  out = os.path.join(work_dir, "libtfi_cpuid_mask.so")
  cc = os.environ.get("CC", "cc")
  try:
    r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", out,
                        CPUID_MASK_SRC], capture_output=True, text=True,
                       check=False)
  except OSError as e:
    raise PeerIsaError(f"--peer_isa needs a C compiler ({cc}): {e}") from e
  if r.returncode != 0:
    raise PeerIsaError(f"--peer_isa: {cc} could not build {CPUID_MASK_SRC}:"
                       f"\n{r.stderr[-1500:]}")
  return out


def peer_env(env, library):
  """env for a peer worker whose CPUID is limited to --peer_isa."""
  # After what the environment preloads: a sanitizer runtime must come
  # first (tools/asan_check.sh preloads libasan, which otherwise aborts the
  # worker at start); the mask only has to be in before the peer's own
  # libraries, which Python loads later.
  preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p] + [library]
  return dict(env, LD_PRELOAD=":".join(preload),
              TF_FUSED_INT8_CPUID_MASK=FLAGS.peer_isa)


def check_peer_isa(family, info, isa):
  state = info.get("cpuid_mask_state")
  if state != 1:
    raise PeerIsaError(
        f"--peer_isa={isa}: the {family} worker's CPUID is not "
        f"limited: {CPUID_MASK_STATES.get(state, f'state {state!r}')}")


def start_workers(impls, threads, work_dir, notes):
  """{family: Worker}; families that cannot start are reported in notes."""
  env = dict(os.environ)
  mask_library = cpuid_mask_library(work_dir) if FLAGS.peer_isa else None
  env["PYTHONPATH"] = os.pathsep.join(
      [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
  env["TF_FUSED_INT8_BENCH_GRAPH_OPS"] = str(FLAGS.graph_ops)
  fp32_isa = FLAGS.fp32_max_isa or PEER_ISA_ONEDNN.get(FLAGS.peer_isa, "")
  workers = {}
  for family in dict.fromkeys(family_of(i) for i in impls):
    python = sys.executable
    family_env = env
    limited = family != "ours" and mask_library is not None
    if family == "ours" and fp32_isa:
      # Read by oneDNN once, when TF first uses it: set before the worker
      # starts.
      family_env = dict(env, ONEDNN_MAX_CPU_ISA=fp32_isa)
    if limited:
      family_env = peer_env(env, mask_library)
    if family in PEER_VENV_FAMILIES:
      python = peers_python()
      if not os.path.exists(python):
        notes.add(f"{family}: skipped, not installed (run {SETUP_PEERS}, "
                  f"or pass --peers_python)")
        continue
    try:
      workers[family] = Worker(family, python, threads, work_dir, family_env)
      if limited:
        try:
          check_peer_isa(family, workers[family].info, FLAGS.peer_isa)
        except PeerIsaError:
          for w in workers.values():
            w.close()
          raise
        notes.add(f"peers: their CPUID says {FLAGS.peer_isa} is this CPU's "
                  f"widest int8 instruction set (--peer_isa; our rows are "
                  f"not limited, use --paths)")
      isa = workers[family].info.get("onednn_max_cpu_isa")
      if isa:  # as the worker itself sees it
        notes.add(f"tf-fp32 / tf-int8: TF's oneDNN limited to {isa} "
                  f"(ONEDNN_MAX_CPU_ISA, --fp32_max_isa)")
    except WorkerError as e:
      first = str(e).splitlines()[0] if str(e) else "?"
      notes.add(f"{family}: skipped, it failed to start: {first}"
                + ("" if family not in PEER_VENV_FAMILIES else
                   f" (re-run {SETUP_PEERS}?)"))
  return workers


# ------------------------------------------------------------------- timing

def per_op_seconds(once, twice, n):
  """(seconds per op, seconds per call) of a call of n ops taking `once`,
  and `twice` with 2n ops (None: not timed; then once / n and None).

  In-graph rows: what n more ops add to a call, so that what TF pays once
  a call is not shared by the ops (workers/impl_ours.py says why not an
  empty call's time); never below a tenth of the raw share, should noise
  make the difference tiny."""
  if twice is None:
    return once / n, None
  per_op = max((twice - once) / n, 0.1 * once / n)
  return per_op, max(once - n * per_op, 0.0)


def _insert_after(entries, impl, name, worker):
  """entries with (name, worker) placed right after impl."""
  out = {}
  for k, v in entries.items():
    out[k] = v
    if k == impl:
      out[name] = worker
  return out


def time_interleaved(entries, key):
  """Best seconds per call of each (impl, worker); repeats interleaved."""
  iters, best = {}, {}
  for impl, worker in entries.items():
    iters[impl] = worker.call("calibrate", key=key, impl=impl,
                              min_time=FLAGS.min_time)["iters"]
    best[impl] = float("inf")
  for _ in range(max(1, FLAGS.repeats)):
    for impl, worker in entries.items():
      s = worker.call("time", key=key, impl=impl, iters=iters[impl])["seconds"]
      best[impl] = min(best[impl], s)
  return best


def measure_peaks(workers, threads):
  """Peak rows for this thread count (the ours worker runs the loops)."""
  ours = workers["ours"]
  loops = [l for l in ours.info.get("peak_loops", "").split(",") if l]
  gops = ours.call("peak", loops=loops, threads=threads,
                   min_time=FLAGS.peak_time)["gops"]
  rows = []
  for name in loops:
    g = gops[name]
    rows.append(dict(suite="peak", layer=name, batch=None, threads=threads,
                     impl="peak_" + name, ms=None,
                     gops=g if g > 0 else None, exact=None, cpu_kernel=None,
                     peak_pct=None,
                     error=None if g > 0 else "not on this CPU"))
  gbps = ours.call("copy", sizes=[[MEMORY_COPY_BYTES, MEMORY_COPY_BYTES]],
                   threads=threads, min_time=FLAGS.peak_time)["gbps"][0]
  rows.append(dict(suite="peak", layer=MEMORY_LIMIT, batch=None,
                   threads=threads, impl="peak_" + MEMORY_LIMIT, ms=None,
                   gops=None, gbps=gbps if gbps > 0 else None, exact=None,
                   cpu_kernel=None, peak_pct=None,
                   error=None if gbps > 0 else "not on this CPU"))
  return rows


def layer_bytes(case):
  """(input bytes, output bytes) of a layer: int8, the batch included."""
  ho, wo = case.output_hw()
  return (case.batch * case.height * case.width * case.in_channels,
          case.batch * ho * wo * case.out_channels)


def copy_limits(case, workers, threads, peaks):
  """For a depthwise layer under --peak: {"memory": GB/s, "same": GB/s}, the
  copy loop far beyond the caches and moving the layer's own bytes; {}
  otherwise."""
  if not (FLAGS.peak and cases_lib.is_depthwise(case)):
    return {}
  src, dst = layer_bytes(case)
  same = workers["ours"].call("copy", sizes=[[src, dst]], threads=threads,
                              min_time=FLAGS.peak_time)["gbps"][0]
  return {"memory": peaks.get(MEMORY_LIMIT), "same": same if same > 0 else None}


# ----------------------------------------------------------- layer suites

class ProbeCache:
  """Exactness verdicts per (layer, impl), probed once at batch 1."""

  def __init__(self, work_dir):
    self.work_dir = work_dir
    self.verdicts = {}
    self.multipliers = {}

  def multiplier(self, spec, kind):
    k = (spec["name"], kind)
    if k not in self.multipliers:
      x, w, _ = exactness.probe_inputs(spec, kind, "int8")
      acc = exactness.exact_accumulators(x, w, spec)
      self.multipliers[k] = exactness.output_multiplier(acc)
    return self.multipliers[k]

  def verdict(self, spec, impl, worker):
    k = (spec["name"], impl)
    if k in self.verdicts:
      return self.verdicts[k]
    errors = []
    try:
      for kind in exactness.PROBE_KINDS:
        out = os.path.join(self.work_dir, "probe_out.npz")
        reply = worker.call("probe", impl=impl, spec=dict(spec, batch=1),
                            kind=kind, seed=0,
                            multiplier=self.multiplier(spec, kind), out=out)
        result = reply["result"]
        if result.get("not_int8"):
          self.verdicts[k] = (None, "float")
          return self.verdicts[k]
        with np.load(out) as arrays:
          result.update({n: arrays[n] for n in arrays.files})
        act = "uint8" if result["out_min"] == 0 and result["out_max"] == 255 \
            else "int8"
        errors.append(exactness.evaluate(dict(spec, batch=1), kind, act,
                                         result))
      self.verdicts[k] = exactness.verdict(errors)
    except (WorkerError, ValueError, KeyError) as e:
      self.verdicts[k] = (None, "probe failed: " + str(e).splitlines()[0][:80])
    return self.verdicts[k]


def _winograd_shape(spec):
  """3x3, stride 1, dilation 1, one group: where the avx2 path may run its
  Winograd (cc/core/cpu/winograd/winograd.h, WinogradEligible)."""
  return (spec["kernel_h"] == spec["kernel_w"] == 3 and spec["stride_h"] ==
          spec["stride_w"] == 1 and spec["dilation_h"] == spec["dilation_w"] == 1
          and spec["groups"] == 1)


def peak_for(impl_kernel, spec, peaks):
  if impl_kernel is None or not peaks:
    return None
  if spec.get("depthwise"):
    table = DEPTHWISE_PEAK
  elif spec.get("non_negative_input") and not (
      impl_kernel == "avx2" and _winograd_shape(spec)):
    table = NON_NEGATIVE_PATH_PEAK
  else:
    table = PATH_PEAK
  return peaks.get(table.get(impl_kernel))


def limit_pct(seconds, macs, outputs, mac_gops, epilogue_gops):
  """A layer's limit over its time, in %: its MACs at the path's instruction
  limit (mac_gops, 2 ops a MAC) plus its outputs at the path's epilogue
  limit (epilogue_gops, G outputs/s), added because the two share the
  vector ports on the VNNI and AVX2 paths and AMX's tile work did not
  overlap the vector epilogue (peak.h). None where a number is missing."""
  if not (seconds and mac_gops and epilogue_gops):
    return None
  limit = 2 * macs / (mac_gops * 1e9) + outputs / (epilogue_gops * 1e9)
  return 100.0 * limit / seconds


def run_layers(impls, work_dir, notes):
  rows = []
  if FLAGS.layer_inputs == "model":
    notes.add("layer inputs: as in the model (--layer_inputs): max(x, 0) "
              "where the layer reads a ReLU's output there, uniform int8 "
              "for the rest")
  probes = ProbeCache(work_dir)
  for threads in (int(t) for t in FLAGS.threads):
    workers = start_workers(impls, threads, work_dir, notes)
    try:
      if "ours" not in workers:
        raise SystemExit("benchmark: our own worker did not start; see "
                         + os.path.join(work_dir, f"worker_ours_t{threads}.log"))
      auto_kernel = workers["ours"].info.get("cpu_kernel")
      peaks = {}
      if FLAGS.peak:
        peak_rows = measure_peaks(workers, threads)
        rows += peak_rows
        peaks = {r["layer"]: r.get("gbps") or r["gops"] for r in peak_rows
                 if r.get("gbps") or r["gops"]}
      for batch in (int(b) for b in FLAGS.batches):
        for case in cases_lib.layer_cases(FLAGS.layers, batch, FLAGS.suite):
          rows += run_one_layer(case, impls, workers, threads, auto_kernel,
                                peaks, probes, work_dir)
    finally:
      for w in workers.values():
        w.close()
  return rows


def run_one_layer(case, impls, workers, threads, auto_kernel, peaks, probes,
                  work_dir):
  spec = cases_lib.layer_spec(case)
  spec["paths"] = list(FLAGS.paths)
  inputs = testing.make_inputs(case, seed=0)
  if FLAGS.layer_inputs == "model":
    custom = case not in cases_lib.suite_cases(FLAGS.suite, case.batch)
    if cases_lib.reads_relu_output(FLAGS.suite, case, custom):
      inputs["conv_input"] = np.maximum(inputs["conv_input"], 0)
      spec["non_negative_input"] = True
  data = os.path.join(work_dir, "layer.npz")
  np.savez(data, x=inputs["conv_input"], w=inputs["filter"],
           bias=inputs["bias"], scale=inputs["conv_input_scale"])
  key = f"{spec['name']}|{case.batch}"
  ops, doubled, check = {}, {}, None
  replies = {}
  entries, errors = setup_on_workers(workers, impls, replies, "setup_layer",
                                     key=key, spec=spec, data=data)
  for reply in replies.values():
    ops.update(reply.get("ops_per_call", {}))
    if reply.get("check") is not None:
      check = reply["check"]
    for impl, twice in reply.get("doubled", {}).items():
      # The impl's graph with twice its ops, timed right after it.
      if impl in entries and reply["impls"].get(twice, "missing") is None:
        doubled[impl] = twice
        entries = _insert_after(entries, impl, twice,
                                workers[family_of(impl)])
  if not FLAGS.check:
    check = None
  seconds = {}
  if entries:
    try:
      seconds = time_interleaved(entries, key)
    except WorkerError as e:
      for impl in entries:
        errors[impl] = str(e).splitlines()[0][:300]
  verdicts = {}
  if FLAGS.probes:
    for impl, worker in entries.items():
      if impl in seconds and impl in impls:
        verdicts[impl] = probes.verdict(spec, impl, worker)
  for worker in workers.values():
    try:
      worker.call("release", key=key)
    except WorkerError:
      pass
  limits = copy_limits(case, workers, threads, peaks)
  moved = sum(layer_bytes(case))
  rows = []
  macs = case.macs()
  outputs = int(np.prod(case.output_shape))
  for impl in impls:
    if impl not in seconds and impl not in errors:
      continue
    s = seconds.get(impl)
    overhead = None
    if s is not None:
      s, overhead = per_op_seconds(s, seconds.get(doubled.get(impl)),
                                   ops.get(impl, 1))
    base, _, path = impl.partition("@")
    is_ours = base in ("ours", "ours_eager")
    kernel = (path or auto_kernel) if is_ours else None
    exact, text = verdicts.get(impl, (None, None))
    gops = 2 * macs / s / 1e9 if s else None
    peak = peak_for(kernel, spec, peaks) if is_ours else None
    epilogue = peaks.get(PATH_EPILOGUE.get(kernel)) if is_ours else None
    gbps = moved / s / 1e9 if (s and limits and is_ours) else None
    rows.append(dict(
        suite=FLAGS.suite, layer=spec["name"], batch=case.batch,
        threads=threads, impl="ours" if is_ours else impl,
        mode=("eager" if base == "ours_eager" else "graph") if is_ours else None,
        forced=path or None, ms=s * 1e3 if s else None, gops=gops,
        exact=exact, exact_text=text, cpu_kernel=kernel,
        peak_pct=100.0 * gops / peak if (gops and peak) else None,
        limit_pct=limit_pct(s, macs, outputs, peak, epilogue),
        gbps=gbps,
        mem_pct=(100.0 * gbps / limits["memory"]
                 if gbps and limits.get("memory") else None),
        copy_pct=(100.0 * gbps / limits["same"]
                  if gbps and limits.get("same") else None),
        check=check if impl == "ours" else None, macs=macs,
        call_overhead_ms=overhead * 1e3 if overhead else None,
        error=errors.get(impl)))
  return rows


# ----------------------------------------------------------- models suite

def run_models(impls, work_dir, notes):
  rows = []
  models = None
  for threads in (int(t) for t in FLAGS.threads):
    workers = start_workers(impls, threads, work_dir, notes)
    try:
      if "ours" not in workers:
        raise SystemExit("benchmark: our own worker did not start")
      if models is None:
        models = prepared_models(workers["ours"], work_dir)
      for batch in (int(b) for b in FLAGS.batches):
        for name, info in models.items():
          rows += run_one_model(name, info, batch, impls, workers, threads,
                                notes)
    finally:
      for w in workers.values():
        w.close()
  return rows, models or {}


def prepared_models(worker, work_dir):
  """The models' files and facts; with --work_dir, reused from an earlier run
  that prepared the same models there with the same quantization code."""
  import hashlib  # pylint: disable=g-import-not-at-top
  from tf_fused_int8 import quantization  # pylint: disable=g-import-not-at-top
  from tf_fused_int8.benchmark import models as models_lib  # pylint: disable=g-import-not-at-top
  code = hashlib.sha256()
  for module in (quantization, models_lib):
    with open(module.__file__, "rb") as f:
      code.update(f.read())
  stamp = dict(models=list(FLAGS.models), seed=0, code=code.hexdigest(),
               calibration_images=FLAGS.calibration_images)
  path = os.path.join(work_dir, "models.json")
  if FLAGS.work_dir and os.path.exists(path):
    with open(path) as f:
      saved = json.load(f)
    if saved.get("stamp") == stamp:
      print(f"models suite: reusing the models prepared in {work_dir}",
            file=sys.stderr, flush=True)
      return saved["models"]
  print(f"models suite: preparing {', '.join(FLAGS.models)} (build, "
        f"quantize_model, TFLite conversion; a few minutes)...",
        file=sys.stderr, flush=True)
  models = worker.call("prepare_models", names=list(FLAGS.models),
                       dir=work_dir,
                       calibration_images=FLAGS.calibration_images,
                       seed=0)["models"]
  with open(path, "w") as f:
    json.dump(dict(stamp=stamp, models=models), f)
  return models


def setup_on_workers(workers, impls, replies, op, **msg):
  """Sends a setup command to every worker: ({impl: worker} of the impls
  ready to time, {impl: error}); each worker's reply lands in replies."""
  entries, errors = {}, {}
  for family, worker in workers.items():
    try:
      reply = replies[family] = worker.call(op, **msg)
    except WorkerError as e:
      for impl in impls:
        if family_of(impl) == family:
          errors[impl] = str(e).splitlines()[0][:300]
      continue
    for impl, err in reply["impls"].items():
      if impl in impls:
        if err is None:
          entries[impl] = worker
        else:
          errors[impl] = err
  return entries, errors


def repacked_while_timing(before, after):
  """How many weight-cache misses and stale entries (weights packed or
  prepared again) our worker counted between two cache_stats replies."""
  return sum(after[kind][field] - before[kind][field]
             for kind in ("gemm", "depthwise") for field in ("misses", "stale"))


def run_one_model(name, info, batch, impls, workers, threads, notes):
  key = f"{name}|{batch}"
  # The forced paths travel in the model's dict (as in a layer's spec).
  entries, errors = setup_on_workers(workers, impls, {}, "setup_model",
                                     key=key, batch=batch,
                                     model=dict(info, paths=list(FLAGS.paths)))
  # Every implementation ran once in setup: from here on our weight caches
  # should only hit. A miss means our rows timed repacking (as they did when
  # the worker's six copies of ResNet50 outgrew the cache's bounds).
  ours = workers["ours"]
  before = ours.call("cache_stats")
  seconds = time_interleaved(entries, key) if entries else {}
  repacked = repacked_while_timing(before, ours.call("cache_stats"))
  if repacked:
    notes.add(f"{name} batch {batch}, {threads} thread(s): our weight caches "
              f"packed weights again {repacked} times while timing: our rows "
              "include that repacking")
  for worker in workers.values():
    worker.call("release", key=key)
  macs = info["macs"] * batch
  rows = []
  for impl in impls:
    if impl not in seconds and impl not in errors:
      continue
    s = seconds.get(impl)
    base, _, path = impl.partition("@")
    mode = "graph" if base in ("ours", "tf_fp32") else None
    if base in OURS_MODES:
      base, mode = "ours", OURS_MODES[base]
    rows.append(dict(suite="models", layer=name, batch=batch, threads=threads,
                     impl=base, mode=mode, forced=path or None,
                     ms=s * 1e3 if s else None,
                     gops=2 * macs / s / 1e9 if s else None, exact=None,
                     exact_text=None,
                     cpu_kernel=((path or workers["ours"].info.get("cpu_kernel"))
                                 if base == "ours" else None),
                     peak_pct=None, check=None, macs=macs,
                     error=errors.get(impl)))
  return rows


# --------------------------------------------------------------------- main

def cpu_name():
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return "unknown CPU"


def validate():
  """Usage errors before anything starts (bad --layers, --peers, numbers)."""
  impls = selected_impls()
  if FLAGS.peer_isa:
    if not sys.platform.startswith("linux") or platform.machine() not in (
        "x86_64", "AMD64"):
      raise ValueError(f"--peer_isa needs x86-64 Linux, not {sys.platform} "
                       f"{platform.machine()}")
    if not any(family_of(i) != "ours" for i in impls):
      raise ValueError("--peer_isa limits the peers' CPUID, and no peer is "
                       "selected (--peers)")
  for b in FLAGS.batches + FLAGS.threads:
    if not b.strip().isdigit() or int(b) < 1:
      raise ValueError(f"--batches/--threads need positive integers, got {b!r}")
  if FLAGS.suite != "models":
    for b in FLAGS.batches:
      cases_lib.layer_cases(FLAGS.layers, int(b), FLAGS.suite)


def run():
  """Runs the benchmark per FLAGS; prints the tables; returns the rows."""
  impls = selected_impls()
  keep = bool(FLAGS.work_dir)
  work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="tfi_bench_")
  os.makedirs(work_dir, exist_ok=True)
  notes = set()
  t0 = time.time()
  try:
    if FLAGS.suite == "models":
      rows, models = run_models(impls, work_dir, notes)
    else:
      rows, models = run_layers(impls, work_dir, notes), {}
  finally:
    if not keep:
      shutil.rmtree(work_dir, ignore_errors=True)
  print(f"tf_fused_int8 benchmark on {cpu_name()} ({os.cpu_count()} CPUs), "
        f"suite {FLAGS.suite}, {time.time() - t0:.0f} s")
  for note in sorted(notes):
    print("note: " + note)
  print(tables.format_all(rows, impls, models, FLAGS.paths, FLAGS.suite))
  if FLAGS.json:
    with open(FLAGS.json, "w") as f:
      json.dump(rows, f, indent=1)
  if FLAGS.plot:
    print(plot(rows, FLAGS.plot))
  return rows


def plot(rows, path):
  """Plots with matplotlib from this venv, else from the peers' venv."""
  data = path + ".json"
  with open(data, "w") as f:
    json.dump(rows, f)
  script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot.py")
  for python in (sys.executable, peers_python()):
    if not os.path.exists(python):
      continue
    r = subprocess.run([python, script, data, path], capture_output=True,
                       text=True, check=False)
    if r.returncode == 0:
      os.remove(data)
      return f"plot: wrote {path}"
  os.remove(data)
  return ("plot: matplotlib is not installed here or in the peers' venv "
          f"(.venv/bin/pip install matplotlib, or {SETUP_PEERS})")
