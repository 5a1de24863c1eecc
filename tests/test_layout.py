"""Layout helpers between NHWC/HWIO and NCHW_VECT_C/OIHW_VECT_I."""

import numpy as np
import pytest
import tensorflow as tf

import tf_fused_int8 as tfi


@pytest.mark.parametrize("channels,vect", [(4, 4), (8, 4), (5, 4), (3, 4), (32, 32), (40, 32)])
def test_activation_layout_round_trip(channels, vect):
  rng = np.random.default_rng(channels)
  x = rng.integers(-128, 128, (2, 3, 5, channels), dtype=np.int8)
  v = tfi.nhwc_to_nchw_vect_c(x, vect_size=vect).numpy()
  padded = -(-channels // vect) * vect
  assert v.shape == (2, padded // vect, 3, 5, vect)
  # Element (n, c // v, h, w, c % v) is x[n, h, w, c]; padded channels are 0.
  for c in range(padded):
    want = x[..., c] if c < channels else np.zeros_like(x[..., 0])
    np.testing.assert_array_equal(v[:, c // vect, :, :, c % vect], want)
  back = tfi.nchw_vect_c_to_nhwc(v, channels=channels).numpy()
  np.testing.assert_array_equal(back, x)
  assert tfi.nchw_vect_c_to_nhwc(v).shape == (2, 3, 5, padded)


@pytest.mark.parametrize("in_ch,vect", [(4, 4), (6, 4), (1, 4), (64, 32)])
def test_filter_layout_round_trip(in_ch, vect):
  rng = np.random.default_rng(in_ch)
  w = rng.integers(-128, 128, (3, 2, in_ch, 8), dtype=np.int8)
  v = tfi.hwio_to_oihw_vect_i(w, vect_size=vect).numpy()
  padded = -(-in_ch // vect) * vect
  assert v.shape == (8, padded // vect, 3, 2, vect)
  for i in range(padded):
    want = w[:, :, i, :] if i < in_ch else np.zeros_like(w[:, :, 0, :])
    np.testing.assert_array_equal(np.transpose(v[:, i // vect, :, :, i % vect], (1, 2, 0)), want)
  np.testing.assert_array_equal(tfi.oihw_vect_i_to_hwio(v, in_channels=in_ch).numpy(), w)


def test_layout_helpers_keep_qint8():
  x = tf.bitcast(tf.constant(np.arange(24, dtype=np.int8).reshape(1, 2, 3, 4)), tf.qint8)
  v = tfi.nhwc_to_nchw_vect_c(x)
  assert v.dtype == tf.qint8
  back = tfi.nchw_vect_c_to_nhwc(v)
  np.testing.assert_array_equal(tf.bitcast(back, tf.int8).numpy(),
                                np.arange(24, dtype=np.int8).reshape(1, 2, 3, 4))


def test_layout_helpers_work_in_tf_function_with_unknown_dims():
  @tf.function(input_signature=[tf.TensorSpec([None, None, None, 6], tf.int8)])
  def f(x):
    return tfi.nchw_vect_c_to_nhwc(tfi.nhwc_to_nchw_vect_c(x), channels=6)
  x = np.arange(2 * 3 * 4 * 6, dtype=np.int64).astype(np.int8).reshape(2, 3, 4, 6)
  np.testing.assert_array_equal(f(x).numpy(), x)


def test_layout_helpers_reject_wrong_rank():
  with pytest.raises(ValueError, match="rank-4"):
    tfi.nhwc_to_nchw_vect_c(np.zeros((2, 3, 4), np.int8))
  with pytest.raises(ValueError, match="rank-5"):
    tfi.oihw_vect_i_to_hwio(np.zeros((2, 3, 4, 4), np.int8))


@pytest.mark.parametrize("channels,multiplier", [(4, 1), (12, 2), (32, 1), (8, 3)])
def test_depthwise_filter_runs_depthwise_in_nchw_vect_c(channels, multiplier):
  """NCHW_VECT_C's groups span whole int8x4 words: a depthwise layer is given as
  groups of 4 channels, one channel per lane (depthwise_filter_to_oihw_vect_i), and
  computes the depthwise layer's bits (CPU kernel here; the GPU runs the same
  call on its direct kernel)."""
  import op_harness  # pylint: disable=g-import-not-at-top
  import reference  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(channels * 10 + multiplier)
  out = channels * multiplier
  x = rng.integers(-128, 128, (2, 9, 7, channels), dtype=np.int8)
  w = rng.integers(-128, 128, (3, 3, 1, out), dtype=np.int8)
  side = rng.integers(-128, 128, (2, 5, 4, out), dtype=np.int8)
  bias = rng.uniform(-20, 20, out).astype(np.float32)
  scale = rng.uniform(0.5, 2, out).astype(np.float32) / (74 * 74 * 3)
  want = reference.fused_conv2d_reference(
      x, w, bias, side_input=side, conv_input_scale=scale, side_input_scale=0.5,
      strides=(2, 2), padding="SAME", activation="None")
  wv = tfi.depthwise_filter_to_oihw_vect_i(w, channel_multiplier=multiplier)
  assert wv.shape == (out, 1, 3, 3, 4)
  # Output channel o's weights sit in lane (o // multiplier) % 4, the other lanes are 0.
  lanes = (np.arange(out) // multiplier) % 4
  np.testing.assert_array_equal(wv.numpy()[np.arange(out), 0, :, :, lanes],
                                np.transpose(w[:, :, 0, :], (2, 0, 1)))
  assert np.count_nonzero(wv.numpy()) == np.count_nonzero(w)
  with tf.device("/CPU:0"):
    got = tfi.fused_conv2d_bias_activation(
        tfi.nhwc_to_nchw_vect_c(x), wv, bias, strides=2, padding="SAME",
        conv_input_scale=scale, side_input=tfi.nhwc_to_nchw_vect_c(side),
        side_input_scale=0.5, activation_mode="None", data_format="NCHW_VECT_C")
  op_harness.assert_same_bits(tfi.nchw_vect_c_to_nhwc(got).numpy(), want,
                              f"depthwise {channels} x{multiplier}")


def test_depthwise_filter_helper_rejects_bad_shapes():
  with pytest.raises(ValueError, match="HWIO depthwise filter"):
    tfi.depthwise_filter_to_oihw_vect_i(np.zeros((3, 3, 2, 8), np.int8))
  with pytest.raises(ValueError, match="multiple of 4"):
    tfi.depthwise_filter_to_oihw_vect_i(np.zeros((3, 3, 1, 12), np.int8), channel_multiplier=2)
  with pytest.raises(ValueError, match="channel_multiplier"):
    tfi.depthwise_filter_to_oihw_vect_i(np.zeros((3, 3, 1, 8), np.int8), channel_multiplier=0)
  qw = tf.bitcast(tf.constant(np.ones((1, 1, 1, 4), np.int8)), tf.qint8)
  assert tfi.depthwise_filter_to_oihw_vect_i(qw).dtype == tf.qint8
