"""Runs cases through the op and the reference (shared by several tests)."""

import contextlib
import ctypes
import functools
import os
import platform

import numpy as np
import tensorflow as tf

import reference
import tf_fused_int8
from tf_fused_int8 import _loader

KERNEL_ENV = "TF_FUSED_INT8_CPU_KERNEL"


@functools.lru_cache(maxsize=None)
def _lib():
  """The op library's C API (loaded on first use, not at import)."""
  lib = ctypes.CDLL(_loader.library_path())
  lib.tf_fused_int8_kernel_path.restype = ctypes.c_char_p
  lib.tf_fused_int8_pinned_buffers.restype = ctypes.c_int64
  return lib


def packed_weights_stats():
  """The packed-weights cache's counters (packed_weights.h): hits, misses,
  stale, evictions, pinned_hits, entries, bytes, released, pinned_entries."""
  return _loader.weight_cache_stats()["gemm"]


def depthwise_cache_stats():
  """The depthwise prepared-weights cache's counters, as
  packed_weights_stats's (depthwise.h)."""
  return _loader.weight_cache_stats()["depthwise"]


def pinned_buffers():
  """How many weight buffers the pins' registry knows (weight_pin.h)."""
  return _lib().tf_fused_int8_pinned_buffers()


def pinned_hits():
  """The packed-weights cache's pinned hits: calls that used a packing of
  a variable's buffer unchecked (packed_weights.h)."""
  return packed_weights_stats()["pinned_hits"]


def depthwise_pinned_hits():
  """The depthwise prepared-weights cache's pinned hits: calls that used a
  preparation of variables' buffers without comparing them (depthwise.h)."""
  return depthwise_cache_stats()["pinned_hits"]


def assert_depthwise_used_pinned(call):
  """call() (a repeated call of depthwise layers whose weights are
  variables) used their prepared weights pinned, unchecked (no depthwise
  cache on the reference path)."""
  hits = depthwise_pinned_hits()
  call()
  assert depthwise_pinned_hits() > hits or kernel_path() == "reference", (
      "the depthwise weights were not used pinned")


def kernel_path():
  """The CPU kernel path a call runs now (TF_FUSED_INT8_CPU_KERNEL or the
  best this CPU has)."""
  return _lib().tf_fused_int8_kernel_path().decode()


def uses_packed_weights():
  """Whether the path this process runs caches packed weights (not the
  portable and reference kernels, e.g. forced by TF_FUSED_INT8_CPU_KERNEL)."""
  return kernel_path() not in ("portable", "reference")


@contextlib.contextmanager
def forced_kernel(path):
  """Forces the CPU kernel path for the duration of the block."""
  old = os.environ.get(KERNEL_ENV)
  if path is None:
    os.environ.pop(KERNEL_ENV, None)
  else:
    os.environ[KERNEL_ENV] = path
  try:
    yield
  finally:
    if old is None:
      os.environ.pop(KERNEL_ENV, None)
    else:
      os.environ[KERNEL_ENV] = old


def is_aarch64():
  return platform.machine().lower() in ("aarch64", "arm64")


