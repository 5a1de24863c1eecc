#!/usr/bin/env python3
"""The main job, end to end: a small ResNet-style int8 network served from a
SavedModel.

    ./configure.sh && bazel build //:_fused_int8_ops.so && \
        .venv/bin/python examples/resnet_demo.py

1. A float ResNet-style network (stem conv, an identity residual block, a
   downsampling block with a 1x1 projection shortcut, a MobileNetV2-style
   inverted-residual block, a float head) is calibrated on a few random
   images and quantized post-training into QuantizedFusedConv2D layers
   (QuantizedFusedConv2D.from_float_weights; the inverted-residual block's
   3x3 depthwise conv with from_float_depthwise_weights, i.e. groups =
   channels). The inverted-residual block is a 1x1 expand conv + ReLU6, a
   3x3 depthwise conv + ReLU6 and a linear 1x1 projection; ReLU6 is the
   layer's activation="relu6" (int8 output bound min(127, round(6 / s_out))).
   All three residual additions run inside the fused op as its side input.
2. The int8 network runs eagerly, as one tf.function traced once for any
   batch, and through tf_fused_int8.InferenceRunner (frozen, run in the
   calling thread: its batch-1 time is printed beside the tf.function's);
   every int8 layer is checked bit for bit against the independent
   numpy reference (tests/reference.py, with the layer's actual output
   bound) and, where TensorFlow has a kernel for it, against TensorFlow's
   built-in int8 kernel (_FusedConv2D), one line per layer. That kernel has
   no grouped/depthwise convolution and no output bound (Relu only), so the
   depthwise layer is "n/a" there, and a ReLU6 layer is compared only when
   its int8 bound is 127 (then ReLU6 is Relu plus the int8 saturation).
3. The model is exported as a SavedModel, reloaded in a NEW Python process
   (`import tf_fused_int8` + tf.saved_model.load) and a batch is served
   through its serving_default signature; the outputs of the whole network
   (all blocks) must be identical.
4. The speed of our op and of TF's built-in int8 kernel on the network's
   layers is printed; for the depthwise layer, which TF has no int8 kernel
   for, TF's float tf.nn.depthwise_conv2d + bias + relu6 on the same values
   is timed instead (labelled as such).

Exits non-zero if any agreement check fails. Runs in well under a minute on
two cores.
"""

import argparse
import collections
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

# name, input tensor, side-input tensor (residual), out channels, kernel,
# stride, padding, activation (None, "relu" or "relu6"), depthwise (groups =
# input channels, channel multiplier out / in). Tensors are named by the
# layer that produces them.
Layer = collections.namedtuple(
    "Layer", "name src side filters kernel stride padding activation "
    "depthwise", defaults=(False,))
EXPAND = 6  # MobileNetV2's expansion factor
LAYERS = (
    Layer("stem", "image", None, 32, 5, 2, "same", "relu"),
    Layer("block1_conv1", "stem", None, 32, 3, 1, "same", "relu"),
    Layer("block1_conv2", "block1_conv1", "stem", 32, 3, 1, "same", "relu"),
    Layer("block2_conv1", "block1_conv2", None, 64, 3, 2, "same", "relu"),
    Layer("block2_shortcut", "block1_conv2", None, 64, 1, 2, "valid", None),
    Layer("block2_conv2", "block2_conv1", "block2_shortcut", 64, 3, 1, "same",
          "relu"),
    # MobileNetV2 inverted residual: 1x1 expand + ReLU6, 3x3 depthwise +
    # ReLU6, linear 1x1 projection + the block input (fused side input).
    Layer("block3_expand", "block2_conv2", None, 64 * EXPAND, 1, 1, "valid",
          "relu6"),
    Layer("block3_depthwise", "block3_expand", None, 64 * EXPAND, 3, 1,
          "same", "relu6", depthwise=True),
    Layer("block3_project", "block3_depthwise", "block2_conv2", 64, 1, 1,
          "valid", None),
)
CLASSES = 10


