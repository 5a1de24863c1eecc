"""The op against the independent numpy reference, bit for bit, on the
generated sweep: every CPU kernel path, int8 and qint8, eager and tf.function."""

import dataclasses
import functools

import numpy as np
import pytest
import tensorflow as tf

import op_harness
from tf_fused_int8 import testing

CASES = testing.sweep_cases(seed=1)
IDS = [c.name() for c in CASES]


def test_sweep_covers_the_space():
  assert {c.kernel_h for c in CASES} == set(range(1, 8))
  assert {c.stride_h for c in CASES} == {1, 2, 3}
  assert {c.padding for c in CASES} == {"SAME", "VALID"}
  assert {c.per_channel_scale for c in CASES} == {True, False}
  assert {c.side_input for c in CASES} == {True, False}
  assert {c.activation for c in CASES} == {"Relu", "None"}
  assert {c.batch for c in CASES} == {1, 2, 3, 4}
  assert any(c.scale_kind == "pow2" for c in CASES)
  assert any(c.height % 2 == 1 for c in CASES)


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_every_path_matches_reference_on_sweep(path):
  op_harness.assert_cases_match_reference(CASES, path)


def test_outputs_are_not_degenerate():
  """The sweep's inputs exercise the whole epilogue, not just the clip."""
  values = []
  for i, case in enumerate(CASES[:20]):
    values.append(op_harness.run_reference(case, testing.make_inputs(case, i)).ravel())
  values = np.concatenate(values)
  assert (values == 127).mean() < 0.2
  assert len(np.unique(values)) > 150


@pytest.mark.parametrize("case", CASES[::3], ids=IDS[::3])
def test_tf_function_and_qint8(case):
  inputs = testing.make_inputs(case, seed=7)
  want = op_harness.run_reference(case, inputs)
  op_harness.assert_same_bits(
      op_harness.run_op(case, inputs, use_function=True), want, "tf.function")
  op_harness.assert_same_bits(
      op_harness.run_op(case, inputs, dtype=tf.qint8), want, "qint8")
  op_harness.assert_same_bits(
      op_harness.run_op(case, inputs, dtype=tf.qint8, use_function=True), want,
      "qint8 tf.function")


def test_dilations_match_reference():
  cases = [c for c in testing.sweep_cases(seed=5, dilations=True)
           if c.dilations != (1, 1)]
  assert len(cases) >= 10
  for path in op_harness.expected_paths():
    for i, case in enumerate(cases):
      inputs = testing.make_inputs(case, seed=i)
      with op_harness.forced_kernel(path):
        got = op_harness.run_op(case, inputs)
      op_harness.assert_same_bits(got, op_harness.run_reference(case, inputs),
                                  f"{path} {case.name()}")


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_large_accumulators_round_to_nearest_even(path):
  """|acc| > 2^24: float32(acc) rounds to nearest even, in every path."""
  # 1x1 conv, depth 1040: all -128 * -128 gives acc = 1040 * 16384 > 2^24.
  case = testing.ConvCase(batch=1, height=3, width=5, in_channels=1040,
                          kernel_h=1, kernel_w=1, out_channels=19,
                          padding="VALID", per_channel_scale=True,
                          activation="None")
  rng = np.random.default_rng(3)
  x = np.full(case.input_shape, -128, np.int8)
  x[0, 0, 0, :7] = rng.integers(-128, 128, 7)  # make some accs odd
  w = np.full(case.filter_shape, -128, np.int8)
  w[:, :, :5, :] = rng.integers(-128, 128, (1, 1, 5, 19))
  inputs = dict(conv_input=x, filter=w, bias=np.zeros(19, np.float32),
                side_input=None,
                conv_input_scale=np.full(19, 2.0 ** -18, np.float32),
                side_input_scale=np.float32(0))
  want = op_harness.run_reference(case, inputs)
  assert np.abs(want).max() > 32
  with op_harness.forced_kernel(path):
    op_harness.assert_same_bits(op_harness.run_op(case, inputs), want, path)


