"""QuantizedFusedConv2D: outputs against the numpy reference, shape inference
against the op's C++ shape function, config and .keras round trips,
tf.function with varying batch, functional models with stock layers, errors."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_helpers
import op_harness
import reference
import tf_fused_int8
from tf_fused_int8 import layers as qlayers
from tf_fused_int8 import testing
from tf_fused_int8.testing import ConvCase

# Keras's own saving code trips numpy 2's __array__(copy=...) deprecation.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning")

QFC = tf_fused_int8.QuantizedFusedConv2D


def layer_for_case(case, inputs=None, **kwargs):
  """A built QuantizedFusedConv2D computing `case` (weights from `inputs`)."""
  layer = QFC(
      filters=case.out_channels,
      kernel_size=(case.kernel_h, case.kernel_w),
      strides=case.strides,
      padding=case.padding.lower(),
      activation="relu" if case.activation == "Relu" else None,
      use_side_input=case.side_input,
      per_channel_scale=case.per_channel_scale,
      dilation_rate=case.dilations,
      **kwargs)
  layer.build((None, None, None, case.in_channels))
  if inputs is not None:
    weights = [inputs["filter"], inputs["bias"], inputs["conv_input_scale"]]
    if case.side_input:
      weights.append(inputs["side_input_scale"])
    layer.set_weights(weights)
  return layer


def call_layer(layer, case, inputs):
  if case.side_input:
    return layer(inputs["conv_input"], side_input=inputs["side_input"])
  return layer(inputs["conv_input"])


CASES = [
    ConvCase(2, 9, 11, 5, 3, 3, 7),
    ConvCase(1, 8, 8, 16, 3, 3, 16, side_input=True),
    ConvCase(3, 10, 7, 4, 3, 3, 6, stride_h=2, stride_w=2, padding="VALID",
             activation="None"),
    ConvCase(2, 7, 7, 3, 1, 1, 8, per_channel_scale=False, side_input=True,
             activation="None"),
    ConvCase(1, 13, 12, 8, 5, 3, 4, stride_h=2, stride_w=3, padding="SAME",
             per_channel_scale=False),
    ConvCase(2, 11, 11, 6, 3, 3, 5, dilation_h=2, dilation_w=2,
             padding="VALID", side_input=True),
    ConvCase(1, 9, 9, 33, 7, 7, 17, stride_h=2, stride_w=2, scale_kind="pow2"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name() for c in CASES])
def test_layer_matches_reference(case):
  inputs = testing.make_inputs(case, seed=3)
  layer = layer_for_case(case, inputs)
  got = call_layer(layer, case, inputs)
  assert got.dtype == tf.int8
  want = op_harness.run_reference(case, inputs)
  op_harness.assert_same_bits(got.numpy(), want, case.name())
  assert layer.compute_output_shape(case.input_shape) == case.output_shape


@pytest.mark.parametrize("case", CASES, ids=[c.name() for c in CASES])
def test_eager_fast_call_gives_keras_calls_bits(case, keras_calls):
  """layers._EagerCall: a built layer called eagerly on tf tensors runs
  call() without Keras's __call__ machinery, with the reference's bits and
  Keras's path's bits; numpy inputs take Keras's path (which converts them)."""
  inputs = testing.make_inputs(case, seed=4)
  layer = layer_for_case(case, inputs)
  x = tf.constant(inputs["conv_input"])
  kw = ({"side_input": tf.constant(inputs["side_input"])} if case.side_input
        else {})
  got = layer(x, **kw)
  assert keras_calls == []
  want = op_harness.run_reference(case, inputs)
  op_harness.assert_same_bits(got.numpy(), want, case.name())
  via_keras = call_layer(layer, case, inputs)  # numpy: Keras's path
  assert keras_calls == ["QuantizedFusedConv2D"]
  np.testing.assert_array_equal(via_keras.numpy(), got.numpy())


