"""QuantizedModel: the model quantize_model / fuse_conv_sequences return.

Called eagerly with one input tensor of a shape it has seen before, it runs a
concrete function of itself traced for that shape. Its results must be the
bits of Keras's own eager path (Functional.__call__) for every input, and
every call outside the documented conditions must take Keras's path.
"""

import gc
import os
import re
import threading
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf

import test_conv_sequence
import test_quantization
import tf_fused_int8
from keras.src.models.functional import Functional  # pylint: disable=g-direct-keras-import
from tf_fused_int8 import quantization
from tf_fused_int8 import quantized_model

QM = tf_fused_int8.QuantizedModel
L = keras.layers


def _keras_path(model, x, **kwargs):
  return Functional.__call__(model, x, **kwargs)


def _assert_same(got, want):
  got, want = keras.tree.flatten(got), keras.tree.flatten(want)
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.dtype == w.dtype and g.shape == w.shape
    np.testing.assert_array_equal(g.numpy(), w.numpy())


def _traced(model):
  calls = model.__dict__.get("_tfi_compiled_calls")
  return {} if calls is None else calls.functions


def _key(x, device=""):
  return (tuple(x.shape), tf.float32, device)


_MODELS = {
    "mobilenet_like": lambda: test_conv_sequence._quantized(  # pylint: disable=protected-access
        test_conv_sequence._mobilenet_like())[0],  # pylint: disable=protected-access
    "resnet_like": lambda: test_conv_sequence._quantized(  # pylint: disable=protected-access
        test_conv_sequence._resnet_like())[0],  # pylint: disable=protected-access
}


@pytest.mark.parametrize("fused", [False, True], ids=["quantized", "fused"])
@pytest.mark.parametrize("name", sorted(_MODELS))
def test_eager_calls_give_keras_bits_and_trace_on_a_shapes_second_call(
    name, fused, keras_calls):
  model = _MODELS[name]()
  if fused:
    model = quantization.fuse_conv_sequences(model)
  assert type(model) is QM  # pylint: disable=unidiomatic-typecheck
  shape = model.inputs[0].shape[1:]
  for batch in (1, 3):
    x = test_quantization.images(batch, seed=20 + batch, shape=shape)
    want = _keras_path(model, tf.constant(x))
    keras_calls.clear()
    _assert_same(model(tf.constant(x)), want)  # first call of the shape
    assert keras_calls and keras_calls[0] == "QuantizedModel"
    assert _key(x) not in _traced(model)
    _assert_same(model(tf.constant(x)), want)  # the second: traced
    assert _key(x) in _traced(model)
    # From then on the traced function, whatever the input's values, and
    # with numpy arrays and training=None / False too.
    for i, call in enumerate([
        lambda t: model(t), lambda t: model(t.numpy()),
        lambda t: model(t, training=False), lambda t: model(t, training=None)]):
      x = test_quantization.images(batch, seed=40 + i, shape=shape)
      want = _keras_path(model, tf.constant(x))
      keras_calls.clear()
      _assert_same(call(tf.constant(x)), want)
      assert keras_calls == [], (i, keras_calls)
  assert len(_traced(model)) == 2
  # Extreme inputs (every value far outside the calibrated range).
  for v in (-1e6, 1e6, 0.0):
    x = tf.fill([3] + list(shape), v)
    _assert_same(model(x), _keras_path(model, x))


def _traced_resnet_like(seed):
  """The ResNet-like quantized model, a batch x of 2, Keras's outputs on x,
  after the two calls that trace x's shape."""
  model = _MODELS["resnet_like"]()
  shape = model.inputs[0].shape[1:]
  x = tf.constant(test_quantization.images(2, seed=seed, shape=shape))
  want = _keras_path(model, x)
  model(x)
  model(x)
  assert _key(x) in _traced(model)
  return model, x, want


