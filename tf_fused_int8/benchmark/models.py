"""The models suite's preparation (runs in the "ours" worker: TF + Keras).

For each keras.applications model (weights=None: nothing is downloaded;
classifier_activation=None: logits): random BatchNormalization statistics
(so that folding matters), then from the same seeded calibration images:
  * the int8 model of tf_fused_int8.quantization.quantize_model, its conv
    runs fused by fuse_conv_sequences (.keras);
  * the float model (.keras, for tf_fp32, and a SavedModel export for
    OpenVINO's TF frontend);
  * TF's full-integer TFLite conversion (int8 in/out, per-channel weights).
The timing input is another set of random images. Returned per model: the
file paths and facts for the table (conv/dense MACs per image, the number of
int8 regions, the cosine of the float and int8 logits on the timing images).
"""

import os
import warnings

import numpy as np

# --models: keras.applications builders (weights=None, 224x224, logits).
# The default runs the first two; the rest are the families
# quantize_model covers (docs/quantization.md's table).
BUILDERS = {
    name: name for name in (
        "ResNet50", "MobileNetV2", "ResNet50V2", "VGG16", "InceptionV3",
        "DenseNet121", "Xception", "EfficientNetB0", "MobileNetV3Small",
        "ConvNeXtTiny", "MobileNet", "MobileNetV3Large", "EfficientNetV2B0",
        "NASNetMobile", "InceptionResNetV2")
}
IMAGE_SHAPE = (224, 224, 3)


def _randomize_batch_norm(model, rng):
  import keras  # pylint: disable=g-import-not-at-top
  from tf_fused_int8 import testing  # pylint: disable=g-import-not-at-top
  for layer in model.layers:
    if isinstance(layer, keras.layers.BatchNormalization):
      testing.randomize_batch_norm(layer, rng)


def _leaf_layers(model):
  """The model's layers, those of nested models (ConvNeXt's Sequential stem
  and downsampling blocks) in their place."""
  import keras  # pylint: disable=g-import-not-at-top
  for layer in model.layers:
    if isinstance(layer, keras.Model):
      yield from _leaf_layers(layer)
    else:
      yield layer


def conv_macs(model):
  """Multiply-accumulates per image of the Conv2D / DepthwiseConv2D /
  SeparableConv2D / Dense layers, nested models' included (what GOPS
  counts)."""
  import keras  # pylint: disable=g-import-not-at-top
  total = 0
  for layer in _leaf_layers(model):
    if isinstance(layer, keras.layers.SeparableConv2D):
      _, h, w, co = layer.output.shape
      kh, kw = layer.kernel_size
      mid = layer.input.shape[-1] * layer.depth_multiplier
      total += h * w * mid * (kh * kw + co)
    elif isinstance(layer, keras.layers.DepthwiseConv2D):
      _, h, w, c = layer.output.shape
      kh, kw = layer.kernel_size
      total += h * w * c * kh * kw
    elif isinstance(layer, keras.layers.Conv2D):
      _, h, w, co = layer.output.shape
      kh, kw = layer.kernel_size
      ci = layer.input.shape[-1] // layer.groups
      total += h * w * co * kh * kw * ci
    elif isinstance(layer, keras.layers.Dense):  # per row of its input
      rows = int(np.prod([d for d in layer.input.shape[1:-1]]))
      total += rows * layer.input.shape[-1] * layer.units
  return int(total)


def build_float_model(name, seed):
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(seed)
  builder = getattr(keras.applications, BUILDERS[name])
  model = builder(weights=None, input_shape=IMAGE_SHAPE,
                  classifier_activation=None)
  _randomize_batch_norm(model, np.random.default_rng(seed))
  return model


def _tflite(model, calibration):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  converter = tf.lite.TFLiteConverter.from_keras_model(model)
  converter.optimizations = [tf.lite.Optimize.DEFAULT]
  converter.representative_dataset = lambda: (
      [calibration[i:i + 1]] for i in range(len(calibration)))
  converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
  converter.inference_input_type = tf.int8
  converter.inference_output_type = tf.int8
  return converter.convert()


def prepare(names, out_dir, calibration_images, seed):
  """Builds, quantizes, converts and saves each model; returns their info."""
  from tf_fused_int8 import quantization  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  calibration = rng.uniform(-1, 1, (calibration_images,) + IMAGE_SHAPE).astype(
      np.float32)
  images = rng.uniform(-1, 1, (8,) + IMAGE_SHAPE).astype(np.float32)
  calib_path = os.path.join(out_dir, "calibration.npy")
  input_path = os.path.join(out_dir, "input.npy")
  np.save(calib_path, calibration)
  np.save(input_path, images)
  info = {}
  for name in names:
    if name not in BUILDERS:
      raise ValueError(f"unknown model {name!r}; known: {sorted(BUILDERS)}")
    model = build_float_model(name, seed)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always", quantization.QuantizationWarning)
      int8_model = quantization.quantize_model(model, calibration, verbose=0)
    # What the README recommends for inference: each run of convolutions as
    # one QuantizedConvSequence (the same bits, less TF cost per call).
    int8_model = quantization.fuse_conv_sequences(int8_model)
    stays_float = [str(w.message).splitlines()[0] for w in caught
                   if issubclass(w.category, quantization.QuantizationWarning)]
    paths = dict(float_keras=os.path.join(out_dir, name + "_float.keras"),
                 int8_keras=os.path.join(out_dir, name + "_int8.keras"),
                 saved_model=os.path.join(out_dir, name + "_savedmodel"),
                 tflite=os.path.join(out_dir, name + "_int8.tflite"))
    model.save(paths["float_keras"])
    int8_model.save(paths["int8_keras"])
    model.export(paths["saved_model"], verbose=False)
    try:
      tflite = _tflite(model, calibration)
    except Exception as e:  # pylint: disable=broad-except
      # The litert column then says why (the worker cannot open the file).
      tflite = None
      stays_float.append(f"TFLite full-integer conversion failed: "
                         f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
    if tflite is not None:
      with open(paths["tflite"], "wb") as f:
        f.write(tflite)
    want = np.asarray(model(images, training=False)).reshape(len(images), -1)
    got = np.asarray(int8_model(images)).reshape(len(images), -1)
    cosine = float(np.mean(np.sum(want * got, axis=1) / (
        np.linalg.norm(want, axis=1) * np.linalg.norm(got, axis=1))))
    regions = sum(type(l).__name__ == "Quantize" for l in int8_model.layers)
    info[name] = dict(paths, name=name, input=input_path,
                      calibration=calib_path, macs=conv_macs(model),
                      int8_regions=regions, cosine=cosine,
                      stays_float=stays_float[:2])
  return info
