"""output_lut: the op's optional output lookup table (an extension of the
contract: out = output_lut[out + 128] after the clip), on every CPU path
against the numpy reference, and activation_lut against Keras's
activations."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import op_harness
import reference
import tf_fused_int8
from tf_fused_int8 import testing

CASES = testing.sweep_cases(seed=11)


def random_lut(seed):
  return np.random.default_rng(seed).integers(-128, 128, 256).astype(np.int8)


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_every_path_matches_reference_with_a_table(path):
  cases = CASES[::2]
  assert {c.activation for c in cases} == {"Relu", "None"}
  assert any(c.side_input for c in cases)
  for i, case in enumerate(cases):
    inputs = testing.make_inputs(case, seed=100 + i)
    lut = random_lut(i)
    want = op_harness.run_reference(case, inputs, output_lut=lut)
    with op_harness.forced_kernel(path):
      got = op_harness.run_op(case, inputs, output_lut=lut)
    op_harness.assert_same_bits(got, want, f"{path} {case.name()}")


@pytest.mark.parametrize("case", CASES[1::7], ids=[c.name() for c in CASES[1::7]])
def test_tf_function_variables_and_qint8(case):
  inputs = testing.make_inputs(case, seed=3)
  lut = random_lut(5)
  want = op_harness.run_reference(case, inputs, output_lut=lut)
  for kwargs in (dict(use_function=True), dict(variables=True),
                 dict(variables=True, use_function=True),
                 dict(dtype=tf.qint8, use_function=True)):
    op_harness.assert_same_bits(
        op_harness.run_op(case, inputs, output_lut=lut, **kwargs), want,
        f"{case.name()} {kwargs}")


def test_table_of_the_identity_changes_nothing():
  case = CASES[0]
  inputs = testing.make_inputs(case, seed=1)
  identity = np.arange(-128, 128).astype(np.int8)
  op_harness.assert_same_bits(
      op_harness.run_op(case, inputs, output_lut=identity),
      op_harness.run_reference(case, inputs), "identity table")


def test_table_applies_after_the_clip():
  """Relu with output_max: only entries lo..hi of the table can appear, and
  they appear where the untabled output has those values."""
  case = testing.ConvCase(batch=2, height=9, width=7, in_channels=16,
                          kernel_h=3, kernel_w=3, out_channels=24)
  inputs = testing.make_inputs(case, seed=9)
  lut = random_lut(9)
  plain = tf_fused_int8.fused_conv2d_bias_activation(
      inputs["conv_input"], inputs["filter"], inputs["bias"], padding="SAME",
      conv_input_scale=inputs["conv_input_scale"], output_max=50).numpy()
  looked = tf_fused_int8.fused_conv2d_bias_activation(
      inputs["conv_input"], inputs["filter"], inputs["bias"], padding="SAME",
      conv_input_scale=inputs["conv_input_scale"], output_max=50,
      output_lut=lut).numpy()
  assert plain.min() == 0 and plain.max() == 50 and len(np.unique(plain)) > 40
  np.testing.assert_array_equal(looked, lut[plain.astype(np.int64) + 128])


@pytest.mark.parametrize("bad, match", [
    ([0] * 255, "256 entries"),
    (np.zeros((16, 16), np.int8), "256 entries"),
    ([128] + [0] * 255, r"\[-128, 127\]"),
    (np.full(256, 0.5), "integers"),
])
def test_bad_table_is_a_clear_python_error(bad, match):
  case = CASES[0]
  inputs = testing.make_inputs(case)
  with pytest.raises(ValueError, match=match):
    op_harness.run_op(case, inputs, output_lut=bad)


@pytest.mark.parametrize("bad, match", [
    ([1] * 7, "output_lut must be empty or have 256 entries"),
    ([0] * 200 + [-129] * 56, r"output_lut\[200\] = -129"),
])
def test_bad_table_is_refused_by_the_kernel(bad, match):
  """The raw ops validate the attr themselves (eager: the kernel; graph: the
  shape function), for both the tensor and the resource op."""
  ops = tf_fused_int8.load_ops()
  x = tf.zeros([1, 3, 3, 4], tf.int8)
  args = dict(conv_input=x, side_input=tf.zeros([0], tf.int8),
              side_input_scale=0.0, strides=[1, 1, 1, 1], padding="SAME",
              output_lut=bad)
  with pytest.raises(tf.errors.InvalidArgumentError, match=match):
    ops.fused_int8_conv2d_bias_activation(
        filter=tf.zeros([1, 1, 4, 4], tf.int8), bias=tf.zeros([4]),
        conv_input_scale=1.0, **args)
  w = tf.Variable(tf.zeros([1, 1, 4, 4], tf.int8))
  b = tf.Variable(tf.zeros([4]))
  s = tf.Variable(1.0)
  with pytest.raises(tf.errors.InvalidArgumentError, match=match):
    ops.resource_fused_int8_conv2d_bias_activation(
        filter=w.handle, bias=b.handle, conv_input_scale=s.handle, **args)
  with pytest.raises(ValueError, match=match):
    tf.function(lambda: ops.fused_int8_conv2d_bias_activation(
        filter=tf.zeros([1, 1, 4, 4], tf.int8), bias=tf.zeros([4]),
        conv_input_scale=1.0, **args)).get_concrete_function()


# --------------------------------------------------------------- activation_lut

@pytest.mark.parametrize("name", tf_fused_int8.ops.LUT_ACTIVATIONS)
def test_activation_lut_follows_keras(name):
  """The table's functions are Keras's (float32 Keras against our float64
  numpy at the 256 points of a wide scale), and the table is their rounding."""
  x = np.arange(-128, 128, dtype=np.float64) * 0.07
  want = np.asarray(keras.activations.get(name)(
      tf.constant(x, tf.float32)), np.float64)
  got = tf_fused_int8.ops._LUT_FUNCTIONS[name](x)  # pylint: disable=protected-access
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)
  out_scale = max(np.abs(got).max(), 1e-3) / 127
  table = tf_fused_int8.activation_lut(name, 0.07, out_scale)
  assert table.dtype == np.int8 and table.shape == (256,)
  np.testing.assert_array_equal(
      table, np.clip(np.round(got / out_scale), -128, 127).astype(np.int8))


def test_activation_lut_of_a_function_and_its_rounding():
  table = tf_fused_int8.activation_lut(lambda x: x * 2.0, 0.5, 1.0)
  # q * 0.5 * 2 = q exactly: the identity, clipped.
  np.testing.assert_array_equal(table, np.arange(-128, 128).astype(np.int8))
  # Ties round to even: q * 0.25 / 0.5 = q / 2.
  half = tf_fused_int8.activation_lut("linear", 0.25, 0.5)
  np.testing.assert_array_equal(half, np.round(np.arange(-128, 128) / 2))


@pytest.mark.parametrize("args, error, match", [
    (("swish", 0.0, 1.0), ValueError, "input_scale"),
    (("swish", 1.0, float("nan")), ValueError, "output_scale"),
    (("nope", 1.0, 1.0), ValueError, "unknown activation 'nope'"),
    ((3, 1.0, 1.0), TypeError, "a name or a function"),
    ((lambda x: x[:3], 1.0, 1.0), ValueError, "256 finite values"),
])
def test_activation_lut_errors(args, error, match):
  with pytest.raises(error, match=match):
    tf_fused_int8.activation_lut(*args)


# ------------------------------------------------------------------- the layer

def _layer_with_table(lut, **kwargs):
  rng = np.random.default_rng(4)
  kernel = rng.normal(size=(3, 3, 8, 12)).astype(np.float32)
  return tf_fused_int8.QuantizedFusedConv2D.from_float_weights(
      kernel, rng.normal(size=12).astype(np.float32), input_scale=0.05,
      output_scale=0.1, padding="same", output_lut=lut, **kwargs)


def test_layer_with_a_table_matches_the_reference(tmp_path):
  lut = tf_fused_int8.activation_lut("swish", 0.1, 0.06)
  layer = _layer_with_table(lut)
  assert layer.get_config()["output_lut"] == [int(v) for v in lut]
  x = np.random.default_rng(5).integers(-128, 128, (2, 7, 9, 8)).astype(np.int8)
  kernel, bias, scale = [np.asarray(w) for w in layer.get_weights()]
  want = reference.fused_conv2d_reference(
      x, kernel, bias, conv_input_scale=scale, padding="SAME",
      activation="None", output_lut=lut)
  np.testing.assert_array_equal(np.asarray(layer(x)), want)
  np.testing.assert_array_equal(np.asarray(tf.function(layer)(x)), want)
  # Config, .keras and SavedModel round trips keep the table.
  again = tf_fused_int8.QuantizedFusedConv2D.from_config(layer.get_config())
  again.build(x.shape)
  again.set_weights(layer.get_weights())
  np.testing.assert_array_equal(np.asarray(again(x)), want)
  inp = keras.Input((7, 9, 8), dtype="int8")
  model = keras.Model(inp, layer(inp))
  model.save(str(tmp_path / "m.keras"))
  loaded = keras.models.load_model(str(tmp_path / "m.keras"))
  np.testing.assert_array_equal(np.asarray(loaded(x)), want)
  model.export(str(tmp_path / "sm"), verbose=False)
  served = tf.saved_model.load(str(tmp_path / "sm"))
  np.testing.assert_array_equal(served.serve(tf.constant(x)).numpy(), want)


def test_layer_rejects_a_bad_table():
  with pytest.raises(ValueError, match="QuantizedFusedConv2D: output_lut must "
                     "have 256 entries"):
    tf_fused_int8.QuantizedFusedConv2D(4, 1, output_lut=[0] * 3)
  with pytest.raises(ValueError, match=r"\[-128, 127\]"):
    tf_fused_int8.QuantizedDense(4, output_lut=[200] * 256)