def test_both_ways_of_calling_the_traced_function(monkeypatch, keras_calls):
  """TensorFlow 2.21's ConcreteFunction has _call_flat(tensor_inputs,
  captured_inputs), which the fast path calls; without it, the plain call:
  the same bits either way."""
  model, x, want = _traced_resnet_like(seed=12)
  assert quantized_model._FLAT_CALL == [True]  # pylint: disable=protected-access
  for flat in (True, False):
    monkeypatch.setattr(quantized_model, "_FLAT_CALL", [flat])
    keras_calls.clear()
    _assert_same(model(x), want)
    assert keras_calls == []
  fn = next(iter(_traced(model).values()))
  assert quantized_model._flat_call_supported(fn)  # pylint: disable=protected-access
  assert not quantized_model._flat_call_supported(lambda x: x)  # pylint: disable=protected-access


def test_other_calls_take_keras_path(keras_calls):
  model = quantization.fuse_conv_sequences(_MODELS["mobilenet_like"]())
  shape = model.inputs[0].shape[1:]
  x = tf.constant(test_quantization.images(2, seed=3, shape=shape))
  model(x)
  model(x)
  assert len(_traced(model)) == 1

  def keras_path_taken(call):
    keras_calls.clear()
    out = call()
    assert keras_calls and keras_calls[0] == "QuantizedModel", keras_calls
    return out

  want = _keras_path(model, x)
  # training=True, a mask, an input of another dtype (Keras converts it).
  _assert_same(keras_path_taken(lambda: model(x, training=True)), want)
  _assert_same(keras_path_taken(lambda: model(x, mask=None)), want)
  _assert_same(keras_path_taken(lambda: model(tf.cast(x, tf.float64))), want)
  _assert_same(keras_path_taken(lambda: model(x.numpy().astype(np.float64))), want)
  # run_eagerly (Keras's switch for debugging), then off again.
  model.run_eagerly = True
  _assert_same(keras_path_taken(lambda: model(x)), want)
  model.run_eagerly = False
  keras_calls.clear()
  _assert_same(model(x), want)
  assert keras_calls == []
  # A tensor with a Keras mask.
  masked = tf.identity(x)
  masked._keras_mask = tf.ones(x.shape[:3], tf.bool)  # pylint: disable=protected-access
  keras_path_taken(lambda: model(masked))
  # A wrong shape: Keras's own error, on every call (nothing traced).
  bad = tf.zeros([2, shape[0] + 1, shape[1], shape[2]])
  for _ in range(3):
    keras_calls.clear()
    with pytest.raises(ValueError):
      model(bad)
    assert keras_calls and keras_calls[0] == "QuantizedModel"
  assert len(_traced(model)) == 1
  # In a graph: Keras's path, traced into the caller's function.
  keras_calls.clear()
  _assert_same(tf.function(model)(x), want)
  assert "QuantizedModel" in keras_calls
  # Symbolic: the model as a layer of a larger model (which is Keras's
  # Functional and calls it eagerly through Keras's path).
  inp = keras.Input(shape)
  outer = keras.Model(inp, model(inp)["logits"])
  np.testing.assert_array_equal(outer(x).numpy(), want["logits"].numpy())


def test_an_input_the_model_rejects_is_traced_at_most_once(keras_calls):
  """Input sizes free (None): an image too small for the 5x5 VALID filter
  passes the fast path's shape check, and every call gives Keras's own
  error; its key is tried once and never traced again."""
  inp = keras.Input((None, None, 3))
  model = keras.Model(inp, L.Conv2D(4, 5)(L.Conv2D(4, 3, padding="same")(inp)))
  test_quantization.randomize(model, np.random.default_rng(2))
  qmodel = quantization.quantize_model(
      model, test_quantization.images(8, seed=1, shape=(9, 9, 3)), verbose=0)
  assert type(qmodel) is QM  # pylint: disable=unidiomatic-typecheck
  small = tf.constant(test_quantization.images(1, seed=2, shape=(3, 3, 3)))
  with pytest.raises(ValueError) as first:
    _keras_path(qmodel, small)
  for _ in range(3):
    keras_calls.clear()
    with pytest.raises(ValueError) as got:
      qmodel(small)
    assert str(got.value) == str(first.value)
    assert keras_calls and keras_calls[0] == "QuantizedModel"
  assert not _traced(qmodel)
  assert len(qmodel.__dict__["_tfi_compiled_calls"].failed) == 1
  # Other sizes still run, traced.
  x = tf.constant(test_quantization.images(2, seed=3, shape=(11, 7, 3)))
  want = _keras_path(qmodel, x)
  for _ in range(3):
    _assert_same(qmodel(x), want)
  assert _key(x) in _traced(qmodel)