def test_eager_fast_call_only_where_it_changes_nothing(keras_calls):
  case = CASES[1]  # with a side input
  inputs = testing.make_inputs(case, seed=5)
  x = tf.constant(inputs["conv_input"])
  side = tf.constant(inputs["side_input"])
  unbuilt = QFC(case.out_channels, 3, padding="same", use_side_input=True)
  unbuilt(x, side_input=side)  # builds: Keras's path
  assert keras_calls == ["QuantizedFusedConv2D"]
  keras_calls.clear()
  unbuilt(x, side_input=side)
  assert keras_calls == []
  layer = layer_for_case(case, inputs)
  want = layer(x, side_input=side).numpy()
  # In a graph: Keras's path (tracing), the same bits.
  got = tf.function(lambda a, b: layer(a, side_input=b))(x, side)
  np.testing.assert_array_equal(got.numpy(), want)
  assert keras_calls == ["QuantizedFusedConv2D"]
  keras_calls.clear()
  # Symbolic inputs (building a functional model): Keras's path.
  inp = keras.Input(case.input_shape[1:], dtype="int8")
  res = keras.Input(case.output_shape[1:], dtype="int8")
  model = keras.Model([inp, res], layer(inp, side_input=res))
  assert "QuantizedFusedConv2D" in keras_calls
  keras_calls.clear()
  # An eager functional model call: the layer's call is fast, same bits.
  np.testing.assert_array_equal(model([x, side]).numpy(), want)
  assert "QuantizedFusedConv2D" not in keras_calls
  # training=False / None, which the model passes on to every layer and
  # which Keras drops for a call() without `training`: still fast, the
  # same bits. training=True (Keras would tell nested layers): Keras's
  # path, the same bits.
  for training in (False, None):
    np.testing.assert_array_equal(
        model([x, side], training=training).numpy(), want)
    np.testing.assert_array_equal(
        layer(x, side_input=side, training=training).numpy(), want)
    assert "QuantizedFusedConv2D" not in keras_calls
  np.testing.assert_array_equal(model([x, side], training=True).numpy(), want)
  assert "QuantizedFusedConv2D" in keras_calls
  keras_calls.clear()
  np.testing.assert_array_equal(
      layer(x, side_input=side, training=True).numpy(), want)
  assert keras_calls == ["QuantizedFusedConv2D"]
  keras_calls.clear()
  # A tensor with a Keras mask: Keras's path (which warns that the layer
  # drops the mask), the same bits.
  masked = tf.identity(x)
  masked._keras_mask = tf.ones(x.shape[:3], tf.bool)  # pylint: disable=protected-access
  keras_calls.clear()
  with pytest.warns(UserWarning, match="does not support masking"):
    np.testing.assert_array_equal(
        layer(masked, side_input=side).numpy(), want)
  assert keras_calls == ["QuantizedFusedConv2D"]
  # A mask on the side input (a keyword argument) also takes Keras's path;
  # a mask set back to None does not.
  masked_side = tf.identity(side)
  masked_side._keras_mask = tf.ones(side.shape[:3], tf.bool)  # pylint: disable=protected-access
  keras_calls.clear()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    np.testing.assert_array_equal(
        layer(x, side_input=masked_side).numpy(), want)
  assert keras_calls == ["QuantizedFusedConv2D"]
  masked_side._keras_mask = None  # pylint: disable=protected-access
  keras_calls.clear()
  np.testing.assert_array_equal(layer(x, side_input=masked_side).numpy(), want)
  assert keras_calls == []
  # An unknown keyword: Keras's path, which rejects it as it always did.
  keras_calls.clear()
  with pytest.raises(TypeError):
    layer(x, side_input=side, bogus=1)
  assert keras_calls == ["QuantizedFusedConv2D"]


