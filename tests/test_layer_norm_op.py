"""FusedInt8LayerNorm (tf_fused_int8.layer_norm_int8) and the Keras layer
quantization.Int8LayerNormalization: layer normalization of an int8 tensor
over its last axis, to int8.

Checked bit for bit against a plain numpy model of the documented contract
(int64 sums, the float64 reciprocal square root per row, a float32 multiply
and a correctly rounded fmaf from tests/reference.py, NaN -> 0, clip, round
half to even), over ranks 1-5, channel counts around the vector widths up
to 65536, epsilons, constant rows, extremes and NaN / Inf gamma and beta, on
every CPU path; within one output step of Keras's float LayerNormalization
of the same values; then graphs, the layer (config, save / load), and every
bad input.
"""

import numpy as np
import pytest
import tensorflow as tf
import keras

import tf_fused_int8
from tf_fused_int8 import _loader
from tf_fused_int8 import quantization

import op_harness
from reference import fmaf


def numpy_layer_norm(x, gamma, beta, epsilon):
  """The op in numpy, written from its documentation."""
  q = np.asarray(x, np.int64)
  c = q.shape[-1]
  s1 = q.sum(-1, keepdims=True)
  s2 = (q * q).sum(-1, keepdims=True)
  d = c * s2 - s1 * s1
  assert (d >= 0).all()
  inner = d.astype(np.float64) + np.float64(np.float32(epsilon)) * (float(c) * float(c))
  with np.errstate(divide="ignore"):
    r = (1.0 / np.sqrt(inner)).astype(np.float32)
  r = np.where(d == 0, np.float32(0), r).astype(np.float32)
  t = (c * q - s1).astype(np.float32)
  assert np.array_equal(t.astype(np.int64), c * q - s1)  # exact
  with np.errstate(invalid="ignore", over="ignore"):
    u = (t * r).astype(np.float32)
    y = fmaf(u, np.asarray(gamma, np.float32), np.asarray(beta, np.float32))
  y = np.where(np.isnan(y), np.float32(0), y)
  return np.rint(np.clip(y, -128, 127)).astype(np.int8)


def cases():
  """(shape, kind, epsilon, special) over ranks, widths and values."""
  widths = (1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 96, 100, 192,
            257, 768)
  out = []
  for k, c in enumerate(widths):
    lead = [(), (3,), (2, 5), (1, 3, 4), (2, 1, 2, 3)][k % 5]
    out.append((lead + (c,), ("random", "few", "extreme", "constant")[k % 4],
                (0.0, 1e-6, 0.25, 3.0, 1e6)[k % 5], k % 6 == 5))
  out.append(((2, 65536), "random", 1e-3, False))
  out.append(((4, 4099), "few", 0.5, False))
  return out


def values(shape, kind, seed):
  rng = np.random.default_rng(seed)
  if kind == "few":
    return rng.integers(-1, 2, shape).astype(np.int8)
  if kind == "extreme":
    return np.where(rng.integers(0, 2, shape) == 1, 127, -128).astype(np.int8)
  x = rng.integers(-128, 128, shape).astype(np.int8)
  if kind == "constant":
    x.reshape(-1, shape[-1])[0] = -37  # one constant row: D == 0
  return x


def gamma_beta(c, seed, special):
  rng = np.random.default_rng(seed)
  g = rng.uniform(-40, 40, c).astype(np.float32)
  b = rng.uniform(-80, 80, c).astype(np.float32)
  if special:
    g[::5] = np.nan
    g[2::7] = -np.inf
    b[1::5] = np.inf
    b[3::11] = np.nan
  return g, b


@pytest.mark.parametrize("path", op_harness.expected_paths())
def test_matches_numpy_on_every_path(path):
  with op_harness.forced_kernel(path):
    for k, (shape, kind, eps, special) in enumerate(cases()):
      x = values(shape, kind, seed=k)
      g, b = gamma_beta(shape[-1], k, special)
      got = tf_fused_int8.layer_norm_int8(x, g, b, eps).numpy()
      np.testing.assert_array_equal(got, numpy_layer_norm(x, g, b, eps),
                                    err_msg=f"{path} case {k} {shape} {kind} {eps}")


