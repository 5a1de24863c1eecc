"""The models suite's preparation (runs in the "ours" worker: TF + Keras).

For each keras.applications model (weights=None: nothing is downloaded;
classifier_activation=None: logits) or 1-D model of BUILDERS (M5Audio, TCN:
random initial weights): random BatchNormalization statistics (so that
folding matters), then from the same seeded calibration inputs (random
values in [-1, 1] of the model's input shape):
  * the int8 model of tf_fused_int8.quantization.quantize_model, its conv
    runs fused by fuse_conv_sequences (.keras);
  * the float model (.keras, for tf_fp32, and a SavedModel export for
    OpenVINO's TF frontend);
  * TF's full-integer TFLite conversion (int8 in/out, per-channel weights).
The timing input is another set of random inputs. Returned per model: the
file paths and facts for the table (conv/dense MACs per image, the number of
int8 regions, the cosine of the float and int8 logits on the timing images).
"""

import os
import warnings

import numpy as np

IMAGE_SHAPE = (224, 224, 3)


def _m5_audio():
  """A raw-waveform audio classifier (the M5 of Dai et al., 2017: 1 s of
  16 kHz audio, 35 keyword logits): a Conv1D of 128 filters of 80 taps,
  stride 4, then 3-tap Conv1D layers to 128, 256 and 512 channels, each
  with BN + ReLU and a max pool of 4; global average pooling, Dense."""
  import keras  # pylint: disable=g-import-not-at-top
  layers = keras.layers
  x = inp = keras.Input((16000, 1), name="waveform")
  for i, (filters, k, s) in enumerate(((128, 80, 4), (128, 3, 1), (256, 3, 1),
                                       (512, 3, 1))):
    x = layers.Conv1D(filters, k, strides=s, padding="same", name=f"conv{i}")(x)
    x = layers.ReLU(name=f"relu{i}")(layers.BatchNormalization(name=f"bn{i}")(x))
    x = layers.MaxPooling1D(4, name=f"pool{i}")(x)
  x = layers.GlobalAveragePooling1D(name="gap")(x)
  return keras.Model(inp, layers.Dense(35, name="logits")(x), name="M5Audio")


def _tcn():
  """A temporal convolutional network (Bai et al., 2018) on 1024 steps of
  32 features: a 1x1 Conv1D to 128 channels, six residual blocks of two
  causal Conv1D 3 (dilations 1 to 32) + BN, ReLUs, global average pooling,
  Dense to 10 logits."""
  import keras  # pylint: disable=g-import-not-at-top
  layers = keras.layers
  inp = keras.Input((1024, 32), name="series")
  x = layers.Conv1D(128, 1, name="proj")(inp)
  for i in range(6):
    d = 2 ** i
    h = layers.Conv1D(128, 3, padding="causal", dilation_rate=d, name=f"b{i}_c1")(x)
    h = layers.ReLU(name=f"b{i}_r1")(layers.BatchNormalization(name=f"b{i}_bn1")(h))
    h = layers.Conv1D(128, 3, padding="causal", dilation_rate=d, name=f"b{i}_c2")(h)
    h = layers.BatchNormalization(name=f"b{i}_bn2")(h)
    x = layers.ReLU(name=f"b{i}_out")(layers.Add(name=f"b{i}_add")([x, h]))
  x = layers.GlobalAveragePooling1D(name="gap")(x)
  return keras.Model(inp, layers.Dense(10, name="logits")(x), name="TCN")


def _dcgan():
  """The generator of TensorFlow's DCGAN tutorial (MNIST, 28 x 28 x 1 from
  100 noise values): Dense to 7 x 7 x 256 + BN + LeakyReLU, then
  Conv2DTranspose 5 x 5 to 128 (stride 1), 64 (stride 2) and 1 (stride 2,
  tanh) channels, each but the last with BN + LeakyReLU."""
  import keras  # pylint: disable=g-import-not-at-top
  layers = keras.layers
  inp = keras.Input((100,), name="noise")
  x = layers.Dense(7 * 7 * 256, use_bias=False, name="project")(inp)
  x = layers.LeakyReLU(name="project_lrelu")(
      layers.BatchNormalization(name="project_bn")(x))
  x = layers.Reshape((7, 7, 256), name="reshape")(x)
  for i, (filters, stride) in enumerate(((128, 1), (64, 2))):
    x = layers.Conv2DTranspose(filters, 5, strides=stride, padding="same",
                               use_bias=False, name=f"up{i}")(x)
    x = layers.LeakyReLU(name=f"up{i}_lrelu")(
        layers.BatchNormalization(name=f"up{i}_bn")(x))
  x = layers.Conv2DTranspose(1, 5, strides=2, padding="same",
                             activation="tanh", name="image")(x)
  return keras.Model(inp, x, name="DCGAN")