# Few output pixels and a filter over 512 KiB: the GEMV of the AVX-512 VNNI
# path (cc/core/cpu/gemm/gemm_kernels.h), e.g. a Dense head at batch 1 or 2.
GEMV_CASES = [
    testing.ConvCase(batch=1, height=1, width=1, in_channels=1280, kernel_h=1,
                     kernel_w=1, out_channels=1000, activation="None"),
    testing.ConvCase(batch=2, height=1, width=1, in_channels=2048, kernel_h=1,
                     kernel_w=1, out_channels=300, side_input=True),
    testing.ConvCase(batch=1, height=1, width=2, in_channels=64, kernel_h=3,
                     kernel_w=3, out_channels=1000, per_channel_scale=False),
]


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_few_pixel_large_filter_layers_match_reference(path):
  for i, case in enumerate(GEMV_CASES):
    assert case.batch * case.height * case.width <= 2
    assert np.prod(case.filter_shape) > 512 * 1024
    inputs = testing.make_inputs(case, seed=20 + i)
    with op_harness.forced_kernel(path):
      for use_function in (False, True):
        op_harness.assert_same_bits(
            op_harness.run_op(case, inputs, use_function=use_function),
            op_harness.run_reference(case, inputs), f"{path} {case.name()}")


def test_unknown_forced_path_is_a_clear_error():
  case = CASES[0]
  inputs = testing.make_inputs(case)
  with op_harness.forced_kernel("sse9"):
    with pytest.raises(tf.errors.InvalidArgumentError, match="TF_FUSED_INT8_CPU_KERNEL"):
      op_harness.run_op(case, inputs)


@pytest.mark.parametrize("path", op_harness.unavailable_paths())
def test_unavailable_forced_path_is_a_clear_error(path):
  """A known path this build or CPU lacks (on x86-64: neon, dotprod, i8mm;
  on aarch64: the x86 ones) is refused by name, with the best one offered."""
  case = CASES[0]
  inputs = testing.make_inputs(case)
  with op_harness.forced_kernel(path):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"CPU kernel '{path}' is not available on this CPU or in "
                             "this build \\(best available: "):
      op_harness.run_op(case, inputs)


def test_unknown_forced_path_error_lists_every_name():
  case = CASES[0]
  inputs = testing.make_inputs(case)
  with op_harness.forced_kernel("sse9"):
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
      op_harness.run_op(case, inputs)
  names = ("auto", "reference", "portable") + op_harness.X86_ISA_PATHS + op_harness.ARM_ISA_PATHS
  for name in names:
    assert name in str(e.value), (name, str(e.value))


def test_python_number_scales_and_no_side_input_eagerly_and_in_graph():
  """Eager calls reuse the tensors of Python-number scales and of the empty
  side input (ops.py caches them): each value must still be its own, for
  int8 and qint8, eagerly and inside a tf.function."""
  import reference  # pylint: disable=g-import-not-at-top
  import tf_fused_int8  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(5)
  x = rng.integers(-128, 128, (2, 6, 5, 8)).astype(np.int8)
  w = rng.integers(-128, 128, (3, 3, 8, 4)).astype(np.int8)
  side = rng.integers(-128, 128, (2, 6, 5, 4)).astype(np.int8)
  bias = rng.uniform(-5, 5, 4).astype(np.float32)
  calls = [(2.0 ** -9, 0.0, None), (0.003, 0.0, None), (2.0 ** -9, 0.5, side),
           (2.0 ** -9, -0.25, side), (0.003, 0.0, side), (1, 0, None)]
  for dtype in (tf.int8, tf.qint8):
    def op(xx, ww, s, ss, sd, dtype=dtype):
      cast = (lambda a: tf.bitcast(tf.constant(a), tf.qint8)) if dtype == tf.qint8 \
          else tf.constant
      return tf_fused_int8.fused_conv2d_bias_activation(
          cast(xx), cast(ww), bias, padding="SAME", conv_input_scale=s,
          side_input_scale=ss, side_input=None if sd is None else cast(sd),
          activation_mode="None")
    for s, ss, sd in calls * 2:
      want = reference.fused_conv2d_reference(
          x, w, bias, conv_input_scale=np.float32(s), side_input=sd,
          side_input_scale=np.float32(ss), padding="SAME", activation="None")
      got = op(x, w, s, ss, sd)
      assert got.dtype == dtype
      np.testing.assert_array_equal(tf.bitcast(got, tf.int8).numpy()
                                    if dtype == tf.qint8 else got.numpy(), want)
      graph = tf.function(lambda: op(x, w, s, ss, sd))()  # pylint: disable=cell-var-from-loop
      np.testing.assert_array_equal(tf.bitcast(graph, tf.int8).numpy()
                                    if dtype == tf.qint8 else graph.numpy(), want)


