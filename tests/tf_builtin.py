# Copyright tf-fused-int8 authors. Apache 2.0.
"""Calls TensorFlow's own int8 fused convolution CPU kernel (``_FusedConv2D``).

TensorFlow (checked against 2.21.0, CPU build) registers CPU kernels for the
hidden op ``_FusedConv2D`` with ``T`` in {int8, qint8}
(tensorflow/core/kernels/conv_ops_fused_int8.cc,
``LaunchFusedConv2DOpCpuInt8Helper``). It is not in ``tf.raw_ops``; this module
runs it eagerly through ``tensorflow.python.eager.execute.execute`` so tests
can compare our custom op against it bit for bit and benchmarks can time it.

How the op is called (the only form the int8 kernel accepts)
-------------------------------------------------------------
inputs, in order (the kernel reads them as ctx->input(0..5)):

  0 input             T      [N, H, W, Ci]   NHWC
  1 filter            T      [Kh, Kw, Ci, Co] HWIO
  args[0]  bias       float  [Co]
  args[1]  side_input T      [N, Ho, Wo, Co], or an empty tensor (shape [0])
                             meaning "no side input"
  host_args[0] conv_input_scale float, [] / [1] (per tensor) or [Co]
                                (per output channel)
  host_args[1] side_input_scale float, exactly one element

attrs: T, TArgs=[float, T], num_args=2, num_host_args=2,
strides=[1, sh, sw, 1], padding="SAME"|"VALID", explicit_paddings=[],
data_format="NHWC", filter_format="HWIO", dilations=[1, 1, 1, 1],
use_cudnn_on_gpu=False, fused_ops=["BiasAdd", "Relu"] (activation Relu) or
["BiasAdd"] (no activation), epsilon and leakyrelu_alpha at their defaults.
For T=int8, InitializeFusedComputation insists on exactly 6 inputs with
filter int8, bias float and side_input int8 (InvalidArgument otherwise); for
T=qint8 none of these type/count checks run (see CRASHING_TF_INPUTS).

What TF's int8 CPU kernel supports
----------------------------------
* NHWC input / HWIO filter only (NCHW -> Unimplemented).
* padding SAME and VALID. EXPLICIT is not handled by the int8 helper: it calls
  BrainPadding2EigenPadding(EXPLICIT), which is LOG(FATAL) -> process abort.
* any strides >= 1; dilation must be 1 (Unimplemented otherwise); a filter
  with Kh == 0 or Kw == 0 kills the process (SIGFPE).
* no grouped convolution (filter Ci must equal input Ci).
* fused_ops ["BiasAdd"] and ["BiasAdd","Relu"] only; Relu6/Elu/LeakyRelu/
  FusedBatchNorm pass op construction but the int8 kernel returns
  Unimplemented. Bias is mandatory (use zeros for "no bias").
* per-channel conv_input_scale: YES. A conv_input_scale with more than one
  element is read per output channel (no length check in TF: fewer than Co
  elements is an out-of-bounds read, so this wrapper requires exactly Co).
* side input: yes, with a per-tensor side_input_scale. It is skipped when the
  side tensor is empty OR side_input_scale == 0.0f (like our contract).
* Shapes of bias / side_input / conv_input_scale are NOT validated by TF
  (out-of-bounds reads); this wrapper validates them before calling.

Numeric order in TF's kernel (read in the source and confirmed by experiment)
--------------------------------------------------------------------------
1. The convolution is an Eigen float32 contraction of the int8 inputs cast to
   float (``ComputeT = TempT = float``): 1x1 & stride 1 -> MatMul; filter ==
   input H,W with VALID -> MatMul; otherwise Eigen::SpatialConvolution.
   int8 products are exact in float and every partial sum is exact while
   |partial sum| <= 2^24, so TF's accumulator equals the exact int32 sum
   whenever Kh*Kw*Ci <= 1024 (1024 * 128 * 128 = 2^24), and for mixed-sign
   data far beyond (random uniform int8 at K = 73728: still exact, because
   the partial sums stay ~1e6). Once partial sums pass 2^24 TF rounds at
   every step (blocked order, identical with 1 or all threads here), while the
   contract rounds the exact int32 sum once: measured |TF acc - f32(exact)| up
   to 12 ulps (e.g. 48 at |acc| ~ 6e7, K = 4608, data in [100,127]).
2. y = acc * conv_input_scale[c]      (plain float multiply, no FMA)
3. if side input: y = std::fmaf(side, side_input_scale, y)   (a true fma)
4. y = y + bias[c]                    (plain float add)
5. out = clip(round_half_to_even(y), lo, 127) cast to T; lo = 0 for Relu,
   -128 without activation. TF 2.21's scalar_round_half_to_even_op<float>
   takes the rint/print branch (packet_traits<float>::HasRint), i.e. exact
   round-half-to-even: 0.49999997f -> 0, 0.5 -> 0, 1.5 -> 2, 2.5 -> 2,
   -2.5 -> -2, 127.5 -> 127 (verified); the older floor(x + 0.5) form that
   rounded 0.49999997f up to 1 is not what runs.
Steps 2-5 are exactly the project's contract (y = f32(acc)*scale[c];
y = fmaf(side, side_scale, y); y += bias[c]; clip(rint(y), lo, 127)); the
only divergence is step 1, float vs exact-integer accumulation, and it only
shows for large same-sign accumulations: end to end with outputs spread over
the int8 range, 0.12 % of outputs differ by 1 at K = 4608 with x, w in
[100,127], 0.02 % at K = 9216 with x, w in [0,127], 0 % for signed uniform
data. Verified bit-exact otherwise (600 random cases: SAME/VALID, strides
1-3, odd sizes, 1x1 and full-size paths, with/without side input, Relu/None,
per-tensor/per-channel scale, int8/qint8; plus 3583 outputs chosen to be
sensitive to fma-vs-mul+add and to bias-before-side order: TF == contract on
all of them, mul+add agreed on only 1239, bias-first on 2143).
Other behaviour: side_input_scale == 0 (or -0) ignores the side input;
an empty side_input (shape [0]) means none; N == 0 or Co == 0 or an empty
VALID output return an empty tensor. Non-finite y: +-inf saturate to 127 /
lo, but NaN (from a NaN scale or bias) gives 0 OR -128 depending on the
SIMD lane -- even with Relu -- so NaN results are unspecified in TF; this
differs from the project contract (NaN -> lo), so never compare NaN cases.

TF inputs that abort the process (never pass them; this wrapper rejects them)
-------------------------------------------------------------------------------
See ``CRASHING_TF_INPUTS`` below (found by running each in a subprocess).

Timing
------
``make_tf_fused_conv2d_int8`` converts the operands to TF tensors once and
returns a zero-argument callable that runs just the op (eager
``execute.execute``: the kernel is cached after the first call, no retracing,
no tf.function); its result is an EagerTensor (call ``.numpy()`` outside the
timed region). Fixed per-call dispatch cost is ~35 us here (best of many) (measured on a
1x1x1x1 problem), so subtract it or use problems big enough to swamp it.
TF's CPU kernel uses TF's intra-op thread pool (all cores by default); call
``set_tf_threads(n)`` before anything else initialises TF's eager context to
pin it for a fair comparison.
"""