def test_a_model_with_two_inputs_takes_keras_path(keras_calls):
  a, b = (keras.Input((6, 6, 4), dtype="int8", name=n) for n in "ab")
  qfc = tf_fused_int8.QuantizedFusedConv2D
  y = qfc(4, 1, name="tail", use_side_input=True)(
      qfc(4, 3, padding="same", name="c")(a), side_input=b)
  model = quantization.fuse_conv_sequences(keras.Model({"a": a, "b": b}, y))
  assert type(model) is QM  # pylint: disable=unidiomatic-typecheck
  rng = np.random.default_rng(5)
  x = {k: rng.integers(-128, 128, (2, 6, 6, 4)).astype(np.int8) for k in "ab"}
  for _ in range(3):
    keras_calls.clear()
    _assert_same(model(x), _keras_path(model, x))
    assert keras_calls[0] == "QuantizedModel"
  assert not _traced(model)


def test_predict_of_one_small_batch_runs_the_traced_function(monkeypatch):
  """predict(x, verbose=0) of at most batch_size rows and predict_on_batch
  give Keras's own predict's arrays; from a shape's third call they run
  the traced function, not Keras's predict loop."""
  model = quantization.fuse_conv_sequences(_MODELS["mobilenet_like"]())
  shape = model.inputs[0].shape[1:]
  keras_predicts = []
  for name in ("predict", "predict_on_batch"):
    original = getattr(keras.Model, name)

    def counting(self, *args, original=original, name=name, **kwargs):
      keras_predicts.append(name)
      return original(self, *args, **kwargs)
    monkeypatch.setattr(keras.Model, name, counting)

  def same(got, want):
    assert set(got) == set(want)
    for k in want:
      assert isinstance(got[k], np.ndarray) and got[k].dtype == want[k].dtype
      np.testing.assert_array_equal(got[k], want[k], err_msg=k)

  for batch in (1, 5):
    x = test_quantization.images(batch, seed=batch, shape=shape)
    want = keras.Model.predict(model, x, verbose=0)
    for call in (lambda: model.predict(x, verbose=0),
                 lambda: model.predict(x, batch_size=batch, verbose=0),
                 lambda: model.predict_on_batch(x),
                 lambda: model.predict_on_batch(tf.constant(x))):
      keras_predicts.clear()
      same(call(), want)
      same(call(), want)  # traced by now
      keras_predicts.clear()
      same(call(), want)
      assert keras_predicts == [], keras_predicts
    assert _key(x) in _traced(model)
  # A progress bar and callbacks: the traced function between the same
  # callback calls as Keras's loop (the same CallbackList); steps: Keras's
  # own predict (several batches: the next test).
  x = test_quantization.images(5, seed=5, shape=shape)
  want = keras.Model.predict(model, x, verbose=0)

  class Spy(keras.callbacks.Callback):

    def __init__(self):
      super().__init__()
      self.seen = []

    def on_predict_begin(self, logs=None):
      self.seen.append(("begin", logs))

    def on_predict_batch_begin(self, batch, logs=None):
      self.seen.append(("batch_begin", batch, logs))

    def on_predict_batch_end(self, batch, logs=None):
      # Keras's CallbackList flattens the outputs into the logs.
      self.seen.append(("batch_end", batch, sorted(logs)))
      self.logs = {k: np.asarray(v) for k, v in logs.items()}

    def on_predict_end(self, logs=None):
      self.seen.append(("end", logs))

  keras_spy = Spy()
  keras.Model.predict(model, x, verbose=0, callbacks=[keras_spy])
  assert [e[0] for e in keras_spy.seen] == ["begin", "batch_begin", "batch_end", "end"]
  for kwargs in ({"verbose": 0, "callbacks": [Spy()]},
                 {"verbose": 1, "callbacks": [Spy()]}):
    keras_predicts.clear()
    same(model.predict(x, **kwargs), want)
    assert keras_predicts == [], (kwargs, keras_predicts)
    assert kwargs["callbacks"][0].seen == keras_spy.seen, kwargs
    same(kwargs["callbacks"][0].logs, keras_spy.logs)
    assert kwargs["callbacks"][0].model is model
  for _ in range(3):
    keras_predicts.clear()
    same(model.predict(x, verbose=0, steps=1), want)
    assert keras_predicts == ["predict"], keras_predicts


