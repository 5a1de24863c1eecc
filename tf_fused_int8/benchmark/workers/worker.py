"""One benchmark worker process: `python worker.py --family=NAME --threads=N`.

Run by path (not with -m) so that it imports nothing of tf_fused_int8 unless
its family needs it: the peers' venv has no TensorFlow. The family module
(impl_<family>.py next to this file) is imported after the thread
environment is set, so that its libraries start their pools with N threads.

A family object has:
  setup_layer(key, spec, data_path) -> {"impls": {impl: None or error},
  optional "ops_per_call": {impl: n}, "check": text},
  probe(impl, spec, kind, seed, multiplier) -> result dict (see
  exactness.evaluate; multiplier: the x_scale * w_scale / y_scale to use where
  the implementation lets us choose), callable(key, impl) -> fn, release(key),
  setup_model(key, model, batch) -> like setup_layer, info() -> dict;
  optionally extra commands in EXTRA_COMMANDS.
"""

import argparse
import importlib
import os
import sys

import numpy as np


def _set_thread_env(threads):
  n = str(threads)
  for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENVINO_NUM_THREADS"):
    os.environ[var] = n
  # numpy's own BLAS is not what is timed; its idle workers would spin.
  os.environ["OPENBLAS_NUM_THREADS"] = "1"
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def cpuid_mask_info():
  """Whether cpuid_mask.c (LD_PRELOADed by --peer_isa) limits this process,
  asked after the family's libraries loaded (one could have replaced the
  SIGSEGV handler that answers CPUID)."""
  import ctypes  # pylint: disable=g-import-not-at-top
  try:
    lib = ctypes.CDLL(None)
    state = int(lib.tfi_cpuid_mask_state())
    count = lib.tfi_cpuid_mask_emulated
    count.restype = ctypes.c_long
    emulated = int(count())
  except AttributeError:
    state, emulated = 0, 0
  return dict(cpuid_mask=os.environ["TF_FUSED_INT8_CPUID_MASK"],
              cpuid_mask_state=state, cpuid_mask_emulated=emulated)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--family", required=True)
  parser.add_argument("--threads", type=int, required=True)
  args = parser.parse_args()
  _set_thread_env(args.threads)
  here = os.path.dirname(os.path.abspath(__file__))
  if here not in sys.path:
    sys.path.insert(0, here)
  import exactness  # pylint: disable=g-import-not-at-top
  import protocol  # pylint: disable=g-import-not-at-top
  try:
    module = importlib.import_module("impl_" + args.family)
    family = module.Family(args.threads)
  except Exception as e:  # pylint: disable=broad-except
    # The parent reads this first reply: the family is unavailable here.
    protocol.send({"ok": False, "error": f"{type(e).__name__}: {e}"})
    return 0
  info = family.info()
  if os.environ.get("TF_FUSED_INT8_CPUID_MASK"):
    info.update(cpuid_mask_info())
  protocol.send({"ok": True, "info": info})
  fns = {}

  def setup_layer(msg):
    return family.setup_layer(msg["key"], msg["spec"], msg["data"])

  def probe(msg):
    result = family.probe(msg["impl"], msg["spec"], msg["kind"],
                          msg["seed"], msg["multiplier"])
    arrays = {k: np.asarray(result.pop(k)) for k in ("out", "weights", "x")
              if k in result}
    np.savez(msg["out"], **arrays)
    return {"result": {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                       for k, v in result.items()}}

  def calibrate(msg):
    fn = fns[(msg["key"], msg["impl"])] = family.callable(msg["key"],
                                                          msg["impl"])
    fn()  # warm up: weight packing, caches, tracing
    return {"iters": protocol.calibrate(fn, msg["min_time"])}

  def time_(msg):
    return {"seconds": protocol.time_calls(fns[(msg["key"], msg["impl"])],
                                           msg["iters"])}

  def release(msg):
    for k in [k for k in fns if k[0] == msg["key"]]:
      del fns[k]
    family.release(msg["key"])
    return {}

  def setup_model(msg):
    return family.setup_model(msg["key"], msg["model"], msg["batch"])

  handlers = {"setup_layer": setup_layer, "probe": probe,
              "calibrate": calibrate, "time": time_, "release": release,
              "setup_model": setup_model}
  for name, fn in getattr(module, "EXTRA_COMMANDS", {}).items():
    handlers[name] = (lambda f: lambda msg: f(family, msg))(fn)
  del exactness  # imported above so that a broken install fails early
  protocol.serve(handlers)
  return 0


if __name__ == "__main__":
  sys.exit(main())
