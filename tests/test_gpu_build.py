"""The GPU kernel in CI, on machines without a GPU.

What can be checked without a GPU is checked here: the GPU kernel is compiled
and registered (int8 and qint8, NCHW_VECT_C), the op library gains no CUDA
dependency and still loads, NCHW_VECT_C also runs on the CPU, and the
TF-free harness library (//:libtfi_gpu_harness.so) gets its host side tested:
layout conversions against the Python helpers, the tensor descriptions handed
to cuDNN against numpy's own strides, and the whole GPU pipeline, emulated on
the host with the device kernels' own code, against the independent numpy
reference. What needs a GPU is tools/gpu_check.sh (see docs/gpu.md).
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

import reference
import tf_fused_int8

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS_LIB = os.path.join(ROOT, "bazel-bin", "libtfi_gpu_harness.so")
sys.path.insert(0, os.path.join(ROOT, "tools", "gpu_harness"))
import harness  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

OP = "FusedInt8Conv2DBiasActivation"
OPS = tf_fused_int8.load_ops()
RAW = OPS.fused_int8_conv2d_bias_activation


@pytest.fixture(scope="module")
def lib():
  if not os.path.isfile(HARNESS_LIB):
    pytest.fail(f"{HARNESS_LIB} is missing: run `bazel build //:libtfi_gpu_harness.so` "
                "(`bazel test //:all` builds it)")
  return harness.Lib(HARNESS_LIB)


def _needed(path):
  readelf = shutil.which("readelf")
  assert readelf, "readelf (binutils) is needed for this test"
  out = subprocess.run([readelf, "-d", path], capture_output=True, text=True, check=True).stdout
  return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


# ---------------------------------------------------------------------------------------------
# Registration and loading


def test_gpu_kernel_registered_for_int8_and_qint8():
  registered = kernels.get_registered_kernels_for_op(OP).kernel
  gpu = [k for k in registered if k.device_type == "GPU"]
  types = set()
  for k in gpu:
    constraints = {c.name: c.allowed_values.list for c in k.constraint}
    assert list(constraints["data_format"].s) == [b"NCHW_VECT_C"], k
    types.update(constraints["T"].type)
    assert "side_input_scale" in k.host_memory_arg, k
  assert types == {tf.int8.as_datatype_enum, tf.qint8.as_datatype_enum}
  cpu_types = set()
  for k in registered:
    if k.device_type == "CPU":
      cpu_types.update({c.name: c.allowed_values.list for c in k.constraint}["T"].type)
  assert cpu_types == types


def test_op_library_gains_no_cuda_dependency():
  """CUDA/cuDNN come from TF's lazily loading stubs: no DT_NEEDED on them, so the library loads
  on CPU-only machines (this process has no GPU and loaded it)."""
  lib_path = tf_fused_int8._loader.library_path()  # pylint: disable=protected-access
  needed = _needed(lib_path)
  assert not [n for n in needed if re.search(r"cud|cublas|nvrtc|nvidia", n)], needed
  allowed = re.compile(r"^(libtensorflow_framework\.so\.2|libstdc\+\+\.so\.6|libm\.so\.6|"
                       r"libgcc_s\.so\.1|libc\.so\.6|ld-linux-x86-64\.so\.2|libdl\.so\.2|"
                       r"libpthread\.so\.0)$")
  if "libasan" in os.environ.get("LD_PRELOAD", ""):  # tools/asan_check.sh's build
    needed = [n for n in needed if not re.match(r"^lib(a|ub)san\.so\.\d+$", n)]
  assert all(allowed.match(n) for n in needed), needed


def test_cuda_and_cudnn_symbols_resolve_to_tensorflow():
  nm = shutil.which("nm")
  assert nm, "nm (binutils) is needed for this test"
  lib_path = tf_fused_int8._loader.library_path()  # pylint: disable=protected-access
  undefined = subprocess.run([nm, "-D", "--undefined-only", lib_path], capture_output=True,
                             text=True, check=True).stdout.split()
  wanted = {s for s in undefined if re.match(r"^(cu|cudnn)[A-Z]", s)}
  assert "cudnnBackendExecute" in wanted and "cuLaunchKernel" in wanted, sorted(wanted)
  framework = os.path.join(os.path.dirname(tf.__file__), "libtensorflow_framework.so.2")
  defined = set(subprocess.run([nm, "-D", "--defined-only", framework], capture_output=True,
                               text=True, check=True).stdout.split())
  assert not wanted - defined, sorted(wanted - defined)


def test_nchw_vect_c_runs_on_cpu_too():
  """A graph exported for the GPU layout runs on CPU-only machines (the CPU
  kernel converts layouts; tests/test_nchw_vect_c_cpu.py checks the bits)."""
  x = np.ones((1, 2, 6, 6, 4), np.int8)
  w = np.ones((8, 2, 3, 3, 4), np.int8)
  with tf.device("/CPU:0"):
    out = RAW(conv_input=x, filter=w, bias=np.zeros(8, np.float32),
              side_input=np.zeros((0,), np.int8), conv_input_scale=np.float32(1),
              side_input_scale=np.float32(0), strides=[1, 1, 1, 1], padding="SAME",
              data_format="NCHW_VECT_C", filter_format="OIHW_VECT_I").numpy()
  assert out.shape == (1, 2, 6, 6, 4)
  assert out[0, 0, 2, 2, 0] == 72 and out[0, 0, 0, 0, 0] == 32  # 9*8 and 4*8 taps


def test_nhwc_keeps_working_with_the_gpu_kernel_registered():
  x = np.ones((1, 4, 4, 4), np.int8)
  w = np.ones((1, 1, 4, 4), np.int8)
  out = tf_fused_int8.fused_conv2d_bias_activation(x, w, np.zeros(4, np.float32), padding="SAME",
                                                   conv_input_scale=0.5)
  assert (out.numpy() == 2).all()


# ---------------------------------------------------------------------------------------------
# The TF-free harness library


def test_harness_library_is_tf_free(lib):
  del lib
  needed = _needed(HARNESS_LIB)
  assert not [n for n in needed if re.search(r"tensorflow|cud|nvidia", n)], needed


def test_gpu_init_without_a_gpu_is_a_clean_error(lib):
  """No driver / no cuDNN: a clear UNAVAILABLE error naming the library, no crash; and the GPU
  entry point refuses to run before a successful init."""
  if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
    pytest.skip("this machine has an NVIDIA driver")
  case = harness.Case("x", 1, 4, 4, 4, 4, 1, 1)
  with pytest.raises(RuntimeError, match="call tfi_init first"):
    lib.gpu_conv(case.conv_struct(0.0), [0] * 6, 0)
  with pytest.raises(RuntimeError, match="call tfi_init first"):  # the timed calls' form
    lib.gpu_conv(case.conv_struct(0.0), [0] * 6, 0, want_info=False)
  try:
    lib.init("libcudnn.so.9", "libcuda.so.1")
  except RuntimeError as e:
    assert re.search(r"UNAVAILABLE: could not load (the CUDA driver library libcuda\.so\.1|"
                     r"cuDNN libcudnn\.so\.9)", str(e)), str(e)
  else:
    pytest.skip("CUDA and cuDNN libraries are installed (no GPU device)")


@pytest.mark.parametrize("shape,vect", [((2, 3, 5, 4), 4), ((1, 4, 4, 5), 4), ((2, 2, 3, 6), 4),
                                        ((1, 3, 2, 64), 32), ((1, 2, 2, 40), 32)])
def test_activation_layout_matches_python_helpers(lib, shape, vect):
  rng = np.random.default_rng(sum(shape))
  x = rng.integers(-128, 128, shape, dtype=np.int8)
  ours = lib.nhwc_to_vect(x, vect)
  theirs = tf_fused_int8.nhwc_to_nchw_vect_c(x, vect_size=vect).numpy()
  np.testing.assert_array_equal(ours, theirs)
  np.testing.assert_array_equal(lib.vect_to_nhwc(ours, shape[3]), x)


@pytest.mark.parametrize("shape,vect", [((3, 3, 4, 8), 4), ((1, 2, 6, 4), 4), ((2, 2, 64, 12), 32)])
def test_filter_layout_matches_python_helpers(lib, shape, vect):
  rng = np.random.default_rng(sum(shape))
  w = rng.integers(-128, 128, shape, dtype=np.int8)
  ours = lib.hwio_to_vect(w, vect)
  theirs = tf_fused_int8.hwio_to_oihw_vect_i(w, vect_size=vect).numpy()
  np.testing.assert_array_equal(ours, theirs)
  np.testing.assert_array_equal(lib.vect_to_hwio(ours, shape[2]), w)


@pytest.mark.parametrize("vect", [4, 32])
def test_cudnn_tensor_descriptions_match_the_memory_layout(lib, vect):
  """cuDNN's backend takes vectorized int8 tensors as dims in vectors along C, strides in units
  of vectors: the strides handed to cuDNN, times the vector size, are numpy's byte strides of the
  NCHW_VECT_C arrays (and of the float32 NCHW output)."""
  case = harness.Case("spec", 2, 9, 7, 64, 12, 3, 5, stride=(2, 1), padding="SAME")
  conv = case.conv_struct(0.0)
  oh, ow, _ = lib.output_geometry(conv)
  spec = lib.conv_spec(conv, f"x{vect}")
  xv = np.zeros((2, 64 // vect, 9, 7, vect), np.int8)
  wv = np.zeros((12, 64 // vect, 3, 5, vect), np.int8)
  y = np.zeros((2, 12, oh, ow), np.float32)
  assert spec["x"]["dims"] == [2, 64 // vect, 9, 7] and spec["x"]["vector_count"] == vect
  assert spec["w"]["dims"] == [12, 64 // vect, 3, 5] and spec["w"]["vector_count"] == vect
  assert spec["y"]["dims"] == [2, 12, oh, ow] and spec["y"]["vector_count"] == 1
  assert [s * vect for s in spec["x"]["strides"]] == list(xv.strides[:4])
  assert [s * vect for s in spec["w"]["strides"]] == list(wv.strides[:4])
  assert [s * 4 for s in spec["y"]["strides"]] == list(y.strides)


@pytest.mark.parametrize("layout", ["nhwc-i32", "nhwc-f32"])
def test_cudnn_nhwc_descriptions_match_the_memory_layout(lib, layout):
  """The NHWC plans: dims stay [N, C, H, W] / [K, C, R, S], strides are those of NHWC / KRSC
  arrays (in elements), and y is NHWC int32 or float32."""
  case = harness.Case("spec", 2, 9, 7, 12, 8, 3, 5, stride=(2, 1), padding="SAME")
  conv = case.conv_struct(0.0)
  oh, ow, _ = lib.output_geometry(conv)
  spec = lib.conv_spec(conv, layout)
  nhwc = np.zeros((2, 9, 7, 12), np.int8).transpose(0, 3, 1, 2)  # NHWC memory, NCHW view
  krsc = np.zeros((8, 3, 5, 12), np.int8).transpose(0, 3, 1, 2)
  y = np.zeros((2, oh, ow, 8), np.int32).transpose(0, 3, 1, 2)
  assert spec["x"]["dims"] == [2, 12, 9, 7] and spec["x"]["vector_count"] == 1
  assert spec["w"]["dims"] == [8, 12, 3, 5] and spec["y"]["dims"] == [2, 8, oh, ow]
  assert spec["x"]["strides"] == list(nhwc.strides)
  assert spec["w"]["strides"] == list(krsc.strides)
  assert [s * 4 for s in spec["y"]["strides"]] == list(y.strides)


def _emulated_vs_numpy_reference(lib, case, seed):
  p = harness.prepare(lib, case, seed)
  want = reference.fused_conv2d_reference(
      p["x"], p["w"], p["bias"], side_input=p["side"], conv_input_scale=p["scale"]
      if case.per_channel else p["scale"][0], side_input_scale=p["conv"].side_input_scale,
      strides=case.stride, padding=case.padding, activation="Relu" if case.relu else "None",
      dilations=case.dilation)
  if case.lut:
    want = p["lut"][want.astype(np.int16) + 128]
  np.testing.assert_array_equal(p["want"], want, err_msg=f"C++ reference vs numpy: {case}")
  for layout in harness.LAYOUTS:
    if layout == "x32" and case.in_c % 32:
      continue
    got = lib.emulate(p["conv"], layout, p["xv"], p["wv"], p["bias"], p["sidev"], p["scale"],
                      p["wantv"].shape)
    np.testing.assert_array_equal(lib.vect_to_nhwc(got, case.out_c), want,
                                  err_msg=f"GPU pipeline (host emulation, {layout}): {case}")


SMALL_CASES = [c for c in harness.make_cases() if not c.perf][::5] + [
    c for c in harness.make_cases() if c.special or c.lut] + [
    c for c in harness.make_cases() if c.groups > 1 and c.batch * c.h * c.w * c.in_c < 50000]
SMALL_CASES = list({c.name: c for c in SMALL_CASES}.values())


@pytest.mark.parametrize("case", SMALL_CASES, ids=[c.name for c in SMALL_CASES])
def test_gpu_pipeline_emulation_matches_numpy_reference(lib, case):
  _emulated_vs_numpy_reference(lib, case, 99)


def test_harness_cpu_only_sweep(lib):
  del lib
  assert harness.main(["--lib", HARNESS_LIB, "--cpu-only"]) == 0


def test_harness_sweep_covers_what_the_gpu_check_needs():
  cases = [c for c in harness.make_cases() if not c.perf]
  assert len(cases) >= 50
  assert {c.kh for c in cases} >= {1, 3, 5, 7}
  assert {c.stride for c in cases} >= {(1, 1), (2, 2)}
  assert {c.padding for c in cases if isinstance(c.padding, str)} == {"SAME", "VALID"}
  for attr in ("side", "relu", "per_channel"):
    assert {getattr(c, attr) for c in cases} == {True, False}, attr
  assert any(c.h % 2 or c.w % 2 for c in cases)
  assert any(c.in_c % 32 == 0 for c in cases) and any(c.in_c % 32 for c in cases)
  assert {"nan_inf", "big_acc"} <= {c.special for c in cases}
  assert any(c.lut and c.in_c % 32 == 0 for c in cases) and any(c.lut and c.side for c in cases)
  assert any(c.deterministic for c in cases) and any(c.dilation != (1, 1) for c in cases)
  # SAME with odd total padding (asymmetric: graph path only) is in the sweep.
  asym = [c for c in cases if c.padding == "SAME" and c.stride == (2, 2) and c.h % 2 == 0]
  assert asym


def test_harness_sweep_covers_grouped_and_depthwise():
  """The direct kernels' cases (groups > 1), all in the --cpu-only sweep too (none is perf),
  besides MobileNetV2's depthwise layers at batch 32, which are perf cases (GPU only)."""
  all_grouped = [c for c in harness.make_cases() if c.groups > 1]
  perf = [c for c in all_grouped if c.perf]
  assert perf and all(c.depthwise and c.batch == 32 and c.name.startswith("mnv2_dw_")
                      for c in perf)
  assert all(c.gpu_direct_plan == "direct/depthwise" for c in perf)
  cases = [c for c in all_grouped if not c.perf]
  assert cases
  # Both direct kernels are exercised: the fused one (groups of one int8x4 word) and the other.
  assert {c.gpu_direct_plan for c in cases} == {"direct/depthwise", "direct/grouped"}
  dw = [c for c in cases if c.depthwise]
  # MobileNetV2's depthwise layers, stride 1 and 2, batch 1 and 8.
  assert {(c.h, c.in_c) for c in dw} >= {(112, 32), (56, 144), (14, 384), (7, 960)}
  assert {c.stride for c in dw} == {(1, 1), (2, 2)} and {c.batch for c in dw} >= {1, 8}
  assert {c.out_c // c.in_c for c in dw} == {1, 2}  # channel multipliers
  grouped = [c for c in cases if not c.depthwise]
  assert {c.in_c // c.groups for c in grouped} >= {4, 8, 16}  # channels per group
  assert any(c.dilation != (1, 1) for c in dw) and any(c.dilation != (1, 1) for c in grouped)
  explicit = [c.padding for c in cases if not isinstance(c.padding, str)]
  assert any(t != b or l != r for t, b, l, r in explicit)  # asymmetric explicit padding
  assert {c.padding for c in cases} >= {"SAME", "VALID"}
  assert {c.kh for c in cases} >= {1, 3, 5, 7}
  for attr in ("side", "relu", "per_channel"):
    assert {getattr(c, attr) for c in cases} == {True, False}, attr
  assert {"big_acc", "extreme"} <= {c.special for c in cases}
  assert any(c.h % 2 or c.w % 2 for c in cases)


def test_depthwise_filter_for_the_gpu_computes_the_depthwise_sums(lib):
  """harness.Case.gpu_filter: groups of 4 channels, one channel per lane, gives the
  depthwise layer's sums (numpy reference, channel multiplier 2)."""
  case = harness.Case("dw", 2, 7, 6, 8, 16, 3, 3, groups=8, stride=(2, 1))
  rng = np.random.default_rng(5)
  x = rng.integers(-128, 128, (2, 7, 6, 8), dtype=np.int8)
  w = rng.integers(-128, 128, (3, 3, 1, 16), dtype=np.int8)
  wg = case.gpu_filter(w)
  assert wg.shape == (3, 3, 4, 16) and case.gpu_groups == 2
  np.testing.assert_array_equal(reference.conv2d_int32(x, wg, strides=(2, 1)),
                                reference.conv2d_int32(x, w, strides=(2, 1)))
  assert np.count_nonzero(wg) == np.count_nonzero(w)


def test_gpu_options_follow_the_environment(lib, monkeypatch):
  for name in ("TF_FUSED_INT8_GPU_AUTOTUNE", "TF_CUDNN_USE_AUTOTUNE",
               "TF_FUSED_INT8_GPU_WORKSPACE_LIMIT_MB", "TF_FUSED_INT8_GPU_PATH",
               "TF_FUSED_INT8_GPU_LAYOUT"):
    monkeypatch.delenv(name, raising=False)
  o = lib.options()
  assert o == dict(autotune=True, deterministic=False, workspace_limit_bytes=4 << 30,
                   path="auto", layout="auto", warnings="")
  monkeypatch.setenv("TF_CUDNN_USE_AUTOTUNE", "false")
  monkeypatch.setenv("TF_FUSED_INT8_GPU_WORKSPACE_LIMIT_MB", "64")
  monkeypatch.setenv("TF_FUSED_INT8_GPU_PATH", "legacy")
  o = lib.options(deterministic=True)
  assert (o["autotune"], o["deterministic"], o["workspace_limit_bytes"], o["path"]) == (
      False, True, 64 << 20, "legacy")
  monkeypatch.setenv("TF_FUSED_INT8_GPU_LAYOUT", "nhwc")
  assert lib.options()["layout"] == "nhwc"
  monkeypatch.setenv("TF_FUSED_INT8_GPU_LAYOUT", "x7")
  assert "TF_FUSED_INT8_GPU_LAYOUT" in lib.options()["warnings"]


def test_embedded_ptx_is_generated_from_the_current_sources(lib):
  gpu_dir = os.path.join(ROOT, "cc", "core", "gpu")
  digest = hashlib.sha256()
  for name in ("device_kernels.h", "device_kernels.cu"):
    with open(os.path.join(gpu_dir, name), "rb") as f:
      digest.update(f.read())
  with open(os.path.join(gpu_dir, "device_kernels_ptx.inc"), encoding="utf-8") as f:
    inc = f.read()
  stamp = re.search(r"^// source-sha256: ([0-9a-f]{64})$", inc, re.M)
  assert stamp and stamp.group(1) == digest.hexdigest(), (
      "cc/core/gpu/device_kernels_ptx.inc is stale: run tools/gpu_harness/gen_ptx.sh (needs nvcc)")
  ptx = lib.embedded_ptx()
  assert ".version 6.0" in ptx and ".target sm_61" in ptx
  for kernel in ("tfi_epilogue_x4", "tfi_x4_to_x32", "tfi_transpose_words", "tfi_count_mismatch",
                 "tfi_check_sample", "tfi_direct_conv", "tfi_depthwise_conv"):
    assert f".entry {kernel}(" in ptx
  # The contract's roundings are explicit (never contracted): cvt.rn (int32 -> float32), mul.rn,
  # fma.rn, add.rn, cvt.rni (round half to even).
  for op in ("cvt.rn.f32.s32", "mul.rn.f32", "fma.rn.f32", "add.rn.f32", "cvt.rni.s32.f32"):
    assert op in ptx


@pytest.mark.parametrize("script", ["tools/gpu_check.sh", "tools/gpu_harness/gen_ptx.sh"])
def test_gpu_scripts_are_valid_bash(script):
  path = os.path.join(ROOT, script)
  assert os.access(path, os.X_OK), f"{script} is not executable"
  subprocess.run(["bash", "-n", path], check=True)


# ---------------------------------------------------------------------------------------------
# The harness's GPU mode, with a fake PyTorch and the host emulation standing in for the GPU:
# checks its plumbing (pointers, layouts, timing, forced paths, JSON) so that the scarce GPU
# session does not discover Python bugs.


class _FakeTensor:
  registry = {}

  def __init__(self, arr):
    self.arr = arr

  def to(self, *unused):
    return self

  def data_ptr(self):
    _FakeTensor.registry[self.arr.ctypes.data] = self.arr
    return self.arr.ctypes.data

  def permute(self, *dims):
    return _FakeTensor(self.arr.transpose(dims))

  def half(self):
    return _FakeTensor(self.arr.astype(np.float16))

  def contiguous(self, memory_format=None):
    del memory_format
    return _FakeTensor(np.ascontiguousarray(self.arr))

  def cpu(self):
    return self

  def numpy(self):
    return self.arr


def _fake_torch():
  import contextlib  # pylint: disable=g-import-not-at-top
  import types  # pylint: disable=g-import-not-at-top

  class Event:
    def __init__(self, enable_timing=False):
      del enable_timing

    def record(self, stream=None):
      del stream

    def synchronize(self):
      pass

    def elapsed_time(self, other):
      del other
      return 2.0

  class Stream:
    cuda_stream = 0

    def synchronize(self):
      pass

  torch = types.ModuleType("torch")
  torch.__version__ = "fake"
  torch.int8 = np.int8
  torch.channels_last = "channels_last"
  torch.device = lambda name: name
  torch.zeros = lambda *shape, device=None: _FakeTensor(np.zeros(shape, np.float32))
  torch.empty = lambda shape, dtype=None, device=None: _FakeTensor(np.empty(shape, dtype))
  torch.empty_like = lambda t: _FakeTensor(np.empty_like(t.arr))
  torch.equal = lambda a, b: np.array_equal(a.arr, b.arr)
  torch.from_numpy = _FakeTensor
  torch.cuda = types.SimpleNamespace(
      is_available=lambda: True, get_device_name=lambda: "fake GPU",
      get_device_capability=lambda: (9, 0), synchronize=lambda: None, Stream=Stream,
      Event=Event, stream=lambda s: contextlib.nullcontext())
  torch.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 0))
  functional = types.ModuleType("torch.nn.functional")
  def conv2d(x, w, stride=1, dilation=1, groups=1):
    del stride, dilation
    assert x.arr.shape[1] == w.arr.shape[1] * groups, "PyTorch's grouped conv2d shapes"
    return _FakeTensor(np.zeros(1, np.float16))

  functional.conv2d = conv2d

  def pad(t, pads):
    left, right, top, bottom = pads
    return _FakeTensor(np.pad(t.arr, [(0, 0), (0, 0), (top, bottom), (left, right)]))

  functional.pad = pad
  torch.nn = types.SimpleNamespace(functional=functional)
  return torch, functional


