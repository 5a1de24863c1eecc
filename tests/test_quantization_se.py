"""Squeeze-excite in int8: the op FusedInt8ChannelScale (an int8 tensor times
a float per image and channel), the Int8ChannelMultiply layer that runs it,
and quantize_model on EfficientNet-style blocks (SiLU tables, a gate
Multiply of the int8 main path, a Dropout before the residual Add), which
stay one int8 region.

Checked: the op against numpy on every CPU path (ties to even, the clip,
NaN / Inf multipliers, channel tails, both multiplier shapes), its errors,
the layer's formula, and the quantized block: one region, every int8 layer
bit for bit on its actual inputs, the float outputs within quantization
error, .keras / SavedModel round trips.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import layer_helpers
import op_harness
import tf_fused_int8
from tf_fused_int8 import ops
from tf_fused_int8 import quantization
import test_quantization
from test_quantization_depthwise import check_layers_against_reference
from test_quantization_depthwise import randomize

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation:DeprecationWarning")

L = keras.layers


def channel_scale_reference(x, m):
  """float32(x) * m[n, c] (numpy float32: correctly rounded), NaN -> 0,
  clipped, rounded half to even."""
  x = np.asarray(x)
  m = np.asarray(m, np.float32).reshape(x.shape[0], 1, 1, x.shape[3])
  with np.errstate(invalid="ignore", over="ignore"):
    y = x.astype(np.float32) * m
  y = np.where(np.isnan(y), np.float32(0), y)
  return np.round(np.clip(y, -128, 127)).astype(np.int8)


def random_case(seed, channels):
  rng = np.random.default_rng(seed)
  x = rng.integers(-128, 128, (2, 3, 5, channels)).astype(np.int8)
  m = (rng.integers(-1000, 1001, (2, channels)) / 512.0).astype(np.float32)
  m[0, :: 7] = 0.5  # exact halves: ties to even
  if channels > 3:
    m[1, 1], m[1, 2], m[1, 3] = np.nan, np.inf, -np.inf
  return x, m


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_op_matches_numpy_on_every_path(path):
  for i, channels in enumerate([1, 3, 7, 8, 15, 16, 17, 31, 40, 64, 67]):
    x, m = random_case(i, channels)
    want = channel_scale_reference(x, m)
    with op_harness.forced_kernel(path):
      for mult in (m, m.reshape(2, 1, 1, channels)):
        got = ops.channel_scale_int8(x, mult).numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"{path} C={channels}")
        got = tf.function(ops.channel_scale_int8)(x, mult).numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"{path} C={channels}")


def test_op_fixed_values():
  x = np.array([1, 3, 5, -3, 127, -128, 100, 7, 0, 5, 34, 38], np.int8)
  m = np.array([0.5, 0.5, 0.5, 0.5, 1, -1, 2, np.inf, np.inf, np.nan, 0.25, 0.25],
               np.float32)
  got = ops.channel_scale_int8(x.reshape(1, 1, 1, -1), m.reshape(1, -1)).numpy()
  np.testing.assert_array_equal(
      got.ravel(), [0, 2, 2, -2, 127, 127, 127, 127, 0, 0, 8, 10])


@pytest.mark.parametrize("x_shape, m_shape, dtype, match", [
    ((2, 3, 3, 8), (1, 8), tf.float32, r"multiplier must be float32 \[2, 8\] or \[2, 1, 1, 8\]"),
    ((2, 3, 3, 8), (2, 1, 2, 8), tf.float32, r"multiplier must be float32"),
    ((2, 3, 3, 8), (2, 9), tf.float32, r"multiplier must be float32"),
    ((2, 3, 8), (2, 8), tf.float32, r"x must be int8 \[N, H, W, C\]"),
])
def test_op_refuses_bad_shapes_in_the_kernel(x_shape, m_shape, dtype, match):
  raw = tf_fused_int8.load_ops()
  with pytest.raises(tf.errors.InvalidArgumentError, match=match):
    raw.fused_int8_channel_scale(x=tf.zeros(x_shape, tf.int8),
                                 multiplier=tf.zeros(m_shape, dtype))


def test_op_refuses_bad_shapes_in_a_graph_and_bad_dtypes():
  with pytest.raises(ValueError, match="must be equal|rank"):
    tf.function(lambda: ops.channel_scale_int8(
        tf.zeros([2, 3, 3, 8], tf.int8), tf.zeros([2, 9]))).get_concrete_function()
  with pytest.raises(TypeError, match="x must be int8"):
    ops.channel_scale_int8(tf.zeros([1, 2, 2, 4]), tf.zeros([1, 4]))
  with pytest.raises(TypeError, match="multiplier must be float32"):
    ops.channel_scale_int8(tf.zeros([1, 2, 2, 4], tf.int8),
                           tf.zeros([1, 4], tf.float64))


def test_layer_formula_and_config():
  x, m = random_case(3, 24)
  gate = np.abs(m).reshape(2, 1, 1, 24)
  gate[~np.isfinite(gate)] = 0.3
  layer = quantization.Int8ChannelMultiply(0.05, 0.04, name="gate_mul")
  ratio = np.float32(0.05 / 0.04)
  want = channel_scale_reference(x, gate.astype(np.float32) * ratio)
  np.testing.assert_array_equal(np.asarray(layer([x, gate])), want)
  again = quantization.Int8ChannelMultiply.from_config(layer.get_config())
  np.testing.assert_array_equal(np.asarray(again([x, gate])), want)
  with pytest.raises(ValueError, match="output_scale"):
    quantization.Int8ChannelMultiply(0.05, 0.0)


# ----------------------------------------------------------- quantize_model

def mbconv_model(seed=0):
  """image -> stem conv + BN + swish -> 2 EfficientNet MBConv blocks
  [expand 1x1 + BN + swish -> depthwise + BN + swish -> SE (GAP, Reshape,
  Conv2D silu, Conv2D sigmoid, Multiply) -> project 1x1 + BN -> Dropout ->
  Add(input)] -> GAP -> Dropout -> Dense."""
  inp = keras.Input((12, 10, 3), name="image")
  x = L.Conv2D(16, 3, padding="same", use_bias=False, name="stem")(inp)
  x = L.Activation("swish", name="stem_act")(L.BatchNormalization(name="stem_bn")(x))
  for b in range(2):
    h = L.Conv2D(48, 1, use_bias=False, name=f"b{b}_expand")(x)
    h = L.Activation("swish", name=f"b{b}_expand_act")(
        L.BatchNormalization(name=f"b{b}_expand_bn")(h))
    h = L.DepthwiseConv2D(3, padding="same", use_bias=False, name=f"b{b}_dw")(h)
    h = L.Activation("swish", name=f"b{b}_dw_act")(
        L.BatchNormalization(name=f"b{b}_dw_bn")(h))
    se = L.GlobalAveragePooling2D(name=f"b{b}_se_squeeze")(h)
    se = L.Reshape((1, 1, 48), name=f"b{b}_se_reshape")(se)
    se = L.Conv2D(4, 1, activation="silu", name=f"b{b}_se_reduce")(se)
    se = L.Conv2D(48, 1, activation="sigmoid", name=f"b{b}_se_expand")(se)
    h = L.Multiply(name=f"b{b}_se_excite")([h, se])
    h = L.BatchNormalization(name=f"b{b}_project_bn")(
        L.Conv2D(16, 1, use_bias=False, name=f"b{b}_project")(h))
    h = L.Dropout(0.2, name=f"b{b}_drop")(h)
    x = L.Add(name=f"b{b}_add")([h, x])
  pooled = L.Dropout(0.3, name="top_drop")(L.GlobalAveragePooling2D(name="gap")(x))
  logits = L.Dense(5, name="head")(pooled)
  model = keras.Model(inp, {"features": x, "logits": logits})
  randomize(model, np.random.default_rng(seed), weight_std=0.3)
  return model


@pytest.fixture(scope="module")
def quantized():
  model = mbconv_model()
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", quantization.QuantizationWarning)
    qmodel = quantization.quantize_model(model, images(24), verbose=0)
  notes = [str(w.message) for w in caught
           if issubclass(w.category, quantization.QuantizationWarning)]
  return model, qmodel, notes


def images(n, seed=1):
  return test_quantization.images(n, seed, (12, 10, 3))


def test_blocks_are_one_int8_region(quantized):
  _, qmodel, notes = quantized
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Quantize") == 1, kinds
  assert kinds.count("Int8ChannelMultiply") == 2, kinds
  assert "Dropout" not in kinds and "Multiply" not in kinds, kinds
  for b in range(2):
    # The residual Add after the Dropout is the project conv's side input.
    assert qmodel.get_layer(f"b{b}_project").use_side_input
  # The head's Dropout is the identity in int8, so the Dense is int8 too.
  assert type(qmodel.get_layer("top_drop")) is quantization.Int8Dropout
  assert isinstance(qmodel.get_layer("head"), tf_fused_int8.QuantizedDense)
  # The squeeze-excite convolutions' own silu / sigmoid are split off and
  # become their lookup tables: nothing stays float but the tiny gate, which
  # the Int8ChannelMultiply reads dequantized; no warning.
  assert not notes, notes
  for b in range(2):
    assert type(qmodel.get_layer(f"b{b}_se_reshape")) is quantization.Int8Reshape  # pylint: disable=unidiomatic-typecheck
    for name in (f"b{b}_se_reduce", f"b{b}_se_expand"):
      layer = qmodel.get_layer(name)
      assert isinstance(layer, tf_fused_int8.QuantizedFusedConv2D), name
      assert layer.output_lut is not None, name
    assert qmodel.get_layer(f"b{b}_se_excite").input[1].dtype == "float32"


def test_every_int8_layer_matches_the_reference(quantized):
  _, qmodel, _ = quantized
  x = images(3, seed=8)
  assert check_layers_against_reference(qmodel, x) >= 8
  muls = [l for l in qmodel.layers
          if isinstance(l, quantization.Int8ChannelMultiply)]
  probe = keras.Model(qmodel.input, [t for l in muls
                                     for t in (l.input[0], l.input[1], l.output)])
  values = [np.asarray(v) for v in probe(x)]
  for i, layer in enumerate(muls):
    xq, gate, out = values[3 * i:3 * i + 3]
    assert xq.dtype == np.int8 and gate.dtype == np.float32
    m = gate.astype(np.float32) * np.float32(layer.ratio)
    np.testing.assert_array_equal(out, channel_scale_reference(xq, m), err_msg=layer.name)
    assert len(np.unique(out)) > 20, layer.name


def test_float_outputs_within_quantization_error(quantized):
  model, qmodel, _ = quantized
  layer_helpers.assert_outputs_close(model, qmodel, images(8, seed=5))


def test_round_trips(quantized, tmp_path):
  _, qmodel, _ = quantized
  layer_helpers.assert_keras_and_saved_model_round_trip(
      qmodel, images(2, seed=4), tmp_path)


def test_gate_multiply_of_a_float_tensor_stays_float():
  """A Multiply whose main input is float (no conv before it) stays float."""
  inp = keras.Input((6, 6, 8), name="image")
  gate = L.Conv2D(8, 1, activation="sigmoid", name="g")(
      L.Reshape((1, 1, 8), name="r")(L.GlobalAveragePooling2D(name="p")(inp)))
  y = L.Conv2D(8, 1, name="c")(L.Multiply(name="m")([inp, gate]))
  model = keras.Model(inp, y)
  randomize(model, np.random.default_rng(2))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", quantization.QuantizationWarning)
    qmodel = quantization.quantize_model(
        model, test_quantization.images(8, 3, (6, 6, 8)), verbose=0)
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert "Int8ChannelMultiply" not in kinds and "Multiply" in kinds, kinds


def test_fused_blocks_are_one_sequence_with_channel_scale_steps(quantized, tmp_path):
  """fuse_conv_sequences runs the squeeze-excite blocks inside one sequence:
  the squeeze (a global average as a conv) read through its Int8Reshape
  pair, the gate's Dequantize and the Int8ChannelMultiply as a channel
  scale step (layers.QuantizedConvSequence, the op's step_kinds 1); the
  same bits as the quantized model, eagerly, in a tf.function, frozen
  (InferenceRunner), at batch 1 to 3 (2: batch slices on two threads), and
  after a .keras / SavedModel round trip."""
  _, qmodel, _ = quantized
  fused = quantization.fuse_conv_sequences(qmodel)
  seqs = [l for l in fused.layers
          if isinstance(l, tf_fused_int8.layers.QuantizedConvSequence)]
  assert len(seqs) == 1, [l.name for l in fused.layers]
  configs = seqs[0].conv_configs
  scales = [c["channel_scale"] for c in configs if "channel_scale" in c]
  assert len(configs) == 1 + 2 * 7 and len(scales) == 2, configs
  for b, step in enumerate(scales):
    excite = qmodel.get_layer(f"b{b}_se_excite")
    deq = excite._inbound_nodes[0].input_tensors[1]._keras_history[0]  # pylint: disable=protected-access
    assert step == {"channels": 48, "gate_scale": deq.scale, "ratio": excite.ratio}
  kinds = [type(l).__name__ for l in fused.layers]
  before = [type(l).__name__ for l in qmodel.layers]
  # The gates' two Dequantizes are gone (the outputs' stay).
  assert "Int8ChannelMultiply" not in kinds, kinds
  assert kinds.count("Dequantize") == before.count("Dequantize") - 2, kinds
  with pytest.raises(ValueError, match="is a channel scale"):
    seqs[0].conv_weights(configs.index({"channel_scale": scales[0]}))
  f = tf.function(lambda t: fused(t, training=False))
  runner = tf_fused_int8.InferenceRunner(fused)
  for n in (1, 2, 3):
    x = images(n, seed=20 + n)
    want = {k: np.asarray(v) for k, v in qmodel(x).items()}
    for how, got in (("eager", fused(x)), ("tf.function", f(tf.constant(x)))):
      for k in want:
        np.testing.assert_array_equal(np.asarray(got[k]), want[k], err_msg=f"{how} {k} n={n}")
    got = runner(x)
    got = got if isinstance(got, dict) else dict(zip(sorted(want), got))
    for k in want:
      np.testing.assert_array_equal(np.asarray(got[k]), want[k], err_msg=f"runner {k} n={n}")
  layer_helpers.assert_keras_and_saved_model_round_trip(fused, images(2, seed=4), tmp_path)


def mobilenetv3_model(shift=3.0, seed=0):
  """image -> stem conv + BN + hard-swish -> one MobileNetV3 block [expand
  1x1 + BN + hard-swish -> depthwise + BN + hard-swish -> SE (GAP keepdims,
  Conv2D + ReLU, Conv2D, hard sigmoid as keras.applications writes it:
  ReLU(6)(x + shift) * (1 / 6), Multiply) -> project 1x1 + BN -> Add(input)]
  -> GAP -> Dense."""
  inp = keras.Input((12, 10, 3), name="image")
  x = L.Conv2D(16, 3, padding="same", use_bias=False, name="stem")(inp)
  x = L.Activation("hard_swish", name="stem_act")(L.BatchNormalization(name="stem_bn")(x))
  h = L.Conv2D(48, 1, use_bias=False, name="expand")(x)
  h = L.Activation("hard_swish", name="expand_act")(L.BatchNormalization(name="expand_bn")(h))
  h = L.DepthwiseConv2D(3, padding="same", use_bias=False, name="dw")(h)
  h = L.Activation("hard_swish", name="dw_act")(L.BatchNormalization(name="dw_bn")(h))
  se = L.GlobalAveragePooling2D(keepdims=True, name="se_pool")(h)
  se = L.ReLU(name="se_relu")(L.Conv2D(8, 1, name="se_conv")(se))
  se = L.Conv2D(48, 1, name="se_conv_1")(se)
  se = L.ReLU(6.0, name="se_relu6")(se + shift) * (1.0 / 6.0)
  h = L.Multiply(name="se_mul")([h, se])
  h = L.BatchNormalization(name="project_bn")(L.Conv2D(16, 1, use_bias=False, name="project")(h))
  x = L.Add(name="residual")([x, h])
  logits = L.Dense(5, name="head")(L.GlobalAveragePooling2D(name="gap")(x))
  model = keras.Model(inp, {"features": x, "logits": logits})
  randomize(model, np.random.default_rng(seed), weight_std=0.3)
  return model


def test_mobilenetv3_hard_sigmoid_gate_is_a_table_and_the_block_one_sequence():
  """keras.applications MobileNetV3's hard sigmoid after the gate conv,
  ReLU(6)(x + 3) * (1 / 6), becomes that conv's output table (Keras's
  hard_sigmoid), so the gate is int8 (as EfficientNet's sigmoid gate) and
  fuse_conv_sequences runs the whole block, its squeeze-excite included, as
  one sequence with a channel scale step: the same bits as the quantized
  model, the float outputs within quantization error."""
  model = mobilenetv3_model()
  qmodel = layer_helpers.quantize_strict(model, images(24), verbose=0)
  gate = qmodel.get_layer("se_conv_1")
  assert isinstance(gate, tf_fused_int8.QuantizedFusedConv2D) and gate.output_lut is not None
  kinds = [type(l).__name__ for l in qmodel.layers]
  assert kinds.count("Int8ChannelMultiply") == 1 and "ReLU" not in kinds, kinds
  layer_helpers.assert_outputs_close(model, qmodel, images(8, seed=5))
  fused = quantization.fuse_conv_sequences(qmodel)
  seqs = [l for l in fused.layers
          if isinstance(l, tf_fused_int8.layers.QuantizedConvSequence)]
  assert len(seqs) == 1 and sum("channel_scale" in c for c in seqs[0].conv_configs) == 1
  for n in (1, 2):
    x = images(n, seed=30 + n)
    want, got = qmodel(x), fused(x)
    for k in ("features", "logits"):
      np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]), err_msg=k)


def test_other_gate_chains_stay_float():
  """ReLU(6)(x + 2) * (1 / 6) is not a hard sigmoid: it stays float (and
  is listed), with the same results as before."""
  model = mobilenetv3_model(shift=2.0)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", quantization.QuantizationWarning)
    qmodel = quantization.quantize_model(model, images(24), verbose=0)
  messages = [str(w.message) for w in caught
              if issubclass(w.category, quantization.QuantizationWarning)]
  assert len(messages) == 1 and "(Add)" in messages[0], messages
  assert qmodel.get_layer("se_conv_1").output_lut is None
  layer_helpers.assert_outputs_close(model, qmodel, images(8, seed=5))
