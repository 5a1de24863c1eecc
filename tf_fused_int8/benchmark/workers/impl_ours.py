"""Benchmark family "ours" (project venv): this package's op, and TensorFlow's
own kernels on the same data.

impls:
  ours          our op inside a tf.function, GRAPH_OPS ops per call on the
                same input and filter, each with its own bias (distinct
                values, so grappler cannot merge them; nothing is folded:
                the input is an argument), run as a Keras layer runs it: the
                filter, biases and scale are tf.Variables, which
                fused_conv2d_bias_activation reads in the kernel
                (ResourceFusedInt8Conv2DBiasActivation: the filter pinned
                for the packed-weights cache, no per-call check). One filter
                keeps the weights as hot as the peers' single prepacked
                layer. Each output is consumed at once by a one-element
                slice, as a model's next layer consumes it, so that its
                buffer is freed before the next op runs and reused, as in a
                model and as the peers reuse theirs: returning all GRAPH_OPS
                outputs kept them alive together in fresh memory (Zen 5, one
                thread, 28x28x32 -> 192 at batch 8: 209 us per op against
                151 us consumed; bench_core 182 us).
                Each graph impl is also built with 2 x GRAPH_OPS ops
                ("_x2:" + its name, timed alongside); the parent takes the
                difference of the two calls' times over GRAPH_OPS: the cost
                of one more op inside a model, whatever each call costs
                once. An empty tf.function's time, the baseline before,
                missed part of that once-a-call cost: on the Zen 4 VM, one
                thread, 16 28x28x128 3x3 ops a call, the calling thread was
                on the CPU about 0.9 ms a call against 0.2 ms for the empty
                call (the same Python functions ran 3x slower after the
                8 ms it slept: cold caches), while our kernel took the same
                513-537 us as in bench_core (uprobes on RunGemmConv) with
                7 us between ops; per op, empty-call baseline 572-627 us,
                the difference of 16 and 32 ops 510-570 us.
  ours_eager    one eager call of tf_fused_int8.fused_conv2d_bias_activation
                on prepared tensors: what an eager user pays per call, the
                Python wrapper included.
  ours@PATH     "ours" with TF_FUSED_INT8_CPU_KERNEL=PATH (the spec's paths).
  tf_int8       TF's built-in int8 _FusedConv2D CPU kernel, eagerly (it is
                not in tf.raw_ops, so it cannot be put in a tf.function
                simply); it casts to float and runs a float contraction.
  tf_fp32       tf.nn.conv2d (depthwise: tf.nn.depthwise_conv2d) + bias_add +
                relu on the same values as float32, GRAPH_OPS per tf.function
                call like "ours", each output consumed the same way (each on
                its own filter: see below).
Models (setup_model): ours = the quantize_model int8 model, tf_fp32 = the
float model, each called as a tf.function; ours@PATH for each of the
model's "paths" as in the layer suite.
"""

import ctypes
import os

import numpy as np

import exactness
import protocol

KERNEL_ENV = "TF_FUSED_INT8_CPU_KERNEL"
GRAPH_OPS = int(os.environ.get("TF_FUSED_INT8_BENCH_GRAPH_OPS", "16"))
# The name prefix of a graph impl built with 2 x GRAPH_OPS ops (see "ours").
DOUBLED = "_x2:"


def _consumed(y):
  """One element of y: the op's output is read, then freed (see "ours")."""
  return y[0, 0, 0, 0]


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


