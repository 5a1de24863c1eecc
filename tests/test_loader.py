"""The op library loader: once, from the expected places, and a clear message
for a TF version mismatch or a missing library."""

import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

import tf_fused_int8
from tf_fused_int8 import _loader

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code, **env):
  full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT, **env)
  return subprocess.run([sys.executable, "-c", code], env=full_env, cwd=ROOT,
                        capture_output=True, text=True, timeout=300)


def test_loads_once():
  assert tf_fused_int8.load_ops() is tf_fused_int8.load_ops()
  assert tf_fused_int8.register_all() is tf_fused_int8.load_ops()


def test_library_carries_the_tf_version_it_was_built_with():
  assert _loader.built_tf_version(_loader.library_path()) == tf.__version__


def test_version_mismatch_message_names_both_versions():
  with pytest.raises(ImportError) as e:
    _loader.check_version(_loader.library_path(), "2.99.1")
  assert tf.__version__ in str(e.value) and "2.99.1" in str(e.value)


def test_mismatched_library_is_refused_before_loading(tmp_path):
  """A library stamped with another TF version is never dlopen'ed."""
  data = open(_loader.library_path(), "rb").read()
  stamp = f"TF_FUSED_INT8_BUILT_WITH_TF={tf.__version__};".encode()
  assert data.count(stamp) == 1
  other = f"TF_FUSED_INT8_BUILT_WITH_TF={'9' * len(tf.__version__.split('.')[0])}." \
          f"{tf.__version__.split('.', 1)[1]};".encode()
  assert len(other) == len(stamp)
  fake = tmp_path / "_fused_int8_ops.so"
  fake.write_bytes(data.replace(stamp, other))
  r = run_python(
      "import tf_fused_int8\n"
      "try:\n"
      "  tf_fused_int8.fused_conv2d_bias_activation([[[[1]]]], [[[[1]]]], [0.], padding='SAME')\n"
      "except ImportError as e:\n"
      "  print('IMPORT-ERROR', e)\n",
      TF_FUSED_INT8_LIBRARY=str(fake))
  assert "IMPORT-ERROR" in r.stdout, r.stdout + r.stderr
  assert tf.__version__ in r.stdout and "built against TensorFlow 9" in r.stdout


def test_missing_library_message(tmp_path):
  r = run_python(
      "import tf_fused_int8\n"
      "try:\n"
      "  tf_fused_int8.load_ops()\n"
      "except ImportError as e:\n"
      "  print('IMPORT-ERROR', e)\n",
      TF_FUSED_INT8_LIBRARY=str(tmp_path / "nope.so"))
  assert "IMPORT-ERROR" in r.stdout and "TF_FUSED_INT8_LIBRARY" in r.stdout, r.stdout + r.stderr


def test_library_from_package_dir(tmp_path):
  """A wheel-style layout: the .so next to the package's .py files."""
  pkg = tmp_path / "tf_fused_int8"
  shutil.copytree(os.path.join(ROOT, "tf_fused_int8"), pkg,
                  ignore=shutil.ignore_patterns("__pycache__", "*.so"))
  shutil.copy(_loader.library_path(), pkg / "_fused_int8_ops.so")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(tmp_path))
  env.pop("TF_FUSED_INT8_LIBRARY", None)
  r = subprocess.run(
      [sys.executable, "-c",
       "import tf_fused_int8, tf_fused_int8._loader as l; print('PATH', l.library_path())"],
      env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
  assert f"PATH {pkg / '_fused_int8_ops.so'}" in r.stdout, r.stdout + r.stderr


def test_library_preloaded_by_tensorflow():
  """TF loaded the library itself (TF_PLUGGABLE_DEVICE_LIBRARY_PATH): the
  package's API still works, through wrappers generated from the registry."""
  r = run_python(
      "import numpy as np, tf_fused_int8\n"
      "y = tf_fused_int8.fused_conv2d_bias_activation(\n"
      "    np.full((1, 3, 3, 2), 3, np.int8), np.ones((1, 1, 2, 1), np.int8),\n"
      "    [0.5], padding='SAME', activation_mode='None')\n"  # 6 + 0.5 -> 6
      "print('VALUES', sorted(set(y.numpy().ravel().tolist())))\n",
      TF_PLUGGABLE_DEVICE_LIBRARY_PATH=_loader.library_path())
  assert "VALUES [6]" in r.stdout, r.stdout + r.stderr