def _run_harness_on_a_fake_gpu(lib, monkeypatch, tmp_path, fake_gpu_conv, picked, seed, iters,
                               verbose):
  """harness.run_gpu over `picked` with the fake PyTorch and `fake_gpu_conv` standing in for
  the GPU; asserts that it passed and returns its results JSON."""
  torch, functional = _fake_torch()
  monkeypatch.setitem(sys.modules, "torch", torch)
  monkeypatch.setitem(sys.modules, "torch.nn", torch.nn)
  monkeypatch.setitem(sys.modules, "torch.nn.functional", functional)
  monkeypatch.setattr(lib, "init", lambda cudnn, cuda: None)
  monkeypatch.setattr(lib, "gpu_conv", fake_gpu_conv)
  out_json = tmp_path / "results.json"
  args = harness.argparse.Namespace(seed=seed, iters=iters, cudnn=None, cuda="libcuda.so.1",
                                    no_forced=False, verbose=verbose, json=str(out_json))
  assert harness.run_gpu(lib, picked, args)
  import json  # pylint: disable=g-import-not-at-top
  return json.loads(out_json.read_text())


def test_harness_gpu_mode_plumbing_with_a_fake_gpu(lib, monkeypatch, tmp_path):
  calls = []

  def fake_gpu_conv(conv, ptrs, stream, want_info=True):
    del stream, want_info
    arrays = [_FakeTensor.registry.get(p) if p else None for p in ptrs]
    xv, wv, bias, sidev, scale, out = arrays
    layout = {"x32": "x32", "nhwc": "nhwc-i32"}.get(
        os.environ.get("TF_FUSED_INT8_GPU_LAYOUT", ""), "x4")
    out[...] = lib.emulate(conv, layout, xv, wv, bias, sidev, scale, out.shape)
    if conv.groups > 1:  # a direct kernel: no cuDNN, no candidates (RunFusedConvGpu)
      calls.append(f"direct/{conv.groups}")
      # UsesDepthwiseKernel: groups of one int8x4 word of input channels.
      plan = "direct/depthwise" if conv.in_c // conv.groups == 4 else "direct/grouped"
      return dict(device="fake", plan=plan, tuned_now=False, candidates=[])
    calls.append(layout)
    return dict(device="fake", plan=f"emulated/{layout}", tuned_now=True,
                candidates=[dict(name=f"emulated/{layout}", outcome="ok (baseline)",
                                 time_ms=0.5, workspace_bytes=0)])

  cases = harness.make_cases()
  grouped = [c for c in cases if c.name in ("mnv2_dw_112x32_s1", "dw_asym_pad",
                                              "grouped_8ch_d2_explicit")]
  picked = (cases[:4] + [c for c in cases if c.deterministic] +
            [c for c in cases if c.in_c == 64 and not c.perf][:2] + grouped)
  results = _run_harness_on_a_fake_gpu(lib, monkeypatch, tmp_path, fake_gpu_conv, picked,
                                       seed=7, iters=2, verbose=True)
  assert results["failures"] == 0 and results["errors"] == 0
  assert len(results["rows"]) == len(picked) and all(r["bits"] == "exact" for r in results["rows"])
  assert {"x4", "x32", "nhwc-i32"} <= set(calls)
  assert any(f["env"] == "TF_FUSED_INT8_GPU_PATH=legacy" for f in results["forced"])
  assert "TF_FUSED_INT8_GPU_LAYOUT" not in os.environ
  # The GPU gets a depthwise layer as groups of 4 channels (mnv2_dw_112x32_s1: 32 -> 8 groups).
  assert {"direct/8", "direct/4"} <= set(calls)
  rows = {r["case"]: r for r in results["rows"]}
  # Depthwise layers (groups of 4 channels on the GPU) take the fused kernel, wider groups the
  # direct kernel; the harness checks each row's plan against the case (gpu_direct_plan).
  assert {c.name: c.gpu_direct_plan for c in grouped} == {
      "mnv2_dw_112x32_s1": "direct/depthwise", "dw_asym_pad": "direct/depthwise",
      "grouped_8ch_d2_explicit": "direct/grouped"}
  assert all(rows[c.name]["plan"] == c.gpu_direct_plan and rows[c.name]["groups"] == c.groups
             for c in grouped)
  # Grouped calls with asymmetric padding under a forced legacy path: still a direct kernel.
  forced_grouped = {f["case"]: f for f in results["forced"]
                    if f["case"] in ("dw_asym_pad", "grouped_8ch_d2_explicit")}
  assert len(forced_grouped) == 2 and all(
      f["env"] == "TF_FUSED_INT8_GPU_PATH=legacy" for f in forced_grouped.values())
  assert forced_grouped["dw_asym_pad"]["result"] == "direct/depthwise: exact"
  assert forced_grouped["grouped_8ch_d2_explicit"]["result"] == "direct/grouped: exact"