class Family(protocol.KeyedRuns):
  """Our op, TF's int8 kernel and TF's fp32 conv."""

  def __init__(self, threads):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import tf_fused_int8  # pylint: disable=g-import-not-at-top
    from tf_fused_int8 import _loader  # pylint: disable=g-import-not-at-top
    _loader.load_ops()
    self.tf = tf
    self.tfi = tf_fused_int8
    self.threads = threads
    self.library = _loader.library_path()
    self.lib = ctypes.CDLL(self.library)
    self.lib.tf_fused_int8_peak_gops.restype = ctypes.c_double
    self.lib.tf_fused_int8_peak_gops.argtypes = [ctypes.c_char_p, ctypes.c_int,
                                                 ctypes.c_double]
    self.lib.tf_fused_int8_peak_loops.restype = ctypes.c_char_p
    self.lib.tf_fused_int8_copy_gbps.restype = ctypes.c_double
    self.lib.tf_fused_int8_copy_gbps.argtypes = [
        ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_double]
    self.lib.tf_fused_int8_kernel_path.restype = ctypes.c_char_p
    self.runs = {}

  def kernel_path(self):
    """The CPU kernel path a call would take now (env override included)."""
    return self.lib.tf_fused_int8_kernel_path().decode()

  def info(self):
    return dict(tensorflow=self.tf.__version__, library=self.library,
                cpu_kernel=self.kernel_path(),
                peak_loops=self.lib.tf_fused_int8_peak_loops().decode(),
                onednn_max_cpu_isa=os.environ.get("ONEDNN_MAX_CPU_ISA", ""))

  # ------------------------------------------------------------ one layer

  def _op_kwargs(self, spec, activation=None):
    kw = dict(strides=[spec["stride_h"], spec["stride_w"]],
              padding=spec["padding"],
              activation_mode=activation or spec["activation"],
              dilations=[spec["dilation_h"], spec["dilation_w"]])
    return kw

  def _eager(self, spec, x, w, bias, scale, activation=None):
    """Our op as one eager execute call on prepared tensors."""
    tf = self.tf
    from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
    from tensorflow.python.eager import execute  # pylint: disable=g-import-not-at-top
    tensors = [tf.constant(x), tf.constant(w), tf.constant(bias),
               tf.zeros([0], tf.int8), tf.constant(scale),
               tf.constant(np.float32(0))]
    attrs = ("T", tf.int8.as_datatype_enum,
             "strides", [1, spec["stride_h"], spec["stride_w"], 1],
             "padding", spec["padding"].encode(), "data_format", b"NHWC",
             "filter_format", b"HWIO",
             "activation_mode", (activation or spec["activation"]).encode(),
             "dilations", [1, spec["dilation_h"], spec["dilation_w"], 1])
    ctx = context.context()
    ctx.ensure_initialized()

    def fn():
      return execute.execute(b"FusedInt8Conv2DBiasActivation", 1, tensors,
                             attrs, ctx)[0]
    return fn

  def _tf_int8(self, spec, x, w, bias, scale, activation=None):
    """TF's int8 _FusedConv2D (form documented in tests/tf_builtin.py)."""
    tf = self.tf
    from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
    from tensorflow.python.eager import execute  # pylint: disable=g-import-not-at-top
    if (spec["dilation_h"], spec["dilation_w"]) != (1, 1) or spec["groups"] != 1:
      return None
    scale = np.asarray(scale, np.float32)
    tensors = [tf.constant(x), tf.constant(w), tf.constant(bias),
               tf.zeros([0], tf.int8),
               tf.constant(scale.reshape(()) if scale.size == 1 else scale),
               tf.constant(np.float32(0))]
    act = activation or spec["activation"]
    fused_ops = [b"BiasAdd", b"Relu"] if act == "Relu" else [b"BiasAdd"]
    attrs = ("T", tf.int8.as_datatype_enum,
             "TArgs", [tf.float32.as_datatype_enum, tf.int8.as_datatype_enum],
             "num_args", 2, "num_host_args", 2,
             "strides", [1, spec["stride_h"], spec["stride_w"], 1],
             "padding", spec["padding"].encode(), "explicit_paddings", [],
             "data_format", b"NHWC", "filter_format", b"HWIO",
             "dilations", [1, 1, 1, 1], "use_cudnn_on_gpu", False,
             "fused_ops", fused_ops, "epsilon", 1e-4, "leakyrelu_alpha", 0.2)
    ctx = context.context()
    ctx.ensure_initialized()

    def fn():
      return execute.execute(b"_FusedConv2D", 1, tensors, attrs, ctx)[0]
    return fn

  def _fp32_conv(self, spec, x, w):
    tf = self.tf
    strides = [1, spec["stride_h"], spec["stride_w"], 1]
    dil = (spec["dilation_h"], spec["dilation_w"])
    if spec["depthwise"]:
      mult = spec["out_channels"] // spec["in_channels"]
      w = tf.reshape(w, [spec["kernel_h"], spec["kernel_w"],
                         spec["in_channels"], mult])
      return tf.nn.depthwise_conv2d(x, w, strides, spec["padding"],
                                    dilations=None if dil == (1, 1) else dil)
    return tf.nn.conv2d(x, w, strides=strides, padding=spec["padding"],
                        dilations=[1, dil[0], dil[1], 1])

  def setup_layer(self, key, spec, data):
    tf, tfi = self.tf, self.tfi
    d = np.load(data)
    x, w, bias, scale = d["x"], d["w"], d["bias"], d["scale"]
    xs = tf.constant(x)
    w_t = tf.constant(w)
    bias_t, scale_t = tf.constant(bias), tf.constant(scale)
    # As a Keras layer holds them (the resource op; see the docstring).
    with tf.device("/CPU:0"):
      w_v, scale_v = tf.Variable(w), tf.Variable(scale)
      bias_vs = [tf.Variable(bias + np.float32(j * 2.0 ** -12))
                 for j in range(2 * GRAPH_OPS)]
    biases = [tf.constant(bias + np.float32(j * 2.0 ** -12))
              for j in range(2 * GRAPH_OPS)]
    kwargs = self._op_kwargs(spec)

    def ours_graph(n):
      @tf.function
      def graph(x):
        return [_consumed(tfi.fused_conv2d_bias_activation(
            x, w_v, b, conv_input_scale=scale_v, **kwargs))
                for b in bias_vs[:n]]
      return lambda: graph(xs)

    # TF's float conv is a node of its own: on one filter grappler would
    # merge the convolutions into one, so each gets its own.
    xf = tf.constant(x.astype(np.float32))
    wfs = [tf.constant(np.roll(w, j, axis=3).astype(np.float32))
           for j in range(2 * GRAPH_OPS)]

    def fp32_graph(n):
      @tf.function
      def graph(x):
        return [_consumed(tf.nn.relu(tf.nn.bias_add(
            self._fp32_conv(spec, x, wf), b)))
                for wf, b in zip(wfs[:n], biases)]
      return lambda: graph(xf)

    fns, status, ops = {}, {}, {}
    ours_graphs = {n: ours_graph(n) for n in (GRAPH_OPS, 2 * GRAPH_OPS)}
    graphs = {"ours": ours_graphs.get}
    for path in spec.get("paths", []):
      graphs["ours@" + path] = (
          lambda n, path=path: _forced(path, ours_graphs[n]))
    fns["ours_eager"] = lambda: tfi.fused_conv2d_bias_activation(
        xs, w_t, bias_t, conv_input_scale=scale_t, **kwargs)
    tf_int8 = self._tf_int8(spec, x, w, bias, scale)
    if tf_int8 is None:
      status["tf_int8"] = "TF's int8 kernel has no groups or dilation"
    else:
      fns["tf_int8"] = tf_int8
    graphs["tf_fp32"] = fp32_graph
    for name, graph in graphs.items():
      fns[name] = graph(GRAPH_OPS)
      fns[DOUBLED + name] = graph(2 * GRAPH_OPS)
      ops[name] = GRAPH_OPS
    for name in list(fns):
      try:
        fns[name]()
        status[name] = None
      except Exception as e:  # pylint: disable=broad-except
        status[name] = protocol.error_text(e)
        del fns[name]
    check = self._check(spec, x, w, bias, scale, fns)
    self.runs[key] = fns
    return dict(impls=status, ops_per_call=ops, check=check,
                doubled={name: DOUBLED + name for name in ops})

  def _check(self, spec, x, w, bias, scale, fns):
    """Ours vs TF's int8 kernel bit for bit ("exact", "MISMATCH" or "~N"
    where TF's float accumulation may round: depth > 1024); depthwise: vs
    TF's float depthwise accumulators (exact for 3x3) + the contract's
    epilogue in numpy; "n/a" otherwise."""
    if "ours_eager" not in fns:
      return "n/a"
    ours = fns["ours_eager"]().numpy()
    depth = spec["kernel_h"] * spec["kernel_w"] * (
        spec["in_channels"] // spec["groups"])
    if "tf_int8" in fns:
      theirs = fns["tf_int8"]().numpy()
    elif spec["depthwise"] and depth <= 1024:
      tf = self.tf
      acc = self._fp32_conv(spec, tf.constant(x.astype(np.float32)),
                            tf.constant(w.astype(np.float32))).numpy()
      y = acc.astype(np.float32) * scale.astype(np.float32)
      y = y + bias.astype(np.float32)
      lo = 0.0 if spec["activation"] == "Relu" else -128.0
      theirs = np.clip(np.rint(y), lo, 127).astype(np.int8)
    else:
      return "n/a"
    diffs = int((ours.view(np.int8) != theirs.view(np.int8)).sum())
    if diffs == 0:
      return "exact"
    return "MISMATCH" if depth <= 1024 else f"~{diffs}"

  def probe(self, impl, spec, kind, seed, multiplier):
    if impl == "tf_fp32":
      return {"not_int8": True}
    x, w, zp = exactness.probe_inputs(spec, kind, "int8", seed)
    co = spec["out_channels"]
    bias = np.zeros(co, np.float32)
    scale = np.float32(multiplier)
    if impl == "tf_int8":
      fn = self._tf_int8(spec, x, w, bias, scale, activation="None")
    else:
      fn = self._eager(spec, x, w, bias, scale, activation="None")
      if impl.startswith("ours@"):
        fn = _forced(impl[len("ours@"):], fn)
    out = fn().numpy()
    return dict(out=out, x_zero_point=zp, multiplier=float(scale),
                out_zero_point=0, out_min=-128, out_max=127)

  # -------------------------------------------------------------- models

  def setup_model(self, key, model, batch):
    import keras  # pylint: disable=g-import-not-at-top
    tf = self.tf
    x = tf.constant(np.load(model["input"])[:batch])

    def load(path):
      return keras.models.load_model(path, compile=False)
    def build(path):
      f = tf.function(load(path))
      return lambda: f(x)
    def build_concrete(path):
      # The same tf.function's concrete function for this input's shape,
      # called directly: what a SavedModel's serving signature is, and what
      # a caller holding one pays per call (no Python matching of the
      # arguments to a trace).
      cf = tf.function(load(path)).get_concrete_function(
          tf.TensorSpec(x.shape, x.dtype))
      return lambda: cf(x)
    def build_runner(path):
      # The same model through InferenceRunner: frozen, in the calling
      # thread; numpy in and out, as the TFLite interpreter is timed.
      run = self.tfi.InferenceRunner(load(path))
      xn = x.numpy()
      return lambda: run(xn)
    def build_eager(path):
      # The model called eagerly, as a script calling a Keras model does
      # (Keras's advice for small batches): a QuantizedModel, which from a
      # shape's second call runs its traced function (quantized_model.py).
      m = load(path)
      return lambda: m(x, training=False)
    builders = {"ours": lambda: build(model["int8_keras"]),
                "ours_eager": lambda: build_eager(model["int8_keras"]),
                "ours_concrete": lambda: build_concrete(model["int8_keras"]),
                "ours_runner": lambda: build_runner(model["int8_keras"]),
                "tf_fp32": lambda: build(model["float_keras"])}
    for p in model.get("paths", ()):
      # ours@PATH: the same fused model, its kernels forced to PATH per call
      # (a model of its own, so the packed-weight caches do not alternate).
      builders["ours@" + p] = (
          lambda p=p: _forced(p, build(model["int8_keras"])))
      builders["ours_runner@" + p] = (
          lambda p=p: _forced(p, build_runner(model["int8_keras"])))
    self.runs[key], status = protocol.setup_each(builders)
    return dict(impls=status)


def _peak(family, msg):
  gops = {}
  for name in msg["loops"]:
    gops[name] = family.lib.tf_fused_int8_peak_gops(
        name.encode(), int(msg["threads"]), float(msg["min_time"]))
  return {"gops": gops}


def _copy(family, msg):
  """GB/s (read + written) of the copy loop for each [src, dst] in sizes."""
  return {"gbps": [family.lib.tf_fused_int8_copy_gbps(
      int(src), int(dst), int(msg["threads"]), float(msg["min_time"]))
                   for src, dst in msg["sizes"]]}


def _prepare_models(family, msg):
  del family  # TF is set up; the work is in the package
  from tf_fused_int8.benchmark import models  # pylint: disable=g-import-not-at-top
  return {"models": models.prepare(msg["names"], msg["dir"],
                                   msg["calibration_images"], msg["seed"])}


def _kernel_path(family, msg):
  del msg
  return {"cpu_kernel": family.kernel_path()}


def _cache_stats(family, msg):
  """The weight caches' counters (_loader.weight_cache_stats): misses or
  stale entries while timing mean weights packed again inside the timed
  calls."""
  del family, msg
  from tf_fused_int8 import _loader  # pylint: disable=g-import-not-at-top
  return _loader.weight_cache_stats()


EXTRA_COMMANDS = {"peak": _peak, "copy": _copy,
                  "prepare_models": _prepare_models,
                  "kernel_path": _kernel_path,
                  "cache_stats": _cache_stats}