@pytest.mark.parametrize("path", op_harness.unavailable_paths()[:1])
def test_forced_path_this_cpu_lacks_still_normalizes(path):
  x = values((3, 70), "random", seed=1)
  g, b = gamma_beta(70, 1, False)
  with op_harness.forced_kernel(path):
    got = tf_fused_int8.layer_norm_int8(x, g, b, 1e-3).numpy()
  np.testing.assert_array_equal(got, numpy_layer_norm(x, g, b, 1e-3))


def test_within_one_step_of_keras():
  """Keras's float LayerNormalization of x * s_in, quantized at s_out."""
  rng = np.random.default_rng(3)
  s_in, s_out, eps = 0.05, 0.03, 1e-6
  x = rng.integers(-128, 128, (2, 6, 6, 96)).astype(np.int8)
  ln = keras.layers.LayerNormalization(epsilon=eps)
  ln.build((None, 6, 6, 96))
  ln.gamma.assign(rng.uniform(0.5, 1.5, 96).astype(np.float32))
  ln.beta.assign(rng.uniform(-1, 1, 96).astype(np.float32))
  want = ln(x.astype(np.float32) * s_in).numpy() / s_out
  layer = quantization.Int8LayerNormalization.from_float_weights(
      ln.gamma.numpy(), ln.beta.numpy(), 96, input_scale=s_in,
      output_scale=s_out, epsilon=eps)
  got = layer(x).numpy()
  assert got.dtype == np.int8
  err = np.abs(got - np.clip(want, -128, 127))
  assert err.max() <= 0.5 + 1e-3, err.max()


def test_ties_round_to_even_and_constant_rows():
  # C = 2, (1, -1): t = (2, -2), r = 1/2 (epsilon 0), t r = (1, -1).
  x = np.array([[1, -1], [5, 5]], np.int8)
  got = tf_fused_int8.layer_norm_int8(
      x, np.float32([2.5, 3.5]), np.float32([0.0, 0.0])).numpy()
  np.testing.assert_array_equal(got, [[2, -4], [0, 0]])
  got = tf_fused_int8.layer_norm_int8(
      x, np.float32([1, 1]), np.float32([6.5, -200.0])).numpy()
  np.testing.assert_array_equal(got[1], [6, -128])  # D == 0: round(beta)


def test_graph_with_unknown_sizes_and_static_shape():
  g, b = gamma_beta(24, 2, False)
  f = tf.function(lambda t: tf_fused_int8.layer_norm_int8(t, g, b, 0.5),
                  input_signature=[tf.TensorSpec([None, None, 24], tf.int8)])
  x = values((3, 7, 24), "random", seed=4)
  np.testing.assert_array_equal(f(x).numpy(), numpy_layer_norm(x, g, b, 0.5))
  h = tf.function(lambda t: tf_fused_int8.layer_norm_int8(t, g, b))
  assert h.get_concrete_function(tf.TensorSpec([None, 5, 24], tf.int8)
                                 ).structured_outputs.shape.as_list() == [None, 5, 24]


def test_empty_rows():
  got = tf_fused_int8.layer_norm_int8(np.zeros((0, 3, 8), np.int8),
                                      np.ones(8, np.float32), np.zeros(8, np.float32))
  assert got.shape == (0, 3, 8)


def raw(x, gamma, beta, epsilon=0.0):
  return _loader.load_ops().fused_int8_layer_norm(x=x, gamma=gamma, beta=beta,
                                                  epsilon=epsilon)