def network_3x3_cases():
  """ResNet-50's 3x3 layers (the Winograd-eligible ones) and MobileNetV2's
  3x3 layers (the strided stem and the depthwise layers) at batch 1 and 8,
  with the epilogue variants spread over them."""
  cases = []
  for batch in (1, 8):
    layers = [c for c in testing.resnet50_cases(batch) if c.kernel_h == 3]
    layers.append(testing.ConvCase(batch=batch, height=224, width=224,
                                   in_channels=3, kernel_h=3, kernel_w=3,
                                   out_channels=32, stride_h=2, stride_w=2))
    layers += testing.mobilenet_v2_depthwise_cases(batch)
    for i, c in enumerate(layers):
      cases.append(dataclasses.replace(
          c, side_input=i % 3 == 1, per_channel_scale=i % 4 != 3,
          activation="None" if i % 2 else "Relu"))
  return cases


NETWORK_CASES = network_3x3_cases()


@functools.lru_cache(maxsize=None)
def _network_case(index):
  case = NETWORK_CASES[index]
  inputs = testing.make_inputs(case, seed=100 + index)
  return inputs, op_harness.run_reference(case, inputs)


def test_network_cases_cover_winograd_shapes():
  resnet = {(c.height, c.in_channels) for c in NETWORK_CASES
            if c.kernel_h == 3 and c.stride_h == 1 and c.groups == 1}
  assert resnet == {(56, 64), (28, 128), (14, 256), (7, 512)}
  assert {c.batch for c in NETWORK_CASES} == {1, 8}
  assert any(c.groups > 1 for c in NETWORK_CASES)


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_network_3x3_layers_match_reference(path):
  for i, case in enumerate(NETWORK_CASES):
    inputs, want = _network_case(i)
    with op_harness.forced_kernel(path):
      got = op_harness.run_op(case, inputs)
    op_harness.assert_same_bits(got, want, f"{path} {case.name()}")


def _extreme_inputs(case, pattern):
  """Inputs at the Winograd bounds: 'min' every input and weight -128 (the
  largest accumulators), 'min_max' inputs -128 against weights 127 (the most
  negative), 'alternating' +-extreme checkerboards over space and channels."""
  n, h, w, ci = case.input_shape
  kh, kw, _, co = case.filter_shape
  if pattern == "alternating":
    iy, ix, ic = np.meshgrid(np.arange(h), np.arange(w), np.arange(ci), indexing="ij")
    x = np.where((iy + ix + ic) % 2 == 1, 127, -128).astype(np.int8)
    x = np.broadcast_to(x, case.input_shape).copy()
    ky, kx, fc, fo = np.meshgrid(np.arange(kh), np.arange(kw), np.arange(ci),
                                 np.arange(co), indexing="ij")
    f = np.where((ky + kx + fc + fo) % 2 == 1, 127, -128).astype(np.int8)
  else:
    x = np.full(case.input_shape, -128, np.int8)
    f = np.full(case.filter_shape, -128 if pattern == "min" else 127, np.int8)
  # The largest |acc| maps to about 100.
  scale = (100.0 / (kh * kw * ci * 16384.0) * (1 + 0.37 * np.arange(co)))
  rng = np.random.default_rng(ci)
  return dict(conv_input=x, filter=f,
              bias=(rng.integers(-20, 21, co) / 2.0).astype(np.float32),
              side_input=(rng.integers(-128, 128, case.output_shape, dtype=np.int8)
                          if case.side_input else None),
              conv_input_scale=scale.astype(np.float32),
              side_input_scale=np.float32(-0.75 if case.side_input else 0.0))


# Input depths at the Winograd chunk limit (a chunk of 3640 channels keeps
# 4 * acc below 2^31; 3641 in one chunk would wrap) and past it.
EDGE_CASES = [
    (testing.ConvCase(2, 5, 5, 3640, 3, 3, 17), "min"),
    (testing.ConvCase(1, 5, 4, 3641, 3, 3, 17, side_input=True, activation="None"), "min"),
    (testing.ConvCase(1, 5, 5, 3641, 3, 3, 5, padding="VALID", activation="None"),
     "min_max"),
    (testing.ConvCase(1, 4, 3, 7281, 3, 3, 5, activation="None"), "alternating"),
    (testing.ConvCase(3, 7, 9, 64, 3, 3, 33, side_input=True), "alternating"),
]


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_winograd_bounds_match_reference(path):
  for case, pattern in EDGE_CASES:
    inputs = _extreme_inputs(case, pattern)
    want = op_harness.run_reference(case, inputs)
    assert len(np.unique(want)) > 1
    with op_harness.forced_kernel(path):
      got = op_harness.run_op(case, inputs)
    op_harness.assert_same_bits(got, want, f"{path} {case.name()} {pattern}")
