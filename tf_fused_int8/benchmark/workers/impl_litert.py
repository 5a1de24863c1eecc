"""Benchmark family "litert" (project venv): TF's own full-integer TFLite
conversion, run by tf.lite.Interpreter with its default XNNPACK delegate.

One layer: a float conv (+ bias + relu) tf.function with the layer's int8
values as float weights, converted with TFLiteConverter (per-channel int8
weights, int8 input and output, representative data = the layer's input as
float), then `invoke()` timed with the input set once. Probes: the same
conversion of the probe layer (weights -128 / random, bias 0, no
activation); the converter picks its own scales (and narrow-range weights,
-127..127), which the result reports, read back from the model.
Models: the .tflite file the models suite converted (models.py).
"""

import numpy as np

import exactness
import protocol


class Family(protocol.KeyedRuns):
  """TFLite / XNNPACK."""

  def __init__(self, threads):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    self.tf = tf
    self.threads = threads
    self.runs = {}

  def info(self):
    return dict(tensorflow=self.tf.__version__)

  def _convert(self, spec, w, bias, relu, representative):
    tf = self.tf
    wf = tf.constant(w.astype(np.float32))
    bf = tf.constant(bias.astype(np.float32))
    strides = [1, spec["stride_h"], spec["stride_w"], 1]
    dil = [spec["dilation_h"], spec["dilation_w"]]
    shape = [representative[0].shape[0], spec["height"], spec["width"],
             spec["in_channels"]]

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32)])
    def layer(x):
      if spec["depthwise"]:
        k = tf.reshape(wf, [spec["kernel_h"], spec["kernel_w"],
                            spec["in_channels"],
                            spec["out_channels"] // spec["in_channels"]])
        y = tf.nn.depthwise_conv2d(x, k, strides, spec["padding"],
                                   dilations=dil)
      else:
        y = tf.nn.conv2d(x, wf, strides, spec["padding"],
                         dilations=[1] + dil + [1])
      y = tf.nn.bias_add(y, bf)
      return tf.nn.relu(y) if relu else y

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [layer.get_concrete_function()], layer)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([r] for r in representative)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    return converter.convert()

  def _interpreter(self, content):
    interp = self.tf.lite.Interpreter(model_content=content,
                                      num_threads=self.threads)
    interp.allocate_tensors()
    return interp

  def setup_layer(self, key, spec, data):
    d = np.load(data)
    x, w, bias = d["x"], d["w"], d["bias"]
    # Float images whose quantization by the converter's calibration gives
    # about the int8 values themselves (scale ~1).
    rep = [x.astype(np.float32)]
    def build():
      interp = self._interpreter(self._convert(
          spec, w, bias, spec["activation"] == "Relu", rep))
      interp.set_tensor(interp.get_input_details()[0]["index"], x)
      return interp.invoke
    self.runs[key], status = protocol.setup_each({"litert": build})
    return dict(impls=status)

  def probe(self, impl, spec, kind, seed, multiplier):
    del impl, multiplier  # the converter chooses the scales itself
    x_real, w, _ = exactness.probe_inputs(spec, kind, "int8", seed)
    co = spec["out_channels"]
    content = self._convert(spec, w, np.zeros(co, np.float32), False,
                            [x_real.astype(np.float32)])
    interp = self._interpreter(content)
    inp = interp.get_input_details()[0]
    out = interp.get_output_details()[0]
    x_s, x_zp = inp["quantization"]
    xq = np.clip(np.rint(x_real / x_s) + x_zp, -128, 127).astype(np.int8)
    interp.set_tensor(inp["index"], xq)
    interp.invoke()
    y = interp.get_tensor(out["index"])
    y_s, y_zp = out["quantization"]
    weights, w_scales, bias_q = self._read_back(interp, spec)
    return dict(out=y, x=xq, x_zero_point=int(x_zp), weights=weights,
                multiplier=(x_s * np.asarray(w_scales, np.float64) /
                            y_s).tolist(),
                bias_q=bias_q, out_zero_point=int(y_zp), out_min=-128,
                out_max=127)

  def _read_back(self, interp, spec):
    """The model's int8 filter as HWIO, its per-channel scales and bias."""
    kh, kw = spec["kernel_h"], spec["kernel_w"]
    co, cig = spec["out_channels"], spec["in_channels"] // spec["groups"]
    weights = scales = bias = None
    for t in interp.get_tensor_details():
      shape = tuple(t["shape"])
      if t["dtype"] == np.int8 and shape in ((co, kh, kw, cig), (1, kh, kw, co)):
        q = interp.get_tensor(t["index"])
        # TFLite: conv OHWI, depthwise 1HW(C*M); ours HWIO.
        weights = (q.transpose(1, 2, 3, 0) if shape[0] == co and
                   not spec["depthwise"] else q.reshape(kh, kw, 1, co))
        scales = t["quantization_parameters"]["scales"]
        if scales.size == 1:
          scales = np.full(co, scales[0])
      elif t["dtype"] == np.int32 and shape == (co,):
        bias = interp.get_tensor(t["index"]).tolist()
    if weights is None:
      raise RuntimeError("could not find the filter tensor in the TFLite model")
    return weights, scales, bias

  def setup_model(self, key, model, batch):
    x = np.load(model["input"])[:batch]

    def build():
      with open(model["tflite"], "rb") as f:
        interp = self.tf.lite.Interpreter(model_content=f.read(),
                                          num_threads=self.threads)
      inp = interp.get_input_details()[0]
      interp.resize_tensor_input(inp["index"], list(x.shape))
      interp.allocate_tensors()
      inp = interp.get_input_details()[0]
      s, zp = inp["quantization"]
      interp.set_tensor(inp["index"],
                        np.clip(np.rint(x / s) + zp, -128, 127).astype(np.int8))
      return interp.invoke
    self.runs[key], status = protocol.setup_each({"litert": build})
    return dict(impls=status)
