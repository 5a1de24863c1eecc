"""QuantizedModel: the functional model quantize_model and
fuse_conv_sequences return, whose eager calls run as one compiled function.

Keras recommends ``model(x)`` for small batches, and eagerly a functional
model is a Python walk over its graph: Keras's own bookkeeping for the model
call and for every layer it calls, then one eager op dispatch per layer. On
a quantized, fused MobileNetV2 at batch 1 (Xeon with AMX under KVM, 2
threads) that walk took about 3.2 ms a call where the same model's concrete
function took 1.8 and TFLite's interpreter 2.2. So a QuantizedModel called
eagerly with one input tensor of a shape it has seen before runs a concrete
function of itself traced for that shape: the same layers and ops, the same
bits, and the call costs what calling a ``tf.function`` costs.

When it applies (anything else takes Keras's own path, unchanged):

* executing eagerly, with one positional argument that is an eager
  ``tf.Tensor`` or a numpy array, of the model's (single) input dtype and
  rank, its known dimensions matching, with no Keras mask;
* no keyword argument but ``training=None`` or ``training=False`` (both are
  inference for every layer a quantized model holds; ``training=True`` takes
  Keras's path);
* no Keras distribution set, and ``model.run_eagerly`` not set (Keras's
  switch for debugging: every call then runs layer by layer);
* the shape's second call: the first call of a shape runs through Keras, the
  second traces (once) and runs the function; at most ``_MAX_TRACED``
  shapes a model are traced, later shapes stay on Keras's path (a stream of
  ever-new shapes never pays for tracing). A call under another
  ``tf.device`` scope counts as another shape (its function places its ops
  there).

``predict_on_batch(x)`` and ``predict(x)`` (a numpy array or eager tensor,
no ``steps``) run the same traced functions under the same conditions and
return what Keras's would: Keras's ``predict`` builds its data pipeline and
step loop on every call (about 50 ms for one image, the float model alike,
and 70-120 ms more than the model's own calls for 64-256 images). ``predict``
cuts ``x`` into batches of ``batch_size`` rows (default 32) as Keras does,
runs each batch's traced function (one for the full batches, one for a
shorter last batch: both shapes follow the rule above, so a new size of
``x`` takes Keras's path once) and concatenates the outputs. It keeps
Keras's callbacks: the same ``CallbackList`` Keras would make (its progress
bar for ``verbose`` not 0, the caller's callbacks) gets the same calls as in
Keras's loop (``on_predict_begin``, ``on_predict_batch_begin(step)`` and
``on_predict_batch_end(step, {"outputs": ...})`` per batch,
``on_predict_end``), and ``model.stop_predicting`` set by a callback ends
the loop after that batch, as there. ``steps``, other inputs (datasets,
lists, dicts), a distribution strategy, ``steps_per_execution`` other than 1
or ``run_eagerly`` take Keras's own ``predict``.

The traced function reads the model's variables, so ``set_weights`` /
``assign`` (``set_conv_weights``) are seen by later calls; replacing a layer
or changing a layer's Python attributes after a shape was traced is not
(as in any ``tf.function``). A saved ``.keras`` file records the class
(registered as ``tf_fused_int8>QuantizedModel``; importing tf_fused_int8
registers it, as it does the quantized layers the file needs anyway).
"""

import inspect
import threading

import numpy as np
import keras
import tensorflow as tf

from tensorflow.python.eager import context as _context  # pylint: disable=g-direct-tensorflow-import

from tf_fused_int8.layers import _has_keras_mask
from tf_fused_int8.layers import _is_inference_training

try:
  from keras.src.models.functional import Functional  # pylint: disable=g-direct-keras-import,g-import-not-at-top
except ImportError:  # a Keras that moved it: the class of a functional model
  _probe = keras.Input((1,))
  Functional = type(keras.Model(_probe, _probe))
  del _probe

# Shapes traced per model (each keeps one concrete function and its graph).
_MAX_TRACED = 8


class _CompiledCalls:
  """A model's traced functions (by shape, dtype and device scope) and the
  keys called once. Not a dict or a Trackable, so that nothing that walks a
  model's attributes (saving, tracking) descends into it."""

  __slots__ = ("functions", "seen", "failed", "lock")

  def __init__(self):
    self.functions = {}
    self.seen = set()
    self.failed = set()  # keys whose tracing raised: Keras's path, untraced
    self.lock = threading.Lock()