def cpu_flags():
  """The CPU's feature names from /proc/cpuinfo: the x86 "flags" line or the
  aarch64 "Features" line (asimd, asimddp, i8mm, ...)."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key = line.split(":", 1)[0].strip()
        if key in ("flags", "Features"):
          return set(line.split(":", 1)[1].split())
  except OSError:
    pass
  return set()


# avx2_direct and avx2_winograd force the two variants the avx2 path chooses
# between (the direct kernels, the exact Winograd F(2x2, 3x3) on every 3x3
# stride-1 convolution).
X86_ISA_PATHS = ("avx2", "avx2_direct", "avx2_winograd", "avxvnni",
                 "avx512vnni", "amx")
ARM_ISA_PATHS = ("neon", "dotprod", "i8mm")

# Instruction-set kernels the build has (BUILD selects them by target CPU);
# each one this CPU supports is required to be available (a missing one
# fails, it is never skipped).
BUILT_ISA_PATHS = ARM_ISA_PATHS if is_aarch64() else X86_ISA_PATHS


def expected_paths():
  """CPU kernel paths this machine must be able to run."""
  flags = cpu_flags()
  paths = ["reference", "portable"]
  if is_aarch64():
    # dispatch.cc: HWCAP_ASIMD, HWCAP_ASIMDDP, HWCAP2_I8MM (i8mm with dotprod).
    if "asimd" in flags:
      paths.append("neon")
    if {"asimd", "asimddp"} <= flags:
      paths.append("dotprod")
    if {"asimd", "asimddp", "i8mm"} <= flags:
      paths.append("i8mm")
  else:
    if {"avx2", "fma"} <= flags:
      paths += ["avx2", "avx2_direct", "avx2_winograd"]
    if {"avx2", "fma", "avx_vnni"} <= flags:
      paths.append("avxvnni")
    avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}
    if avx512 <= flags:
      paths.append("avx512vnni")
    # dispatch.cc also asks Linux for the tile data state (arch_prctl), which
    # every kernel that lists these flags grants.
    if avx512 | {"amx_tile", "amx_int8"} <= flags:
      paths.append("amx")
  return [p for p in paths if p in ("reference", "portable") + BUILT_ISA_PATHS]


def kernel_paths():
  """expected_paths() but the reference: the kernels tested against it."""
  return [p for p in expected_paths() if p != "reference"]


def unavailable_paths():
  """Known path names this build or CPU cannot run (forcing them must fail
  cleanly): the other CPU family's, and this family's the CPU lacks."""
  return [p for p in X86_ISA_PATHS + ARM_ISA_PATHS if p not in expected_paths()]


def run_op(case, inputs, dtype=tf.int8, use_function=False, variables=False,
           output_lut=None):
  """Our op on `inputs` (numpy), returns numpy int8. variables=True passes
  filter, bias and conv_input_scale as tf.Variables (the op then runs
  ResourceFusedInt8Conv2DBiasActivation, which reads them in the kernel)."""
  def cast(a):
    if a is None:
      return None
    t = tf.constant(a)
    return tf.bitcast(t, tf.qint8) if dtype == tf.qint8 else t

  filter, bias = cast(inputs["filter"]), inputs["bias"]
  scale = inputs["conv_input_scale"]
  if variables:
    filter, bias = tf.Variable(filter), tf.Variable(np.float32(bias))
    scale = tf.Variable(np.float32(scale))
  args = dict(
      conv_input=cast(inputs["conv_input"]), filter=filter,
      bias=bias, strides=case.strides, padding=case.padding,
      conv_input_scale=scale,
      side_input_scale=inputs["side_input_scale"],
      side_input=cast(inputs["side_input"]), activation_mode=case.activation,
      dilations=case.dilations)
  if output_lut is not None:
    args["output_lut"] = output_lut
  if use_function:
    fn = tf.function(lambda: tf_fused_int8.fused_conv2d_bias_activation(**args))
    out = fn()
  else:
    out = tf_fused_int8.fused_conv2d_bias_activation(**args)
  if out.dtype == tf.qint8:
    out = tf.bitcast(out, tf.int8)
  return out.numpy()


def run_reference(case, inputs, output_lut=None):
  return reference.fused_conv2d_reference(
      inputs["conv_input"], inputs["filter"], inputs["bias"],
      side_input=inputs["side_input"],
      conv_input_scale=inputs["conv_input_scale"],
      side_input_scale=inputs["side_input_scale"],
      strides=case.strides, padding=case.padding,
      activation=case.activation, dilations=case.dilations,
      output_lut=output_lut)


def assert_same_bits(got, want, what=""):
  assert got.dtype == np.int8, got.dtype
  assert got.shape == want.shape, (what, got.shape, want.shape)
  if not np.array_equal(got, want):
    diff = np.argwhere(got != want)
    first = tuple(diff[0])
    raise AssertionError(
        f"{what}: {len(diff)} of {got.size} elements differ; first at {first}: "
        f"got {got[first]}, want {want[first]}")


def assert_cases_match_reference(cases, path, seed=0):
  """Every case through the op with `path` forced equals the reference
  (inputs from testing.make_inputs with seed + index)."""
  from tf_fused_int8 import testing  # pylint: disable=g-import-not-at-top
  for i, case in enumerate(cases):
    inputs = testing.make_inputs(case, seed=seed + i)
    want = run_reference(case, inputs)
    with forced_kernel(path):
      got = run_op(case, inputs)
    assert_same_bits(got, want, f"{path} {case.name()}")


def assert_ops_differ_only_in_resource_inputs(tensor_name, resource_name,
                                              resource_inputs):
  """Freezing renames a resource op into its tensor twin
  (tf_fused_int8/_freeze.py): the attrs (with defaults and allowed values),
  input names and order and the output must match, the inputs named in
  `resource_inputs` being resources in the resource op."""
  from tensorflow.python.framework import op_def_registry  # pylint: disable=g-import-not-at-top
  tensor_op = op_def_registry.get(tensor_name)
  resource_op = op_def_registry.get(resource_name)
  assert list(tensor_op.attr) == list(resource_op.attr)
  assert list(tensor_op.output_arg) == list(resource_op.output_arg)
  assert ([a.name for a in tensor_op.input_arg] ==
          [a.name for a in resource_op.input_arg])
  for t, r in zip(tensor_op.input_arg, resource_op.input_arg):
    if r.name in resource_inputs:
      assert r.type == tf.resource.as_datatype_enum, r
    else:
      assert t == r, (t, r)
