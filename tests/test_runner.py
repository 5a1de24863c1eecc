"""InferenceRunner: a frozen graph run in the calling thread (runner.py).

Its outputs are the model's own, bit for bit (the same ops, frozen), and
for a single op also the numpy reference's; bad calls are clear errors.
"""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import op_harness
import reference
import test_conv_sequence
import tf_fused_int8
from tf_fused_int8 import quantization

QFC = tf_fused_int8.QuantizedFusedConv2D


def _fused(builder):
  qmodel, x = test_conv_sequence._quantized(builder())  # pylint: disable=protected-access
  return qmodel, quantization.fuse_conv_sequences(qmodel), x


@pytest.mark.parametrize("builder", [test_conv_sequence._mobilenet_like,  # pylint: disable=protected-access
                                     test_conv_sequence._resnet_like])  # pylint: disable=protected-access
def test_runner_gives_the_models_bits_at_every_batch_size(builder):
  qmodel, fused, x = _fused(builder)
  pinned = tf_fused_int8.InferenceRunner(fused, device="/CPU:0")
  assert all(op.device.endswith("CPU:0")
             for op in pinned._graph.get_operations())  # pylint: disable=protected-access
  np.testing.assert_array_equal(pinned(x)["logits"], qmodel(x)["logits"].numpy())
  with tf_fused_int8.InferenceRunner(fused) as run:
    for batch in (1, 3):
      xb = x[:batch]
      got = run(xb)
      want = qmodel(xb)
      assert sorted(got) == sorted(want)
      for k in want:
        assert isinstance(got[k], np.ndarray), type(got[k])
        assert got[k].dtype == want[k].dtype, k
        np.testing.assert_array_equal(got[k], want[k].numpy(), err_msg=k)
      # A tf.Tensor input and a float64 array give the same.
      again = run(tf.constant(xb))
      np.testing.assert_array_equal(again["logits"], got["logits"])
      np.testing.assert_array_equal(run(xb.astype(np.float64))["logits"],
                                    got["logits"])
    # Frozen: the tensor ops, each weight a FusedInt8WeightConstant (whose
    # buffer pins the packed weights), and no variable.
    ops = collections.Counter(n.type for n in run._graph.get_operations())  # pylint: disable=protected-access
    assert ops["FusedInt8ConvSequence"] == 1, ops
    assert ops["ResourceFusedInt8ConvSequence"] == 0, ops
    assert ops["ResourceFusedInt8Conv2DBiasActivation"] == 0, ops
    convs = ops["FusedInt8Conv2DBiasActivation"]
    assert convs >= 1, ops
    assert ops["FusedInt8WeightConstant"] == 2 + 3 * convs, ops
    assert ops["VarHandleOp"] == 0 and ops["ReadVariableOp"] == 0, ops
    # ...so the packed weights are used unchecked (pinned), as in the model.
    if op_harness.uses_packed_weights():
      before = op_harness.pinned_hits()
      run(x)
      assert op_harness.pinned_hits() > before


def test_runner_of_a_single_op_matches_the_numpy_reference():
  rng = np.random.default_rng(3)
  w = rng.integers(-128, 128, (3, 3, 8, 16), dtype=np.int8)
  bias = rng.uniform(-20, 20, 16).astype(np.float32)
  scale = rng.uniform(0.01, 0.05, 16).astype(np.float32)

  def fn(x, side):
    return tf_fused_int8.fused_conv2d_bias_activation(
        x, w, bias, side_input=side, conv_input_scale=scale,
        side_input_scale=0.5, strides=[1, 2, 2, 1], padding="SAME",
        activation_mode="None")
  sig = [tf.TensorSpec([None, 9, 11, 8], tf.int8, name="x"),
         tf.TensorSpec([None, 5, 6, 16], tf.int8, name="side")]
  run = tf_fused_int8.InferenceRunner(fn, input_signature=sig)
  for n in (1, 2):
    x = rng.integers(-128, 128, (n, 9, 11, 8), dtype=np.int8)
    side = rng.integers(-128, 128, (n, 5, 6, 16), dtype=np.int8)
    want = reference.fused_conv2d_reference(
        x, w, bias, side_input=side, conv_input_scale=scale,
        side_input_scale=0.5, strides=(2, 2), padding="SAME",
        activation="None")
    np.testing.assert_array_equal(run(x, side), want)
  assert [s.name for s in run.input_signature] == ["x", "side"]


