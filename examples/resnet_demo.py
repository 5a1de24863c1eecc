#!/usr/bin/env python3
"""The main job, end to end: a small ResNet-style int8 network served from a
SavedModel.

    ./configure.sh && bazel build //:_fused_int8_ops.so && \
        .venv/bin/python examples/resnet_demo.py

1. A float ResNet-style network (stem conv, an identity residual block, a
   downsampling block with a 1x1 projection shortcut, a float head) is
   calibrated on a few random images and quantized post-training into
   QuantizedFusedConv2D layers (QuantizedFusedConv2D.from_float_weights).
   The residual additions run inside the fused op as its side input.
2. The int8 network runs eagerly and as one tf.function traced once for any
   batch; every int8 layer is checked bit for bit against the independent
   numpy reference (tests/reference.py) and against TensorFlow's built-in int8
   kernel (_FusedConv2D), one line per layer.
3. The model is exported as a SavedModel, reloaded in a NEW Python process
   (`import tf_fused_int8` + tf.saved_model.load) and a batch is served
   through its serving_default signature; the outputs must be identical.
4. The speed of our op and of TF's built-in int8 kernel on the network's
   layers is printed.

Exits non-zero if any agreement check fails. Runs in well under a minute on
two cores.
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in (os.path.join(ROOT, "tests"), ROOT):
  if _p not in sys.path:
    sys.path.insert(0, _p)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top

BATCH = 8
IMAGE = 64
SEED = 2024


# --------------------------------------------------------------- the network

# name, input tensor, side-input tensor, out channels, kernel, stride,
# padding, activation. Tensors are named by the layer that produces them.
LAYERS = (
    ("stem", "image", None, 32, 5, 2, "same", "relu"),
    ("block1_conv1", "stem", None, 32, 3, 1, "same", "relu"),
    ("block1_conv2", "block1_conv1", "stem", 32, 3, 1, "same", "relu"),
    ("block2_conv1", "block1_conv2", None, 64, 3, 2, "same", "relu"),
    ("block2_shortcut", "block1_conv2", None, 64, 1, 2, "valid", None),
    ("block2_conv2", "block2_conv1", "block2_shortcut", 64, 3, 1, "same",
     "relu"),
)
CLASSES = 10


def float_weights(rng):
  """He-initialized float weights for LAYERS and the head."""
  channels = {"image": 3}
  weights = {}
  for name, src, _, co, k, _, _, _ in LAYERS:
    ci = channels[src]
    w = rng.normal(0.0, math.sqrt(2.0 / (k * k * ci)), (k, k, ci, co))
    b = rng.normal(0.0, 0.05, co)
    weights[name] = (w.astype(np.float32), b.astype(np.float32))
    channels[name] = co
  weights["head"] = (
      rng.normal(0.0, 0.2, (channels[LAYERS[-1][0]], CLASSES)).astype(
          np.float32), np.zeros(CLASSES, np.float32))
  return weights


def float_forward(tf, weights, images):
  """The float network (the function the int8 network approximates)."""
  t = {"image": tf.constant(images, tf.float32)}
  for name, src, side, _, _, stride, padding, act in LAYERS:
    w, b = weights[name]
    y = tf.nn.conv2d(t[src], w, stride, padding.upper()) + b
    if side is not None:
      y = y + t[side]
    t[name] = tf.nn.relu(y) if act == "relu" else y
  features = tf.reduce_mean(t[LAYERS[-1][0]], axis=[1, 2])
  w, b = weights["head"]
  return {k: v.numpy() for k, v in t.items()}, (features @ w + b).numpy()


def build_int8_model(keras, tf_fused_int8, weights, scales):
  """The Keras functional int8 model; scales[tensor] = its int8 scale."""
  inp = keras.Input((None, None, 3), dtype="int8", name="image")
  t = {"image": inp}
  for name, src, side, _, _, stride, padding, act in LAYERS:
    w, b = weights[name]
    layer = tf_fused_int8.QuantizedFusedConv2D.from_float_weights(
        w, b, input_scale=scales[src], output_scale=scales[name],
        side_input_scale=None if side is None else scales[side],
        strides=stride, padding=padding, activation=act, name=name)
    t[name] = (layer(t[src]) if side is None else
               layer(t[src], side_input=t[side]))
  last = LAYERS[-1][0]
  x = keras.layers.Rescaling(scales[last], name="dequantize")(t[last])
  x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
  w, b = weights["head"]
  head = keras.layers.Dense(CLASSES, name="head")
  logits = head(x)
  head.set_weights([w, b])
  return keras.Model(inp, {"logits": logits, "features": t[last]})


# ------------------------------------------------------------------- helpers

class Checks:
  """Collects agreement checks; the exit status is their conjunction."""

  def __init__(self):
    self.failed = []

  def __call__(self, ok, what):
    if not ok:
      self.failed.append(what)
    return "identical" if ok else "DIFFERENT"


def timeit(fn, min_time=0.15, max_iters=30):
  """Median seconds per call of fn() (after two warm-up calls)."""
  fn()
  fn()
  times = []
  start = time.perf_counter()
  while len(times) < max_iters and (time.perf_counter() - start < min_time or
                                    len(times) < 3):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


# --------------------------------------------------------- the serving child

def serve_in_this_process(saved_dir, batch_path, out_path):
  """Child process: import tf_fused_int8, load the SavedModel, serve."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_fused_int8  # pylint: disable=g-import-not-at-top,unused-import
  t0 = time.perf_counter()
  loaded = tf.saved_model.load(saved_dir)
  load_s = time.perf_counter() - t0
  serve = loaded.signatures["serving_default"]
  spec = list(serve.structured_input_signature[1].values())[0]
  batch = np.load(batch_path)
  out = serve(tf.constant(batch))
  t0 = time.perf_counter()
  out = serve(tf.constant(batch))
  serve_s = time.perf_counter() - t0
  np.savez(out_path, **{k: v.numpy() for k, v in out.items()})
  print(f"  [new process {os.getpid()}] tf.saved_model.load {load_s:.2f} s; "
        f"serving_default({spec.name}: {spec.dtype.name}"
        f"{spec.shape.as_list()}) served a batch of {batch.shape[0]} in "
        f"{serve_s * 1e3:.1f} ms", flush=True)


