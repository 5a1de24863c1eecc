"""InferenceRunner: a model frozen into one graph, run in the calling thread.

A tf.function call costs TensorFlow's eager function runtime on every call:
binding the arguments in Python, then an executor that runs the graph on an
inter-op pool thread while the caller sleeps, and a wake-up of the caller at
the end. For a quantized MobileNetV2 at batch 1 that is about a sixth of the
call. tf.lite.Interpreter.invoke(), the int8 alternative a TF user has, runs
in the calling thread and pays almost none of it.

InferenceRunner(model) does what the interpreter does, in TensorFlow, with
the same ops and the same bits as model(x): it traces the model once,
freezes its variables into constants (ResourceFusedInt8ConvSequence and
ResourceFusedInt8Conv2DBiasActivation become their tensor forms, reading
FusedInt8WeightConstant nodes whose buffers keep their packed weights
pinned: see _freeze.py), imports the graph into a Session of its own and
runs it through a callable whose run options say "run in the caller's thread"
(RunOptions.inter_op_thread_pool = -1). Parallel work inside our ops still
uses TF's intra-op pool, whose size tf.config.threading sets, as for a
tf.function.

Measured (AMD EPYC Zen 5, 2 vCPUs, KVM; quantize_model +
fuse_conv_sequences models, tf.function and runner alternated in one
process, medians of 11 rounds): MobileNetV2 at batch 1, 1155 -> 853 us on two
threads (0.74x), 1564 -> 1380 us on one (0.88x); ResNet50 at batch 8 on one
thread 0.997x. A first version that left the frozen weights as plain
constants (the tensor ops then compare the filter bytes on every call:
memcmp was 2.8% of the perf samples of a one-thread loop) measured 0.86x on
two threads and 0.90x on one, in an earlier run; until freezing made
FusedInt8WeightConstant nodes, the runner turned the weights back into
session variables to pin them. The benchmark's models suite times both
(`--suite=models`).

Inputs are taken as numpy arrays (or anything np.asarray accepts, tf.Tensors
included) and outputs come back as numpy arrays, in the model's output
structure. The weights are copied into the frozen graph when the runner is
made: later changes to the model's variables do not reach it (make a new
runner).
"""

import numpy as np
import tensorflow as tf

from tf_fused_int8 import _loader


def _input_specs(model, input_signature):
  """(specs, call) for a Keras model or a tf.function; each spec named."""
  if input_signature is not None:
    specs = list(tf.nest.flatten(input_signature))
    if not all(isinstance(s, tf.TensorSpec) for s in specs):
      raise TypeError("InferenceRunner: input_signature must be tf.TensorSpecs, "
                      f"got {input_signature!r}")

    def call(*args):
      return model(*tf.nest.pack_sequence_as(input_signature, list(args)))
    return specs, call
  inputs = getattr(model, "inputs", None)
  if not inputs:
    raise TypeError(
        "InferenceRunner: give a built Keras model (with model.inputs), or "
        "input_signature= for a tf.function or other callable; got "
        f"{type(model).__name__}")
  names = [getattr(t, "name", None) or f"input_{i}" for i, t in enumerate(inputs)]
  specs = [tf.TensorSpec(tuple(t.shape), tf.as_dtype(t.dtype), name=n)
           for t, n in zip(inputs, names)]

  def call(*args):
    return model(args[0] if len(args) == 1 else list(args), training=False)
  return specs, call


