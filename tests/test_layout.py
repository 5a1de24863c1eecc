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
