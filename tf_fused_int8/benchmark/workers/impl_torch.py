"""Benchmark family "torch" (peers venv): PyTorch's quantized Conv2d
(torch.ao.nn.quantized; ConvReLU2d for Relu layers), channels_last, quint8
activations (zero point 128), per-channel qint8 weights, float bias,
inference mode, torch.set_num_threads = the thread count.

  torch_x86     quantized engine "x86" (FBGEMM / oneDNN mix PyTorch picks)
  torch_onednn  quantized engine "onednn"
The engine is set when the weights are packed and before every call.
PyTorch's convolution padding is symmetric: where TF's SAME pads are not
(stride 2 on even sizes), the input is padded beforehand by the amount TF
pads, with the zero point, and the convolution runs unpadded (the timed call
then skips the padding; noted in the table's legend).
"""

import numpy as np

import exactness
import protocol

ENGINES = {"torch_x86": "x86", "torch_onednn": "onednn"}


class Family(protocol.KeyedRuns):
  """PyTorch quantized conv."""

  def __init__(self, threads):
    import torch  # pylint: disable=g-import-not-at-top
    torch.set_num_threads(threads)
    try:
      torch.set_num_interop_threads(1)
    except RuntimeError:
      pass
    self.torch = torch
    self.runs = {}

  def info(self):
    return dict(torch=self.torch.__version__,
                engines=list(self.torch.backends.quantized.supported_engines))

  def _module(self, spec, engine, w, w_scale, bias, y_scale, y_zp, relu):
    torch = self.torch
    import torch.ao.nn.intrinsic.quantized as nniq  # pylint: disable=g-import-not-at-top
    import torch.ao.nn.quantized as nnq  # pylint: disable=g-import-not-at-top
    torch.backends.quantized.engine = engine
    t, b, l, r = spec["pads"]
    symmetric = t == b and l == r
    cls = nniq.ConvReLU2d if relu else nnq.Conv2d
    conv = cls(spec["in_channels"], spec["out_channels"],
               (spec["kernel_h"], spec["kernel_w"]),
               stride=(spec["stride_h"], spec["stride_w"]),
               padding=(t, l) if symmetric else 0,
               dilation=(spec["dilation_h"], spec["dilation_w"]),
               groups=spec["groups"])
    scales = torch.tensor(np.asarray(w_scale, np.float64))
    wf = torch.from_numpy(w.transpose(3, 2, 0, 1).astype(np.float32)) * \
        scales.float().reshape(-1, 1, 1, 1)
    qw = torch.quantize_per_channel(
        wf, scales, torch.zeros(len(scales), dtype=torch.int64), 0, torch.qint8)
    conv.set_weight_bias(qw, torch.from_numpy(np.asarray(bias, np.float32)))
    conv.scale = float(y_scale)
    conv.zero_point = int(y_zp)
    pre_pad = None if symmetric else (t, b, l, r)
    return conv, pre_pad

  def _input(self, x_u8, pre_pad):
    torch = self.torch
    if pre_pad is not None:
      t, b, l, r = pre_pad
      x_u8 = np.pad(x_u8, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=128)
    xf = torch.from_numpy(x_u8.astype(np.float32) - 128.0).permute(0, 3, 1, 2)
    q = torch.quantize_per_tensor(xf, 1.0, 128, torch.quint8)
    return q.contiguous(memory_format=torch.channels_last)

  def _fn(self, engine, conv, qx):
    torch = self.torch

    def fn():
      torch.backends.quantized.engine = engine
      with torch.inference_mode():
        return conv(qx)
    return fn

  def setup_layer(self, key, spec, data):
    d = np.load(data)
    x, w, bias, scale = d["x"], d["w"], d["bias"], d["scale"]
    co = spec["out_channels"]
    w_scale = np.broadcast_to(scale, (co,)).astype(np.float64)
    x_u8 = (x.astype(np.int16) + 128).astype(np.uint8)
    def build(engine):
      if engine not in self.torch.backends.quantized.supported_engines:
        raise RuntimeError(f"engine {engine} not in this torch build")
      conv, pre_pad = self._module(spec, engine, w, w_scale, bias, 1.0, 128,
                                   spec["activation"] == "Relu")
      return self._fn(engine, conv, self._input(x_u8, pre_pad))
    self.runs[key], status = protocol.setup_each(
        {impl: (lambda e=engine: build(e)) for impl, engine in ENGINES.items()})
    return dict(impls=status)

  def probe(self, impl, spec, kind, seed, multiplier):
    engine = ENGINES[impl]
    x, w, zp = exactness.probe_inputs(spec, kind, "uint8", seed)
    co = spec["out_channels"]
    w_scale = np.full(co, multiplier, np.float64)
    conv, pre_pad = self._module(dict(spec, batch=1), engine, w, w_scale,
                                 np.zeros(co), 1.0, 128, False)
    y = self._fn(engine, conv, self._input(x, pre_pad))()
    out = y.int_repr().permute(0, 2, 3, 1).numpy()
    used = conv.weight().int_repr().permute(2, 3, 1, 0).numpy()
    return dict(out=out, x_zero_point=zp, weights=used,
                multiplier=float(w_scale[0]),
                out_zero_point=128, out_min=0, out_max=255)