def test_weights_and_attributes():
  case = CASES[1]
  layer = layer_for_case(case)
  assert [w.name for w in layer.weights] == [
      "kernel", "bias", "conv_input_scale", "side_input_scale"]
  assert [w.dtype for w in layer.weights] == [
      "int8", "float32", "float32", "float32"]
  assert [tuple(w.shape) for w in layer.weights] == [
      (3, 3, 16, 16), (16,), (16,), ()]
  assert layer.trainable_weights == []
  assert layer.supports_jit is False
  scalar = layer_for_case(CASES[3])
  assert tuple(scalar.conv_input_scale.shape) == ()
  no_side = layer_for_case(CASES[0])
  assert [w.name for w in no_side.weights] == [
      "kernel", "bias", "conv_input_scale"]


def test_set_weights_rejects_float_kernel():
  layer = layer_for_case(CASES[0])
  k, b, s = layer.get_weights()
  with pytest.raises(ValueError, match="int8"):
    layer.set_weights([k.astype(np.float32), b, s])
  with pytest.raises(ValueError, match=r"\[-128, 127\]"):
    layer.set_weights([k.astype(np.int32) + 300, b, s])


def test_kernel_initializer_gives_int8():
  layer = QFC(4, 3, kernel_initializer=keras.initializers.RandomUniform(
      -127, 127, seed=1))
  layer.build((None, 8, 8, 2))
  k = layer.get_weights()[0]
  assert k.dtype == np.int8 and k.shape == (3, 3, 2, 4)
  assert len(np.unique(k)) > 20


def test_config_round_trip():
  layer = QFC(8, (3, 5), strides=(2, 1), padding="same", activation="relu",
              use_side_input=True, per_channel_scale=False,
              dilation_rate=(1, 2), name="qconv",
              bias_initializer=keras.initializers.Constant(0.5))
  config = layer.get_config()
  for key, value in dict(filters=8, kernel_size=(3, 5), strides=(2, 1),
                         padding="same", activation="relu",
                         use_side_input=True, per_channel_scale=False,
                         dilation_rate=(1, 2), name="qconv").items():
    assert config[key] == value, key
  clone = QFC.from_config(config)
  assert clone.get_config() == config
  # Through Keras's generic (de)serialization, by registered name.
  ser = keras.saving.serialize_keras_object(layer)
  assert keras.saving.get_registered_name(QFC) == (
      "tf_fused_int8>QuantizedFusedConv2D")
  again = keras.saving.deserialize_keras_object(ser)
  assert isinstance(again, QFC) and again.get_config() == config
  # Weights carry over to the clone.
  layer.build((None, 9, 9, 4))
  clone.build((None, 9, 9, 4))
  rng = np.random.default_rng(0)
  clone.set_weights([rng.integers(-128, 128, (3, 5, 4, 8)).astype(np.int8),
                     np.ones(8, np.float32), np.float32(0.01),
                     np.float32(0.5)])
  layer.set_weights(clone.get_weights())
  x = rng.integers(-128, 128, (2, 9, 9, 4)).astype(np.int8)
  side = rng.integers(-128, 128, (2, 5, 9, 8)).astype(np.int8)
  np.testing.assert_array_equal(layer(x, side_input=side),
                                clone(x, side_input=side))


def test_constructor_argument_errors():
  with pytest.raises(ValueError, match="activation"):
    QFC(4, 3, activation="sigmoid")
  with pytest.raises(ValueError, match="padding"):
    QFC(4, 3, padding="causal")
  with pytest.raises(ValueError, match="filters"):
    QFC(0, 3)
  with pytest.raises(ValueError, match="strides"):
    QFC(4, 3, strides=(1, 0))
  assert QFC(4, 3, activation="linear").activation is None
  assert QFC(4, 3, activation="ReLU").activation == "relu"


# ----------------------------------------------------------- shape inference

SHAPE_LAYERS = [
    dict(filters=6, kernel_size=3, padding="same"),
    dict(filters=6, kernel_size=3, padding="valid", strides=2),
    dict(filters=5, kernel_size=(3, 2), padding="valid", dilation_rate=(2, 3)),
    dict(filters=4, kernel_size=(1, 5), padding="same", strides=(3, 2)),
]
INPUT_SPECS = [
    (None, None, None, 3),
    (None, 17, None, 3),
    (2, None, 12, 3),
    (4, 17, 12, 3),
    (None, 9, 10, 3),
]


