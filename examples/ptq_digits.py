#!/usr/bin/env python3
"""Post-training quantization of a real (small) CNN, end to end.

    ./configure.sh && bazel build //:_fused_int8_ops.so && \
        .venv/bin/python examples/ptq_digits.py

1. Trains, in seconds, a small ResNet-style float CNN (Conv2D + BatchNorm +
   ReLU stem, an identity residual block, a downsampling block with a 1x1
   projection shortcut, global pooling, Dense) on scikit-learn's digits
   (1797 8x8 grey images of 0-9, shipped inside scikit-learn: nothing is
   downloaded). Seeded: the same numbers on every run on one machine.
   ``--model efficientnet`` / ``--model mobilenetv3`` train small models
   built like keras.applications EfficientNet (MBConv blocks: SiLU,
   squeeze-excite with a sigmoid gate, Dropout before the residual Add) and
   MobileNetV3 (hard-swish, squeeze-excite with a hard-sigmoid gate)
   instead: their activations become int8 lookup tables and their gates
   Int8ChannelMultiply.
2. Quantizes it with ``tf_fused_int8.quantization.quantize_model``,
   calibrating on 256 training images: every conv stack becomes one
   QuantizedFusedConv2D (BN folded, ReLU fused, the residual Adds as side
   inputs); the head stays float.
3. Reports float vs int8 top-1 accuracy on the held-out test images and how
   often the two agree, for min/max and percentile calibration.
4. Saves the int8 model as .keras, reloads it and checks the predictions are
   identical.

Exits non-zero when the int8 model (min/max calibration) is more than one
accuracy point below the float model.
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top

SEED = 2024
EPOCHS = 10
CALIBRATION_IMAGES = 256
MAX_ACCURACY_DROP = 0.01  # one point


def load_digits_split(seed=SEED, test_fraction=0.2):
  """(x_train, y_train, x_test, y_test): NHWC float32 in [0, 1], int labels.

  A stratified split of scikit-learn's digits (pixel values 0..16, / 16).
  """
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  digits = load_digits()
  x = (digits.images.astype(np.float32) / 16.0)[..., None]
  y = digits.target.astype(np.int64)
  rng = np.random.default_rng(seed)
  train_idx, test_idx = [], []
  for c in range(10):
    idx = rng.permutation(np.flatnonzero(y == c))
    n_test = int(round(len(idx) * test_fraction))
    test_idx.extend(idx[:n_test])
    train_idx.extend(idx[n_test:])
  train_idx = rng.permutation(train_idx)
  test_idx = np.sort(test_idx)
  return x[train_idx], y[train_idx], x[test_idx], y[test_idx]


def build_float_model(keras, width=24):
  """A small ResNet-style CNN for 8x8x1 images (functional Keras model)."""
  layers = keras.layers

  def conv_bn(x, filters, kernel, strides, name, relu=True):
    x = layers.Conv2D(filters, kernel, strides=strides, padding="same",
                      use_bias=False, name=name)(x)
    x = layers.BatchNormalization(momentum=0.9, name=name + "_bn")(x)
    return layers.ReLU(name=name + "_relu")(x) if relu else x

  inp = keras.Input((8, 8, 1), name="image")
  x = conv_bn(inp, width, 3, 1, "stem")
  # Identity residual block.
  y = conv_bn(x, width, 3, 1, "block1_conv1")
  y = conv_bn(y, width, 3, 1, "block1_conv2", relu=False)
  x = layers.ReLU(name="block1_out")(layers.Add(name="block1_add")([x, y]))
  # Downsampling block with a 1x1 projection shortcut.
  y = conv_bn(x, 2 * width, 3, 2, "block2_conv1")
  y = conv_bn(y, 2 * width, 3, 1, "block2_conv2", relu=False)
  s = conv_bn(x, 2 * width, 1, 2, "block2_shortcut", relu=False)
  x = layers.ReLU(name="block2_out")(layers.Add(name="block2_add")([s, y]))
  x = layers.GlobalAveragePooling2D(name="pool")(x)
  logits = layers.Dense(10, name="logits")(x)
  return keras.Model(inp, logits, name="digits_resnet")


def _conv_bn_act(layers, x, filters, kernel, strides, name, act, depthwise,
                 epsilon):
  """Conv2D (or DepthwiseConv2D) without bias + BatchNormalization
  (momentum 0.9: the short training's moving statistics keep up) + an
  Activation layer (none when act is None)."""
  if depthwise:
    x = layers.DepthwiseConv2D(kernel, strides=strides, padding="same",
                               use_bias=False, name=name)(x)
  else:
    x = layers.Conv2D(filters, kernel, strides=strides, padding="same",
                      use_bias=False, name=name)(x)
  x = layers.BatchNormalization(epsilon=epsilon, momentum=0.9,
                                name=name + "_bn")(x)
  return layers.Activation(act, name=name + "_act")(x) if act else x


def build_efficientnet_style_model(keras, width=16):
  """An EfficientNet-style CNN for 8x8x1 images, built the way
  keras.applications.EfficientNet builds its blocks: Conv + BN + SiLU stem,
  two MBConv blocks (1x1 expand + BN + SiLU, 3x3 depthwise + BN + SiLU,
  squeeze-excite: GAP -> 1x1 conv with silu -> 1x1 conv with sigmoid ->
  Multiply, 1x1 project + BN; the first with Dropout and an identity Add),
  a 1x1 head conv + BN + SiLU, GAP, Dropout, Dense."""
  layers = keras.layers

  def conv_bn_act(x, filters, kernel, strides, name, act="swish", depthwise=False):
    return _conv_bn_act(layers, x, filters, kernel, strides, name, act,
                        depthwise, epsilon=1e-3)

  def mbconv(x, filters, strides, expand, name):
    inputs = x
    c = x.shape[-1] * expand
    x = conv_bn_act(x, c, 1, 1, name + "_expand")
    x = conv_bn_act(x, c, 3, strides, name + "_dw", depthwise=True)
    se = layers.GlobalAveragePooling2D(keepdims=True, name=name + "_se_squeeze")(x)
    se = layers.Conv2D(max(1, c // 4), 1, activation="swish", name=name + "_se_reduce")(se)
    se = layers.Conv2D(c, 1, activation="sigmoid", name=name + "_se_expand")(se)
    x = layers.Multiply(name=name + "_se_excite")([x, se])
    x = conv_bn_act(x, filters, 1, 1, name + "_project", act=None)
    if strides == 1 and inputs.shape[-1] == filters:
      x = layers.Dropout(0.1, name=name + "_drop")(x)
      x = layers.Add(name=name + "_add")([x, inputs])
    return x

  inp = keras.Input((8, 8, 1), name="image")
  x = conv_bn_act(inp, width, 3, 1, "stem")
  x = mbconv(x, width, 1, 4, "block1")
  x = mbconv(x, 2 * width, 2, 4, "block2")
  x = conv_bn_act(x, 4 * width, 1, 1, "top")
  x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
  x = layers.Dropout(0.2, name="top_dropout")(x)
  logits = layers.Dense(10, name="logits")(x)
  return keras.Model(inp, logits, name="digits_efficientnet")


def build_mobilenetv3_style_model(keras, width=16):
  """A MobileNetV3-style CNN for 8x8x1 images, built the way
  keras.applications.MobileNetV3 builds its blocks: Conv + BN + hard-swish
  stem, two inverted residual blocks (1x1 expand + BN + hard-swish, 3x3
  depthwise + BN + hard-swish, squeeze-excite: GAP -> 1x1 conv + ReLU ->
  1x1 conv -> hard sigmoid ReLU6(x + 3) / 6 -> Multiply, 1x1 project + BN;
  the first with an identity Add), a 1x1 head conv + BN + hard-swish, GAP,
  Dense."""
  layers = keras.layers

  def conv_bn_act(x, filters, kernel, strides, name, act="hard_swish", depthwise=False):
    return _conv_bn_act(layers, x, filters, kernel, strides, name, act,
                        depthwise, epsilon=1e-3)

  def block(x, filters, strides, expand, name):
    inputs = x
    c = x.shape[-1] * expand
    x = conv_bn_act(x, c, 1, 1, name + "_expand")
    x = conv_bn_act(x, c, 3, strides, name + "_dw", depthwise=True)
    se = layers.GlobalAveragePooling2D(keepdims=True, name=name + "_se_pool")(x)
    se = layers.Conv2D(max(8, c // 4), 1, name=name + "_se_conv")(se)
    se = layers.ReLU(name=name + "_se_relu")(se)
    se = layers.Conv2D(c, 1, name=name + "_se_conv_1")(se)
    se = layers.ReLU(6.0, name=name + "_se_relu6")(se + 3.0) * (1.0 / 6.0)
    x = layers.Multiply(name=name + "_se_mul")([x, se])
    x = conv_bn_act(x, filters, 1, 1, name + "_project", act=None)
    if strides == 1 and inputs.shape[-1] == filters:
      x = layers.Add(name=name + "_add")([inputs, x])
    return x

  inp = keras.Input((8, 8, 1), name="image")
  x = conv_bn_act(inp, width, 3, 1, "stem")
  x = block(x, width, 1, 3, "block1")
  x = block(x, 2 * width, 2, 4, "block2")
  x = conv_bn_act(x, 4 * width, 1, 1, "top")
  x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
  logits = layers.Dense(10, name="logits")(x)
  return keras.Model(inp, logits, name="digits_mobilenetv3")


BUILDERS = {"resnet": build_float_model,
            "efficientnet": build_efficientnet_style_model,
            "mobilenetv3": build_mobilenetv3_style_model}


def train_float_model(keras, x_train, y_train, epochs=EPOCHS, seed=SEED,
                      verbose=0, model="resnet"):
  """Builds and trains the float model `model` (a BUILDERS key; seeded)."""
  keras.utils.set_random_seed(seed)
  model = BUILDERS[model](keras)
  model.compile(
      optimizer=keras.optimizers.Adam(3e-3),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=["accuracy"])
  model.fit(x_train, y_train, batch_size=32, epochs=epochs, shuffle=True,
            verbose=verbose)
  return model


def compare(float_model, int8_model, x, y):
  """Top-1 accuracy of both models and their agreement on x."""
  pf = np.argmax(float_model(x, training=False), axis=1)
  pq = np.argmax(int8_model(x, training=False), axis=1)
  return {"float": float(np.mean(pf == y)), "int8": float(np.mean(pq == y)),
          "agreement": float(np.mean(pf == pq))}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--epochs", type=int, default=EPOCHS)
  parser.add_argument("--seed", type=int, default=SEED)
  parser.add_argument("--model", choices=sorted(BUILDERS), default="resnet")
  cli = parser.parse_args()

  wall0 = time.perf_counter()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  import tf_fused_int8  # pylint: disable=g-import-not-at-top,unused-import
  from tf_fused_int8 import quantization  # pylint: disable=g-import-not-at-top
  try:
    import sklearn  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    print("this example needs scikit-learn (its digits dataset): "
          ".venv/bin/pip install scikit-learn", file=sys.stderr)
    return 2
  tf.config.experimental.enable_op_determinism()

  x_train, y_train, x_test, y_test = load_digits_split(cli.seed)
  print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}; digits: "
        f"{len(x_train)} training and {len(x_test)} test images, 8x8x1")

  t0 = time.perf_counter()
  float_model = train_float_model(keras, x_train, y_train, cli.epochs,
                                  cli.seed, model=cli.model)
  print(f"trained the float {cli.model}-style CNN "
        f"({float_model.count_params()} "
        f"parameters, {cli.epochs} epochs) in {time.perf_counter() - t0:.1f} "
        f"s")

  calib = x_train[:CALIBRATION_IMAGES]
  results = {}
  models = {}
  for method in ("minmax", "percentile"):
    print(f"\nquantize_model(method={method!r}), calibrating on "
          f"{len(calib)} training images:")
    t0 = time.perf_counter()
    qmodel = quantization.quantize_model(float_model, calib, method=method,
                                         verbose=1)
    print(f"  took {time.perf_counter() - t0:.1f} s")
    models[method] = qmodel
    results[method] = compare(float_model, qmodel, x_test, y_test)

  qmodel = models["minmax"]
  print("\nint8 model (minmax): "
        + ", ".join(f"{l.name} ({type(l).__name__})" for l in qmodel.layers
                    if not isinstance(l, keras.layers.InputLayer)))

  print(f"\ntop-1 accuracy on {len(x_test)} test images:")
  print(f"  {'model':28s} {'accuracy':>9s} {'agreement with float':>21s}")
  print(f"  {'float32':28s} {results['minmax']['float']:9.2%}")
  for method, r in results.items():
    print(f"  {'int8, ' + method + ' calibration':28s} {r['int8']:9.2%} "
          f"{r['agreement']:21.2%}")

  # The quantized model saves and reloads like any Keras model.
  with tempfile.TemporaryDirectory(prefix="ptq_digits_") as tmp:
    path = os.path.join(tmp, "digits_int8.keras")
    qmodel.save(path)
    reloaded = keras.models.load_model(path)
    same = np.array_equal(qmodel(x_test).numpy(), reloaded(x_test).numpy())
  print(f"\n.keras round trip: predictions {'identical' if same else 'DIFFERENT'}")

  diff = results["minmax"]["int8"] - results["minmax"]["float"]
  ok = same and diff >= -MAX_ACCURACY_DROP - 1e-9
  print(f"\n{'OK' if ok else 'FAILED'}: int8 minus float top-1 accuracy "
        f"{diff * 100 + 0.0:+.2f} points (target: at least "
        f"{-MAX_ACCURACY_DROP * 100:+.0f}); {time.perf_counter() - wall0:.1f} "
        f"s in all")
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
