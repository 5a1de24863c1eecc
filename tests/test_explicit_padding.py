"""EXPLICIT padding (like tf.nn.conv2d): every CPU kernel path, NHWC and
NCHW_VECT_C, asymmetric pads and pads larger than the filter, bit for bit
against tests/reference.py; the shape function; one test per new error."""

import math

import numpy as np
import pytest
import tensorflow as tf

import op_harness
import reference
import tf_fused_int8 as tfi
from tf_fused_int8 import _loader

# (batch, h, w, ci, kh, kw, co, (sh, sw), (dh, dw), (top, bottom), (left, right),
#  per_channel, side, activation)
CASES = [
    (1, 5, 5, 3, 3, 3, 4, (1, 1), (1, 1), (0, 2), (1, 0), True, False, "Relu"),
    (2, 7, 6, 16, 3, 3, 17, (2, 1), (1, 1), (3, 0), (0, 4), False, True, "None"),
    (1, 4, 4, 5, 1, 1, 8, (1, 1), (1, 1), (0, 3), (2, 0), True, True, "None"),
    (1, 4, 4, 32, 1, 1, 33, (1, 1), (1, 1), (0, 0), (0, 1), True, False, "Relu"),
    (3, 3, 3, 7, 3, 3, 31, (1, 1), (1, 1), (5, 9), (8, 6), True, True, "None"),
    (1, 2, 9, 64, 5, 3, 64, (2, 3), (1, 1), (4, 5), (0, 0), False, False, "None"),
    (2, 6, 5, 13, 3, 2, 67, (1, 2), (2, 3), (1, 0), (7, 2), True, True, "Relu"),
    (1, 1, 1, 4, 7, 7, 16, (1, 1), (1, 1), (3, 3), (6, 0), True, False, "None"),
    (1, 9, 8, 48, 7, 5, 24, (3, 2), (1, 1), (0, 6), (11, 1), False, True, "None"),
    (2, 5, 5, 1, 2, 2, 2, (1, 1), (1, 1), (0, 0), (0, 0), True, False, "None"),
    (1, 3, 3, 8, 3, 3, 32, (1, 1), (1, 1), (40, 3), (2, 37), True, True, "None"),
    (4, 8, 8, 17, 4, 4, 5, (3, 3), (1, 2), (2, 1), (1, 2), True, False, "Relu"),
]