@pytest.mark.parametrize("kwargs", SHAPE_LAYERS, ids=str)
def test_shape_inference_agrees_with_op(kwargs):
  layer = QFC(**kwargs)
  layer.build((None, None, None, 3))
  layer_helpers.check_shape_inference(layer, INPUT_SPECS)


def test_side_input_shape_merges_like_the_op():
  layer = QFC(6, 3, padding="same", use_side_input=True)
  layer.build((None, None, None, 3))
  for spec, side_spec in [((None, None, None, 3), (2, 8, None, 6)),
                          ((None, 8, 8, 3), (None, None, None, 6)),
                          ((3, None, 5, 3), (None, 4, None, 6))]:
    want = layer_helpers.op_static_shape(layer, spec, side_spec)
    sym = layer(keras.Input(batch_shape=spec, dtype="int8"),
                side_input=keras.Input(batch_shape=side_spec, dtype="int8"))
    assert tuple(sym.shape) == want, (spec, side_spec)
  with pytest.raises(ValueError, match=r"side_input of shape int8 \[\?, 8, 8, 6\]"):
    layer(keras.Input(batch_shape=(None, 8, 8, 3), dtype="int8"),
          side_input=keras.Input(batch_shape=(None, 8, 7, 6), dtype="int8"))


def test_valid_padding_too_small_input_is_an_error_like_the_op():
  layer = QFC(4, 5, padding="valid")
  layer.build((None, None, None, 3))
  with pytest.raises(ValueError, match="input height 4 is smaller"):
    layer.compute_output_shape((None, 4, 9, 3))
  with pytest.raises(Exception):  # the op's shape function agrees
    layer_helpers.op_static_shape(layer, (None, 4, 9, 3))


# -------------------------------------------------------------------- errors

def test_input_errors_name_the_expected_shape():
  layer = QFC(4, 3, padding="same")
  with pytest.raises(ValueError, match=r"\[batch, height, width, Ci\]"):
    layer(keras.Input(batch_shape=(None, 8, 3), dtype="int8"))
  with pytest.raises(ValueError, match=r"needs a known channel count"):
    layer(keras.Input(batch_shape=(None, 8, 8, None), dtype="int8"))
  layer(np.zeros((1, 8, 8, 3), np.int8))  # builds for 3 channels
  with pytest.raises(ValueError, match=r"int8 \[batch, height, width, 3\]"):
    layer(np.zeros((1, 8, 8, 5), np.int8))
  with pytest.raises(ValueError, match=r"int8 \[batch, height, width, 3\]"):
    layer(keras.Input(batch_shape=(None, 8, 8, 5), dtype="int8"))
  with pytest.raises(ValueError, match=r"int8 \[batch, height, width, 3\]"):
    layer(np.zeros((8, 8, 3), np.int8))
  with pytest.raises(ValueError, match="got dtype float32"):
    layer(np.zeros((1, 8, 8, 3), np.float32))
  with pytest.raises(ValueError, match="got dtype uint8"):
    layer(keras.Input(batch_shape=(None, 8, 8, 3), dtype="uint8"))


def test_side_input_errors():
  with_side = QFC(4, 3, padding="same", use_side_input=True)
  x = np.zeros((2, 8, 8, 3), np.int8)
  with pytest.raises(ValueError, match="use_side_input=True"):
    with_side(x)
  with pytest.raises(ValueError, match=r"side_input of shape int8 \[2, 8, 8, 4\]"):
    with_side(x, side_input=np.zeros((2, 8, 8, 3), np.int8))
  with pytest.raises(ValueError, match="side_input of int8"):
    with_side(x, side_input=np.zeros((2, 8, 8, 4), np.float32))
  without = QFC(4, 3, padding="same")
  with pytest.raises(ValueError, match="use_side_input=False"):
    without(x, side_input=np.zeros((2, 8, 8, 4), np.int8))


# ---------------------------------------------------------------- tf.function