class _PredictSpy(keras.callbacks.Callback):
  """Records the predict hooks' calls; stop_at: sets model.stop_predicting
  at the end of that batch."""

  def __init__(self, stop_at=None):
    super().__init__()
    self.seen = []
    self.stop_at = stop_at

  def on_predict_begin(self, logs=None):
    self.seen.append(("begin", logs))

  def on_predict_batch_begin(self, batch, logs=None):
    self.seen.append(("batch_begin", batch, logs))

  def on_predict_batch_end(self, batch, logs=None):
    # Keras's CallbackList flattens the outputs into the logs.
    self.seen.append(("batch_end", batch, sorted(logs),
                      [np.asarray(v).shape for _, v in sorted(logs.items())]))
    self.logs = {k: np.asarray(v) for k, v in logs.items()}
    if batch == self.stop_at:
      self.model.stop_predicting = True

  def on_predict_end(self, logs=None):
    self.seen.append(("end", logs))


def test_predict_of_several_batches_runs_the_traced_functions(monkeypatch):
  """predict(x) of more rows than batch_size: Keras's batches, each through
  the traced function of its shape (the full batches' and the shorter last
  one's, each traced on its second call as model(x) is), the arrays Keras's
  own predict gives, the same callback calls, stop_predicting honored."""
  model = quantization.fuse_conv_sequences(_MODELS["mobilenet_like"]())
  shape = model.inputs[0].shape[1:]
  keras_predicts = []
  original = keras.Model.predict

  def counting(self, *args, **kwargs):
    keras_predicts.append("predict")
    return original(self, *args, **kwargs)
  monkeypatch.setattr(keras.Model, "predict", counting)

  def same(got, want):
    assert set(got) == set(want)
    for k in want:
      assert isinstance(got[k], np.ndarray) and got[k].dtype == want[k].dtype
      np.testing.assert_array_equal(got[k], want[k], err_msg=k)

  x = test_quantization.images(7, seed=11, shape=shape)
  # Batches of 3, 3 and 1 rows (two shapes); 6 rows in batches of 3 and
  # 2 (one shape each); the default batch_size on 70 rows: 32, 32, 6.
  big = test_quantization.images(70, seed=12, shape=shape)
  # first: whether the case's first call takes Keras's path (a batch shape
  # not seen before; the 3-row shape is traced by the first case).
  for data, kwargs, shapes, first in ((x, {"batch_size": 3}, (3, 1), True),
                                      (x[:6], {"batch_size": 3}, (3,), False),
                                      (x[:6], {"batch_size": 2}, (2,), True),
                                      (big, {}, (32, 6), True)):
    want = original(model, data, verbose=0, **kwargs)
    assert all(len(v) == len(data) for v in want.values())
    calls = [lambda: model.predict(data, verbose=0, **kwargs),
             lambda: model.predict(tf.constant(data), verbose=0, **kwargs)]
    for i, call in enumerate(calls * 2):
      keras_predicts.clear()
      same(call(), want)
      assert keras_predicts == (["predict"] if i == 0 and first else []), (
          kwargs, i, keras_predicts)
    assert all(_key(data[:n]) in _traced(model) for n in shapes), kwargs
  # Callbacks and a progress bar: the calls Keras's loop makes, in order.
  keras_spy = _PredictSpy()
  original(model, x, batch_size=3, verbose=0, callbacks=[keras_spy])
  assert [e[:2] for e in keras_spy.seen] == [
      ("begin", {}), ("batch_begin", 0), ("batch_end", 0),
      ("batch_begin", 1), ("batch_end", 1), ("batch_begin", 2),
      ("batch_end", 2), ("end", {})], keras_spy.seen
  want = original(model, x, batch_size=3, verbose=0)
  for verbose in (0, 1):
    spy = _PredictSpy()
    keras_predicts.clear()
    same(model.predict(x, batch_size=3, verbose=verbose, callbacks=[spy]), want)
    assert keras_predicts == [], keras_predicts
    assert spy.seen == keras_spy.seen and spy.model is model
    same(spy.logs, keras_spy.logs)  # the last batch's outputs
  # A callback that stops the loop after the second batch: the rows so far.
  keras_stop = _PredictSpy(stop_at=1)
  want = original(model, x, batch_size=3, verbose=0, callbacks=[keras_stop])
  assert len(next(iter(want.values()))) == 6
  stop = _PredictSpy(stop_at=1)
  keras_predicts.clear()
  same(model.predict(x, batch_size=3, verbose=0, callbacks=[stop]), want)
  assert keras_predicts == [] and stop.seen == keras_stop.seen, stop.seen
  # steps, inputs other than one array or tensor, and several batches a
  # callback step (steps_per_execution): Keras's predict.
  for args, kwargs in (((x,), {"batch_size": 3, "steps": 2}),
                       ((tf.data.Dataset.from_tensor_slices(x).batch(3),), {})):
    want = original(model, *args, verbose=0, **kwargs)
    for _ in range(3):
      keras_predicts.clear()
      same(model.predict(*args, verbose=0, **kwargs), want)
      assert keras_predicts == ["predict"], (kwargs, keras_predicts)
  want = original(model, x, batch_size=3, verbose=0)
  model.compile(steps_per_execution=2)
  for _ in range(2):
    keras_predicts.clear()
    same(model.predict(x, batch_size=3, verbose=0), want)
    assert keras_predicts == ["predict"], keras_predicts


