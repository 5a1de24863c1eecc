"""SavedModel export of a model with QuantizedFusedConv2D, and serving it from
fresh Python processes: with `import tf_fused_int8` (identical outputs through
the signature, TFSMLayer and the .keras file) and without it (TF's error names
the op; importing tf_fused_int8 then fixes the load in the same process)."""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_helpers
import tf_fused_int8

# Keras's own saving code trips numpy 2's __array__(copy=...) deprecation.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning")

QFC = tf_fused_int8.QuantizedFusedConv2D
# What the Keras layers run (their variables read in the kernel).
OP_NAME = "ResourceFusedInt8Conv2DBiasActivation"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_model(seed=0):
  """A small int8 residual network: stem (stride 2), a residual block whose
  second conv takes the block input as side input, a projection shortcut,
  then stock Keras layers (pooling, Rescaling to dequantize, Add, Dense)."""
  rng = np.random.default_rng(seed)

  def qconv(ci, co, k, s_in, s_out, s_side=None, **kw):
    return QFC.from_float_weights(
        rng.normal(0, 1.5 / np.sqrt(k * k * ci), (k, k, ci, co)),
        rng.normal(0, 0.1, co), input_scale=s_in, output_scale=s_out,
        side_input_scale=s_side, **kw)

  inp = keras.Input((None, None, 3), dtype="int8", name="image")
  stem = qconv(3, 8, 3, 1 / 64, 1 / 16, strides=2, padding="same",
               activation="relu", name="stem")(inp)
  c1 = qconv(8, 8, 3, 1 / 16, 1 / 16, padding="same", activation="relu",
             name="block_conv1")(stem)
  out1 = qconv(8, 8, 3, 1 / 16, 1 / 16, 1 / 16, padding="same",
               activation="relu", name="block_conv2")(c1, side_input=stem)
  proj = qconv(8, 12, 1, 1 / 16, 1 / 16, strides=2, padding="valid",
               per_channel_scale=False, name="shortcut")(out1)
  pooled = keras.layers.AveragePooling2D(2, name="pool")(
      keras.layers.Rescaling(1 / 16, name="dequant")(out1))
  dense = keras.layers.Dense(12, name="mix")(
      keras.layers.GlobalMaxPooling2D()(pooled))
  logits = keras.layers.Add(name="logits")([
      dense, keras.layers.GlobalAveragePooling2D()(
          keras.layers.Rescaling(1 / 16)(proj))])
  return keras.Model(inp, {"logits": logits, "features": out1})


class ServingModule(tf.Module):
  """What a user writes for tf.saved_model.save with a serving signature."""

  def __init__(self, model):
    super().__init__()
    self.model = model

  @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.int8,
                                              name="image")])
  def serve(self, image):
    return self.model(image)


def _env():
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  return env


def _run_fresh(script, tmp):
  """Runs `script` in a new Python process; returns its JSON result line."""
  proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)],
                        cwd=tmp, env=_env(), capture_output=True, text=True,
                        timeout=240, check=False)
  lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
  assert proc.returncode == 0 and lines, (
      f"child failed (rc {proc.returncode})\nstdout:\n{proc.stdout}\n"
      f"stderr:\n{proc.stderr[-5000:]}")
  return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("saved")
  model = build_model()
  rng = np.random.default_rng(7)
  x3 = rng.integers(-128, 128, (3, 16, 16, 3)).astype(np.int8)
  x5 = rng.integers(-128, 128, (5, 10, 14, 3)).astype(np.int8)
  paths = dict(export=str(tmp / "export"), module=str(tmp / "module"),
               keras=str(tmp / "model.keras"))
  model.export(paths["export"], verbose=False)
  module = ServingModule(model)
  tf.saved_model.save(module, paths["module"],
                      signatures={"serving_default": module.serve})
  model.save(paths["keras"])
  np.save(tmp / "x3.npy", x3)
  np.save(tmp / "x5.npy", x5)
  want = {}
  for name, x in (("x3", x3), ("x5", x5)):
    out = model(x)
    want[name] = {k: v.numpy() for k, v in out.items()}
  return dict(tmp=tmp, paths=paths, want=want, model=model, x3=x3, x5=x5)


def test_export_contains_the_fused_op(exported):
  for key in ("export", "module"):
    with open(os.path.join(exported["paths"][key], "saved_model.pb"), "rb") as f:
      assert OP_NAME.encode() in f.read(), key
  assert exported["want"]["x3"]["features"].dtype == np.int8
  assert len(np.unique(exported["want"]["x3"]["features"])) > 10


