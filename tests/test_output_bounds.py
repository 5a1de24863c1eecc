"""Bounded activations (output_min/output_max, Relu6): every CPU kernel path,
NHWC and NCHW_VECT_C, combined with EXPLICIT padding, bit for bit against
tests/reference.py; validation; the Keras layer's relu6."""

import numpy as np
import pytest
import tensorflow as tf

import op_harness
import reference
import tf_fused_int8 as tfi
from tf_fused_int8 import layers as tfi_layers
from tf_fused_int8 import testing

BOUNDS = [(-128, 127), (0, 6), (-5, 20), (10, 10), (-128, -3), (-100, 127),
          (3, 90), (-20, 0), (-1, 1), (100, 127)]
CASES = testing.sweep_cases(seed=11, dilations=True)[::2]


def _bounds(i, case):
  lo, hi = BOUNDS[i % len(BOUNDS)]
  if case.activation == "Relu" and hi < 0:
    hi = 0
  return lo, hi


def _want(case, x, lo, hi, padding=None):
  return reference.fused_conv2d_reference(
      x["conv_input"], x["filter"], x["bias"], side_input=x["side_input"],
      conv_input_scale=x["conv_input_scale"],
      side_input_scale=x["side_input_scale"], strides=case.strides,
      padding=padding or case.padding, activation=case.activation,
      dilations=case.dilations, output_min=lo, output_max=hi)


def _got(case, x, lo, hi, **kw):
  return tfi.fused_conv2d_bias_activation(
      x["conv_input"], x["filter"], x["bias"], strides=case.strides,
      padding=kw.pop("padding", case.padding),
      conv_input_scale=x["conv_input_scale"],
      side_input_scale=x["side_input_scale"], side_input=x["side_input"],
      activation_mode=case.activation, dilations=case.dilations,
      output_min=lo, output_max=hi, **kw)


def test_bounds_cover_relu_and_none():
  assert {c.activation for c in CASES} == {"Relu", "None"}
  assert len(CASES) >= 20


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_every_path_matches_reference(path):
  with tf.device("/CPU:0"), op_harness.forced_kernel(path):
    for i, case in enumerate(CASES):
      lo, hi = _bounds(i, case)
      x = testing.make_inputs(case, seed=i)
      want = _want(case, x, lo, hi)
      assert want.min() >= (max(lo, 0) if case.activation == "Relu" else lo)
      assert want.max() <= hi
      op_harness.assert_same_bits(_got(case, x, lo, hi).numpy(), want,
                                  f"{path} {case.name()} [{lo}, {hi}]")


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_bounds_with_explicit_padding_and_nchw_vect_c(path):
  with tf.device("/CPU:0"), op_harness.forced_kernel(path):
    for i, case in enumerate(CASES[:12]):
      lo, hi = _bounds(i + 3, case)
      pads = [[i % 3, 5 - i % 4], [(2 * i) % 7, i % 2]]
      # EXPLICIT geometry: the side input must have the padded output shape.
      x = testing.make_inputs(case, seed=50 + i)
      ho, wo = _explicit_hw(case, pads)
      if x["side_input"] is not None:
        rng = np.random.default_rng(i)
        x["side_input"] = rng.integers(-128, 128, (case.batch, ho, wo, case.out_channels),
                                       dtype=np.int8)
      want = _want(case, x, lo, hi, padding=pads)
      got = _got(case, x, lo, hi, padding=[[0, 0]] + pads + [[0, 0]]).numpy()
      op_harness.assert_same_bits(got, want, f"{path} explicit {case.name()}")
      if case.out_channels % 4:
        continue
      side = x["side_input"]
      y = tfi.fused_conv2d_bias_activation(
          tfi.nhwc_to_nchw_vect_c(x["conv_input"]),
          tfi.hwio_to_oihw_vect_i(x["filter"]), x["bias"], strides=case.strides,
          padding=[[0, 0], [0, 0]] + pads,
          conv_input_scale=x["conv_input_scale"],
          side_input_scale=x["side_input_scale"],
          side_input=None if side is None else tfi.nhwc_to_nchw_vect_c(side),
          activation_mode=case.activation, dilations=case.dilations,
          data_format="NCHW_VECT_C", output_min=lo, output_max=hi)
      op_harness.assert_same_bits(tfi.nchw_vect_c_to_nhwc(y).numpy(), want,
                                  f"{path} NCHW_VECT_C {case.name()}")