from __future__ import annotations

import os
from typing import Callable, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = [
    "is_available",
    "tf_fused_conv2d_int8",
    "make_tf_fused_conv2d_int8",
    "set_tf_threads",
    "CRASHING_TF_INPUTS",
]

# Inputs that kill the process inside TF 2.21's _FusedConv2D int8/qint8 CPU
# kernel, each observed in a subprocess (tests never pass them; the wrappers
# below reject them before TF sees them). (description, how it dies).
CRASHING_TF_INPUTS: Tuple[Tuple[str, str], ...] = (
    ("padding='EXPLICIT' (int8 or qint8): BrainPadding2EigenPadding LOG(FATAL)"
     " 'Eigen does not have explicit padding enum value'", "SIGABRT"),
    ("T=qint8 with num_args=1, num_host_args=0 (bias only): the int8 helper "
     "reads ctx->input(3); 'Check failed: index < num_inputs() (3 vs. 3)'",
     "SIGABRT"),
    ("T=qint8 with a non-float bias (e.g. qint8): bias.flat<float>() "
     "'Check failed: dtype() == expected_dtype'", "SIGABRT"),
    ("T=qint8 with a side_input that is not qint8 (float or int8): "
     "side_input.flat<qint8>() 'Check failed: dtype() == expected_dtype'",
     "SIGABRT"),
    ("side_input_scale (host_args[1]) with 0 or >= 2 elements: scalar<float>()"
     " 'Check failed: 1 == NumElements()'", "SIGABRT"),
    ("filter with a zero spatial size (Kh == 0 or Kw == 0), SAME or VALID "
     "(float Conv2D rejects this with InvalidArgument)", "SIGFPE"),
    ("side_input (non-empty) smaller than the output, e.g. [1,1,1,1] for a "
     "[1,64,64,65536] output: unchecked out-of-bounds read", "SIGSEGV"),
)
# Not crashing in the runs, but unchecked out-of-bounds READS (garbage output,
# would trip ASan): bias shorter than Co (incl. empty), conv_input_scale with
# 0 elements or with 2..Co-1 elements, side_input smaller than the output
# (when it does not reach unmapped memory). For T=int8 (not qint8) wrong
# input count / bias type / side_input type give a clean InvalidArgument.
# Suspected from source, NOT tried (needs > 2^31 output pixels): the int8
# 1x1 path computes `int conv_width = N*Ho*Wo` (int32 truncation).