def test_reload_in_process(exported):
  loaded = tf.saved_model.load(exported["paths"]["export"])
  out = loaded.signatures["serving_default"](tf.constant(exported["x5"]))
  want = exported["want"]["x5"]
  np.testing.assert_array_equal(out["features"].numpy(), want["features"])
  layer_helpers.assert_float_close(out["logits"].numpy(), want["logits"])


FRESH_WITH_IMPORT = """
import json, sys
import numpy as np
import tensorflow as tf
import keras
import tf_fused_int8  # registers the op (and the Keras layer)

paths = PATHS
xs = {n: np.load(n + ".npy") for n in ("x3", "x5")}
res = {}
def put(tag, out):
  for k, v in out.items():
    res[tag + "/" + k] = np.asarray(v).tolist()

exp = tf.saved_model.load(paths["export"])
res["export_signatures"] = sorted(exp.signatures)
sig = exp.signatures["serving_default"]
res["signature_inputs"] = [
    [s.dtype.name, s.shape.as_list()]
    for s in sig.structured_input_signature[1].values()]
for n, x in xs.items():
  put("export/" + n, sig(tf.constant(x)))  # one signature, any batch/size
put("export_serve/x5", exp.serve(xs["x5"]))

mod = tf.saved_model.load(paths["module"])
put("module/x5", mod.signatures["serving_default"](image=tf.constant(xs["x5"])))

tfsm = keras.layers.TFSMLayer(paths["export"], call_endpoint="serving_default")
put("tfsm/x3", tfsm(xs["x3"]))
inp = keras.Input((None, None, 3), dtype="int8")
wrapped = keras.Model(inp, tfsm(inp))
put("tfsm_model/x5", wrapped(xs["x5"]))

k = keras.models.load_model(paths["keras"])
put("keras/x5", k(xs["x5"]))
print("RESULT " + json.dumps(res))
"""


def test_fresh_process_with_import(exported):
  script = FRESH_WITH_IMPORT.replace(
      "PATHS", repr(exported["paths"]))
  res = _run_fresh(script, exported["tmp"])
  assert res["export_signatures"] == ["serve", "serving_default"]
  assert res["signature_inputs"] == [["int8", [None, None, None, 3]]]
  want = exported["want"]
  for tag in ("export/x3", "export/x5", "export_serve/x5", "module/x5",
              "tfsm/x3", "tfsm_model/x5", "keras/x5"):
    x = tag.split("/")[1]
    got = {key: np.asarray(res[f"{tag}/{key}"], want[x][key].dtype)
           for key in ("features", "logits")}
    np.testing.assert_array_equal(got["features"], want[x]["features"],
                                  err_msg=tag)
    layer_helpers.assert_float_close(got["logits"], want[x]["logits"],
                                     err_msg=tag)


FRESH_WITHOUT_IMPORT = """
import json
import numpy as np
import tensorflow as tf
import keras
res = {}
try:
  keras.models.load_model(PATHS["keras"])
  res["keras_error"] = None
except Exception as e:  # Keras cannot find the registered layer class
  res["keras_error"] = type(e).__name__ + ": " + str(e)
try:
  tf.saved_model.load(PATHS["export"])
  res["error"] = None
except Exception as e:  # what a user sees without `import tf_fused_int8`
  res["error"] = type(e).__name__ + ": " + str(e)
# The fix, in the same process: import tf_fused_int8, load again.
import tf_fused_int8
m = tf.saved_model.load(PATHS["export"])
out = m.signatures["serving_default"](tf.constant(np.load("x3.npy")))
res["features"] = out["features"].numpy().tolist()
print("RESULT " + json.dumps(res))
"""


def test_fresh_process_without_import_names_the_op(exported):
  res = _run_fresh(FRESH_WITHOUT_IMPORT.replace(
      "PATHS", repr(exported["paths"])), exported["tmp"])
  if res["error"] is None:
    pytest.skip("the op is registered without importing tf_fused_int8 here "
                "(installed as a TF plugin?)")
  assert f"'{OP_NAME}'" in res["error"], res["error"]
  assert "not registered" in res["error"], res["error"]
  # Keras names the class and its registered name, which holds the package.
  assert "tf_fused_int8>QuantizedFusedConv2D" in res["keras_error"], (
      res["keras_error"])
  np.testing.assert_array_equal(
      np.asarray(res["features"], np.int8), exported["want"]["x3"]["features"])
