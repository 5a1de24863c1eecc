"""Our op equals TensorFlow's own int8 _FusedConv2D CPU kernel, bit for bit,
wherever TF's float32 accumulation is exact (every partial sum within 2^24:
guaranteed when Kh*Kw*Ci*128*128 <= 2^24, i.e. depth <= 1024)."""

import numpy as np
import pytest
import tensorflow as tf

import op_harness
import tf_builtin
from tf_fused_int8 import testing

pytestmark = pytest.mark.skipif(not tf_builtin.is_available(),
                                reason="TF has no int8 _FusedConv2D CPU kernel")

CASES = [c for c in testing.sweep_cases(seed=1)
         if c.kernel_h * c.kernel_w * c.in_channels <= 1024]


def tf_kernel(case, inputs, dtype="int8"):
  return tf_builtin.tf_fused_conv2d_int8(
      inputs["conv_input"], inputs["filter"], inputs["bias"],
      side_input=inputs["side_input"],
      conv_input_scale=inputs["conv_input_scale"],
      side_input_scale=inputs["side_input_scale"], strides=case.strides,
      padding=case.padding, activation=case.activation, dtype=dtype)


def test_enough_cases():
  assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c.name() for c in CASES])
def test_equals_tf_kernel(case):
  inputs = testing.make_inputs(case, seed=11)
  ours = op_harness.run_op(case, inputs)
  theirs = tf_kernel(case, inputs)
  op_harness.assert_same_bits(ours, theirs, "ours vs TF _FusedConv2D")
  # And both equal the independent reference.
  op_harness.assert_same_bits(ours, op_harness.run_reference(case, inputs), "reference")


def test_equals_tf_kernel_qint8():
  case = CASES[3]
  inputs = testing.make_inputs(case, seed=12)
  op_harness.assert_same_bits(op_harness.run_op(case, inputs, dtype=tf.qint8),
                              tf_kernel(case, inputs, dtype="qint8"), "qint8")


def test_equals_tf_kernel_on_deep_reduction_with_small_values():
  """Depth 4608 (3x3x512) with |x|,|w| <= 7: partial sums stay below 2^24."""
  case = testing.ConvCase(batch=1, height=7, width=7, in_channels=512,
                          kernel_h=3, kernel_w=3, out_channels=64,
                          side_input=True, activation="None")
  rng = np.random.default_rng(5)
  inputs = testing.make_inputs(case, seed=5)
  inputs["conv_input"] = rng.integers(-7, 8, case.input_shape).astype(np.int8)
  inputs["filter"] = rng.integers(-7, 8, case.filter_shape).astype(np.int8)
  inputs["conv_input_scale"] = rng.uniform(0.005, 0.05, 64).astype(np.float32)
  ours = op_harness.run_op(case, inputs)
  op_harness.assert_same_bits(ours, tf_kernel(case, inputs), "deep")
  assert len(np.unique(ours)) > 50
