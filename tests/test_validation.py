"""Every kernel-side validation error, called eagerly on the raw op (no Python
checks, no shape function in the way): a clear InvalidArgument/Unimplemented
naming the argument, never a crash."""

import numpy as np
import pytest
import tensorflow as tf

import tf_fused_int8

OPS = tf_fused_int8.load_ops()
RAW = OPS.fused_int8_conv2d_bias_activation


def good(**over):
  args = dict(
      conv_input=np.ones((2, 6, 6, 3), np.int8),
      filter=np.ones((3, 3, 3, 4), np.int8),
      bias=np.zeros(4, np.float32),
      side_input=np.zeros((0,), np.int8),
      conv_input_scale=np.float32(0.5),
      side_input_scale=np.float32(0),
      strides=[1, 1, 1, 1], padding="SAME")
  args.update(over)
  return args


def test_good_call_works():
  out = RAW(**good()).numpy()
  assert out.shape == (2, 6, 6, 4)
  assert out[0, 2, 2, 0] == 14  # 27 * 0.5 = 13.5 -> 14 (half to even)


ERRORS = [
    ("conv_input rank", dict(conv_input=np.ones((6, 6, 3), np.int8)),
     tf.errors.InvalidArgumentError, "conv_input must be rank 4"),
    ("filter rank", dict(filter=np.ones((3, 3, 3, 4, 1), np.int8)),
     tf.errors.InvalidArgumentError, "filter must be rank 4"),
    ("filter depth", dict(filter=np.ones((3, 3, 5, 4), np.int8)),
     tf.errors.InvalidArgumentError, "filter input depth"),
    ("bias length", dict(bias=np.zeros(3, np.float32)),
     tf.errors.InvalidArgumentError, r"bias must have shape \[4\]"),
    ("bias rank", dict(bias=np.zeros((4, 1), np.float32)),
     tf.errors.InvalidArgumentError, r"bias must have shape \[4\]"),
    ("scale length", dict(conv_input_scale=np.ones(3, np.float32)),
     tf.errors.InvalidArgumentError, "conv_input_scale must be a scalar"),
    ("scale empty", dict(conv_input_scale=np.ones(0, np.float32)),
     tf.errors.InvalidArgumentError, "conv_input_scale must be a scalar"),
    ("scale rank", dict(conv_input_scale=np.ones((4, 1), np.float32)),
     tf.errors.InvalidArgumentError, "conv_input_scale must be a scalar"),
    ("side scale vector", dict(side_input_scale=np.ones(1, np.float32)),
     tf.errors.InvalidArgumentError, "side_input_scale must be a scalar"),
    ("side input shape", dict(side_input=np.ones((2, 6, 6, 3), np.int8)),
     tf.errors.InvalidArgumentError, r"side_input must be empty or have the output shape \[2,6,6,4\]"),
    ("side input flat", dict(side_input=np.ones((288,), np.int8)),
     tf.errors.InvalidArgumentError, "side_input must be empty"),
    ("strides length", dict(strides=[1, 1, 1]),
     tf.errors.InvalidArgumentError, "strides must have 4 elements"),
    ("strides batch", dict(strides=[2, 1, 1, 1]),
     tf.errors.InvalidArgumentError, "strides must be 1 in the batch and depth"),
    ("strides zero", dict(strides=[1, 0, 1, 1]),
     tf.errors.InvalidArgumentError, "strides must be positive"),
    ("dilations depth", dict(dilations=[1, 1, 1, 2]),
     tf.errors.InvalidArgumentError, "dilations must be 1 in the batch and depth"),
    ("dilations negative", dict(dilations=[1, -1, 1, 1]),
     tf.errors.InvalidArgumentError, "dilations must be positive"),
    ("padding", dict(padding="EXPLICIT"),
     tf.errors.InvalidArgumentError, "padding"),
    ("activation", dict(activation_mode="Sigmoid"),
     tf.errors.InvalidArgumentError, "activation_mode"),
    ("VALID too small", dict(conv_input=np.ones((2, 2, 6, 3), np.int8), padding="VALID"),
     tf.errors.InvalidArgumentError, "smaller than the effective filter"),
    ("accumulator overflow", dict(conv_input=np.ones((1, 1, 1, 131072), np.int8),
                                  filter=np.ones((1, 1, 131072, 4), np.int8)),
     tf.errors.InvalidArgumentError, "int32 accumulator"),
    ("zero filter size", dict(filter=np.ones((0, 3, 3, 4), np.int8)),
     tf.errors.InvalidArgumentError, "filter spatial dimensions must be positive"),
    ("OIHW_VECT_I with NHWC", dict(filter_format="OIHW_VECT_I"),
     tf.errors.InvalidArgumentError, "data_format NHWC requires filter_format HWIO"),
    ("HWIO with NCHW_VECT_C", dict(conv_input=np.ones((2, 1, 6, 6, 4), np.int8),
                                   data_format="NCHW_VECT_C"),
     tf.errors.InvalidArgumentError, "requires filter_format OIHW_VECT_I"),
    ("NCHW_VECT_C rank", dict(conv_input=np.ones((2, 6, 6, 4), np.int8),
                              filter=np.ones((4, 1, 3, 3, 4), np.int8),
                              data_format="NCHW_VECT_C", filter_format="OIHW_VECT_I",
                              strides=[1, 1, 1, 1]),
     tf.errors.InvalidArgumentError, r"conv_input must be rank 5 \[batch, depth/4"),
    ("NCHW_VECT_C vector size", dict(conv_input=np.ones((2, 1, 6, 6, 8), np.int8),
                                     filter=np.ones((4, 1, 3, 3, 8), np.int8),
                                     data_format="NCHW_VECT_C", filter_format="OIHW_VECT_I"),
     tf.errors.InvalidArgumentError, "conv_input must be rank 5"),
    ("NCHW_VECT_C output depth", dict(conv_input=np.ones((2, 1, 6, 6, 4), np.int8),
                                      filter=np.ones((6, 1, 3, 3, 4), np.int8),
                                      bias=np.zeros(6, np.float32),
                                      data_format="NCHW_VECT_C", filter_format="OIHW_VECT_I"),
     tf.errors.InvalidArgumentError, "multiple of 4"),
    ("NCHW_VECT_C strides order", dict(conv_input=np.ones((2, 1, 6, 6, 4), np.int8),
                                       filter=np.ones((4, 1, 3, 3, 4), np.int8),
                                       data_format="NCHW_VECT_C", filter_format="OIHW_VECT_I",
                                       strides=[1, 2, 2, 1]),
     tf.errors.InvalidArgumentError, r"\[1, 1, height, width\]"),
]