class InferenceRunner:
  """Runs `model` as one frozen graph in the calling thread (see module doc).

      runner = tf_fused_int8.InferenceRunner(qmodel)
      logits = runner(images)              # numpy in, numpy out

  model, one of:
    - a built Keras model (its inputs give the signature, batch size free);
    - a concrete function, e.g. a SavedModel's serving signature:
      `loaded = tf.saved_model.load(path)`, then
      `InferenceRunner(loaded.signatures["serving_default"])` (keep `loaded`
      until the runner is made: it owns the variables);
    - any callable, with `input_signature` (a list of tf.TensorSpec; nested
      structures are flattened in tf.nest order and passed back nested).
  The runner takes its inputs by position, or all by name (the names of
  `input_signature`: a signature's keyword arguments, `runner(inputs=x)`).
  device: where the graph's ops are placed (e.g. "/CPU:0"); None leaves it to
  TensorFlow's placement, as for a tf.function.
  """

  def __init__(self, model, input_signature=None, device=None):
    from tensorflow.python.framework import convert_to_constants  # pylint: disable=g-import-not-at-top
    from tensorflow.core.protobuf import config_pb2  # pylint: disable=g-import-not-at-top
    _loader.load_ops()  # the frozen graph holds our ops
    if isinstance(model, tf.types.experimental.ConcreteFunction):
      # A concrete function (a SavedModel's serving signature, say) has its
      # own inputs: the placeholders left after freezing, in their order.
      if input_signature is not None:
        raise TypeError("InferenceRunner: a concrete function has its own "
                        "signature; give no input_signature")
      concrete = model
    else:
      self._specs, call = _input_specs(model, input_signature)
      concrete = tf.function(call).get_concrete_function(*self._specs)
    frozen = convert_to_constants.convert_variables_to_constants_v2(concrete)
    if concrete is model:
      self._specs = [tf.TensorSpec(t.shape, t.dtype, name=t.name.split(":")[0])
                     for t in frozen.inputs]
    self._names = [s.name or f"input_{i}" for i, s in enumerate(self._specs)]
    graph_def = frozen.graph.as_graph_def()
    self._structure = concrete.structured_outputs
    feeds = [t.name for t in frozen.inputs]
    fetches = [t.name for t in frozen.outputs]
    if len(feeds) != len(self._specs):
      raise ValueError(
          f"InferenceRunner: the frozen graph has {len(feeds)} inputs where "
          f"the model has {len(self._specs)}: some state could not be frozen "
          "into constants")
    self._graph = tf.Graph()
    with self._graph.as_default():
      if device is not None:
        with tf.device(device):
          tf.import_graph_def(graph_def, name="")
      else:
        tf.import_graph_def(graph_def, name="")
    threading = tf.config.threading
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threading.get_intra_op_parallelism_threads(),
        inter_op_parallelism_threads=threading.get_inter_op_parallelism_threads(),
        allow_soft_placement=True)
    self._session = tf.compat.v1.Session(graph=self._graph, config=config)
    options = config_pb2.CallableOptions()
    options.feed.extend(feeds)
    options.fetch.extend(fetches)
    # Kernels run in the thread that calls the runner, not on the inter-op
    # pool (what saves the two thread wake-ups of a tf.function call).
    options.run_options.inter_op_thread_pool = -1
    self._callable = self._session._make_callable_from_options(options)  # pylint: disable=protected-access
    self._np_dtypes = [s.dtype.as_numpy_dtype for s in self._specs]

  @property
  def input_signature(self):
    """The flat list of tf.TensorSpec the runner takes, in call order."""
    return list(self._specs)

  def __call__(self, *inputs, **named):
    if named:
      # By name (input_signature's names: a signature's keyword arguments).
      unknown = sorted(set(named) - set(self._names))
      if inputs or unknown or len(named) != len(self._names):
        raise ValueError(
            f"InferenceRunner: give the inputs by position or all by name "
            f"({', '.join(self._names)}); got {len(inputs)} by position and "
            f"{', '.join(sorted(named))} by name")
      inputs = tuple(named[n] for n in self._names)
    if len(inputs) != len(self._specs):
      raise ValueError(
          f"InferenceRunner: expected {len(self._specs)} input(s) "
          f"({', '.join(self._names)}), got {len(inputs)}")
    feeds = []
    for i, (x, spec) in enumerate(zip(inputs, self._specs)):
      a = np.asarray(x)
      if a.dtype != self._np_dtypes[i]:
        want = np.dtype(self._np_dtypes[i])
        if not np.can_cast(a.dtype, want, casting="same_kind"):
          raise TypeError(
              f"InferenceRunner: input {self._names[i]} must be "
              f"{spec.dtype.name} (or castable to it), got {a.dtype}")
        if want.kind in "iu" and a.size:
          # A narrowing integer cast would wrap: only values that fit.
          info = np.iinfo(want)
          lo, hi = a.min(), a.max()
          if lo < info.min or hi > info.max:
            raise ValueError(
                f"InferenceRunner: input {self._names[i]} is {spec.dtype.name}; "
                f"got {a.dtype} values in [{lo}, {hi}], outside "
                f"[{info.min}, {info.max}]")
        a = a.astype(want)
      if not spec.shape.is_compatible_with(a.shape):
        raise ValueError(
            f"InferenceRunner: input {self._names[i]} must have shape "
            f"{_shape_text(spec.shape)}, got {tuple(a.shape)}")
      feeds.append(a)
    if self._session is None:
      raise RuntimeError("InferenceRunner: called after close()")
    outputs = self._callable(*feeds)
    return tf.nest.pack_sequence_as(self._structure, list(outputs))

  def close(self):
    """Releases the session (the runner cannot be called afterwards)."""
    if self._session is not None:
      self._session.close()
      self._session = None
      self._callable = None

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def __del__(self):
    try:
      self.close()
    except Exception:  # pylint: disable=broad-except
      pass  # interpreter shutdown


def _shape_text(shape):
  return "[" + ", ".join("?" if d is None else str(d)
                         for d in shape.as_list()) + "]"