_NO_X32 = ("NOT_FOUND: no cuDNN engine or algorithm runs this int8 convolution exactly "
           "(graph/x32/: heuristics returned no engine; legacy/x32/: no algorithm for this "
           "configuration; graph/x32//fallback: heuristics returned no engine)")


def test_harness_tells_a_clean_refusal_from_a_failure():
  assert harness.no_engine_offered(_NO_X32 + "\n  candidates: []")
  assert harness.no_engine_offered(
      "NOT_FOUND: no cuDNN engine or algorithm runs this int8 convolution exactly (legacy/x32/: "
      "not used: the legacy cuDNN API needs symmetric padding; graph/x32/: heuristics returned "
      "no engine)")
  # Something ran and was wrong, or failed: not a clean refusal.
  assert not harness.no_engine_offered(_NO_X32.replace(
      "legacy/x32/: no algorithm for this configuration",
      "graph/x32/eng1{}: dropped: wrong: 3 of 96 sampled values differ"))
  assert not harness.no_engine_offered(
      "NOT_FOUND: no cuDNN engine or algorithm ran this int8 convolution (graph/x4/eng0{}: "
      "dropped: execution failed: boom)")
  assert not harness.no_engine_offered("INTERNAL: cudnnCreate: failed")


def test_harness_reports_refused_layouts_and_wrong_candidates(lib, monkeypatch, tmp_path):
  """A cuDNN that offers no INT8x32 engine (H200, cuDNN 9.19) refuses the forced x32 runs
  cleanly: counted apart, not as errors. Candidates that the sample check dropped are listed."""
  def fake_gpu_conv(conv, ptrs, stream, want_info=True):
    del stream, want_info
    layout = {"x32": "x32", "nhwc": "nhwc-f32"}.get(
        os.environ.get("TF_FUSED_INT8_GPU_LAYOUT", ""), "x4")
    if layout == "x32":
      raise RuntimeError(_NO_X32 + "\n  candidates: []")
    xv, wv, bias, sidev, scale, out = [_FakeTensor.registry.get(p) if p else None for p in ptrs]
    out[...] = lib.emulate(conv, layout, xv, wv, bias, sidev, scale, out.shape)
    return dict(device="fake", plan=f"emulated/{layout}", tuned_now=True, candidates=[
        dict(name="graph/nhwc-i32/eng28{}", time_ms=-1, workspace_bytes=0,
             outcome="dropped: wrong: 96 of 96 sampled values differ from float32 of the exact "
                     "sum; at (n, c, oy, ox) = (0, 0, 0, 0) it wrote 1091567616, the exact sum "
                     "is 9"),
        dict(name=f"emulated/{layout}", outcome="ok (baseline)", time_ms=0.5,
             workspace_bytes=0)])

  picked = [c for c in harness.make_cases() if c.in_c == 64 and not c.perf][:3]
  results = _run_harness_on_a_fake_gpu(lib, monkeypatch, tmp_path, fake_gpu_conv, picked,
                                       seed=3, iters=1, verbose=False)
  assert results["errors"] == 0 and results["failures"] == 0
  assert results["unavailable"] == 3
  assert results["wrong_candidates"] == {"graph/nhwc-i32/eng28{}": 3}
  refused = [f for f in results["forced"] if f["env"] == "TF_FUSED_INT8_GPU_LAYOUT=x32"]
  assert len(refused) == 3 and all(f["result"].startswith("UNAVAILABLE: NOT_FOUND") for f in refused)