def test_batch_bounds_are_kerass_batches():
  bounds = quantized_model._batch_bounds  # pylint: disable=protected-access
  x = np.zeros((70, 2), np.float32)
  assert bounds(x, None) == [(0, 32), (32, 64), (64, 70)]
  assert bounds(x, 70) == [(0, 70)] and bounds(x, 100) == [(0, 70)]
  assert bounds(x, np.int64(35)) == [(0, 35), (35, 70)]
  assert bounds(tf.constant(x), 64) == [(0, 64), (64, 70)]
  for bad in (0, -1, 2.0, True, "4"):
    assert bounds(x, bad) is None, bad
  for other in (np.zeros((0, 2)), np.float32(1), [x], {"a": x},
                tf.data.Dataset.from_tensor_slices(x)):
    assert bounds(other, None) is None


@pytest.mark.parametrize("batch_size", [None, 1], ids=["one_batch", "two_batches"])
def test_predict_prints_keras_progress_bar(capsys, batch_size):
  """predict(x) with the default verbose, traced, prints what Keras's
  predict prints (its own ProgbarLogger), timings aside."""
  model = quantization.fuse_conv_sequences(_MODELS["mobilenet_like"]())
  x = test_quantization.images(2, seed=8, shape=model.inputs[0].shape[1:])
  want = keras.Model.predict(model, x, batch_size=batch_size)
  keras_out = capsys.readouterr().out
  for _ in range(3):  # Keras's path, then traced
    got = model.predict(x, batch_size=batch_size)
  ours = capsys.readouterr().out
  for k in want:
    np.testing.assert_array_equal(got[k], want[k])
  assert _key(x[:batch_size or 2]) in _traced(model)

  def bar(text):
    # The last bar printed, its timing removed.
    last = text.replace("\r", "\n").strip().splitlines()[-1]
    return re.sub(r"\d+(\.\d+)?[mu]?s(/step)?", "T", last)
  assert ("1/1" if batch_size is None else "2/2") in bar(keras_out)
  assert bar(ours) == bar(keras_out), (ours, keras_out)


