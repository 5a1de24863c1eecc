"""NCHW_VECT_C/OIHW_VECT_I on CPU: a graph exported for the GPU layout runs on
CPU serving machines unchanged, bit for bit equal to the NHWC reference."""

import numpy as np
import pytest
import tensorflow as tf

import op_harness
import tf_fused_int8 as tfi
from tf_fused_int8 import testing

CASES = [c for c in testing.sweep_cases(seed=4, dilations=True)
         if c.out_channels % 4 == 0][:20]


def run_vect(case, x, dtype=tf.int8):
  def cast(a):
    t = tf.constant(a)
    return tf.bitcast(t, tf.qint8) if dtype == tf.qint8 else t

  side = None
  if x["side_input"] is not None:
    side = cast(tfi.nhwc_to_nchw_vect_c(x["side_input"]).numpy())
  y = tfi.fused_conv2d_bias_activation(
      cast(tfi.nhwc_to_nchw_vect_c(x["conv_input"]).numpy()),
      cast(tfi.hwio_to_oihw_vect_i(x["filter"]).numpy()), x["bias"],
      strides=case.strides, padding=case.padding,
      conv_input_scale=x["conv_input_scale"], side_input_scale=x["side_input_scale"],
      side_input=side, activation_mode=case.activation, data_format="NCHW_VECT_C",
      dilations=case.dilations)
  if y.dtype == tf.qint8:
    y = tf.bitcast(y, tf.int8)
  return tfi.nchw_vect_c_to_nhwc(y).numpy()


def test_enough_cases():
  assert len(CASES) >= 8
  assert any(c.in_channels % 4 for c in CASES)  # padded input channels
  assert any(c.side_input for c in CASES)


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_nchw_vect_c_on_cpu_matches_reference(path):
  with tf.device("/CPU:0"), op_harness.forced_kernel(path):
    for i, case in enumerate(CASES):
      x = testing.make_inputs(case, seed=i)
      op_harness.assert_same_bits(run_vect(case, x), op_harness.run_reference(case, x),
                                  f"{path} {case.name()}")


def test_nchw_vect_c_qint8_and_tf_function():
  case = CASES[0]
  x = testing.make_inputs(case, seed=3)
  want = op_harness.run_reference(case, x)
  with tf.device("/CPU:0"):
    op_harness.assert_same_bits(run_vect(case, x, tf.qint8), want, "qint8")

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, case.in_channels], tf.int8)])
    def fn(images):
      y = tfi.fused_conv2d_bias_activation(
          tfi.nhwc_to_nchw_vect_c(images), tfi.hwio_to_oihw_vect_i(x["filter"]), x["bias"],
          strides=case.strides, padding=case.padding,
          conv_input_scale=x["conv_input_scale"], side_input_scale=x["side_input_scale"],
          side_input=(tfi.nhwc_to_nchw_vect_c(x["side_input"])
                      if x["side_input"] is not None else None),
          activation_mode=case.activation, data_format="NCHW_VECT_C",
          dilations=case.dilations)
      return tfi.nchw_vect_c_to_nhwc(y)

    op_harness.assert_same_bits(fn(x["conv_input"]).numpy(), want, "tf.function")
