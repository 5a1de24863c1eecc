"""Benchmark family "openvino" (peers venv), models suite only: OpenVINO on
the float model exported as a TF SavedModel (openvino.convert_model), and
that model quantized by NNCF (nncf.quantize, the same calibration images as
quantize_model and the TFLite conversion), compiled for the CPU with
INFERENCE_NUM_THREADS = the thread count, one stream, the latency hint and
f32 inference precision for the float model (no silent bf16).

  openvino_fp32, openvino_int8
"""

import os

import numpy as np

import protocol


class Family(protocol.KeyedRuns):
  """OpenVINO (+ NNCF)."""

  def __init__(self, threads):
    import openvino as ov  # pylint: disable=g-import-not-at-top
    self.ov = ov
    self.core = ov.Core()
    self.threads = threads
    self.runs = {}

  def info(self):
    info = dict(openvino=self.ov.__version__)
    try:
      import nncf  # pylint: disable=g-import-not-at-top
      info["nncf"] = nncf.__version__
    except ImportError:
      info["nncf"] = None
    return info

  def setup_layer(self, key, spec, data):
    del key, spec, data
    return dict(impls={})

  def probe(self, impl, spec, kind, seed, multiplier):
    raise NotImplementedError("openvino runs whole models only")

  def _models(self, model):
    """(fp32, int8) ov.Models, converted and quantized once per model (cached
    as IR files next to the SavedModel, for the other thread counts)."""
    ov = self.ov
    base = os.path.join(os.path.dirname(model["saved_model"]),
                        model["name"] + "_openvino")
    fp32_xml, int8_xml = base + "_fp32.xml", base + "_int8.xml"
    if not os.path.exists(fp32_xml):
      ov.save_model(ov.convert_model(model["saved_model"]), fp32_xml,
                    compress_to_fp16=False)
    if not os.path.exists(int8_xml):
      import nncf  # pylint: disable=g-import-not-at-top
      calib = np.load(model["calibration"])
      fp32 = self.core.read_model(fp32_xml)
      fp32.reshape([1] + list(calib.shape[1:]))
      dataset = nncf.Dataset([calib[i:i + 1] for i in range(len(calib))])
      q = nncf.quantize(fp32, dataset, subset_size=len(calib))
      ov.save_model(q, int8_xml, compress_to_fp16=False)
    return fp32_xml, int8_xml

  def setup_model(self, key, model, batch):
    x = np.ascontiguousarray(np.load(model["input"])[:batch])
    try:
      paths = dict(zip(("openvino_fp32", "openvino_int8"), self._models(model)))
    except Exception as e:  # pylint: disable=broad-except
      err = protocol.error_text(e)
      return dict(impls={"openvino_fp32": err, "openvino_int8": err})

    def build(impl, xml):
      m = self.core.read_model(xml)
      m.reshape(list(x.shape))
      config = {"INFERENCE_NUM_THREADS": self.threads, "NUM_STREAMS": 1,
                "PERFORMANCE_HINT": "LATENCY"}
      if impl == "openvino_fp32":
        config["INFERENCE_PRECISION_HINT"] = "f32"
      request = self.core.compile_model(m, "CPU", config).create_infer_request()
      request.set_input_tensor(self.ov.Tensor(x))
      return request.infer
    self.runs[key], status = protocol.setup_each(
        {impl: (lambda i=impl, p=xml: build(i, p)) for impl, xml in paths.items()})
    return dict(impls=status)
