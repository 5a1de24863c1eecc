"""Grouped and depthwise convolution (groups = input depth / filter input
depth, as tf.nn.conv2d) against the independent numpy reference, bit for bit,
on every CPU kernel path; the reference itself against TF's float depthwise
convolution; shape function and kernel errors."""

import numpy as np
import pytest
import tensorflow as tf

import op_harness
import reference
import tf_fused_int8 as tfi
from tf_fused_int8 import testing

CASES = testing.grouped_sweep_cases(seed=2)
IDS = [c.name() for c in CASES]


def test_sweep_covers_the_space():
  depthwise = [c for c in CASES if c.groups == c.in_channels]
  grouped = [c for c in CASES if 1 < c.groups < c.in_channels]
  assert len(depthwise) >= 30 and len(grouped) >= 10
  assert {c.kernel_h for c in depthwise} >= {1, 2, 3, 5, 7}
  assert {c.stride_h for c in depthwise} == {1, 2, 3}
  assert any(c.out_channels > c.in_channels for c in depthwise)  # multiplier
  assert any(c.in_channels % 16 and c.in_channels > 16 for c in depthwise)
  assert any(c.dilations != (1, 1) for c in depthwise)
  assert {c.side_input for c in CASES} == {True, False}
  assert {c.per_channel_scale for c in CASES} == {True, False}
  assert {c.activation for c in CASES} == {"Relu", "None"}
  # The 4-pixel interior blocks of the vector depthwise kernels run.
  assert any(c.width >= 4 * c.stride_w + 2 * c.kernel_w for c in depthwise)


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_every_path_matches_reference(path):
  op_harness.assert_cases_match_reference(CASES, path)


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_mobilenet_v2_depthwise_layers(path):
  """The benchmark's layers (batch 1; the largest two cropped to 40x40)."""
  cases = [c if c.height <= 56 else
           testing.ConvCase(**{**c.__dict__, "height": 40, "width": 40})
           for c in testing.mobilenet_v2_depthwise_cases(batch=1)]
  op_harness.assert_cases_match_reference(cases, path, seed=100)


@pytest.mark.parametrize("case", CASES[::5], ids=IDS[::5])
def test_tf_function_and_qint8(case):
  inputs = testing.make_inputs(case, seed=11)
  want = op_harness.run_reference(case, inputs)
  op_harness.assert_same_bits(
      op_harness.run_op(case, inputs, use_function=True), want, "tf.function")
  op_harness.assert_same_bits(
      op_harness.run_op(case, inputs, dtype=tf.qint8), want, "qint8")


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_depthwise_explicit_padding_and_bounds(path):
  """Asymmetric pads (some larger than the window) and a Relu6-like range."""
  rng = np.random.default_rng(5)
  for i, (pads, lo, hi) in enumerate([
      ([[0, 0], [0, 4], [3, 1], [0, 0]], -128, 127),
      ([[0, 0], [5, 0], [0, 6], [0, 0]], 0, 6),
      ([[0, 0], [1, 1], [2, 2], [0, 0]], -20, 90)]):
    x = rng.integers(-128, 128, (2, 9, 11, 40), dtype=np.int8)
    w = rng.integers(-128, 128, (3, 3, 1, 40), dtype=np.int8)
    bias = rng.uniform(-20, 20, 40).astype(np.float32)
    scale = rng.uniform(0.5, 2, 40).astype(np.float32) * 40 / (3 * 74 * 74)
    want = reference.fused_conv2d_reference(
        x, w, bias, conv_input_scale=scale, padding=pads, activation="None",
        output_min=lo, output_max=hi)
    with op_harness.forced_kernel(path):
      got = tfi.fused_conv2d_bias_activation(
          x, w, bias, padding=pads, conv_input_scale=scale,
          activation_mode="None", output_min=lo, output_max=hi).numpy()
    op_harness.assert_same_bits(got, want, f"{path} pads {i}")


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_grouped_nchw_vect_c_on_cpu(path):
  """NCHW_VECT_C: groups count the (multiple-of-4) channel groups."""
  rng = np.random.default_rng(6)
  for groups, gin, gout in ((2, 4, 8), (4, 8, 4), (3, 12, 4)):
    x = rng.integers(-128, 128, (2, 7, 6, groups * gin), dtype=np.int8)
    w = rng.integers(-128, 128, (3, 3, gin, groups * gout), dtype=np.int8)
    side = rng.integers(-128, 128, (2, 7, 6, groups * gout), dtype=np.int8)
    bias = rng.uniform(-20, 20, groups * gout).astype(np.float32)
    scale = np.float32(40 / (np.sqrt(9 * gin) * 74 * 74))
    want = reference.fused_conv2d_reference(
        x, w, bias, side_input=side, conv_input_scale=scale,
        side_input_scale=0.5, activation="Relu")
    with tf.device("/CPU:0"), op_harness.forced_kernel(path):
      got = tfi.fused_conv2d_bias_activation(
          tfi.nhwc_to_nchw_vect_c(x), tfi.hwio_to_oihw_vect_i(w), bias,
          padding="SAME", conv_input_scale=scale, side_input_scale=0.5,
          side_input=tfi.nhwc_to_nchw_vect_c(side), data_format="NCHW_VECT_C")
    op_harness.assert_same_bits(tfi.nchw_vect_c_to_nhwc(got).numpy(), want,
                                f"{path} groups {groups}")