def test_tf_function_one_trace_serves_any_batch_and_size():
  case = CASES[1]
  inputs = testing.make_inputs(case, seed=5)
  layer = layer_for_case(case, inputs)
  fn = tf.function(
      lambda x, s: layer(x, side_input=s),
      input_signature=[tf.TensorSpec([None, None, None, 16], tf.int8),
                       tf.TensorSpec([None, None, None, 16], tf.int8)])
  rng = np.random.default_rng(0)
  for n, h, w in [(1, 8, 8), (3, 8, 8), (5, 6, 9), (2, 1, 1)]:
    x = rng.integers(-128, 128, (n, h, w, 16)).astype(np.int8)
    s = rng.integers(-128, 128, (n, h, w, 16)).astype(np.int8)
    got = fn(x, s).numpy()
    np.testing.assert_array_equal(got, layer(x, side_input=s).numpy())
  assert fn.experimental_get_tracing_count() == 1


# ------------------------------------------------ functional model, .keras

def build_model(seed=0):
  """int8 in -> conv+relu -> residual conv (side input) -> stock layers."""
  rng = np.random.default_rng(seed)
  inp = keras.Input((None, None, 3), dtype="int8", name="image_q")
  stem = QFC.from_float_weights(
      rng.normal(0, 0.3, (3, 3, 3, 8)), rng.normal(0, 0.1, 8),
      input_scale=1 / 64, output_scale=1 / 16, padding="same",
      activation="relu", name="stem")
  res = QFC.from_float_weights(
      rng.normal(0, 0.1, (3, 3, 8, 8)), rng.normal(0, 0.1, 8),
      input_scale=1 / 16, output_scale=1 / 16, side_input_scale=1 / 16,
      padding="same", activation="relu", per_channel_scale=False, name="res")
  h = stem(inp)
  h2 = res(h, side_input=h)
  pooled = keras.layers.MaxPooling2D(name="pool")(h2)
  f1 = keras.layers.GlobalAveragePooling2D()(
      keras.layers.Rescaling(1 / 16, name="dequant")(pooled))
  f2 = keras.layers.GlobalAveragePooling2D()(
      keras.layers.Rescaling(1 / 16, name="dequant_stem")(h))
  logits = keras.layers.Dense(5, name="head")(keras.layers.Add()([f1, f2]))
  return keras.Model(inp, {"logits": logits, "features": h2})


def test_functional_model_with_stock_layers(tmp_path):
  model = build_model()
  assert model.output["features"].dtype == "int8"
  assert tuple(model.output["features"].shape) == (None, None, None, 8)
  x = np.random.default_rng(1).integers(-128, 128, (3, 12, 10, 3)).astype(
      np.int8)
  out = model(x)
  # The int8 part agrees with the reference, layer by layer.
  stem, res = model.get_layer("stem"), model.get_layer("res")
  k, b, s = stem.get_weights()
  h = reference.fused_conv2d_reference(
      x, k, b, conv_input_scale=s, padding="SAME", activation="Relu")
  k, b, s, ss = res.get_weights()
  h2 = reference.fused_conv2d_reference(
      h, k, b, side_input=h, conv_input_scale=s, side_input_scale=ss,
      padding="SAME", activation="Relu")
  np.testing.assert_array_equal(out["features"].numpy(), h2)
  assert 10 < len(np.unique(h2)), "degenerate test network"
  # Keras's jit_compile="auto" stays off; forcing it on is refused.
  assert not all(layer.supports_jit for layer in model._flatten_layers())
  with warnings.catch_warnings(record=True):
    warnings.simplefilter("always")
    model.jit_compile = True
  assert model.jit_compile is False
  # predict() (Keras's own tf.function) gives the same.
  pred = model.predict(x, batch_size=2, verbose=0)
  np.testing.assert_array_equal(pred["features"], h2)
  # The float head ran on batches of 2 and 1 here, on 3 above.
  layer_helpers.assert_float_close(pred["logits"], out["logits"].numpy())
  # .keras round trip.
  path = str(tmp_path / "model.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  assert isinstance(loaded.get_layer("res"), QFC)
  again = loaded(x)
  np.testing.assert_array_equal(again["features"].numpy(), h2)
  layer_helpers.assert_float_close(again["logits"].numpy(),
                                   out["logits"].numpy())
  for a, b in zip(model.get_weights(), loaded.get_weights()):
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)