@keras.saving.register_keras_serializable(package="tf_fused_int8")
class QuantizedModel(Functional):
  """A functional Keras model whose eager calls run a traced function.

  See the module docstring for when the fast path applies; everything else
  about it (layers, weights, saving, ``predict``, calls in a graph) is
  Keras's ``Functional``.
  """

  def __call__(self, *args, **kwargs):
    x = self._eager_input(args, kwargs)
    if x is not None:
      fn = self._compiled_call(x)
      if fn is not None:
        if not self._called:
          self._called = True
        return _run(fn, x)
    return super().__call__(*args, **kwargs)

  def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
    """Keras's predict. A numpy array or eager tensor without steps runs the
    eager call's traced functions batch by batch (the batches Keras's data
    pipeline would cut, the same ops, the same bits) between the callback
    calls Keras's loop makes, instead of Keras's data pipeline and loop,
    which cost tens of ms a call."""
    bounds = None
    # Keras's loop runs steps_per_execution batches per callback step.
    if steps is None and getattr(self, "steps_per_execution", 1) == 1:
      bounds = _batch_bounds(x, batch_size)
    if bounds is not None:
      make_hooks = None
      if verbose != 0 or callbacks:
        def make_hooks():
          # Made only once the fast path is sure (it sets the callbacks'
          # model and params).
          if isinstance(callbacks, keras.callbacks.CallbackList):
            return callbacks
          return keras.callbacks.CallbackList(
              callbacks, add_progbar=verbose != 0, verbose=verbose, epochs=1,
              steps=len(bounds), model=self)
      y = self._predict_fast(x, make_hooks, bounds)
      if y is not None:
        return y
    return super().predict(x, batch_size=batch_size, verbose=verbose,
                           steps=steps, callbacks=callbacks)

  def predict_on_batch(self, x):
    """Keras's predict_on_batch; a numpy array or tensor the eager call
    would run traced runs the same traced function."""
    y = self._predict_fast(x)
    return y if y is not None else super().predict_on_batch(x)

  def _predict_fast(self, x, make_hooks=None, bounds=None):
    """predict's outputs (numpy, the model's output structure) from the
    traced functions, or None where Keras's own predict must run.
    bounds: the batches' [begin, end) rows (None: x is one batch).
    make_hooks: returns the keras.callbacks.CallbackList to call as Keras's
    predict loop calls it (None: no callbacks, as predict_on_batch)."""
    if self._distribute_strategy is not None or tf.distribute.has_strategy():
      return None
    if bounds is None or len(bounds) == 1:
      bounds = [None]

    def batch(b):
      return self._eager_input((x if b is None else x[b[0]:b[1]],), {})

    def rows(b):
      return None if b is None else b[1] - b[0]

    # The function of each batch shape (the full batches' and a shorter
    # last one's), asked once a shape: each ask counts as the shape's call
    # (the first marks it seen, the second traces), so all of them are asked
    # before deciding, and a call that cannot run them all takes Keras's
    # path.
    fns, first = {}, {}
    for b in (bounds[0], bounds[-1]):
      if rows(b) in fns:
        continue
      t = batch(b)
      first[b] = t
      fns[rows(b)] = self._compiled_call(t) if t is not None else None
    if any(fn is None for fn in fns.values()):
      return None
    self.stop_predicting = False
    hooks = make_hooks() if make_hooks is not None else None
    if hooks is not None:
      hooks.on_predict_begin()
    outputs = []
    for step, b in enumerate(bounds):
      t = first.pop(b) if b in first else batch(b)
      if hooks is not None:
        hooks.on_predict_batch_begin(step)
      y = _run(fns[rows(b)], t)
      outputs.append(y)
      if hooks is not None:
        hooks.on_predict_batch_end(step, {"outputs": y})
      if self.stop_predicting:
        break
    if hooks is not None:
      hooks.on_predict_end()
    if len(outputs) == 1:
      return keras.tree.map_structure(lambda v: v.numpy(), outputs[0])
    return keras.tree.map_structure(
        lambda *v: np.concatenate([a.numpy() for a in v], axis=0), *outputs)

  def _eager_input(self, args, kwargs):
    """The call's input tensor where the fast path may run it, else None."""
    if len(args) != 1 or not tf.executing_eagerly() or self.run_eagerly:
      return None
    if not all(_is_inference_training(k, v) for k, v in kwargs.items()):
      return None
    inputs = self._inputs
    if len(inputs) != 1:
      return None
    spec = inputs[0]
    x = args[0]
    if isinstance(x, np.ndarray):
      if x.dtype != spec.dtype:
        return None
      x = tf.constant(x)
    elif not isinstance(x, tf.Tensor) or x.dtype != spec.dtype or _has_keras_mask(x):
      return None
    shape = x.shape
    want = spec.shape
    if len(shape) != len(want):
      return None
    for got, dim in zip(shape, want):
      if dim is not None and got != dim:
        return None
    if keras.distribution.distribution() is not None:
      return None
    return x

  def _compiled_call(self, x):
    """The concrete function for x's shape, tracing it on the shape's second
    call (None: take Keras's path)."""
    calls = self.__dict__.get("_tfi_compiled_calls")
    if calls is None:
      calls = _CompiledCalls()
      # Past Keras's __setattr__, which would track it.
      object.__setattr__(self, "_tfi_compiled_calls", calls)
    # The device scope too: a function traced under tf.device(...) places
    # its ops there (as tf.function keys its traces on it).
    key = (tuple(x.shape), x.dtype, _context.context().device_name)
    fn = calls.functions.get(key)
    if fn is not None:
      return fn
    with calls.lock:
      fn = calls.functions.get(key)
      if fn is not None:
        return fn
      if key not in calls.seen:
        if len(calls.seen) < 4 * _MAX_TRACED:
          calls.seen.add(key)
        return None
      if len(calls.functions) >= _MAX_TRACED or key in calls.failed:
        return None
      try:
        fn = tf.function(self._graph_call).get_concrete_function(
            tf.TensorSpec(x.shape, x.dtype))
      except Exception:  # pylint: disable=broad-except
        # An input the model rejects (Keras's path raised on the first
        # call too): Keras's path gives its own error, and no later call
        # of this key traces again.
        calls.failed.add(key)
        return None
      calls.functions[key] = fn
      return fn

  def _graph_call(self, x):
    # Traced in a graph, where __call__ takes Keras's path.
    return self(x, training=False)