def _out_hw(c):
  (_, h, w, _, kh, kw, _, (sh, sw), (dh, dw), (t, b), (l, r)) = c[:11]
  return ((h + t + b - (kh - 1) * dh - 1) // sh + 1,
          (w + l + r - (kw - 1) * dw - 1) // sw + 1)


def _inputs(c, seed):
  (n, h, w, ci, kh, kw, co) = c[:7]
  per_channel, side = c[11], c[12]
  rng = np.random.default_rng(seed)
  ho, wo = _out_hw(c)
  base = 40.0 / (math.sqrt(kh * kw * ci) * 74.0 * 74.0)
  shape = (co,) if per_channel else ()
  return dict(
      conv_input=rng.integers(-128, 128, (n, h, w, ci), dtype=np.int8),
      filter=rng.integers(-128, 128, (kh, kw, ci, co), dtype=np.int8),
      bias=rng.uniform(-20, 20, co).astype(np.float32),
      conv_input_scale=np.asarray(base * rng.uniform(0.5, 2.0, shape), np.float32),
      side_input=(rng.integers(-128, 128, (n, ho, wo, co), dtype=np.int8)
                  if side else None),
      side_input_scale=np.float32(rng.uniform(-1, 1) if side else 0.0))


def _reference(c, x):
  return reference.fused_conv2d_reference(
      x["conv_input"], x["filter"], x["bias"], side_input=x["side_input"],
      conv_input_scale=x["conv_input_scale"],
      side_input_scale=x["side_input_scale"], strides=c[7],
      padding=[list(c[9]), list(c[10])], activation=c[13], dilations=c[8])


def _run(c, x, form="pairs", use_function=False):
  pads = [[0, 0], list(c[9]), list(c[10]), [0, 0]]
  kw = dict(strides=c[7], dilations=c[8], conv_input_scale=x["conv_input_scale"],
            side_input_scale=x["side_input_scale"], side_input=x["side_input"],
            activation_mode=c[13])
  if form == "pairs":
    kw["padding"] = pads
  else:
    kw["padding"] = "EXPLICIT"
    kw["explicit_paddings"] = [v for p in pads for v in p]
  f = lambda: tfi.fused_conv2d_bias_activation(
      x["conv_input"], x["filter"], x["bias"], **kw)
  if use_function:
    f = tf.function(f)
  return f().numpy()


def test_cases_cover_the_space():
  assert any(c[9][0] != c[9][1] or c[10][0] != c[10][1] for c in CASES)
  assert any(max(c[9] + c[10]) > max(c[4], c[5]) for c in CASES)
  assert any(c[1] < c[4] for c in CASES)  # input smaller than the filter
  assert any(c[4] == c[5] == 1 for c in CASES)  # 1x1 with padding


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_every_path_matches_reference(path):
  with tf.device("/CPU:0"), op_harness.forced_kernel(path):
    for i, c in enumerate(CASES):
      x = _inputs(c, i)
      want = _reference(c, x)
      assert want.shape[1:3] == _out_hw(c)
      op_harness.assert_same_bits(_run(c, x), want, f"{path} case {i}")


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_nchw_vect_c_on_cpu(path):
  with tf.device("/CPU:0"), op_harness.forced_kernel(path):
    for i, c in enumerate(CASES):
      if c[6] % 4:
        continue
      x = _inputs(c, 100 + i)
      want = _reference(c, x)
      side = x["side_input"]
      if side is not None:
        side = tfi.nhwc_to_nchw_vect_c(side)
      y = tfi.fused_conv2d_bias_activation(
          tfi.nhwc_to_nchw_vect_c(x["conv_input"]),
          tfi.hwio_to_oihw_vect_i(x["filter"]), x["bias"], strides=c[7],
          dilations=c[8], padding=[[0, 0], [0, 0], list(c[9]), list(c[10])],
          conv_input_scale=x["conv_input_scale"],
          side_input_scale=x["side_input_scale"], side_input=side,
          activation_mode=c[13], data_format="NCHW_VECT_C")
      op_harness.assert_same_bits(tfi.nchw_vect_c_to_nhwc(y).numpy(), want,
                                  f"{path} NCHW_VECT_C case {i}")


def test_flat_form_tf_function_and_special_cases():
  c = CASES[1]
  x = _inputs(c, 5)
  want = _reference(c, x)
  op_harness.assert_same_bits(_run(c, x, form="flat"), want, "EXPLICIT flat")
  op_harness.assert_same_bits(_run(c, x, use_function=True), want, "tf.function")
  # Explicit zero padding is VALID; SAME's own pads give SAME.
  rng = np.random.default_rng(0)
  xi = rng.integers(-128, 128, (2, 9, 8, 5), dtype=np.int8)
  w = rng.integers(-128, 128, (4, 3, 5, 6), dtype=np.int8)
  b = np.zeros(6, np.float32)
  common = dict(strides=(2, 1), conv_input_scale=1e-3, activation_mode=None)
  valid = tfi.fused_conv2d_bias_activation(xi, w, b, padding="VALID", **common)
  zero = tfi.fused_conv2d_bias_activation(xi, w, b, padding=[[0, 0]] * 4, **common)
  np.testing.assert_array_equal(valid.numpy(), zero.numpy())
  _, (ph, pw) = reference.conv_output_size_and_padding((9, 8), (4, 3), (2, 1), "SAME")
  same = tfi.fused_conv2d_bias_activation(xi, w, b, padding="SAME", **common)
  expl = tfi.fused_conv2d_bias_activation(
      xi, w, b, padding=[[0, 0], list(ph), list(pw), [0, 0]], **common)
  np.testing.assert_array_equal(same.numpy(), expl.numpy())


def _raw(padding, explicit_paddings, x_shape=(1, 5, 5, 4), k=3,
         data_format="NHWC"):
  ops = _loader.load_ops()
  if data_format == "NHWC":
    x = tf.zeros(x_shape, tf.int8)
    w = tf.zeros((k, k, x_shape[3], 4), tf.int8)
    strides = [1, 1, 1, 1]
  else:
    x = tf.zeros(x_shape, tf.int8)
    w = tf.zeros((4, x_shape[1], k, k, 4), tf.int8)
    strides = [1, 1, 1, 1]
  return ops.fused_int8_conv2d_bias_activation(
      conv_input=x, filter=w, bias=tf.zeros([4]), side_input=tf.zeros([0], tf.int8),
      conv_input_scale=tf.constant(1.0), side_input_scale=tf.constant(0.0),
      strides=strides, padding=padding, explicit_paddings=explicit_paddings,
      data_format=data_format,
      filter_format="HWIO" if data_format == "NHWC" else "OIHW_VECT_I")


def test_shape_function():
  @tf.function(input_signature=[tf.TensorSpec([None, 5, None, 4], tf.int8)])
  def f(x):
    ops = _loader.load_ops()
    return ops.fused_int8_conv2d_bias_activation(
        conv_input=x, filter=tf.zeros((3, 2, 4, 8), tf.int8), bias=tf.zeros([8]),
        side_input=tf.zeros([0], tf.int8), conv_input_scale=tf.constant(1.0),
        side_input_scale=tf.constant(0.0), strides=[1, 2, 1, 1],
        padding="EXPLICIT", explicit_paddings=[0, 0, 1, 6, 2, 0, 0, 0])
  out = f.get_concrete_function().structured_outputs
  assert out.shape.as_list() == [None, 5, None, 8]  # (5 + 7 - 3) // 2 + 1

  @tf.function(input_signature=[tf.TensorSpec([2, 1, 7, 9, 4], tf.int8)])
  def g(x):
    ops = _loader.load_ops()
    return ops.fused_int8_conv2d_bias_activation(
        conv_input=x, filter=tf.zeros((8, 1, 3, 3, 4), tf.int8), bias=tf.zeros([8]),
        side_input=tf.zeros([0], tf.int8), conv_input_scale=tf.constant(1.0),
        side_input_scale=tf.constant(0.0), strides=[1, 1, 1, 1],
        padding="EXPLICIT", explicit_paddings=[0, 0, 0, 0, 0, 4, 3, 3],
        data_format="NCHW_VECT_C", filter_format="OIHW_VECT_I")
  out = g.get_concrete_function().structured_outputs
  assert out.shape.as_list() == [2, 2, 9, 13, 4]


BAD = [
    ("wrong length", "EXPLICIT", [0, 0, 1, 1, 1, 1], "8 elements"),
    ("negative", "EXPLICIT", [0, 0, -1, 1, 1, 1, 0, 0], "non-negative"),
    ("batch", "EXPLICIT", [1, 0, 1, 1, 1, 1, 0, 0], "batch and depth"),
    ("depth", "EXPLICIT", [0, 0, 1, 1, 1, 1, 0, 2], "batch and depth"),
    ("without EXPLICIT", "SAME", [0, 0, 1, 1, 1, 1, 0, 0], "unless padding is EXPLICIT"),
    ("empty output", "EXPLICIT", [0, 0, 0, 0, 0, 0, 0, 0], None),
]


@pytest.mark.parametrize("what,padding,pads,needle", BAD, ids=[b[0] for b in BAD])
def test_kernel_validation(what, padding, pads, needle):
  shape = (1, 2, 5, 4) if what == "empty output" else (1, 5, 5, 4)
  with tf.device("/CPU:0"):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=needle or "plus explicit padding"):
      _raw(padding, pads, x_shape=shape)


@pytest.mark.parametrize("what,padding,pads,needle", BAD, ids=[b[0] for b in BAD])
def test_shape_function_validation(what, padding, pads, needle):
  shape = (1, 2, 5, 4) if what == "empty output" else (1, 5, 5, 4)
  f = tf.function(lambda: _raw(padding, pads, x_shape=shape))
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError),
                     match=needle or "[Nn]egative|output"):
    f.get_concrete_function()


def test_nchw_vect_c_validation_uses_its_dimension_order():
  with tf.device("/CPU:0"):
    y = _raw("EXPLICIT", [0, 0, 0, 0, 1, 2, 3, 0], x_shape=(1, 1, 5, 5, 4),
             data_format="NCHW_VECT_C")
    assert y.shape == (1, 1, 6, 6, 4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="batch and depth"):
      _raw("EXPLICIT", [0, 0, 1, 1, 1, 1, 0, 0], x_shape=(1, 1, 5, 5, 4),
           data_format="NCHW_VECT_C")