def test_sequential_model():
  model = keras.Sequential([
      keras.Input((10, 10, 4), dtype="int8"),
      QFC(8, 3, strides=2, padding="same", activation="relu",
          kernel_initializer=keras.initializers.RandomUniform(-50, 50, seed=2),
          conv_input_scale_initializer=keras.initializers.Constant(0.01)),
      QFC(4, 1, kernel_initializer=keras.initializers.RandomUniform(
          -50, 50, seed=3)),
  ])
  assert model.output_shape == (None, 5, 5, 4)
  assert model.layers[-1].output.dtype == "int8"
  out = model(np.ones((2, 10, 10, 4), np.int8))
  assert out.shape == (2, 5, 5, 4) and out.dtype == tf.int8


def test_mixed_precision_policy_keeps_float32_scales():
  case = CASES[3]
  inputs = testing.make_inputs(case, seed=9)
  layer = layer_for_case(case, inputs, dtype="mixed_float16")
  got = call_layer(layer, case, inputs)
  op_harness.assert_same_bits(got.numpy(), op_harness.run_reference(
      case, inputs), "mixed_float16")


# ----------------------------------------------------- from float weights

def test_quantize_kernel():
  rng = np.random.default_rng(0)
  w = rng.normal(0, 1, (3, 3, 4, 5))
  w[..., 2] = 0.0
  q, s = qlayers.quantize_kernel(w)
  assert q.dtype == np.int8 and s.shape == (5,)
  assert np.all(np.max(np.abs(q), axis=(0, 1, 2))[[0, 1, 3, 4]] == 127)
  assert s[2] == 1.0 and np.all(q[..., 2] == 0)
  assert np.max(np.abs(q * s - w)) <= np.max(s) / 2 + 1e-12
  q1, s1 = qlayers.quantize_kernel(w, per_channel=False)
  assert s1.shape == () and np.max(np.abs(q1)) == 127


def test_from_float_weights_formula_and_accuracy():
  rng = np.random.default_rng(4)
  w = rng.normal(0, 0.2, (3, 3, 6, 10))
  b = rng.normal(0, 0.5, 10)
  s_in, s_out, s_side = 0.02, 0.05, 0.04
  layer = QFC.from_float_weights(w, b, input_scale=s_in, output_scale=s_out,
                                 side_input_scale=s_side, padding="same",
                                 name="from_float")
  assert layer.use_side_input and layer.filters == 10
  assert layer.kernel_size == (3, 3) and layer.input_channels == 6
  q, s_w = qlayers.quantize_kernel(w)
  k, bias, scale, side_scale = layer.get_weights()
  np.testing.assert_array_equal(k, q)
  np.testing.assert_array_equal(scale, (s_in * s_w / s_out).astype(np.float32))
  np.testing.assert_array_equal(bias, (b / s_out).astype(np.float32))
  assert side_scale == np.float32(s_side / s_out)
  # The int8 layer approximates the float computation it was made from.
  xq = rng.integers(-100, 101, (2, 8, 8, 6)).astype(np.int8)
  rq = rng.integers(-100, 101, (2, 8, 8, 10)).astype(np.int8)
  want = (tf.nn.conv2d(xq.astype(np.float64) * s_in, w, 1, "SAME").numpy()
          + b + rq * s_side)
  got = layer(xq, side_input=rq).numpy().astype(np.float64) * s_out
  inside = np.abs(want) < 127 * s_out
  err = np.abs(got - want)[inside]
  assert inside.mean() > 0.5
  assert err.max() < 4 * s_out and err.mean() < s_out
  with pytest.raises(ValueError, match="positive"):
    QFC.from_float_weights(w, b, input_scale=0.0, output_scale=1.0)
  with pytest.raises(ValueError, match="HWIO"):
    QFC.from_float_weights(w[0], b)