def _explicit_hw(case, pads):
  (t, b), (l, r) = pads
  eh = (case.kernel_h - 1) * case.dilation_h + 1
  ew = (case.kernel_w - 1) * case.dilation_w + 1
  return ((case.height + t + b - eh) // case.stride_h + 1,
          (case.width + l + r - ew) // case.stride_w + 1)


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_nan_gives_the_lower_bound(path):
  case = testing.ConvCase(1, 4, 4, 8, 3, 3, 70, activation="None")
  x = testing.make_inputs(case, seed=1)
  x["bias"][::3] = np.nan
  x["bias"][1::3] = np.inf
  x["bias"][2::3] = -np.inf
  with tf.device("/CPU:0"), op_harness.forced_kernel(path):
    for activation, (lo, hi) in (("None", (-7, 9)), ("Relu", (-7, 9)), ("Relu", (5, 9))):
      case = testing.ConvCase(1, 4, 4, 8, 3, 3, 70, activation=activation)
      want = _want(case, x, lo, hi)
      got = _got(case, x, lo, hi).numpy()
      op_harness.assert_same_bits(got, want, f"{path} {activation} NaN")
      expect_lo = max(lo, 0) if activation == "Relu" else lo
      assert (got[..., ::3] == expect_lo).all()
      assert (got[..., 1::3] == hi).all()
      assert (got[..., 2::3] == expect_lo).all()


BAD = [("min below -128", -129, 127, "None"), ("max above 127", -128, 128, "None"),
       ("min above max", 10, 9, "None"), ("Relu with negative max", -128, -1, "Relu")]


@pytest.mark.parametrize("what,lo,hi,act", BAD, ids=[b[0] for b in BAD])
def test_kernel_validation(what, lo, hi, act):
  case = testing.ConvCase(1, 5, 5, 4, 3, 3, 4, activation=act)
  x = testing.make_inputs(case, seed=0)
  with tf.device("/CPU:0"):
    with pytest.raises(tf.errors.InvalidArgumentError, match="output_max|output_min"):
      _got(case, x, lo, hi)


def test_shape_function_validation():
  case = testing.ConvCase(1, 5, 5, 4, 3, 3, 4)
  x = testing.make_inputs(case, seed=0)
  f = tf.function(lambda: _got(case, x, 10, 9))
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError),
                     match="output_min <= output_max"):
    f.get_concrete_function()


def test_keras_relu6_matches_reference():
  rng = np.random.default_rng(3)
  kernel = rng.normal(size=(3, 3, 8, 16)).astype(np.float32) * 0.2
  bias = rng.normal(size=16).astype(np.float32)
  s_in, s_out = 0.05, 6.0 / 127 * 1.7  # round(6 / s_out) = 75
  layer = tfi.QuantizedFusedConv2D.from_float_weights(
      kernel, bias, input_scale=s_in, output_scale=s_out, padding="same",
      activation="relu6")
  assert layer.output_scale == s_out
  assert layer.effective_output_max() == round(6 / s_out) == 75
  x = rng.integers(-128, 128, (2, 9, 9, 8), dtype=np.int8)
  got = layer(tf.constant(x)).numpy()
  q, conv_scale, b = (w for w in layer.get_weights()[:3]) if False else (
      layer.get_weights()[0], layer.get_weights()[2], layer.get_weights()[1])
  want = reference.fused_conv2d_reference(
      x, q, b, conv_input_scale=conv_scale, padding="SAME", activation="Relu",
      output_max=75)
  op_harness.assert_same_bits(got, want, "relu6 layer")
  assert got.max() == 75 and got.min() == 0
  # get_config round trip keeps relu6 and its bound.
  config = layer.get_config()
  assert config["activation"] == "relu6" and config["output_scale"] == s_out
  clone = tfi.QuantizedFusedConv2D.from_config(config)
  clone.build((None, 9, 9, 8))
  clone.set_weights(layer.get_weights())
  op_harness.assert_same_bits(clone(tf.constant(x)).numpy(), want, "clone")


def test_keras_general_bounds_and_errors():
  layer = tfi.QuantizedFusedConv2D(4, 1, output_min=-10, output_max=10,
                                   conv_input_scale_initializer="ones")
  x = np.arange(-64, 64, dtype=np.int8).reshape(1, 4, 8, 4)
  layer.build(x.shape)
  k = np.zeros((1, 1, 4, 4), np.int8)
  for i in range(4):
    k[0, 0, i, i] = 1
  layer.set_weights([k, np.zeros(4, np.float32), np.ones(4, np.float32)])
  y = layer(tf.constant(x)).numpy()
  np.testing.assert_array_equal(y, np.clip(x, -10, 10))
  config = layer.get_config()
  assert (config["output_min"], config["output_max"]) == (-10, 10)
  assert tfi.QuantizedFusedConv2D.from_config(config).output_min == -10
  with pytest.raises(ValueError, match="output_scale"):
    tfi.QuantizedFusedConv2D(4, 3, activation="relu6")
  with pytest.raises(ValueError, match="output_min"):
    tfi.QuantizedFusedConv2D(4, 3, output_min=5, output_max=4)
  assert tfi_layers.relu6_output_max(6 / 127) == 127
  assert tfi_layers.relu6_output_max(0.01) == 127
  assert tfi_layers.relu6_output_max(0.1) == 60