# ---------------------------------------------------------------------- main

def main():
  wall0 = time.perf_counter()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  import tf_fused_int8  # pylint: disable=g-import-not-at-top
  from tf_fused_int8 import _loader  # pylint: disable=g-import-not-at-top
  import reference  # tests/reference.py  # pylint: disable=g-import-not-at-top
  try:
    import tf_builtin  # tests/tf_builtin.py  # pylint: disable=g-import-not-at-top
    have_builtin = tf_builtin.is_available()
  except ImportError:
    have_builtin = False

  check = Checks()
  try:
    library = _loader.library_path()
  except ImportError as e:
    print(f"tf_fused_int8 cannot load its op library:\n  {e}", file=sys.stderr)
    return 2
  print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}, op library "
        f"{library}")

  # 1. Float network, calibration, post-training quantization.
  rng = np.random.default_rng(SEED)
  weights = float_weights(rng)
  calib = rng.uniform(-1.0, 1.0, (16, IMAGE, IMAGE, 3)).astype(np.float32)
  acts, _ = float_forward(tf, weights, calib)
  scales = {"image": 1.0 / 127.0}  # images in [-1, 1]
  for name, *_ in LAYERS:
    scales[name] = float(np.max(np.abs(acts[name]))) / 127.0
  model = build_int8_model(keras, tf_fused_int8, weights, scales)
  n_int8 = sum(isinstance(l, tf_fused_int8.QuantizedFusedConv2D)
               for l in model.layers)
  print(f"\nint8 ResNet-style network: {n_int8} QuantizedFusedConv2D layers "
        f"(two residual additions fused as side inputs) + float head; "
        f"batch {BATCH}x{IMAGE}x{IMAGE}x3")

  images = rng.uniform(-1.0, 1.0, (BATCH, IMAGE, IMAGE, 3)).astype(np.float32)
  x = np.clip(np.rint(images / scales["image"]), -128, 127).astype(np.int8)

  # 2. Layer by layer, eagerly, against the numpy reference and TF's kernel.
  print("\nper layer (eager), against the numpy reference and TF's built-in "
        "int8 _FusedConv2D:")
  t = {"image": x}
  timing_cases = []
  for name, src, side, co, k, stride, padding, act in LAYERS:
    layer = model.get_layer(name)
    wts = layer.get_weights()
    kernel, bias, scale = wts[:3]
    side_scale = wts[3] if side is not None else np.float32(0.0)
    side_in = None if side is None else t[side]
    out = (layer(t[src]) if side is None else
           layer(t[src], side_input=side_in)).numpy()
    ref = reference.fused_conv2d_reference(
        t[src], kernel, bias, side_input=side_in, conv_input_scale=scale,
        side_input_scale=side_scale, strides=(stride, stride),
        padding=padding.upper(), activation="Relu" if act else "None")
    ok_ref = out.shape == ref.shape and np.array_equal(out, ref)
    line = (f"  {name:16s} {k}x{k}/{stride} {padding.upper():5s} "
            f"{t[src].shape[3]:2d}->{co:2d} {'relu' if act else 'none':4s}"
            f"{' +side' if side else '      '} out {str(out.shape):16s} "
            f"reference: {check(ok_ref, name + ' vs reference')}")
    if have_builtin:
      tf_out = tf_builtin.tf_fused_conv2d_int8(
          t[src], kernel, bias, side_input=side_in, conv_input_scale=scale,
          side_input_scale=side_scale, strides=stride, padding=padding.upper(),
          activation="Relu" if act else "None")
      line += (f", TF kernel: "
               f"{check(np.array_equal(out, tf_out), name + ' vs TF kernel')}")
    print(line + f"  ({len(np.unique(out))} distinct values)")
    timing_cases.append((name, dict(
        conv_input=t[src], filter=kernel, bias=bias, side_input=side_in,
        conv_input_scale=scale, side_input_scale=side_scale,
        strides=(stride, stride), padding=padding.upper(),
        activation="Relu" if act else "None")))
    t[name] = out
  features_ref = t[LAYERS[-1][0]]

  # The whole model: eager, and one tf.function for any batch.
  print("\nwhole model:")
  eager = model(x)
  print(f"  eager call                    features vs layer by layer: "
        f"{check(np.array_equal(eager['features'].numpy(), features_ref), 'model eager')}")
  serve_fn = tf.function(
      model, input_signature=[tf.TensorSpec([None, None, None, 3], tf.int8)])
  graph = serve_fn(x)
  small = serve_fn(x[:3])
  ok = (np.array_equal(graph["features"].numpy(), features_ref) and
        np.array_equal(small["features"].numpy(), features_ref[:3]) and
        serve_fn.experimental_get_tracing_count() == 1)
  print(f"  tf.function, batches 8 and 3, "
        f"{serve_fn.experimental_get_tracing_count()} trace: "
        f"{check(ok, 'tf.function')}")
  _, float_logits = float_forward(tf, weights, images)
  q_logits = eager["logits"].numpy()
  cos = float(np.sum(q_logits * float_logits) /
              (np.linalg.norm(q_logits) * np.linalg.norm(float_logits)))
  print(f"  int8 network vs the float network it was quantized from: logits "
        f"cosine similarity {cos:.4f}, top-1 agreement "
        f"{np.mean(q_logits.argmax(1) == float_logits.argmax(1)):.0%}")
  if cos < 0.95:
    check(False, "int8 vs float logits (quantization)")

  # 3. SavedModel, reloaded and served in a new process.
  print("\nSavedModel:")
  with tempfile.TemporaryDirectory(prefix="resnet_int8_") as tmp:
    saved = os.path.join(tmp, "resnet_int8")
    model.export(saved, verbose=False)
    with open(os.path.join(saved, "saved_model.pb"), "rb") as f:
      has_op = b"FusedInt8Conv2DBiasActivation" in f.read()
    print(f"  model.export -> {saved} (graph holds "
          f"FusedInt8Conv2DBiasActivation: {has_op})")
    check(has_op, "SavedModel holds the fused op")
    batch_path = os.path.join(tmp, "batch.npy")
    out_path = os.path.join(tmp, "served.npz")
    np.save(batch_path, x)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--serve", saved,
         batch_path, out_path], env=env, check=False, timeout=120)
    if proc.returncode != 0 or not os.path.exists(out_path):
      print(f"  serving process failed (exit {proc.returncode})")
      check(False, "serving process")
    else:
      served = np.load(out_path)
      ok_f = np.array_equal(served["features"], features_ref)
      ok_l = np.array_equal(served["logits"], q_logits)
      print(f"  served int8 features vs this process: {check(ok_f, 'served features')}; "
            f"served logits: {check(ok_l, 'served logits')}")

  # 4. Speed against TF's built-in int8 kernel.
  print("\nspeed per layer, batch "
        f"{BATCH} (median of repeated eager calls; {os.cpu_count()} CPUs):")
  total_ours = total_tf = 0.0
  for name, c in timing_cases:
    args = dict(
        conv_input=tf.constant(c["conv_input"]), filter=tf.constant(c["filter"]),
        bias=tf.constant(c["bias"]),
        side_input=None if c["side_input"] is None else tf.constant(
            c["side_input"]),
        conv_input_scale=tf.constant(c["conv_input_scale"]),
        side_input_scale=tf.constant(c["side_input_scale"]),
        strides=c["strides"], padding=c["padding"],
        activation_mode=c["activation"])
    ours = timeit(lambda a=args: tf_fused_int8.fused_conv2d_bias_activation(
        **a).numpy())
    total_ours += ours
    line = f"  {name:16s} ours {ours * 1e3:8.2f} ms"
    if have_builtin:
      fn = tf_builtin.make_tf_fused_conv2d_int8(
          c["conv_input"], c["filter"], c["bias"], c["side_input"],
          c["conv_input_scale"], c["side_input_scale"], c["strides"],
          c["padding"], c["activation"])
      theirs = timeit(lambda f=fn: f().numpy())
      total_tf += theirs
      line += (f"   TF _FusedConv2D {theirs * 1e3:8.2f} ms   "
               f"speed-up {theirs / ours:5.2f}x")
    print(line)
  if have_builtin:
    print(f"  {'all layers':16s} ours {total_ours * 1e3:8.2f} ms   "
          f"TF _FusedConv2D {total_tf * 1e3:8.2f} ms   speed-up "
          f"{total_tf / total_ours:5.2f}x")
  else:
    print("  (TF's built-in int8 _FusedConv2D CPU kernel is not available in "
          "this TensorFlow; only our op was timed)")

  print(f"\n{'OK' if not check.failed else 'FAILED'}: "
        f"{'all agreement checks passed' if not check.failed else ', '.join(check.failed)}"
        f" ({time.perf_counter() - wall0:.1f} s)")
  return 1 if check.failed else 0


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--serve", nargs=3,
                      metavar=("SAVED_MODEL", "BATCH_NPY", "OUT_NPZ"),
                      help="(internal) serve BATCH_NPY through SAVED_MODEL "
                      "in this process and write the outputs to OUT_NPZ")
  cli = parser.parse_args()
  if cli.serve:
    serve_in_this_process(*cli.serve)
    sys.exit(0)
  sys.exit(main())