def test_at_most_max_traced_shapes(keras_calls):
  model = _MODELS["resnet_like"]()
  shape = model.inputs[0].shape[1:]
  n = quantized_model._MAX_TRACED  # pylint: disable=protected-access
  for batch in range(1, n + 3):
    x = tf.constant(test_quantization.images(batch, seed=batch, shape=shape))
    want = _keras_path(model, x)
    for _ in range(2):  # the first call, then the second (traced or not)
      _assert_same(model(x), want)
    keras_calls.clear()
    _assert_same(model(x), want)
    assert bool(keras_calls) == (batch > n), (batch, keras_calls)
  assert len(_traced(model)) == n


def test_a_device_scope_is_traced_on_its_own(keras_calls):
  model, x, want = _traced_resnet_like(seed=4)
  with tf.device("/CPU:0"):
    _assert_same(model(x), want)  # the first call under this scope
    assert len(_traced(model)) == 1
    _assert_same(model(x), want)
    keras_calls.clear()
    _assert_same(model(x), want)
    assert keras_calls == []
  assert set(_traced(model)) == {
      _key(x), _key(x, "/job:localhost/replica:0/task:0/device:CPU:0")}


def test_calls_from_several_threads():
  """Python threads calling one model at once, each shape's first calls
  among them: one function traced per shape, Keras's bits everywhere."""
  model = _MODELS["mobilenet_like"]()
  shape = model.inputs[0].shape[1:]
  inputs = [tf.constant(test_quantization.images(1 + i % 2, seed=i, shape=shape))
            for i in range(8)]
  wants = [_keras_path(model, x) for x in inputs]
  errors = []

  def work(i):
    try:
      for _ in range(4):
        _assert_same(model(inputs[i]), wants[i])
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)
  threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors, errors
  assert set(_traced(model)) == {_key(inputs[0]), _key(inputs[1])}


def test_weight_updates_reach_the_traced_function():
  model, x, before = _traced_resnet_like(seed=8)
  conv = next(l for l in model.layers
              if isinstance(l, tf_fused_int8.QuantizedFusedConv2D))
  w = conv.get_weights()
  w[0] = np.random.default_rng(1).integers(-128, 128, w[0].shape).astype(np.int8)
  conv.set_weights(w)
  after = model(x)
  _assert_same(after, _keras_path(model, x))
  assert not np.array_equal(after["features"].numpy(), before["features"].numpy())


def test_saving_loading_and_export_after_traced_calls(tmp_path, keras_calls):
  model = quantization.fuse_conv_sequences(_MODELS["mobilenet_like"]())
  shape = model.inputs[0].shape[1:]
  x = tf.constant(test_quantization.images(3, seed=6, shape=shape))
  model(x)
  want = model(x)
  assert len(_traced(model)) == 1
  path = os.path.join(tmp_path, "m.keras")
  model.save(path)
  again = keras.models.load_model(path)
  assert type(again) is QM  # pylint: disable=unidiomatic-typecheck
  again(x)
  again(x)  # traced
  keras_calls.clear()
  _assert_same(again(x), want)
  assert keras_calls == []
  export = os.path.join(tmp_path, "sm")
  model.export(export, verbose=False)
  served = tf.saved_model.load(export)
  _assert_same(served.serve(x), want)
  saved = os.path.join(tmp_path, "tfsm")
  tf.saved_model.save(model, saved)
  assert tf.saved_model.load(saved) is not None
  # The runner freezes the same model.
  runner = tf_fused_int8.InferenceRunner(model)
  for k, v in runner(x.numpy()).items():
    np.testing.assert_array_equal(v, want[k].numpy())


def _traced_model_ref():
  model = _MODELS["resnet_like"]()
  shape = model.inputs[0].shape[1:]
  x = tf.constant(test_quantization.images(1, seed=2, shape=shape))
  model(x)
  model(x)
  traced = len(_traced(model))
  return weakref.ref(model), traced


def test_the_model_is_freed_after_traced_calls():
  ref, traced = _traced_model_ref()
  assert traced == 1
  gc.collect()
  assert ref() is None