_available: Optional[bool] = None
_tf = None


def _import_tf():
    global _tf
    if _tf is None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf  # noqa: WPS433 (optional heavy dependency)

        _tf = tf
    return _tf


def set_tf_threads(intra_op: int, inter_op: int = 1) -> None:
    """Pins TF's thread pools; must run before TF's eager context starts."""
    tf = _import_tf()
    tf.config.threading.set_intra_op_parallelism_threads(int(intra_op))
    tf.config.threading.set_inter_op_parallelism_threads(int(inter_op))


def _registered() -> bool:
    from tensorflow.python.framework import kernels

    want = {"DT_INT8", "DT_QINT8"}
    found = set()
    for k in kernels.get_registered_kernels_for_op("_FusedConv2D").kernel:
        if k.device_type != "CPU":
            continue
        for c in k.constraint:
            if c.name == "T":
                from tensorflow.core.framework import types_pb2

                for t in c.allowed_values.list.type:
                    found.add(types_pb2.DataType.Name(t))
    return want <= found


def is_available() -> bool:
    """True when TF imports and its int8 _FusedConv2D CPU kernel runs here."""
    global _available
    if _available is not None:
        return _available
    try:
        _import_tf()
        if not _registered():
            _available = False
            return False
        x = np.ones((1, 2, 2, 1), np.int8)
        w = np.ones((1, 1, 1, 1), np.int8)
        b = np.zeros((1,), np.float32)
        out = tf_fused_conv2d_int8(x, w, b, activation="None")
        _available = bool(out.shape == (1, 2, 2, 1) and np.all(out == 1))
    except Exception:  # noqa: BLE001 -- any failure means "not available"
        _available = False
    return _available


def _pair(v, name) -> Tuple[int, int]:
    if np.isscalar(v):
        v = (int(v), int(v))
    v = tuple(int(s) for s in v)
    if len(v) != 2 or min(v) < 1:
        raise ValueError(f"{name} must be a positive int or a pair, got {v}")
    return v


def _out_size(n: int, k: int, s: int, padding: str) -> int:
    """TF's output size for SAME/VALID (dilation 1); < 0 means TF errors."""
    if padding == "SAME":
        return (n + s - 1) // s
    return (n - k + s) // s


def _prepare(conv_input, filter, bias, side_input, conv_input_scale,
             side_input_scale, strides, padding, activation, dtype):
    """Validates everything TF does not and returns (inputs, attrs)."""
    tf = _import_tf()
    from tensorflow.python.framework import dtypes

    if dtype not in ("int8", "qint8"):
        raise ValueError(f"dtype must be 'int8' or 'qint8', got {dtype!r}")
    if activation is None or activation == "None":
        fused_ops = [b"BiasAdd"]
    elif activation == "Relu":
        fused_ops = [b"BiasAdd", b"Relu"]
    else:
        raise NotImplementedError(
            f"TF's int8 kernel supports activation 'Relu' or None, got "
            f"{activation!r}")
    padding = padding.upper() if isinstance(padding, str) else padding
    if padding not in ("SAME", "VALID"):
        # EXPLICIT aborts the process inside TF (LOG(FATAL)).
        raise NotImplementedError(f"padding must be SAME or VALID: {padding!r}")
    sh, sw = _pair(strides, "strides")

    x = np.asarray(conv_input)
    w = np.asarray(filter)
    if x.dtype != np.int8 or x.ndim != 4:
        raise ValueError(f"conv_input must be int8 NHWC, got {x.dtype} {x.shape}")
    if w.dtype != np.int8 or w.ndim != 4:
        raise ValueError(f"filter must be int8 HWIO, got {w.dtype} {w.shape}")
    n, h, wd, ci = x.shape
    kh, kw, fci, co = w.shape
    if fci != ci:
        raise ValueError(f"filter in-channels {fci} != input channels {ci} "
                         "(TF's int8 kernel has no grouped convolution)")
    if kh < 1 or kw < 1:
        # TF's int8 kernel dies with SIGFPE on a zero-size filter window.
        raise ValueError(f"filter height/width must be >= 1, got {w.shape}")
    ho, wo = _out_size(h, kh, sh, padding), _out_size(wd, kw, sw, padding)
    if ho < 0 or wo < 0:
        raise ValueError(f"VALID output size would be negative: input "
                         f"{x.shape}, filter {w.shape}, strides {(sh, sw)}")

    b = np.asarray(bias, dtype=np.float32)
    if b.shape != (co,):
        raise ValueError(f"bias must have shape ({co},), got {b.shape}")

    s = np.asarray(conv_input_scale, dtype=np.float32)
    if s.size == 1:
        s = s.reshape(())
    elif s.shape != (co,):
        raise ValueError(f"conv_input_scale must be a scalar or shape ({co},), "
                         f"got {s.shape}")

    ss = np.asarray(side_input_scale, dtype=np.float32)
    if ss.size != 1:
        raise ValueError("side_input_scale must be a scalar (TF has no "
                         "per-channel side_input_scale)")
    ss = ss.reshape(())

    tdt = dtypes.int8 if dtype == "int8" else dtypes.qint8
    if side_input is None:
        side = np.zeros((0,), np.int8)
    else:
        side = np.asarray(side_input)
        if side.dtype != np.int8 or side.shape != (n, ho, wo, co):
            raise ValueError(f"side_input must be int8 of shape "
                             f"{(n, ho, wo, co)}, got {side.dtype} {side.shape}")

    def t(a, dt):
        return tf.constant(np.ascontiguousarray(a), dtype=dt)

    inputs = [t(x, tdt), t(w, tdt), t(b, dtypes.float32), t(side, tdt),
              t(s, dtypes.float32), t(ss, dtypes.float32)]
    tenum = tdt.as_datatype_enum
    fenum = dtypes.float32.as_datatype_enum
    attrs = ("T", tenum, "TArgs", [fenum, tenum], "num_args", 2,
             "num_host_args", 2, "strides", [1, sh, sw, 1],
             "padding", padding.encode(), "explicit_paddings", [],
             "data_format", b"NHWC", "filter_format", b"HWIO",
             "dilations", [1, 1, 1, 1], "use_cudnn_on_gpu", False,
             "fused_ops", fused_ops, "epsilon", 1e-4,
             "leakyrelu_alpha", 0.2)
    return inputs, attrs