def test_eager_fast_call_of_the_quantization_layers(keras_calls):
  """Quantize / Dequantize / Int8ReLU take the fast path on eager tensors
  with Keras's bits; a float input of another dtype than the layer's
  compute dtype (which Keras would cast) takes Keras's path."""
  from tf_fused_int8 import quantization  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(0, 3, (2, 5, 4, 3)).astype(np.float32))
  q = quantization.Quantize(0.05)
  dq = quantization.Dequantize(0.05)
  relu = quantization.Int8ReLU(output_max=40)
  for layer in (q, dq, relu):
    layer.build(None)
  keras_calls.clear()
  xq = q(x)
  y = dq(relu(xq))
  assert keras_calls == []
  via_keras = [keras.layers.Layer.__call__(q, x)]
  via_keras.append(keras.layers.Layer.__call__(
      dq, keras.layers.Layer.__call__(relu, via_keras[0])))
  np.testing.assert_array_equal(xq.numpy(), via_keras[0].numpy())
  np.testing.assert_array_equal(y.numpy(), via_keras[1].numpy())
  # In a functional model called with training=False (passed on to every
  # layer): still the fast path, the same bits.
  inp = keras.Input(x.shape[1:])
  model = keras.Model(inp, dq(relu(q(inp))))
  keras_calls.clear()
  np.testing.assert_array_equal(model(x, training=False).numpy(), y.numpy())
  assert keras_calls == ["Functional"]
  keras_calls.clear()
  x16 = tf.cast(x, tf.float16)
  np.testing.assert_array_equal(q(x16).numpy(),
                                keras.layers.Layer.__call__(q, x16).numpy())
  assert keras_calls[0] == "Quantize"


def test_eager_fast_call_of_the_keras_derived_int8_layers(keras_calls):
  """Int8MaxPooling2D / Int8AveragePooling2D / Int8GlobalMaxPooling2D /
  Int8ZeroPadding2D / Int8Flatten (Keras layers with an int8 twist) take
  the fast path once built, on eager int8 tensors and with training=False,
  with Keras's bits; a float input keeps its Keras pooling (also bit for
  bit against Keras's path)."""
  from tf_fused_int8 import quantization  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  x = tf.constant(rng.integers(-128, 128, (2, 9, 8, 16)).astype(np.int8))
  made = [
      quantization.Int8MaxPooling2D(3, strides=2, zero_padding=1),
      quantization.Int8MaxPooling2D(2, padding="same"),
      quantization.Int8AveragePooling2D(3, strides=1, padding="same"),
      quantization.Int8GlobalMaxPooling2D(),
      quantization.Int8ZeroPadding2D(((1, 2), (0, 3))),
      quantization.Int8Flatten(),
  ]
  for layer in made:
    first = layer(x)  # builds: Keras's path
    keras_calls.clear()
    for kw in ({}, {"training": False}):
      got = layer(x, **kw)
      assert keras_calls == [], (type(layer).__name__, kw)
      assert got.dtype == tf.int8
      np.testing.assert_array_equal(got.numpy(), first.numpy())
    np.testing.assert_array_equal(
        keras.layers.Layer.__call__(layer, x).numpy(), first.numpy())
  # An input of the wrong rank: Keras's InputSpec error, as on Keras's path
  # (never a silently wrong shape: GlobalMaxPooling2D would reduce the
  # wrong axes of a rank-3 tensor).
  x3 = x[:, 0]
  for layer in made[:5]:
    with pytest.raises(ValueError, match="expected ndim=4, found ndim=3"):
      layer(x3)
  xf = tf.constant(rng.normal(0, 3, (2, 9, 8, 16)).astype(np.float32))
  for layer in made[:3]:
    keras_calls.clear()
    got = layer(xf)
    assert keras_calls == []
    np.testing.assert_array_equal(
        got.numpy(), keras.layers.Layer.__call__(layer, xf).numpy())