@pytest.mark.parametrize("what,over,error,match", ERRORS, ids=[e[0] for e in ERRORS])
def test_kernel_rejects(what, over, error, match):
  del what
  with pytest.raises(error, match=match):
    RAW(**good(**over))


def test_dtype_mismatch_is_rejected():
  with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError),
                     match="qint8"):
    RAW(**good(conv_input=tf.ones((2, 6, 6, 3), tf.int8),
               filter=tf.bitcast(tf.ones((3, 3, 3, 4), tf.int8), tf.qint8)))
  with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError),
                     match="int32"):
    RAW(**good(bias=tf.zeros(4, tf.int32)))
  with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError,
                      tf.errors.NotFoundError), match="uint8"):
    RAW(**good(conv_input=np.ones((2, 6, 6, 3), np.uint8),
               filter=np.ones((3, 3, 3, 4), np.uint8),
               side_input=np.zeros((0,), np.uint8)))


@pytest.mark.parametrize("shape", [(0, 6, 6, 3), (2, 0, 6, 3), (2, 6, 0, 3)])
def test_empty_inputs_give_empty_outputs(shape):
  out = RAW(**good(conv_input=np.ones(shape, np.int8))).numpy()
  assert out.size == 0
  assert out.shape == (shape[0], shape[1], shape[2], 4)


def test_empty_channels():
  # Zero input channels: acc = 0 everywhere, the epilogue still applies.
  out = RAW(**good(conv_input=np.ones((1, 3, 3, 0), np.int8),
                   filter=np.ones((3, 3, 0, 4), np.int8),
                   bias=np.full(4, 2.5, np.float32))).numpy()
  assert (out == 2).all()
  out = RAW(**good(filter=np.ones((3, 3, 3, 0), np.int8),
                   bias=np.zeros(0, np.float32))).numpy()
  assert out.shape == (2, 6, 6, 0)


def test_empty_side_input_with_nonzero_scale_means_no_side_input():
  base = RAW(**good()).numpy()
  out = RAW(**good(side_input_scale=np.float32(3.0))).numpy()
  np.testing.assert_array_equal(base, out)


def test_python_api_errors():
  f = tf_fused_int8.fused_conv2d_bias_activation
  x = np.ones((1, 4, 4, 2), np.int8)
  w = np.ones((1, 1, 2, 2), np.int8)
  b = np.zeros(2, np.float32)
  with pytest.raises(ValueError, match="padding"):
    f(x, w, b)
  with pytest.raises(ValueError, match="padding"):
    f(x, w, b, padding="FULL")
  with pytest.raises(ValueError, match="activation_mode"):
    f(x, w, b, padding="SAME", activation_mode="Elu")
  with pytest.raises(ValueError, match="strides"):
    f(x, w, b, strides=[1, 1, 1], padding="SAME")
  with pytest.raises(TypeError, match="int8 or qint8"):
    f(x.astype(np.float32), w, b, padding="SAME")