def test_grouped_filter_changed_in_place_is_not_stale():
  """The packed-weight cache keys each group's copy by the original filter:
  assigning new values to the same variable must change every group."""
  rng = np.random.default_rng(8)
  x = rng.integers(-128, 128, (4, 16, 16, 32), dtype=np.int8)  # several M tiles
  w = tf.Variable(rng.integers(-128, 128, (3, 3, 8, 32), dtype=np.int8))
  bias = np.zeros(32, np.float32)
  scale = np.float32(1 / 4096)
  for path in op_harness.kernel_paths():
    with op_harness.forced_kernel(path):
      for step in range(4):
        if step:
          new = w.numpy()
          new[1, 2, step % 8, (7 * step) % 32] ^= 0x55  # one group's byte
          w.assign(new)
        got = tfi.fused_conv2d_bias_activation(
            x, w, bias, padding="SAME", conv_input_scale=scale,
            activation_mode="None").numpy()
        want = reference.fused_conv2d_reference(
            x, w.numpy(), bias, conv_input_scale=scale, activation="None")
        op_harness.assert_same_bits(got, want, f"{path} step {step}")


def test_reference_depthwise_equals_tf_depthwise_conv2d():
  """The numpy reference's grouped form against TF's float depthwise conv
  (exact here: every partial sum is an integer below 2^24)."""
  rng = np.random.default_rng(9)
  for mult, stride, padding, dil in ((1, 1, "SAME", 1), (2, 2, "VALID", 1),
                                     (3, 1, "SAME", 2)):
    x = rng.integers(-128, 128, (2, 11, 10, 6), dtype=np.int8)
    wd = rng.integers(-128, 128, (3, 3, 6, mult), dtype=np.int8)
    tf_out = tf.nn.depthwise_conv2d(
        x.astype(np.float32), wd.astype(np.float32), [1, stride, stride, 1],
        padding, dilations=[dil, dil] if stride == 1 else None).numpy()
    acc = reference.conv2d_int32(
        x, wd.reshape(3, 3, 1, 6 * mult), strides=(stride, stride),
        padding=padding, dilations=(dil, dil) if stride == 1 else (1, 1))
    np.testing.assert_array_equal(acc, tf_out.astype(np.int64))


def test_reference_grouped_equals_concatenated_convolutions():
  rng = np.random.default_rng(10)
  x = rng.integers(-128, 128, (2, 8, 9, 12), dtype=np.int8)
  w = rng.integers(-128, 128, (3, 2, 4, 6), dtype=np.int8)  # 3 groups
  acc = reference.conv2d_int32(x, w, strides=(2, 1), padding="SAME")
  parts = [reference.conv2d_int32(x[..., 4 * g:4 * g + 4], w[..., 2 * g:2 * g + 2],
                                  strides=(2, 1), padding="SAME")
           for g in range(3)]
  np.testing.assert_array_equal(acc, np.concatenate(parts, axis=-1))