def _conv_autoencoder():
  """The convolutional autoencoder of Keras's image denoising example on
  224 x 224 x 3 images: Conv2D 3 x 3 to 32 + ReLU and a max pool of 2,
  twice; Conv2DTranspose 3 x 3 stride 2 to 32 + ReLU, twice; Conv2D 3 x 3
  to 3 + sigmoid."""
  import keras  # pylint: disable=g-import-not-at-top
  layers = keras.layers
  x = inp = keras.Input(IMAGE_SHAPE, name="image")
  for i in range(2):
    x = layers.Conv2D(32, 3, activation="relu", padding="same", name=f"enc{i}")(x)
    x = layers.MaxPooling2D(2, padding="same", name=f"pool{i}")(x)
  for i in range(2):
    x = layers.Conv2DTranspose(32, 3, strides=2, activation="relu",
                               padding="same", name=f"dec{i}")(x)
  x = layers.Conv2D(3, 3, activation="sigmoid", padding="same", name="out")(x)
  return keras.Model(inp, x, name="ConvAutoencoder")


# --models: keras.applications builders (weights=None, 224x224, logits) by
# name, two 1-D models (quantize_model runs their Conv1D layers as 1 x k
# Conv2D ones) and two of transposed convolutions (a GAN generator, an
# autoencoder). The default runs the first two; the rest are the families
# quantize_model covers (docs/quantization.md's table).
BUILDERS = {
    **{name: name for name in (
        "ResNet50", "MobileNetV2", "ResNet50V2", "VGG16", "InceptionV3",
        "DenseNet121", "Xception", "EfficientNetB0", "MobileNetV3Small",
        "ConvNeXtTiny", "MobileNet", "MobileNetV3Large", "EfficientNetV2B0",
        "NASNetMobile", "InceptionResNetV2")},
    "M5Audio": _m5_audio,
    "TCN": _tcn,
    "DCGAN": _dcgan,
    "ConvAutoencoder": _conv_autoencoder,
}


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
  SeparableConv2D / Conv2DTranspose / Dense layers (and their 1-D forms),
  nested models' included (what GOPS counts; a transposed convolution
  multiplies each input pixel by its whole kernel)."""
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
    elif isinstance(layer, keras.layers.Conv2DTranspose):
      _, h, w, ci = layer.input.shape
      kh, kw = layer.kernel_size
      total += h * w * ci * kh * kw * layer.filters
    elif isinstance(layer, keras.layers.Conv2D):
      _, h, w, co = layer.output.shape
      kh, kw = layer.kernel_size
      ci = layer.input.shape[-1] // layer.groups
      total += h * w * co * kh * kw * ci
    elif isinstance(layer, keras.layers.SeparableConv1D):
      _, length, co = layer.output.shape
      mid = layer.input.shape[-1] * layer.depth_multiplier
      total += length * mid * (layer.kernel_size[0] + co)
    elif isinstance(layer, keras.layers.DepthwiseConv1D):
      _, length, c = layer.output.shape
      total += length * c * layer.kernel_size[0]
    elif isinstance(layer, keras.layers.Conv1D):
      _, length, co = layer.output.shape
      ci = layer.input.shape[-1] // layer.groups
      total += length * co * layer.kernel_size[0] * ci
    elif isinstance(layer, keras.layers.Dense):  # per row of its input
      rows = int(np.prod([d for d in layer.input.shape[1:-1]]))
      total += rows * layer.input.shape[-1] * layer.units
  return int(total)


def build_float_model(name, seed):
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(seed)
  if callable(BUILDERS[name]):
    model = BUILDERS[name]()
  else:
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
  data = {}  # input shape -> (calibration, images, their paths)

  def inputs_of(shape):
    # Random values in [-1, 1] per input shape: the images' files keep
    # their names, other shapes (the 1-D models) get the shape in theirs.
    if shape not in data:
      rng = np.random.default_rng(
          seed if shape == IMAGE_SHAPE else [seed] + list(shape))
      calibration = rng.uniform(-1, 1, (calibration_images,) + shape).astype(
          np.float32)
      images = rng.uniform(-1, 1, (8,) + shape).astype(np.float32)
      tag = "" if shape == IMAGE_SHAPE else "_" + "x".join(map(str, shape))
      paths = (os.path.join(out_dir, f"calibration{tag}.npy"),
               os.path.join(out_dir, f"input{tag}.npy"))
      np.save(paths[0], calibration)
      np.save(paths[1], images)
      data[shape] = (calibration, images) + paths
    return data[shape]

  info = {}
  for name in names:
    if name not in BUILDERS:
      raise ValueError(f"unknown model {name!r}; known: {sorted(BUILDERS)}")
    model = build_float_model(name, seed)
    calibration, images, calib_path, input_path = inputs_of(
        tuple(model.input.shape[1:]))
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