def float_weights(rng):
  """He-initialized float weights for LAYERS and the head."""
  channels = {"image": 3}
  weights = {}
  for l in LAYERS:
    ci, co, k = channels[l.src], l.filters, l.kernel
    if l.depthwise:  # tf.nn.depthwise_conv2d's [Kh, Kw, Ci, M]; fan-in k * k
      assert co % ci == 0, l
      w = rng.normal(0.0, math.sqrt(2.0 / (k * k)), (k, k, ci, co // ci))
    else:
      w = rng.normal(0.0, math.sqrt(2.0 / (k * k * ci)), (k, k, ci, co))
    b = rng.normal(0.0, 0.05, co)
    weights[l.name] = (w.astype(np.float32), b.astype(np.float32))
    channels[l.name] = co
  weights["head"] = (
      rng.normal(0.0, 0.2, (channels[LAYERS[-1].name], CLASSES)).astype(
          np.float32), np.zeros(CLASSES, np.float32))
  return weights


FLOAT_ACTIVATIONS = {
    None: lambda tf, y: y,
    "relu": lambda tf, y: tf.nn.relu(y),
    "relu6": lambda tf, y: tf.nn.relu6(y),
}


def float_forward(tf, weights, images):
  """The float network (the function the int8 network approximates)."""
  t = {"image": tf.constant(images, tf.float32)}
  for l in LAYERS:
    w, b = weights[l.name]
    if l.depthwise:
      y = tf.nn.depthwise_conv2d(t[l.src], w, [1, l.stride, l.stride, 1],
                                 l.padding.upper()) + b
    else:
      y = tf.nn.conv2d(t[l.src], w, l.stride, l.padding.upper()) + b
    if l.side is not None:
      y = y + t[l.side]
    t[l.name] = FLOAT_ACTIVATIONS[l.activation](tf, y)
  features = tf.reduce_mean(t[LAYERS[-1][0]], axis=[1, 2])
  w, b = weights["head"]
  return {k: v.numpy() for k, v in t.items()}, (features @ w + b).numpy()


def build_int8_model(keras, tf_fused_int8, weights, scales):
  """The Keras functional int8 model; scales[tensor] = its int8 scale."""
  inp = keras.Input((None, None, 3), dtype="int8", name="image")
  t = {"image": inp}
  qfc = tf_fused_int8.QuantizedFusedConv2D
  for l in LAYERS:
    w, b = weights[l.name]
    # relu6: from_float_weights passes output_scale on, and the layer bounds
    # its int8 output at min(127, round(6 / output_scale)).
    make = (qfc.from_float_depthwise_weights if l.depthwise else
            qfc.from_float_weights)  # depthwise: groups = input channels
    layer = make(
        w, b, input_scale=scales[l.src], output_scale=scales[l.name],
        side_input_scale=None if l.side is None else scales[l.side],
        strides=l.stride, padding=l.padding, activation=l.activation,
        name=l.name)
    t[l.name] = (layer(t[l.src]) if l.side is None else
                 layer(t[l.src], side_input=t[l.side]))
  last = LAYERS[-1].name
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


def tf_int8_unsupported(layer):
  """Why TF's built-in int8 _FusedConv2D cannot compute `layer` (None if it
  can). That kernel (tests/tf_builtin.py) has no groups, no dilation, no
  EXPLICIT padding, and only Relu or no activation with the full int8 range:
  no output bounds, so a relu6 layer is only the same computation when its
  int8 bound is 127 (ReLU6 is then Relu plus the int8 saturation at 127)."""
  if layer.groups > 1:
    return "n/a (TF has no int8 depthwise/grouped kernel)"
  if layer.dilation_rate != (1, 1):
    return "n/a (TF's int8 kernel has no dilation)"
  if not isinstance(layer.padding, str):
    return "n/a (TF's int8 kernel has no EXPLICIT padding)"
  hi = layer.effective_output_max()
  if layer.output_min != -128 or hi != 127:
    what = (f"relu6 bound {hi}" if layer.activation == "relu6" else
            f"output range [{layer.output_min}, {hi}]")
    return f"n/a (TF's int8 kernel is Relu-only, no output bound; {what})"
  return None


def make_tf_float_depthwise(tf, l, conv_input, kernel, bias):
  """fn() -> TF's float tf.nn.depthwise_conv2d + bias + activation of layer
  `l` on the same values as our op: the int8 input and the int8 grouped
  kernel [Kh, Kw, 1, Ci * M] (as [Kh, Kw, Ci, M]) as float32, and its bias.
  One tf.function (one dispatch per call, as for the fused kernels)."""
  ci = conv_input.shape[3]
  kh, kw, _, co = kernel.shape
  x = tf.constant(conv_input.astype(np.float32))
  w = tf.constant(kernel.reshape(kh, kw, ci, co // ci).astype(np.float32))
  b = tf.constant(bias)
  act = FLOAT_ACTIVATIONS[l.activation]

  @tf.function
  def fn():
    y = tf.nn.depthwise_conv2d(x, w, [1, l.stride, l.stride, 1],
                               l.padding.upper())
    return act(tf, tf.nn.bias_add(y, b))
  return fn


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
  for l in LAYERS:
    scales[l.name] = float(np.max(np.abs(acts[l.name]))) / 127.0
  model = build_int8_model(keras, tf_fused_int8, weights, scales)
  n_int8 = sum(isinstance(l, tf_fused_int8.QuantizedFusedConv2D)
               for l in model.layers)
  n_side = sum(l.side is not None for l in LAYERS)
  n_dw = sum(l.depthwise for l in LAYERS)
  print(f"\nint8 ResNet-style network: {n_int8} QuantizedFusedConv2D layers "
        f"(stem, two ResNet blocks, a MobileNetV2 inverted-residual block with "
        f"{n_dw} depthwise conv; {n_side} residual additions fused as side "
        f"inputs) + float head; batch {BATCH}x{IMAGE}x{IMAGE}x3")

  images = rng.uniform(-1.0, 1.0, (BATCH, IMAGE, IMAGE, 3)).astype(np.float32)
  x = np.clip(np.rint(images / scales["image"]), -128, 127).astype(np.int8)

  # 2. Layer by layer, eagerly, against the numpy reference and TF's kernel.
  print("\nper layer (eager), against the numpy reference and TF's built-in "
        "int8 _FusedConv2D:")
  t = {"image": x}
  timing_cases = []
  relu6_bounds = []
  for l in LAYERS:
    layer = model.get_layer(l.name)
    wts = layer.get_weights()
    kernel, bias, scale = wts[:3]
    side_scale = wts[3] if l.side is not None else np.float32(0.0)
    side_in = None if l.side is None else t[l.side]
    src = t[l.src]
    out = (layer(src) if l.side is None else
           layer(src, side_input=side_in)).numpy()
    # The op's bounds: the layer's actual output_max (ReLU6 lowers it to
    # min(127, round(6 / s_out))), checked against that formula here.
    lo, hi = layer.output_min, layer.effective_output_max()
    ok_bound = True
    if l.activation == "relu6":
      ok_bound = hi == min(127, round(6.0 / scales[l.name]))
      relu6_bounds.append((l.name, hi))
    mode = "None" if l.activation is None else "Relu"  # relu6 = Relu + bound
    # reference.py infers groups from the kernel: [Kh, Kw, Ci / groups, Co].
    ref = reference.fused_conv2d_reference(
        src, kernel, bias, side_input=side_in, conv_input_scale=scale,
        side_input_scale=side_scale, strides=(l.stride, l.stride),
        padding=l.padding.upper(), activation=mode, output_min=lo,
        output_max=hi)
    ok_ref = (ok_bound and kernel.shape[2] * layer.groups == src.shape[3] and
              out.shape == ref.shape and np.array_equal(out, ref))
    act = (l.activation or "none") + (f"<={hi}" if l.activation == "relu6"
                                      else "")
    conv = f"{l.kernel}x{l.kernel}{' dw' if l.depthwise else ''}/{l.stride}"
    line = (f"  {l.name:16s} {conv:8s} {l.padding.upper():5s} "
            f"{src.shape[3]:3d}->{l.filters:3d} {act:10s}"
            f"{' +side' if l.side else '      '} out {str(out.shape):17s} "
            f"reference: {check(ok_ref, l.name + ' vs reference')}")
    unsupported = tf_int8_unsupported(layer)
    if unsupported:
      line += f", TF kernel: {unsupported}"
    elif have_builtin:
      tf_out = tf_builtin.tf_fused_conv2d_int8(
          src, kernel, bias, side_input=side_in, conv_input_scale=scale,
          side_input_scale=side_scale, strides=l.stride,
          padding=l.padding.upper(), activation=mode)
      line += (f", TF kernel: "
               f"{check(np.array_equal(out, tf_out), l.name + ' vs TF kernel')}")
    print(line + f"  ({len(np.unique(out))} distinct values)")
    timing_cases.append((l, dict(
        conv_input=src, filter=kernel, bias=bias, side_input=side_in,
        conv_input_scale=scale, side_input_scale=side_scale,
        strides=(l.stride, l.stride), padding=l.padding.upper(),
        activation=mode, output_min=lo, output_max=hi,
        unsupported=unsupported)))
    t[l.name] = out
  if relu6_bounds:
    print("  relu6 = Relu + int8 bound min(127, round(6 / s_out)), the "
          "reference run with the layer's bound: " +
          ", ".join(f"{n} {b}" for n, b in relu6_bounds) +
          ("\n  (s_out calibrated on ReLU6 outputs <= 6 gives 127, the int8 "
           "saturation: there TF's Relu-only kernel computes the same)"
           if any(b == 127 for _, b in relu6_bounds) else ""))
  features_ref = t[LAYERS[-1].name]

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
  # The same model frozen and run in the calling thread (lowest latency).
  runner = tf_fused_int8.InferenceRunner(model)
  ok = (np.array_equal(runner(x)["features"], features_ref) and
        np.array_equal(runner(x[:3])["features"], features_ref[:3]))
  one = x[:1]
  t_fn, t_run = timeit(lambda: serve_fn(one)), timeit(lambda: runner(one))
  print(f"  InferenceRunner, batches 8 and 3: {check(ok, 'InferenceRunner')}; "
        f"batch 1 {t_run * 1e3:.2f} ms a call against the tf.function's "
        f"{t_fn * 1e3:.2f} ms")
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

  # 4. Speed against TF's built-in int8 kernel (for the depthwise layer,
  # which it has no kernel for: TF's float depthwise conv on the same values).
  print("\nspeed per layer, batch "
        f"{BATCH} (median of repeated eager calls; {os.cpu_count()} CPUs):")
  tf_int8_label = "TF int8 _FusedConv2D"
  tf_dw_label = "TF fp32 depthwise_conv2d+bias+relu6"
  width = len(tf_dw_label)
  totals = {"int8": [0.0, 0.0], "fp32": [0.0, 0.0]}
  total_ours = 0.0
  for l, c in timing_cases:
    args = dict(
        conv_input=tf.constant(c["conv_input"]), filter=tf.constant(c["filter"]),
        bias=tf.constant(c["bias"]),
        side_input=None if c["side_input"] is None else tf.constant(
            c["side_input"]),
        conv_input_scale=tf.constant(c["conv_input_scale"]),
        side_input_scale=tf.constant(c["side_input_scale"]),
        strides=c["strides"], padding=c["padding"],
        activation_mode=c["activation"], output_min=c["output_min"],
        output_max=c["output_max"])
    ours = timeit(lambda a=args: tf_fused_int8.fused_conv2d_bias_activation(
        **a).numpy())
    total_ours += ours
    line = f"  {l.name:16s} ours {ours * 1e3:8.2f} ms"
    fn = kind = None
    if c["unsupported"] is None and have_builtin:
      kind, label = "int8", tf_int8_label
      fn = tf_builtin.make_tf_fused_conv2d_int8(
          c["conv_input"], c["filter"], c["bias"], c["side_input"],
          c["conv_input_scale"], c["side_input_scale"], c["strides"],
          c["padding"], c["activation"])
    elif l.depthwise and l.side is None:
      # TF has no int8 depthwise kernel: its float depthwise conv + bias +
      # activation on the same (int8-valued) input and kernel instead.
      kind, label = "fp32", tf_dw_label.replace(
          "relu6", l.activation or "none")
      fn = make_tf_float_depthwise(tf, l, c["conv_input"], c["filter"],
                                   c["bias"])
    if fn is None:
      why = c["unsupported"] or "TF's int8 kernel is not available here"
      line += f"   {why}"
    else:
      theirs = timeit(lambda f=fn: f().numpy())
      totals[kind][0] += ours
      totals[kind][1] += theirs
      line += (f"   {label:{width}s} {theirs * 1e3:8.2f} ms   "
               f"speed-up {theirs / ours:5.2f}x")
    print(line)
  for kind, label, what in (
      ("int8", tf_int8_label, "TF-int8 layers"),
      ("fp32", "TF fp32 depthwise (no int8 kernel)", "depthwise")):
    ours, theirs = totals[kind]
    if theirs:
      print(f"  {what:16s} ours {ours * 1e3:8.2f} ms   {label:{width}s} "
            f"{theirs * 1e3:8.2f} ms   speed-up {theirs / ours:5.2f}x")
  print(f"  {'all layers':16s} ours {total_ours * 1e3:8.2f} ms")
  if not have_builtin:
    print("  (TF's built-in int8 _FusedConv2D CPU kernel is not available in "
          "this TensorFlow; it was not timed)")

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
