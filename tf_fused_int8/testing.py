"""Shared case generator for the tests and the benchmark.

Nothing here computes the op's result (the independent reference lives in
tests/reference.py); this module only describes convolution cases and makes
their random inputs, so that tests and benchmarks run the same shapes.
"""

import dataclasses
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class ConvCase:
  """One convolution: NHWC input, HWIO filter, and the epilogue options."""
  batch: int
  height: int
  width: int
  in_channels: int
  kernel_h: int
  kernel_w: int
  out_channels: int
  stride_h: int = 1
  stride_w: int = 1
  padding: str = "SAME"
  dilation_h: int = 1
  dilation_w: int = 1
  per_channel_scale: bool = True
  side_input: bool = False
  activation: str = "Relu"
  # "random": scales that spread outputs over the int8 range; "pow2": powers
  # of two, which make exact .5 ties common.
  scale_kind: str = "random"
  # Grouped convolution (as tf.nn.conv2d): the filter has in_channels /
  # groups input channels; groups == in_channels is depthwise.
  groups: int = 1

  @property
  def input_shape(self):
    return (self.batch, self.height, self.width, self.in_channels)

  @property
  def filter_shape(self):
    return (self.kernel_h, self.kernel_w, self.in_channels // self.groups,
            self.out_channels)

  def output_hw(self):
    """TensorFlow's SAME/VALID output size."""
    eff_h = (self.kernel_h - 1) * self.dilation_h + 1
    eff_w = (self.kernel_w - 1) * self.dilation_w + 1
    if self.padding == "SAME":
      return (math.ceil(self.height / self.stride_h),
              math.ceil(self.width / self.stride_w))
    return ((self.height - eff_h) // self.stride_h + 1,
            (self.width - eff_w) // self.stride_w + 1)

  @property
  def output_shape(self):
    oh, ow = self.output_hw()
    return (self.batch, oh, ow, self.out_channels)

  @property
  def strides(self):
    return (self.stride_h, self.stride_w)

  @property
  def dilations(self):
    return (self.dilation_h, self.dilation_w)

  def macs(self):
    oh, ow = self.output_hw()
    return (self.batch * oh * ow * self.out_channels * self.kernel_h *
            self.kernel_w * (self.in_channels // self.groups))

  def name(self):
    s = (f"n{self.batch}_{self.height}x{self.width}x{self.in_channels}"
         f"_k{self.kernel_h}x{self.kernel_w}x{self.out_channels}"
         f"_s{self.stride_h}{self.stride_w}_{self.padding}")
    if (self.dilation_h, self.dilation_w) != (1, 1):
      s += f"_d{self.dilation_h}{self.dilation_w}"
    s += "_pc" if self.per_channel_scale else "_sc"
    s += "_side" if self.side_input else ""
    s += f"_{self.activation}"
    if self.scale_kind != "random":
      s += f"_{self.scale_kind}"
    if self.groups != 1:
      s += f"_g{self.groups}"
    return s


def sweep_cases(seed=0, dilations=False):
  """The generated sweep every kernel path is tested on.

  Every kernel size 1-7 (square and a few rectangular) x stride 1-3 x
  SAME/VALID, with odd spatial sizes, batch 1-4, channel counts that exercise
  vector tails (1..67), scalar and per-channel scales, with and without side
  input, Relu and None; some cases use power-of-two scales for exact ties.
  """
  rng = np.random.default_rng(seed)
  cases = []
  channel_choices = [1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 24, 31, 32, 33, 48, 64, 67]
  for k in range(1, 8):
    for stride in (1, 2, 3):
      for padding in ("SAME", "VALID"):
        kh = k
        kw = k if rng.random() < 0.8 else int(rng.integers(1, 8))
        dh = dw = 1
        if dilations and rng.random() < 0.5:
          dh, dw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        min_h = (kh - 1) * dh + 1
        min_w = (kw - 1) * dw + 1
        h = int(rng.integers(min_h, min_h + 12))
        w = int(rng.integers(min_w, min_w + 12))
        cases.append(ConvCase(
            batch=int(rng.integers(1, 5)),
            height=h, width=w,
            in_channels=int(rng.choice(channel_choices)),
            kernel_h=kh, kernel_w=kw,
            out_channels=int(rng.choice(channel_choices)),
            stride_h=stride,
            stride_w=stride if rng.random() < 0.8 else int(rng.integers(1, 4)),
            padding=padding,
            dilation_h=dh, dilation_w=dw,
            per_channel_scale=bool(rng.random() < 0.5),
            side_input=bool(rng.random() < 0.5),
            activation=str(rng.choice(["Relu", "None"])),
            scale_kind="pow2" if rng.random() < 0.25 else "random",
        ))
  return cases


def grouped_sweep_cases(seed=0):
  """Grouped and depthwise cases for every kernel path.

  Depthwise (groups = in_channels, channel multiplier 1-3) with kernels 1-7,
  strides 1-3, dilations, SAME/VALID, channel counts around the 16-lane
  vector width; grouped convolutions with 2-8 groups of 1-24 channels.
  """
  rng = np.random.default_rng(seed)
  cases = []
  dw_channels = [1, 2, 3, 8, 15, 16, 17, 24, 32, 33, 48, 96]
  for k in (1, 2, 3, 3, 5, 7):
    for stride in (1, 2, 3):
      for padding in ("SAME", "VALID"):
        ci = int(rng.choice(dw_channels))
        mult = 1 if rng.random() < 0.7 else int(rng.integers(2, 4))
        dh = dw = 1
        if rng.random() < 0.25:
          dh, dw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        min_h, min_w = (k - 1) * dh + 1, (k - 1) * dw + 1
        cases.append(ConvCase(
            batch=int(rng.integers(1, 4)),
            height=int(rng.integers(min_h, min_h + 14)),
            width=int(rng.integers(min_w, min_w + 14)),
            in_channels=ci, kernel_h=k, kernel_w=k, out_channels=ci * mult,
            stride_h=stride, stride_w=stride, padding=padding,
            dilation_h=dh, dilation_w=dw,
            per_channel_scale=bool(rng.random() < 0.7),
            side_input=bool(rng.random() < 0.5),
            activation=str(rng.choice(["Relu", "None"])),
            scale_kind="pow2" if rng.random() < 0.25 else "random",
            groups=ci))
  for k in (1, 3, 5):
    for stride in (1, 2):
      for padding in ("SAME", "VALID"):
        groups = int(rng.choice([2, 3, 4, 8]))
        gin = int(rng.choice([1, 2, 3, 4, 8, 24]))
        gout = int(rng.choice([1, 2, 4, 5, 16]))
        cases.append(ConvCase(
            batch=int(rng.integers(1, 3)),
            height=int(rng.integers(k, k + 10)),
            width=int(rng.integers(k, k + 10)),
            in_channels=groups * gin, kernel_h=k, kernel_w=k,
            out_channels=groups * gout, stride_h=stride, stride_w=stride,
            padding=padding,
            per_channel_scale=bool(rng.random() < 0.5),
            side_input=bool(rng.random() < 0.5),
            activation=str(rng.choice(["Relu", "None"])),
            groups=groups))
  return cases


def make_inputs(case, seed=0):
  """Random inputs for `case` as a dict of numpy arrays.

  Keys: conv_input, filter, bias, side_input (None without side input),
  conv_input_scale (float32 scalar or [Co]), side_input_scale (float32).
  Scales are chosen so that outputs cover the int8 range rather than all
  clipping.
  """
  rng = np.random.default_rng(seed)
  x = rng.integers(-128, 128, size=case.input_shape, dtype=np.int8)
  w = rng.integers(-128, 128, size=case.filter_shape, dtype=np.int8)
  depth = case.kernel_h * case.kernel_w * (case.in_channels // case.groups)
  co = case.out_channels
  # Std of the accumulator ~ sqrt(depth) * 74 * 74; aim for outputs ~ +-40.
  base = 40.0 / (math.sqrt(depth) * 74.0 * 74.0)
  if case.scale_kind == "pow2":
    base = 2.0 ** round(math.log2(base))
    shape = (co,) if case.per_channel_scale else ()
    scale = (base * 2.0 ** rng.integers(-1, 2, size=shape)).astype(np.float32)
    bias = (rng.integers(-40, 41, size=co) / 2.0).astype(np.float32)
    side_scale = np.float32(0.5)
  else:
    shape = (co,) if case.per_channel_scale else ()
    scale = (base * rng.uniform(0.5, 2.0, size=shape)).astype(np.float32)
    bias = rng.uniform(-20, 20, size=co).astype(np.float32)
    side_scale = np.float32(rng.uniform(-1.0, 1.0))
  side = None
  if case.side_input:
    side = rng.integers(-128, 128, size=case.output_shape, dtype=np.int8)
  return dict(conv_input=x, filter=w, bias=bias, side_input=side,
              conv_input_scale=np.asarray(scale, np.float32),
              side_input_scale=np.float32(side_scale if case.side_input else 0.0))


# ResNet-50 layers of the CPU speed issue: (H, W, Ci, Kh, Kw, Co, stride).
RESNET50_LAYERS = (
    (56, 56, 64, 1, 1, 256, 1),
    (56, 56, 64, 3, 3, 64, 1),
    (28, 28, 128, 3, 3, 128, 1),
    (14, 14, 256, 3, 3, 256, 1),
    (7, 7, 512, 3, 3, 512, 1),
    (56, 56, 256, 1, 1, 64, 1),
    (224, 224, 3, 7, 7, 64, 2),
)


def resnet50_cases(batch):
  """The benchmark's ResNet-50 layers as ConvCases (SAME, Relu)."""
  return [ConvCase(batch=batch, height=h, width=w, in_channels=ci,
                   kernel_h=kh, kernel_w=kw, out_channels=co,
                   stride_h=s, stride_w=s, padding="SAME")
          for (h, w, ci, kh, kw, co, s) in RESNET50_LAYERS]


# MobileNetV2's depthwise 3x3 layers at 224x224: (H, W, C, stride).
MOBILENET_V2_DEPTHWISE_LAYERS = (
    (112, 112, 32, 1),
    (112, 112, 96, 2),
    (56, 56, 144, 1),
    (56, 56, 144, 2),
    (28, 28, 192, 1),
    (28, 28, 192, 2),
    (14, 14, 384, 1),
    (14, 14, 576, 1),
    (14, 14, 576, 2),
    (7, 7, 960, 1),
)


def mobilenet_v2_depthwise_cases(batch):
  """MobileNetV2's depthwise 3x3 layers as ConvCases (SAME, Relu)."""
  return [ConvCase(batch=batch, height=h, width=w, in_channels=c,
                   kernel_h=3, kernel_w=3, out_channels=c,
                   stride_h=s, stride_w=s, padding="SAME", groups=c)
          for (h, w, c, s) in MOBILENET_V2_DEPTHWISE_LAYERS]


# MobileNetV2 (alpha 1, 224x224) convolutions, each distinct shape once:
# (H, W, Ci, K, Co, stride, groups, how many times the model has it). The
# stem, the pointwise expand/project 1x1 layers, the depthwise 3x3 ones
# (groups = channels) and the last 1x1 (320 -> 1280).
MOBILENET_V2_LAYERS = (
    (224, 224, 3, 3, 32, 2, 1, 1),
    (112, 112, 32, 3, 32, 1, 32, 1),
    (112, 112, 32, 1, 16, 1, 1, 1),
    (112, 112, 16, 1, 96, 1, 1, 1),
    (112, 112, 96, 3, 96, 2, 96, 1),
    (56, 56, 96, 1, 24, 1, 1, 1),
    (56, 56, 24, 1, 144, 1, 1, 2),
    (56, 56, 144, 3, 144, 1, 144, 1),
    (56, 56, 144, 1, 24, 1, 1, 1),
    (56, 56, 144, 3, 144, 2, 144, 1),
    (28, 28, 144, 1, 32, 1, 1, 1),
    (28, 28, 32, 1, 192, 1, 1, 3),
    (28, 28, 192, 3, 192, 1, 192, 2),
    (28, 28, 192, 1, 32, 1, 1, 2),
    (28, 28, 192, 3, 192, 2, 192, 1),
    (14, 14, 192, 1, 64, 1, 1, 1),
    (14, 14, 64, 1, 384, 1, 1, 4),
    (14, 14, 384, 3, 384, 1, 384, 4),
    (14, 14, 384, 1, 64, 1, 1, 3),
    (14, 14, 384, 1, 96, 1, 1, 1),
    (14, 14, 96, 1, 576, 1, 1, 3),
    (14, 14, 576, 3, 576, 1, 576, 2),
    (14, 14, 576, 1, 96, 1, 1, 2),
    (14, 14, 576, 3, 576, 2, 576, 1),
    (7, 7, 576, 1, 160, 1, 1, 1),
    (7, 7, 160, 1, 960, 1, 1, 3),
    (7, 7, 960, 3, 960, 1, 960, 3),
    (7, 7, 960, 1, 160, 1, 1, 2),
    (7, 7, 960, 1, 320, 1, 1, 1),
    (7, 7, 320, 1, 1280, 1, 1, 1),
)


def mobilenet_v2_cases(batch):
  """MobileNetV2's convolutions (each distinct shape once) as ConvCases."""
  return [ConvCase(batch=batch, height=h, width=w, in_channels=ci,
                   kernel_h=k, kernel_w=k, out_channels=co, stride_h=s,
                   stride_w=s, padding="SAME", groups=g)
          for (h, w, ci, k, co, s, g, _) in MOBILENET_V2_LAYERS]


def randomize_batch_norm(layer, rng):
  """Random statistics (and gamma / beta where it has them) for a Keras
  BatchNormalization layer, so that folding it into a convolution matters:
  gamma U(0.5, 1.5), beta N(0, 0.2), mean N(0, 0.3), variance U(0.3, 2)."""
  n = layer.moving_mean.shape[0]
  weights = []
  if layer.scale:
    weights.append(rng.uniform(0.5, 1.5, n))
  if layer.center:
    weights.append(rng.normal(0.0, 0.2, n))
  weights += [rng.normal(0.0, 0.3, n), rng.uniform(0.3, 2.0, n)]
  layer.set_weights([w.astype(np.float32) for w in weights])