def make_tf_fused_conv2d_int8(
        conv_input: np.ndarray,
        filter: np.ndarray,  # noqa: A002 -- mirrors TF's argument name
        bias: np.ndarray,
        side_input: Optional[np.ndarray] = None,
        conv_input_scale: Union[float, np.ndarray] = 1.0,
        side_input_scale: float = 0.0,
        strides: Union[int, Sequence[int]] = (1, 1),
        padding: str = "SAME",
        activation: Optional[str] = "Relu",
        dtype: str = "int8") -> Callable[[], "object"]:
    """Returns fn() -> EagerTensor running TF's kernel on fixed operands.

    Operands are validated and copied into TF tensors once; every call of fn
    is one eager dispatch of _FusedConv2D on the CPU (for timing loops).
    """
    tf = _import_tf()
    from tensorflow.python.eager import context, execute

    with tf.device("/CPU:0"):
        inputs, attrs = _prepare(conv_input, filter, bias, side_input,
                                 conv_input_scale, side_input_scale, strides,
                                 padding, activation, dtype)
    ctx = context.context()
    ctx.ensure_initialized()
    op = b"_FusedConv2D"
    if not tf.config.list_logical_devices("GPU"):
        # CPU-only TF: eager placement already picks the CPU kernel; skipping
        # the device scope saves ~15 us per call.
        def fn():
            return execute.execute(op, 1, inputs, attrs, ctx)[0]
    else:
        device = tf.device

        def fn():
            with device("/CPU:0"):  # TF's CPU kernel, not the GPU one
                return execute.execute(op, 1, inputs, attrs, ctx)[0]

    return fn


def tf_fused_conv2d_int8(
        conv_input: np.ndarray,
        filter: np.ndarray,  # noqa: A002 -- mirrors TF's argument name
        bias: np.ndarray,
        side_input: Optional[np.ndarray] = None,
        conv_input_scale: Union[float, np.ndarray] = 1.0,
        side_input_scale: float = 0.0,
        strides: Union[int, Sequence[int]] = (1, 1),
        padding: str = "SAME",
        activation: Optional[str] = "Relu",
        dtype: str = "int8") -> np.ndarray:
    """TF's int8 fused conv: returns the NHWC int8 numpy result.

    conv_input int8 [N,H,W,Ci], filter int8 [Kh,Kw,Ci,Co], bias float32 [Co],
    side_input int8 [N,Ho,Wo,Co] or None, conv_input_scale scalar or float32
    [Co] (per-channel, supported by TF), side_input_scale scalar,
    activation "Relu" or "None"/None, dtype "int8" or "qint8" (same numerics).
    """
    fn = make_tf_fused_conv2d_int8(conv_input, filter, bias, side_input,
                                   conv_input_scale, side_input_scale,
                                   strides, padding, activation, dtype)
    out = fn().numpy()
    return np.asarray(out).view(np.int8) if out.dtype != np.int8 else out