def test_weights_are_frozen_when_the_runner_is_made():
  qmodel, fused, x = _fused(test_conv_sequence._mobilenet_like)  # pylint: disable=protected-access
  run = tf_fused_int8.InferenceRunner(fused)
  before = run(x)["logits"]
  dense = [l for l in fused.layers
           if isinstance(l, tf_fused_int8.QuantizedDense)][0]
  dense.bias.assign(dense.bias + 50.0)
  np.testing.assert_array_equal(run(x)["logits"], before)
  assert not np.array_equal(fused(x)["logits"].numpy(), before)
  np.testing.assert_array_equal(
      tf_fused_int8.InferenceRunner(fused)(x)["logits"],
      fused(x)["logits"].numpy())
  del qmodel


def test_bad_calls_are_clear_errors():
  inp = keras.Input((6, 6, 4), dtype="int8", name="image")
  model = keras.Model(inp, QFC(8, 3, padding="same")(inp))
  run = tf_fused_int8.InferenceRunner(model)
  x = np.zeros((2, 6, 6, 4), np.int8)
  assert run(x).shape == (2, 6, 6, 8)
  with pytest.raises(ValueError, match=r"expected 1 input\(s\)"):
    run(x, x)
  with pytest.raises(ValueError, match=r"must have shape \[\?, 6, 6, 4\], "
                     r"got \(2, 6, 5, 4\)"):
    run(x[:, :, :5])
  with pytest.raises(TypeError, match="must be int8"):
    run(x.astype(np.float32))
  # A wider integer array: cast when its values fit, refused (not wrapped)
  # when they do not.
  wide = np.arange(2 * 6 * 6 * 4).reshape(2, 6, 6, 4) % 200 - 100
  np.testing.assert_array_equal(run(wide), run(wide.astype(np.int8)))
  with pytest.raises(ValueError, match=r"values in \[-100, 128\], outside "
                     r"\[-128, 127\]"):
    run(np.where(wide == 99, 128, wide))
  with pytest.raises(TypeError, match="built Keras model"):
    tf_fused_int8.InferenceRunner(lambda t: t)
  with pytest.raises(TypeError, match="tf.TensorSpec"):
    tf_fused_int8.InferenceRunner(lambda t: t, input_signature=[(1, 2)])
  run.close()
  with pytest.raises(RuntimeError, match="after close"):
    run(x)


def test_two_input_model_takes_its_inputs_in_order():
  x_in = keras.Input((5, 7, 8), dtype="int8", name="x")
  side_in = keras.Input((5, 7, 16), dtype="int8", name="side")
  conv = QFC(16, 3, padding="same", use_side_input=True)
  model = keras.Model([x_in, side_in], conv(x_in, side_input=side_in))
  rng = np.random.default_rng(4)
  for v in conv.weights:
    if v.dtype == "int8":
      v.assign(rng.integers(-128, 128, v.shape).astype(np.int8))
    elif "scale" in v.name:  # conv_input_scale: outputs inside the range
      v.assign(np.full(v.shape, 0.002, np.float32))
  run = tf_fused_int8.InferenceRunner(model)
  x = rng.integers(-128, 128, (2, 5, 7, 8), dtype=np.int8)
  side = rng.integers(-128, 128, (2, 5, 7, 16), dtype=np.int8)
  got = run(x, side)
  np.testing.assert_array_equal(got, model([x, side]).numpy())
  assert np.mean(np.abs(got) < 127) > 0.2, "outputs mostly saturated"
  assert not np.array_equal(got, run(x, np.zeros_like(side)))


def test_a_saved_models_serving_signature_runs_by_position_and_by_name(
    tmp_path):
  qmodel, fused, x = _fused(test_conv_sequence._resnet_like)  # pylint: disable=protected-access
  path = str(tmp_path / "sm")
  fused.export(path, verbose=False)
  loaded = tf.saved_model.load(path)  # keeps the variables alive
  serve = loaded.signatures["serving_default"]
  run = tf_fused_int8.InferenceRunner(serve)
  (name,) = [s.name for s in run.input_signature]
  assert list(serve.structured_input_signature[1]) == [name]  # its keyword
  want = serve(**{name: tf.constant(x)})
  for got in (run(x), run(**{name: x})):
    assert sorted(got) == sorted(want)
    for k in want:
      np.testing.assert_array_equal(got[k], want[k].numpy(), err_msg=k)
  np.testing.assert_array_equal(
      run(x)[sorted(want)[0]], qmodel(x)[sorted(qmodel(x))[0]].numpy())
  with pytest.raises(ValueError, match="by position or all by name"):
    run(x, **{name: x})
  with pytest.raises(ValueError, match="by position or all by name"):
    run(no_such_input=x)
  with pytest.raises(TypeError, match="has its own signature"):
    tf_fused_int8.InferenceRunner(serve, input_signature=run.input_signature)
