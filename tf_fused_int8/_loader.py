"""Loads the op library lazily, once.

Search order:
  1. the path in the environment variable ``TF_FUSED_INT8_LIBRARY``;
  2. ``_fused_int8_ops.so`` next to this file (wheel install);
  3. ``bazel-bin/_fused_int8_ops.so`` of the source checkout this package
     lives in (run from a checkout after ``bazel build``).

Before loading, the TensorFlow version the library was built against (a stamp
inside the binary) is compared with the running TensorFlow; a different
major.minor version gives one ImportError naming both versions.
"""

import os
import re
import threading

LIBRARY_NAME = "_fused_int8_ops.so"
LIBRARY_ENV = "TF_FUSED_INT8_LIBRARY"
_STAMP = re.compile(rb"TF_FUSED_INT8_BUILT_WITH_TF=([0-9A-Za-z.\-+]+);")

_lock = threading.Lock()
_module = None
_path = None


def _package_dir():
  return os.path.dirname(os.path.abspath(__file__))


def candidate_paths():
  """The places searched for the library, in order."""
  paths = []
  env = os.environ.get(LIBRARY_ENV)
  if env:
    paths.append(env)
  paths.append(os.path.join(_package_dir(), LIBRARY_NAME))
  repo_root = os.path.dirname(_package_dir())
  paths.append(os.path.join(repo_root, "bazel-bin", LIBRARY_NAME))
  return paths


def built_tf_version(path):
  """The TensorFlow version stamped into the library at `path`, or None."""
  with open(path, "rb") as f:
    match = _STAMP.search(f.read())
  return match.group(1).decode() if match else None


def _major_minor(version):
  return tuple(version.split(".")[:2])


def _find_library():
  paths = candidate_paths()
  env = os.environ.get(LIBRARY_ENV)
  if env and not os.path.isfile(env):
    raise ImportError(
        f"{LIBRARY_ENV}={env} does not name a file. Unset it or point it at "
        f"{LIBRARY_NAME}.")
  for path in paths:
    if os.path.isfile(path):
      return path
  raise ImportError(
      f"tf_fused_int8 could not find its op library {LIBRARY_NAME}. Looked "
      f"in: {', '.join(paths)}. Build it with `./configure.sh && bazel build "
      f"//:{LIBRARY_NAME}` in the source checkout, install the wheel, or set "
      f"{LIBRARY_ENV}.")


def check_version(path, tf_version):
  """Raises ImportError when `path` was built for another TF major.minor."""
  built = built_tf_version(path)
  if built is None:
    raise ImportError(
        f"{path} carries no TensorFlow version stamp; it is not a "
        f"tf_fused_int8 op library (running TensorFlow {tf_version}).")
  if _major_minor(built) != _major_minor(tf_version):
    raise ImportError(
        f"tf_fused_int8's op library {path} was built against TensorFlow "
        f"{built}, but TensorFlow {tf_version} is installed. Install "
        f"tensorflow=={'.'.join(_major_minor(built))}.* or rebuild the library "
        f"against TensorFlow {tf_version} (./configure.sh && bazel build "
        f"//:{LIBRARY_NAME}).")
  return built


def _wrappers_from_registry():
  """Python wrappers for our op generated from TF's op registry."""
  import types  # pylint: disable=g-import-not-at-top
  from tensorflow.core.framework import op_def_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow.python.framework import _pywrap_python_op_gen  # pylint: disable=g-import-not-at-top
  from tensorflow.python.framework import op_def_registry  # pylint: disable=g-import-not-at-top
  op_list = op_def_pb2.OpList()
  op_list.op.add().CopyFrom(op_def_registry.get("FusedInt8Conv2DBiasActivation"))
  module = types.ModuleType("tf_fused_int8._generated_ops")
  exec(_pywrap_python_op_gen.GetPythonWrappers(op_list.SerializeToString()),  # pylint: disable=exec-used
       module.__dict__)
  return module


def load_ops():
  """Loads the op library (once) and returns its generated op module."""
  global _module, _path
  if _module is not None:
    return _module
  with _lock:
    if _module is None:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      path = _find_library()
      check_version(path, tf.__version__)
      try:
        module = tf.load_op_library(path)
      except Exception as e:  # pylint: disable=broad-except
        raise ImportError(
            f"Loading {path} into TensorFlow {tf.__version__} failed: {e}. "
            f"The library may have been built with another TensorFlow or "
            f"compiler ABI; rebuild it with ./configure.sh && bazel build "
            f"//:{LIBRARY_NAME}.") from e
      if not hasattr(module, "fused_int8_conv2d_bias_activation"):
        # TF had loaded the library already (e.g. through
        # TF_PLUGGABLE_DEVICE_LIBRARY_PATH), so load_op_library returns a
        # module without wrappers: generate them from the registered op.
        module = _wrappers_from_registry()
      _path = path
      _module = module
  return _module


def library_path():
  """Path of the loaded library (loads it if needed)."""
  load_ops()
  return _path


_CACHE_STATS = ("hits", "misses", "stale", "evictions", "pinned_hits",
                "entries", "bytes", "released", "pinned_entries")


def weight_cache_stats():
  """The weight caches' counters, {"gemm": {...}, "depthwise": {...}}, each
  with the fields of cc/core/cpu/weight_cache_stats.h (read through the
  library's C API, cc/tf/c_api.cc): for tests and the benchmark."""
  import ctypes  # pylint: disable=g-import-not-at-top
  lib = ctypes.CDLL(library_path())  # the loaded library: dlopen returns it
  out = {}
  for kind, fn in (("gemm", lib.tf_fused_int8_packed_weights_stats),
                   ("depthwise", lib.tf_fused_int8_depthwise_cache_stats)):
    values = (ctypes.c_int64 * len(_CACHE_STATS))()
    fn(values)
    out[kind] = dict(zip(_CACHE_STATS, values))
  return out