@pytest.mark.parametrize("shape, g, b, eps, message", [
    ((), 1, 1, 0.0, r"x must be int8 \[\.\.\., C\] \(rank >= 1\)"),
    ((3, 0), 0, 0, 0.0, r"last dimension C must be in \[1, 65536\]"),
    ((1, 65537), 65537, 65537, 0.0, r"last dimension C must be in \[1, 65536\]"),
    ((2, 8), 7, 8, 0.0, r"gamma must be float32 \[8\]"),
    ((2, 8), 8, 9, 0.0, r"beta must be float32 \[8\]"),
    ((2, 8), 8, 8, -1.0, "epsilon must be finite and >= 0"),
    ((2, 8), 8, 8, float("nan"), "epsilon must be finite and >= 0"),
])
def test_bad_inputs_are_clean_errors(shape, g, b, eps, message):
  """Checked in the kernel (a graph with unknown shapes), not only in Python."""
  f = tf.function(lambda x, gg, bb: raw(x, gg, bb, eps),
                  input_signature=[tf.TensorSpec(None, tf.int8),
                                   tf.TensorSpec(None, tf.float32),
                                   tf.TensorSpec(None, tf.float32)])
  with pytest.raises(tf.errors.InvalidArgumentError, match=message):
    f(tf.zeros(shape, tf.int8), tf.ones([g], tf.float32), tf.zeros([b], tf.float32))


def test_bad_python_arguments():
  with pytest.raises(TypeError, match="x must be int8"):
    tf_fused_int8.layer_norm_int8(np.zeros((2, 4), np.float32), np.ones(4), np.zeros(4))
  with pytest.raises(ValueError, match="epsilon must be finite and >= 0"):
    tf_fused_int8.layer_norm_int8(np.zeros((2, 4), np.int8), np.ones(4), np.zeros(4), -1)
  with pytest.raises((TypeError, tf.errors.InvalidArgumentError), match="float"):
    raw(tf.zeros((2, 4), tf.int8), tf.ones([4], tf.int32), tf.zeros([4]))
  with pytest.raises(ValueError, match="epsilon must be finite"):
    quantization.Int8LayerNormalization(0.1, 0.1, epsilon=-1.0)
  with pytest.raises(ValueError, match="does not fit in float32"):
    quantization.Int8LayerNormalization(1e-30, 0.1, epsilon=1.0)


def test_layer_config_and_saving(tmp_path):
  rng = np.random.default_rng(5)
  g, b = rng.uniform(0.5, 2, 40), rng.uniform(-1, 1, 40)
  layer = quantization.Int8LayerNormalization.from_float_weights(
      g, b, 40, input_scale=0.02, output_scale=0.04, epsilon=1e-5, name="ln")
  s_in, s_out = layer.input_scale, layer.output_scale  # float32 values
  assert (s_in, s_out) == (float(np.float32(0.02)), float(np.float32(0.04)))
  np.testing.assert_array_equal(layer.gamma.numpy(), (g / s_out).astype(np.float32))
  np.testing.assert_array_equal(layer.beta.numpy(), (b / s_out).astype(np.float32))
  assert layer.epsilon_steps == float(np.float32(1e-5 / s_in ** 2))
  x = values((2, 3, 40), "random", seed=6)
  want = numpy_layer_norm(x, layer.gamma.numpy(), layer.beta.numpy(), layer.epsilon_steps)
  np.testing.assert_array_equal(layer(x).numpy(), want)
  inp = keras.Input((3, 40), dtype="int8")
  model = keras.Model(inp, layer(inp))
  model.save(tmp_path / "m.keras")
  again = keras.models.load_model(tmp_path / "m.keras")
  np.testing.assert_array_equal(again(x).numpy(), want)
  np.testing.assert_array_equal(tf.function(again)(tf.constant(x)).numpy(), want)
  no_affine = quantization.Int8LayerNormalization.from_float_weights(
      None, None, 40, input_scale=0.02, output_scale=0.04, epsilon=0.0)
  np.testing.assert_array_equal(no_affine.gamma.numpy(),
                                np.float32(1 / no_affine.output_scale))
  np.testing.assert_array_equal(no_affine.beta.numpy(), 0.0)