def test_depthwise_vs_tf_float_depthwise_through_the_op():
  """Whole op, scale 1 / bias 0 / small values: equals TF's float
  depthwise conv rounded and clipped."""
  rng = np.random.default_rng(12)
  x = rng.integers(-6, 7, (1, 14, 14, 32), dtype=np.int8)
  wd = rng.integers(-2, 3, (3, 3, 32, 1), dtype=np.int8)
  want = tf.nn.depthwise_conv2d(x.astype(np.float32), wd.astype(np.float32),
                                [1, 1, 1, 1], "SAME").numpy()
  want = np.clip(np.rint(want), -128, 127).astype(np.int8)
  got = tfi.fused_conv2d_bias_activation(
      x, wd.reshape(3, 3, 1, 32), np.zeros(32, np.float32), padding="SAME",
      activation_mode="None").numpy()
  op_harness.assert_same_bits(got, want, "depthwise vs tf.nn.depthwise_conv2d")


def _call(x_shape, w_shape, co=None):
  co = w_shape[3] if co is None else co
  return tfi.fused_conv2d_bias_activation(
      np.zeros(x_shape, np.int8), np.zeros(w_shape, np.int8),
      np.zeros(co, np.float32), padding="SAME")


@pytest.mark.parametrize("x_shape,w_shape,match", [
    ((1, 5, 5, 6), (3, 3, 4, 6), r"conv_input depth 6 .* must be a multiple of the filter input depth 4"),
    # Both depths named with their tensors' shapes (built only on this path).
    ((1, 5, 5, 6), (3, 3, 4, 6),
     r"conv_input depth 6 \(dimension 3 of conv_input \[1,5,5,6\]\) must be a "
     r"multiple of the filter input depth 4 \(dimension 2 of filter \[3,3,4,6\]\)"),
    ((1, 5, 5, 6), (3, 3, 3, 7), r"filter output depth \(7\) must be a multiple of groups \(2"),
    ((1, 5, 5, 0), (3, 3, 2, 4), r"conv_input depth 0 .* must be a multiple"),
    ((1, 5, 5, 4), (3, 3, 0, 4), r"filter input depth 0 .* is 0 but conv_input depth"),
])
def test_kernel_rejects_inconsistent_groups(x_shape, w_shape, match):
  with pytest.raises(tf.errors.InvalidArgumentError, match=match):
    _call(x_shape, w_shape)


def _infer(x_shape, w_shape):
  specs = [tf.TensorSpec(x_shape, tf.int8), tf.TensorSpec(w_shape, tf.int8),
           tf.TensorSpec([w_shape[3]], tf.float32)]

  @tf.function(input_signature=specs)
  def f(x, w, b):
    return tfi.fused_conv2d_bias_activation(x, w, b, padding="SAME", strides=2)

  return f.get_concrete_function().structured_outputs.shape.as_list()


def test_shape_function_grouped():
  assert _infer((2, 9, 9, 12), (3, 3, 4, 6)) == [2, 5, 5, 6]
  assert _infer((None, None, 9, 32), (3, 3, 1, 64)) == [None, None, 5, 64]
  assert _infer((2, 9, 9, None), (3, 3, 4, 6)) == [2, 5, 5, 6]


@pytest.mark.parametrize("x_shape,w_shape,match", [
    ((2, 9, 9, 12), (3, 3, 5, 6), "must be a multiple of the filter input depth"),
    ((2, 9, 9, 12), (3, 3, 4, 7), r"must be a multiple of groups \(3"),
    ((2, 9, 9, 0), (3, 3, 4, 8), "must be a multiple of the filter input depth"),
])
def test_shape_function_rejects_inconsistent_groups(x_shape, w_shape, match):
  with pytest.raises(ValueError, match=match):
    _infer(x_shape, w_shape)
