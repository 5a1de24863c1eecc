"""Benchmark family "onnxruntime" (peers venv): ONNX Runtime's com.microsoft
QLinearConv with channels_last=1 (NHWC in and out, as our op), per-channel
int8 weights and int32 bias as initializers (prepacked by the session),
asymmetric pads as TF's SAME, one session per layer with
intra_op_num_threads = the thread count, run through an I/O binding on
preallocated buffers (the least overhead ONNX Runtime offers).

  onnxruntime_u8  uint8 activations (zero point 128): ONNX Runtime's fast
                  u8 x s8 path (on CPUs without VNNI: VPMADDUBSW, saturating)
  onnxruntime_s8  int8 activations (zero point 0)
Relu is not part of QLinearConv; the output is requantized to the full range.
"""

import numpy as np

import exactness
import protocol

IMPLS = {"onnxruntime_u8": "uint8", "onnxruntime_s8": "int8"}


class Family(protocol.KeyedRuns):
  """ONNX Runtime QLinearConv."""

  def __init__(self, threads):
    import onnx  # pylint: disable=g-import-not-at-top
    import onnxruntime as ort  # pylint: disable=g-import-not-at-top
    self.onnx = onnx
    self.ort = ort
    self.threads = threads
    self.runs = {}

  def info(self):
    return dict(onnxruntime=self.ort.__version__, onnx=self.onnx.__version__)

  def _session(self, spec, act_dtype, w, w_scale, bias_q, y_scale):
    from onnx import TensorProto, helper, numpy_helper  # pylint: disable=g-import-not-at-top
    elem = TensorProto.UINT8 if act_dtype == "uint8" else TensorProto.INT8
    zp = 128 if act_dtype == "uint8" else 0
    zp_np = np.array(zp, np.uint8 if act_dtype == "uint8" else np.int8)
    n = spec["batch"]
    co = spec["out_channels"]
    t, b, l, r = spec["pads"]
    kh, kw = spec["kernel_h"], spec["kernel_w"]
    ho = (spec["height"] + t + b - (kh - 1) * spec["dilation_h"] - 1) // spec["stride_h"] + 1
    wo = (spec["width"] + l + r - (kw - 1) * spec["dilation_w"] - 1) // spec["stride_w"] + 1
    inits = [
        numpy_helper.from_array(np.array(1.0, np.float32), "x_scale"),
        numpy_helper.from_array(zp_np, "x_zp"),
        # ONNX weight layout: [Co, Ci / groups, Kh, Kw].
        numpy_helper.from_array(np.ascontiguousarray(w.transpose(3, 2, 0, 1)), "w"),
        numpy_helper.from_array(np.asarray(w_scale, np.float32).reshape(co), "w_scale"),
        numpy_helper.from_array(np.zeros(co, np.int8), "w_zp"),
        numpy_helper.from_array(np.array(y_scale, np.float32), "y_scale"),
        numpy_helper.from_array(zp_np, "y_zp"),
        numpy_helper.from_array(np.asarray(bias_q, np.int32), "bias"),
    ]
    node = helper.make_node(
        "QLinearConv",
        ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp", "bias"],
        ["y"], domain="com.microsoft", channels_last=1,
        kernel_shape=[kh, kw], strides=[spec["stride_h"], spec["stride_w"]],
        dilations=[spec["dilation_h"], spec["dilation_w"]],
        pads=[t, l, b, r], group=spec["groups"])
    graph = helper.make_graph(
        [node], "layer",
        [helper.make_tensor_value_info("x", elem, [n, spec["height"], spec["width"], spec["in_channels"]])],
        [helper.make_tensor_value_info("y", elem, [n, ho, wo, co])], inits)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = min(model.ir_version, 8)
    so = self.ort.SessionOptions()
    so.intra_op_num_threads = self.threads
    so.inter_op_num_threads = 1
    so.execution_mode = self.ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = self.ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = self.ort.InferenceSession(model.SerializeToString(), so,
                                     providers=["CPUExecutionProvider"])
    out = np.empty((n, ho, wo, co), np.uint8 if act_dtype == "uint8" else np.int8)
    return sess, out, zp

  def _run(self, sess, x, out):
    """A call of sess on x into out through an I/O binding. The binding
    points at the arrays' memory: the closure keeps them alive."""
    x = np.ascontiguousarray(x)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu", 0, out.dtype, out.shape, out.ctypes.data)
    keep = (sess, x, out)

    def fn():
      keep[0].run_with_iobinding(binding)
    return fn

  def setup_layer(self, key, spec, data):
    d = np.load(data)
    x, w, bias, scale = d["x"], d["w"], d["bias"], d["scale"]
    co = spec["out_channels"]
    w_scale = np.broadcast_to(scale, (co,)).astype(np.float32)
    bias_q = np.rint(bias / w_scale).astype(np.int32)
    def build(act):
      sess, out, zp = self._session(spec, act, w, w_scale, bias_q, 1.0)
      xa = (x.astype(np.int16) + zp).astype(act) if act == "uint8" else x
      return self._run(sess, xa, out)
    self.runs[key], status = protocol.setup_each(
        {impl: (lambda act=act: build(act)) for impl, act in IMPLS.items()})
    return dict(impls=status)

  def probe(self, impl, spec, kind, seed, multiplier):
    act = IMPLS[impl]
    x, w, zp = exactness.probe_inputs(spec, kind, act, seed)
    co = spec["out_channels"]
    pspec = dict(spec, batch=1)
    w_scale = np.full(co, multiplier, np.float32)
    sess, out, zp = self._session(pspec, act, w, w_scale, np.zeros(co), 1.0)
    self._run(sess, x, out)()
    lo, hi = (0, 255) if act == "uint8" else (-128, 127)
    return dict(out=out.copy(), x_zero_point=zp, multiplier=float(w_scale[0]),
                out_zero_point=zp, out_min=lo, out_max=hi)