def _batch_bounds(x, batch_size):
  """The [begin, end) rows of the batches Keras's predict would cut from x
  (batch_size rows, default 32, the last one shorter), or None where x is
  not a numpy array or eager tensor of known, nonzero length, or
  batch_size not a positive integer (Keras's path then: its data adapters,
  its errors)."""
  if isinstance(x, np.ndarray):
    rows = len(x) if x.ndim >= 1 else 0
  elif isinstance(x, tf.Tensor) and tf.executing_eagerly():
    rows = x.shape[0] if x.shape.rank else 0
  else:
    return None
  if batch_size is None:
    batch_size = 32
  if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
    return None
  size = int(batch_size)
  if not rows or size < 1:
    return None
  return [(i, min(i + size, rows)) for i in range(0, rows, size)]


def _flat_call_supported(fn):
  """Whether fn (a ConcreteFunction) has _call_flat(tensor_inputs,
  captured_inputs), as TensorFlow 2.21's does."""
  method = getattr(fn, "_call_flat", None)
  try:
    params = list(inspect.signature(method).parameters)
  except (TypeError, ValueError):
    return False
  return params == ["tensor_inputs", "captured_inputs"]


_FLAT_CALL = []  # [bool], decided on the first traced function


def _run(fn, x):
  """fn(x) for a concrete function of the one tensor x it was traced for.
  ConcreteFunction.__call__ first binds its arguments to the function's
  signature (canonicalize_function_inputs) and opens a profiler trace;
  with one tensor of the traced shape and dtype that changes nothing, and
  _call_flat (which __call__ ends in) skips it. model(x), batch 1, the two
  alternated three times in one process (Xeon with AMX, KVM): MobileNetV2
  on two threads 1.51-1.56 -> 1.44-1.47 ms, on one 1.96-1.99 -> 1.92-1.99;
  ResNet50 on one 6.09-6.13 -> 6.02-6.06, on two within noise (3.72-3.78
  and 3.65-3.86). Where a TensorFlow lacks that method or its signature,
  the plain call."""
  if not _FLAT_CALL:
    _FLAT_CALL.append(_flat_call_supported(fn))
  if _FLAT_CALL[0]:
    return fn._call_flat([x], fn.captured_inputs)  # pylint: disable=protected-access
  return fn(x)
