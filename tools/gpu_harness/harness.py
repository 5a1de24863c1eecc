#!/usr/bin/env python3
"""TF-free GPU harness for the fused int8 convolution.

Runs the GPU backend of cc/core/gpu (through libtfi_gpu_harness.so, ctypes) on
random inputs over a generated sweep of shapes, compares every output bit for
bit with the reference kernel of cc/core, and prints the autotuning choice and
the time per shape next to PyTorch's fp16 convolution (channels_last) on the
same shapes. Needs numpy; the GPU mode needs an NVIDIA GPU, the driver,
cuDNN 9 and PyTorch (no TensorFlow). Normally started by tools/gpu_check.sh.

  harness.py --lib build/gpu_check/libtfi_gpu_harness.so            # GPU run
  harness.py --lib bazel-bin/libtfi_gpu_harness.so --cpu-only       # no GPU:
      the same cases through the host emulation of the GPU pipeline

Exit status: 0 when every output matches the reference bit for bit and no
case failed; 1 otherwise.
"""

import argparse
import concurrent.futures
import ctypes
import dataclasses
import itertools
import json
import math
import os
import sys
import time

import numpy as np


# ConvLayout codes of the C API (cc/core/gpu/plan.h): how cuDNN is asked.
LAYOUTS = {"x4": 0, "x32": 1, "nhwc-i32": 2, "nhwc-f32": 3}


class TfiConv(ctypes.Structure):
  """Mirrors TfiConv in harness_api.cc."""
  _fields_ = [(name, ctypes.c_int64) for name in (
      "batch", "in_h", "in_w", "in_c", "out_c", "filter_h", "filter_w",
      "stride_h", "stride_w", "dilation_h", "dilation_w", "groups", "pad_top", "pad_bottom",
      "pad_left", "pad_right")] + [
          ("padding", ctypes.c_int32),  # 0 VALID, 1 SAME, 2 EXPLICIT (the pads)
          ("relu", ctypes.c_int32),
          ("per_channel_scale", ctypes.c_int32),
          ("deterministic", ctypes.c_int32),
          ("side_input_scale", ctypes.c_float),
          ("has_lut", ctypes.c_int32),
          ("lut", ctypes.c_int8 * 256),
      ]


@dataclasses.dataclass
class Case:
  name: str
  batch: int
  h: int
  w: int
  in_c: int
  out_c: int
  kh: int
  kw: int
  stride: tuple = (1, 1)
  dilation: tuple = (1, 1)
  padding: object = "SAME"  # "SAME", "VALID" or explicit (top, bottom, left, right)
  side: bool = False
  relu: bool = True
  per_channel: bool = False
  special: str = ""  # "", "nan_inf", "big_acc", "extreme" (all -128 x; w -128, 127)
  perf: bool = False  # a larger shape, mainly for timing
  deterministic: bool = False
  lut: bool = False  # an output lookup table (the op's output_lut)
  # As tf.nn.conv2d: in_c / filter input depth; groups == in_c is depthwise
  # (channel multiplier out_c / in_c). The GPU gets the grouped form NCHW_VECT_C can
  # express (gpu_groups, gpu_filter).
  groups: int = 1

  @property
  def depthwise(self):
    return self.groups > 1 and self.groups == self.in_c

  @property
  def gpu_groups(self):
    """The op's groups for the NCHW_VECT_C call: its filter input depth is
    4 * filter dimension 1, so a depthwise layer runs as groups of 4
    channels with a filter that has one channel per lane (gpu_filter)."""
    return self.in_c // 4 if self.depthwise else self.groups

  @property
  def gpu_direct_plan(self):
    """The plan RunFusedConvGpu names for the NCHW_VECT_C call when it is grouped (None: an
    ordinary call, cuDNN's autotuned plan): "direct/depthwise" (the fused kernel,
    tfi_depthwise_conv) when each group is one int8x4 word of input channels, as every
    depthwise layer of 8+ channels is, else "direct/grouped" (tfi_direct_conv + epilogue)."""
    if self.gpu_groups <= 1:
      return None
    return "direct/depthwise" if self.in_c // self.gpu_groups == 4 else "direct/grouped"

  def gpu_filter(self, w):
    """The HWIO filter of the NCHW_VECT_C call: `w` itself, or for a depthwise
    layer [Kh, Kw, 1, C*m] -> [Kh, Kw, 4, C*m] where output channel o (input
    channel c = o // m, group c // 4 of gpu_groups) has its weight in lane
    c % 4 and zeros in the other lanes: the same sums."""
    if not self.depthwise:
      return w
    m = self.out_c // self.in_c
    o = np.arange(self.out_c)
    e = np.zeros(w.shape[:2] + (4, self.out_c), np.int8)
    e[:, :, (o // m) % 4, o] = w[:, :, 0, o]
    return e

  def describe(self):
    s = (f"n{self.batch} {self.h}x{self.w}x{self.in_c}->{self.out_c} "
         f"k{self.kh}x{self.kw} s{self.stride[0]}x{self.stride[1]}")
    if self.dilation != (1, 1):
      s += f" d{self.dilation[0]}x{self.dilation[1]}"
    if self.depthwise:
      s += f" dw*{self.out_c // self.in_c}"
    elif self.groups > 1:
      s += f" g{self.groups}/{self.in_c // self.groups}ch"
    s += (f" {self.padding}" if isinstance(self.padding, str)
          else " pad" + ",".join(str(v) for v in self.padding))
    s += " side" if self.side else ""
    s += " relu" if self.relu else ""
    s += " pc" if self.per_channel else ""
    s += f" {self.special}" if self.special else ""
    s += " det" if self.deterministic else ""
    s += " lut" if self.lut else ""
    return s

  def conv_struct(self, side_scale, lut=None, gpu=False):
    """The C API's struct; gpu=True: the NCHW_VECT_C call's (gpu_groups)."""
    c = TfiConv()
    c.batch, c.in_h, c.in_w = self.batch, self.h, self.w
    c.in_c, c.out_c = self.in_c, self.out_c
    c.filter_h, c.filter_w = self.kh, self.kw
    c.stride_h, c.stride_w = self.stride
    c.dilation_h, c.dilation_w = self.dilation
    c.groups = self.gpu_groups if gpu else self.groups
    if isinstance(self.padding, str):
      c.padding = 1 if self.padding == "SAME" else 0
    else:
      c.padding = 2
      c.pad_top, c.pad_bottom, c.pad_left, c.pad_right = self.padding
    c.relu = 1 if self.relu else 0
    c.per_channel_scale = 1 if self.per_channel else 0
    c.deterministic = 1 if self.deterministic else 0
    c.side_input_scale = side_scale if self.side else 0.0
    if lut is not None:
      c.has_lut = 1
      c.lut[:] = [int(v) for v in lut]
    return c


def make_cases():
  """The sweep: every kernel size 1/3/5/7 x stride 1/2 x SAME/VALID, four times
  over with odd sizes, side input, relu and scalar/per-channel scale rotating
  through their combinations; plus dilation, NaN/Inf, |acc| > 2^24,
  determinism, and a few ResNet-like layers for timing. Deterministic."""
  cases = []
  channels = [(4, 4), (8, 12), (12, 8), (16, 20), (32, 32), (36, 28), (64, 64),
              (20, 4), (32, 96), (128, 64)]
  sizes = [(7, 9), (8, 8), (11, 6), (13, 13), (5, 17), (16, 15), (9, 9)]
  combos = list(itertools.product([1, 3, 5, 7], [1, 2], ["SAME", "VALID"]))
  i = 0
  for variant in range(4):
    for k, s, pad in combos:
      in_c, out_c = channels[i % len(channels)]
      h, w = sizes[i % len(sizes)]
      h, w = max(h, k + 1), max(w, k + 2)
      cases.append(Case(
          name=f"sweep{i:02d}", batch=1 + i % 3, h=h, w=w, in_c=in_c, out_c=out_c,
          kh=k, kw=k, stride=(s, s), padding=pad,
          side=bool(variant & 1), relu=bool(variant & 2) != bool(i % 2),
          per_channel=bool((variant >> 1) & 1) != bool(i % 3 == 0)))
      i += 1
  cases += [
      Case("rect", 2, 10, 14, 8, 8, 3, 1, stride=(2, 1), padding="SAME", side=True),
      Case("rect_valid", 1, 12, 7, 12, 16, 1, 5, stride=(1, 2), padding="VALID"),
      Case("dilated", 1, 15, 15, 16, 16, 3, 3, dilation=(2, 2), padding="SAME", side=True,
           per_channel=True),
      Case("dilated_s2", 2, 17, 16, 8, 12, 3, 3, stride=(2, 2), dilation=(2, 3),
           padding="VALID", relu=False),
      Case("nan_inf", 1, 8, 8, 16, 16, 3, 3, side=True, per_channel=True, relu=False,
           special="nan_inf"),
      Case("nan_inf_relu", 1, 8, 8, 16, 16, 3, 3, per_channel=True, special="nan_inf"),
      Case("big_acc", 1, 6, 6, 256, 8, 7, 7, padding="SAME", relu=False, special="big_acc"),
      Case("big_acc_pc", 1, 5, 5, 128, 16, 5, 5, padding="VALID", relu=False,
           per_channel=True, side=True, special="big_acc"),
      Case("deterministic", 2, 14, 14, 32, 32, 3, 3, side=True, deterministic=True),
      Case("one_by_one_wide", 1, 7, 7, 256, 256, 1, 1, per_channel=True),
      Case("lut", 1, 9, 9, 16, 16, 3, 3, side=True, per_channel=True, lut=True),
      Case("lut_x32", 2, 8, 8, 32, 32, 1, 1, lut=True),
      Case("lut_nan_inf", 1, 8, 8, 16, 16, 3, 3, per_channel=True, relu=False,
           special="nan_inf", lut=True),
      Case("resnet_56_64_k3", 8, 56, 56, 64, 64, 3, 3, per_channel=True, perf=True),
      Case("resnet_28_128_k3_s2", 8, 56, 56, 128, 128, 3, 3, stride=(2, 2), per_channel=True,
           side=False, perf=True),
      Case("resnet_14_256_k3", 8, 14, 14, 256, 256, 3, 3, per_channel=True, side=True,
           perf=True),
      Case("resnet_7_512_k1", 8, 7, 7, 512, 2048, 1, 1, per_channel=True, side=True,
           relu=False, perf=True),
      Case("stem_k7_s2", 4, 112, 112, 4, 64, 7, 7, stride=(2, 2), per_channel=True, perf=True),
      # The direct kernel (groups > 1) at a serving batch: MobileNetV2's depthwise layers.
      Case("mnv2_dw_112x32_n32", 32, 112, 112, 32, 32, 3, 3, per_channel=True, groups=32,
           perf=True),
      Case("mnv2_dw_56x144_n32", 32, 56, 56, 144, 144, 3, 3, per_channel=True, groups=144,
           side=True, perf=True),
      Case("mnv2_dw_14x576_n32", 32, 14, 14, 576, 576, 3, 3, per_channel=True, groups=576,
           perf=True),
  ]
  cases += grouped_cases()
  return cases


def grouped_cases():
  """Grouped and depthwise convolutions (groups > 1: the direct kernel, no
  cuDNN): MobileNetV2's depthwise 3x3 layers (stride 1 and 2, batch 1 and 8),
  a channel multiplier of 2, groups of 4, 8, 16 and 32 channels, dilation 2,
  asymmetric explicit and SAME padding, odd sizes, 5x5, all -128 operands.
  Small enough for --cpu-only, so none is a perf case."""
  dw = dict(kh=3, kw=3, per_channel=True)
  return [
      Case("mnv2_dw_112x32_s1", 1, 112, 112, 32, 32, groups=32, **dw),
      Case("mnv2_dw_112x96_s2", 1, 112, 112, 96, 96, stride=(2, 2), groups=96, **dw),
      Case("mnv2_dw_56x144_s1", 1, 56, 56, 144, 144, groups=144, side=True, **dw),
      Case("mnv2_dw_56x144_s2", 1, 56, 56, 144, 144, stride=(2, 2), groups=144, **dw),
      Case("mnv2_dw_14x384_s1", 1, 14, 14, 384, 384, groups=384, **dw),
      Case("mnv2_dw_7x960_s1", 1, 7, 7, 960, 960, groups=960, **dw),
      Case("mnv2_dw_28x192_s2_n8", 8, 28, 28, 192, 192, stride=(2, 2), groups=192, **dw),
      Case("dw_mult2_k5", 2, 13, 11, 12, 24, 5, 5, groups=12, side=True, relu=False),
      Case("dw_dilated", 1, 17, 15, 16, 16, 3, 3, dilation=(2, 2), groups=16, side=True,
           per_channel=True),
      Case("dw_asym_pad", 2, 9, 10, 8, 8, 3, 3, stride=(2, 2), padding=(0, 2, 1, 0),
           groups=8, relu=False),
      Case("grouped_4ch_k3", 2, 15, 13, 32, 32, 3, 3, groups=8, side=True, per_channel=True),
      Case("grouped_8ch_s2", 1, 28, 28, 64, 128, 3, 3, stride=(2, 2), groups=8,
           per_channel=True),
      Case("grouped_16ch_k1", 2, 14, 14, 64, 64, 1, 1, groups=4, relu=False),
      Case("grouped_8ch_d2_explicit", 1, 16, 17, 32, 16, 3, 3, dilation=(2, 2),
           padding=(3, 1, 0, 2), groups=4, side=True),
      Case("grouped_4ch_k5_valid", 3, 11, 9, 16, 8, 5, 5, padding="VALID", groups=4),
      Case("grouped_32ch_big_acc", 1, 7, 7, 64, 16, 7, 7, groups=2, relu=False,
           special="big_acc"),
      Case("dw_extreme", 2, 6, 7, 16, 16, 3, 3, groups=16, relu=False, special="extreme"),
      Case("grouped_8ch_extreme", 1, 9, 8, 32, 32, 5, 5, groups=4, per_channel=True,
           special="extreme"),
  ]


def make_data(case, seed):
  """Random NHWC input, HWIO filter, bias, scale, side input for `case`."""
  rng = np.random.default_rng(seed)
  if case.special in ("big_acc", "extreme"):
    x = np.full((case.batch, case.h, case.w, case.in_c), -128, np.int8)
    w = np.full((case.kh, case.kw, case.in_c // case.groups, case.out_c), -128, np.int8)
    w[..., 1::2] = 127
  else:
    x = rng.integers(-128, 128, (case.batch, case.h, case.w, case.in_c), dtype=np.int8)
    w = rng.integers(-128, 128, (case.kh, case.kw, case.in_c // case.groups, case.out_c),
                     dtype=np.int8)
  depth = case.kh * case.kw * (case.in_c // case.groups)
  n_scale = case.out_c if case.per_channel else 1
  # Scales that put outputs across the whole int8 range (and ties at .5).
  base = 64.0 / (128.0 * 128.0 * math.sqrt(depth))
  scale = (base * rng.uniform(0.25, 4.0, n_scale)).astype(np.float32)
  if case.special == "big_acc":
    scale = np.full(n_scale, 2.0 ** -24, np.float32) * rng.uniform(1, 2, n_scale).astype(np.float32)
  bias = (rng.integers(-100, 100, case.out_c) * 0.5).astype(np.float32)
  if case.special == "nan_inf":
    bias[0], bias[1] = np.inf, -np.inf
    bias[2] = np.nan
    if case.per_channel:
      scale[3], scale[4], scale[5] = np.nan, np.inf, -np.inf
    bias[6] = 1e30
  side_scale = np.float32(rng.choice([0.5, -0.75, 0.3, 1.0 / 3.0, 2.5]))
  # A scrambled table: each output value maps to a different byte.
  lut = rng.permutation(256).astype(np.int16).astype(np.int8) if case.lut else None
  # The side input's shape is the output's, known once the geometry is: prepare() makes it.
  return dict(x=x, w=w, bias=bias, scale=scale, side_scale=side_scale, side_seed=seed + 1,
              lut=lut)


class Lib:
  """ctypes wrapper of libtfi_gpu_harness.so."""

  def __init__(self, path):
    self.lib = ctypes.CDLL(path)
    L = self.lib
    p = ctypes.c_void_p
    i64 = ctypes.c_int64
    L.tfi_abi_version.restype = ctypes.c_int
    if L.tfi_abi_version() != 4 or L.tfi_sizeof_conv() != ctypes.sizeof(TfiConv):
      raise RuntimeError(f"{path}: unexpected ABI (version {L.tfi_abi_version()}, want 4; "
                         f"struct size {L.tfi_sizeof_conv()} vs {ctypes.sizeof(TfiConv)})")
    L.tfi_output_geometry.argtypes = [ctypes.POINTER(TfiConv), ctypes.POINTER(i64),
                                      ctypes.POINTER(i64), ctypes.POINTER(i64), p, ctypes.c_int]
    L.tfi_reference_nhwc.argtypes = [ctypes.POINTER(TfiConv), p, p, p, p, p, p, p, ctypes.c_int]
    L.tfi_emulate.argtypes = [ctypes.POINTER(TfiConv), ctypes.c_int, p, p, p, p, p, p, p,
                              ctypes.c_int]
    L.tfi_nhwc_to_nchw_vect_c.argtypes = [p, i64, i64, i64, i64, i64, p]
    L.tfi_nchw_vect_c_to_nhwc.argtypes = [p, i64, i64, i64, i64, i64, i64, p]
    L.tfi_hwio_to_oihw_vect_i.argtypes = [p, i64, i64, i64, i64, i64, p]
    L.tfi_oihw_vect_i_to_hwio.argtypes = [p, i64, i64, i64, i64, i64, i64, p]
    L.tfi_conv_spec.argtypes = [ctypes.POINTER(TfiConv), ctypes.c_int, ctypes.POINTER(i64), p,
                                ctypes.c_int]
    L.tfi_options_json.argtypes = [ctypes.c_int, p, ctypes.c_int]
    L.tfi_embedded_ptx.restype = ctypes.c_char_p
    L.tfi_init.argtypes = [ctypes.c_char_p, ctypes.c_char_p, p, ctypes.c_int]
    L.tfi_gpu_conv.argtypes = [ctypes.POINTER(TfiConv), p, p, p, p, p, p, p, p, ctypes.c_int, p,
                               ctypes.c_int]
    L.tfi_cache_stats.argtypes = [ctypes.POINTER(i64)]

  @staticmethod
  def _ptr(a):
    return None if a is None else a.ctypes.data_as(ctypes.c_void_p)

  @staticmethod
  def _check(rc, err):
    if rc != 0:
      raise RuntimeError(err.value.decode(errors="replace"))

  def output_geometry(self, conv):
    oh, ow = ctypes.c_int64(), ctypes.c_int64()
    pads = (ctypes.c_int64 * 4)()
    err = ctypes.create_string_buffer(1024)
    self._check(self.lib.tfi_output_geometry(ctypes.byref(conv), ctypes.byref(oh),
                                             ctypes.byref(ow), pads, err, 1024), err)
    return oh.value, ow.value, tuple(pads)

  def reference(self, conv, x, w, bias, side, scale):
    oh, ow, _ = self.output_geometry(conv)
    out = np.zeros((conv.batch, oh, ow, conv.out_c), np.int8)
    err = ctypes.create_string_buffer(1024)
    self._check(self.lib.tfi_reference_nhwc(
        ctypes.byref(conv), self._ptr(x), self._ptr(w), self._ptr(bias), self._ptr(side),
        self._ptr(scale), self._ptr(out), err, 1024), err)
    return out

  def emulate(self, conv, layout, xv, wv, bias, sidev, scale, out_shape):
    """The GPU pipeline on the host; layout is a key of LAYOUTS."""
    out = np.full(out_shape, 77, np.int8)
    err = ctypes.create_string_buffer(1024)
    self._check(self.lib.tfi_emulate(
        ctypes.byref(conv), LAYOUTS[layout], self._ptr(xv), self._ptr(wv), self._ptr(bias),
        self._ptr(sidev), self._ptr(scale), self._ptr(out), err, 1024), err)
    return out

  def nhwc_to_vect(self, x, vect=4):
    x = np.ascontiguousarray(x, np.int8)
    n, h, w, c = x.shape
    cp = -(-c // vect) * vect
    out = np.empty((n, cp // vect, h, w, vect), np.int8)
    self.lib.tfi_nhwc_to_nchw_vect_c(self._ptr(x), n, h, w, c, vect, self._ptr(out))
    return out

  def vect_to_nhwc(self, v, channels):
    v = np.ascontiguousarray(v, np.int8)
    n, c4, h, w, vect = v.shape
    out = np.empty((n, h, w, channels), np.int8)
    self.lib.tfi_nchw_vect_c_to_nhwc(self._ptr(v), n, c4 * vect, h, w, vect, channels,
                                     self._ptr(out))
    return out

  def hwio_to_vect(self, w, vect=4):
    w = np.ascontiguousarray(w, np.int8)
    kh, kw, i, o = w.shape
    ip = -(-i // vect) * vect
    out = np.empty((o, ip // vect, kh, kw, vect), np.int8)
    self.lib.tfi_hwio_to_oihw_vect_i(self._ptr(w), kh, kw, i, o, vect, self._ptr(out))
    return out

  def vect_to_hwio(self, v, in_channels):
    v = np.ascontiguousarray(v, np.int8)
    o, i4, kh, kw, vect = v.shape
    out = np.empty((kh, kw, in_channels, o), np.int8)
    self.lib.tfi_oihw_vect_i_to_hwio(self._ptr(v), o, i4 * vect, kh, kw, vect, in_channels,
                                     self._ptr(out))
    return out

  def conv_spec(self, conv, layout):
    out = (ctypes.c_int64 * 27)()
    err = ctypes.create_string_buffer(1024)
    self._check(self.lib.tfi_conv_spec(ctypes.byref(conv), LAYOUTS[layout], out, err, 1024), err)
    vals = list(out)
    return {t: dict(dims=vals[k * 9:k * 9 + 4], strides=vals[k * 9 + 4:k * 9 + 8],
                    vector_count=vals[k * 9 + 8]) for k, t in enumerate("xwy")}

  def options(self, deterministic=False):
    buf = ctypes.create_string_buffer(4096)
    self.lib.tfi_options_json(1 if deterministic else 0, buf, 4096)
    return json.loads(buf.value.decode())

  def embedded_ptx(self):
    return self.lib.tfi_embedded_ptx().decode()

  def init(self, cudnn, cuda):
    err = ctypes.create_string_buffer(2048)
    self._check(self.lib.tfi_init(cudnn.encode() if cudnn else None,
                                  cuda.encode() if cuda else None, err, 2048), err)

  def gpu_conv(self, conv, ptrs, stream, want_info=True):
    """One call; returns the run's info (plan, candidates, ...) as a dict, or
    {} without want_info (the timed calls: no 1 MiB buffer or JSON per call)."""
    info = ctypes.create_string_buffer(1 << 20) if want_info else None
    err = ctypes.create_string_buffer(4096)
    rc = self.lib.tfi_gpu_conv(ctypes.byref(conv), *[ctypes.c_void_p(p) if p else None
                                                       for p in ptrs],
                               ctypes.c_void_p(stream), info, (1 << 20) if want_info else 0,
                               err, 4096)
    meta = json.loads(info.value.decode() or "{}") if info is not None and info.value else {}
    if rc != 0:
      raise RuntimeError(err.value.decode(errors="replace") + (
          "\n  candidates: " + json.dumps(meta.get("candidates", []), indent=1)
          if meta.get("candidates") else ""))
    return meta

  def cache_stats(self):
    out = (ctypes.c_int64 * 5)()
    self.lib.tfi_cache_stats(out)
    return dict(zip(("lookups", "hits", "tunes", "evictions", "size"), list(out)))


def no_engine_offered(message):
  """Whether a NOT_FOUND refusal says only that no engine or algorithm was
  offered (no candidate ran, none was dropped for a wrong or failed result)."""
  head = message.split("\n")[0]
  if not head.startswith("NOT_FOUND: no cuDNN engine or algorithm runs this"):
    return False
  inside = head[head.find("(") + 1:head.rfind(")")]
  parts = [p.split(": ", 1)[1] for p in inside.split("; ") if ": " in p]
  offered_nothing = ("heuristics returned no engine", "no algorithm for this configuration",
                     "not used: ")
  return bool(parts) and all(p.startswith(offered_nothing) for p in parts)


def prepare(lib, case, seed):
  """Host inputs (NHWC and NCHW_VECT_C) and the reference output of `case`."""
  d = make_data(case, seed)
  side_scale = float(d["side_scale"])
  conv = case.conv_struct(side_scale, d["lut"], gpu=True)
  ref_conv = case.conv_struct(side_scale, d["lut"])
  oh, ow, pads = lib.output_geometry(conv)
  side = None
  if case.side:
    side = np.random.default_rng(d["side_seed"]).integers(
        -128, 128, (case.batch, oh, ow, case.out_c), dtype=np.int8)
  # The reference computes the layer as given (a depthwise one with groups = in_c), the GPU
  # its NCHW_VECT_C form (conv, gpu_filter).
  want = lib.reference(ref_conv, d["x"], d["w"], d["bias"], side, d["scale"])
  return dict(conv=conv, x=d["x"], w=d["w"], bias=d["bias"], scale=d["scale"], side=side,
              lut=d["lut"],
              xv=lib.nhwc_to_vect(d["x"]), wv=lib.hwio_to_vect(case.gpu_filter(d["w"])),
              sidev=None if side is None else lib.nhwc_to_vect(side),
              want=want, wantv=lib.nhwc_to_vect(want), out_hw=(oh, ow), pads=pads)


def mismatch_text(got, want):
  bad = np.argwhere(got != want)
  if bad.size == 0:
    return "exact"
  first = tuple(int(v) for v in bad[0])
  return (f"{len(bad)} of {want.size} differ; first at {first}: got {int(got[first])}, "
          f"want {int(want[first])}")


# -------------------------------------------------------------------------------------------
def run_cpu_only(lib, cases, args):
  failures = 0
  print(f"{'#':>3} {'case':<52} " + " ".join(f"{name:>8}" for name in LAYOUTS))
  for idx, case in enumerate(cases):
    p = prepare(lib, case, args.seed + idx)
    shape = p["wantv"].shape
    results = []
    for layout in LAYOUTS:
      # Grouped convolutions run a direct kernel whatever the layout (no cuDNN): once. The
      # emulation takes the GPU's path: the fused depthwise kernel for groups of one int8x4 word.
      if (layout == "x32" and case.in_c % 32) or (case.groups > 1 and layout != "x4"):
        results.append("-")
        continue
      got = lib.emulate(p["conv"], layout, p["xv"], p["wv"], p["bias"], p["sidev"], p["scale"],
                        shape)
      text = mismatch_text(got, p["wantv"])
      if text != "exact":
        failures += 1
        print(f"    {case.name} {layout}: {text}")
      results.append("exact" if text == "exact" else "DIFF")
    print(f"{idx:>3} {case.describe():<52} " + " ".join(f"{r:>8}" for r in results))
  print(f"cpu-only: {len(cases)} cases, {failures} mismatching runs")
  return failures == 0


def loaded_library(name):
  """Full path of a loaded shared library whose file name starts with `name`."""
  try:
    with open("/proc/self/maps") as f:
      for line in f:
        path = line.split()[-1] if "/" in line else ""
        if os.path.basename(path).startswith(name):
          return path
  except OSError:
    pass
  return None


def time_ms(torch, stream, fn, iters, warmup=3):
  with torch.cuda.stream(stream):
    for _ in range(warmup):
      fn()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record(stream)
    for _ in range(iters):
      fn()
    stop.record(stream)
  stop.synchronize()
  return start.elapsed_time(stop) / iters


def run_gpu(lib, cases, args):
  import torch  # pylint: disable=g-import-not-at-top
  import torch.nn.functional as F  # pylint: disable=g-import-not-at-top
  if not torch.cuda.is_available():
    print("harness: PyTorch sees no GPU", file=sys.stderr)
    return False
  dev = torch.device("cuda")
  torch.backends.cudnn.benchmark = True
  # Make PyTorch load its cuDNN, then share it (dlopen finds it by SONAME).
  F.conv2d(torch.zeros(1, 4, 4, 4, device=dev), torch.zeros(4, 4, 1, 1, device=dev))
  torch.cuda.synchronize()
  cudnn_path = args.cudnn or loaded_library("libcudnn.so.9") or "libcudnn.so.9"
  lib.init(cudnn_path, args.cuda)
  print(f"harness: GPU {torch.cuda.get_device_name()} (cc {torch.cuda.get_device_capability()}), "
        f"torch {torch.__version__}, torch cuDNN {torch.backends.cudnn.version()}, "
        f"our cuDNN {cudnn_path}")
  print(f"harness: options {lib.options()}")
  stream = torch.cuda.Stream()

  # References on all cores while the GPU works.
  pool = concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 4)
  futures = [pool.submit(prepare, lib, c, args.seed + i) for i, c in enumerate(cases)]

  rows, failures, errors = [], 0, 0
  header = (f"{'#':>3} {'case':<56} {'plan':<44} {'cands':>5} {'int8 ms':>9} "
            f"{'fp16 ms':>9} {'ratio':>6} bits")
  print(header)
  for idx, (case, fut) in enumerate(zip(cases, futures)):
    p = fut.result()
    row = dict(case=case.name, desc=case.describe(), groups=case.groups)
    try:
      t = {k: (None if p[k] is None else torch.from_numpy(np.ascontiguousarray(p[k])).to(dev))
           for k in ("xv", "wv", "bias", "scale", "sidev")}
      out = torch.empty(p["wantv"].shape, dtype=torch.int8, device=dev)
      ptrs = [t["xv"].data_ptr(), t["wv"].data_ptr(), t["bias"].data_ptr(),
              t["sidev"].data_ptr() if t["sidev"] is not None else 0, t["scale"].data_ptr(),
              out.data_ptr()]
      with torch.cuda.stream(stream):
        meta = lib.gpu_conv(p["conv"], ptrs, stream.cuda_stream)
      stream.synchronize()
      text = mismatch_text(out.cpu().numpy(), p["wantv"])
      want_plan = case.gpu_direct_plan
      if want_plan is not None and meta.get("plan") != want_plan:
        text = f"plan {meta.get('plan')}, expected {want_plan}; bits {text}"
      ok = text == "exact"
      if case.deterministic:  # a second run gives the same bits
        with torch.cuda.stream(stream):
          out2 = torch.empty_like(out)
          lib.gpu_conv(p["conv"], ptrs[:5] + [out2.data_ptr()], stream.cuda_stream)
        stream.synchronize()
        ok &= bool(torch.equal(out, out2))
      failures += 0 if ok else 1
      ours = time_ms(torch, stream,
                     lambda: lib.gpu_conv(p["conv"], ptrs, stream.cuda_stream, want_info=False),
                     args.iters)
      # PyTorch fp16, channels_last, same geometry (input pre-padded for SAME).
      top, bottom, left, right = p["pads"]
      xh = torch.from_numpy(p["x"]).to(dev).permute(0, 3, 1, 2).half()
      xh = F.pad(xh, (left, right, top, bottom)).contiguous(memory_format=torch.channels_last)
      wh = torch.from_numpy(p["w"]).to(dev).permute(3, 2, 0, 1).half().contiguous(
          memory_format=torch.channels_last)
      theirs = time_ms(torch, stream, lambda: F.conv2d(xh, wh, stride=case.stride,
                                                       dilation=case.dilation,
                                                       groups=case.groups), args.iters)
      row.update(plan=meta.get("plan"), candidates=meta.get("candidates", []),
                 tuned_now=meta.get("tuned_now"), device=meta.get("device"),
                 int8_ms=ours, fp16_ms=theirs, bits=text)
      n_ok = sum(1 for c in meta.get("candidates", []) if c["outcome"].startswith("ok"))
      print(f"{idx:>3} {case.describe():<56} {str(meta.get('plan'))[:44]:<44} "
            f"{n_ok:>2}/{len(meta.get('candidates', [])):<2} {ours:>9.4f} {theirs:>9.4f} "
            f"{ours / theirs:>6.2f} {'OK' if ok else 'MISMATCH: ' + text}")
      if args.verbose or not ok:
        for c in meta.get("candidates", []):
          print(f"      {c['name']:<56} {c['outcome'][:90]} "
                f"{'' if c['time_ms'] < 0 else '%.4f ms' % c['time_ms']}")
    except Exception as e:  # pylint: disable=broad-except
      errors += 1
      row.update(error=str(e))
      print(f"{idx:>3} {case.describe():<56} ERROR: {e}")
    rows.append(row)
  pool.shutdown()

  # Candidates the autotuner's sample check dropped (cuDNN results that are not
  # the exact sums): which, how often, and one example of each.
  wrong = {}
  for r in rows:
    for c in r.get("candidates", []):
      if c["outcome"].startswith("dropped: wrong"):
        wrong.setdefault(c["name"], []).append((r["desc"], c["outcome"]))
  if wrong:
    print(f"sample check dropped {sum(len(v) for v in wrong.values())} wrong candidates:")
    for name, seen in sorted(wrong.items()):
      print(f"  {name:<40} in {len(seen)} cases, e.g. {seen[0][0]}: {seen[0][1][8:]}")

  # Forced paths on a few cases: legacy API, each operand layout, autotuning off.
  forced = []
  unavailable = 0
  if not args.no_forced:
    # Grouped calls never reach cuDNN: a forced legacy path (which refuses asymmetric
    # padding) leaves them on the direct kernel.
    def pick_grouped(c):
      return c.groups > 1 and not isinstance(c.padding, str)

    for env, pick in ((("TF_FUSED_INT8_GPU_PATH", "legacy"),
                       lambda c: c.padding == "VALID" or (c.kh % 2 == 1 and c.stride == (1, 1))),
                      (("TF_FUSED_INT8_GPU_LAYOUT", "x4"), lambda c: True),
                      (("TF_FUSED_INT8_GPU_LAYOUT", "x32"), lambda c: c.in_c % 32 == 0),
                      (("TF_FUSED_INT8_GPU_LAYOUT", "nhwc"), lambda c: True),
                      (("TF_FUSED_INT8_GPU_AUTOTUNE", "0"), lambda c: True),
                      (("TF_FUSED_INT8_GPU_PATH", "legacy"), pick_grouped)):
      # The cuDNN paths' reruns take ungrouped cases (grouped ones never reach cuDNN).
      chosen = [(i, c) for i, c in enumerate(cases)
                if pick(c) and not c.perf and (c.groups > 1) == (pick is pick_grouped)][:6]
      os.environ[env[0]] = env[1]
      try:
        for i, c in chosen:
          p = prepare(lib, c, args.seed + i)
          t = {k: (None if p[k] is None else torch.from_numpy(np.ascontiguousarray(p[k])).to(dev))
               for k in ("xv", "wv", "bias", "scale", "sidev")}
          out = torch.empty(p["wantv"].shape, dtype=torch.int8, device=dev)
          ptrs = [t["xv"].data_ptr(), t["wv"].data_ptr(), t["bias"].data_ptr(),
                  t["sidev"].data_ptr() if t["sidev"] is not None else 0, t["scale"].data_ptr(),
                  out.data_ptr()]
          try:
            with torch.cuda.stream(stream):
              meta = lib.gpu_conv(p["conv"], ptrs, stream.cuda_stream)
            stream.synchronize()
            text = mismatch_text(out.cpu().numpy(), p["wantv"])
            failures += 0 if text == "exact" else 1
            line = f"{meta.get('plan')}: {text}"
          except Exception as e:  # pylint: disable=broad-except
            if no_engine_offered(str(e)):
              # A clear refusal: this cuDNN offers no engine for the forced
              # layout on this GPU (nothing ran, nothing was wrong).
              unavailable += 1
              line = "UNAVAILABLE: " + str(e).split("\n")[0]
            else:
              errors += 1
              line = f"ERROR: {e}"
          forced.append(dict(env=f"{env[0]}={env[1]}", case=c.name, result=line))
          print(f"forced {env[0]}={env[1]:<7} {c.describe():<56} {line}")
      finally:
        del os.environ[env[0]]

  stats = lib.cache_stats()

  def geomean_ratio(rs):
    ratios = [r["int8_ms"] / r["fp16_ms"] for r in rs if "int8_ms" in r and r["fp16_ms"] > 0]
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")

  gmean = geomean_ratio(rows)
  grouped = [r for r in rows if r["groups"] > 1]
  if grouped:
    exact = sum(1 for r in grouped if r.get("bits") == "exact")
    fused = sum(1 for r in grouped if r.get("plan") == "direct/depthwise")
    direct = sum(1 for r in grouped if r.get("plan") == "direct/grouped")
    print(f"harness: grouped/depthwise: {len(grouped)} cases, {exact} exact, {fused} on the "
          f"fused depthwise kernel, {direct} on the direct kernel, int8/fp16 time ratio geomean "
          f"{geomean_ratio(grouped):.2f}")
  if unavailable:
    print(f"harness: {unavailable} forced runs refused cleanly: cuDNN offers no engine for "
          "that layout here")
  print(f"harness: {len(cases)} cases, {failures} mismatching, {errors} errors; "
        f"autotune cache {stats}; int8/fp16 time ratio geomean {gmean:.2f}")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(dict(rows=rows, forced=forced, cache=stats, gmean_ratio=gmean,
                     failures=failures, errors=errors, unavailable=unavailable,
                     wrong_candidates={k: len(v) for k, v in wrong.items()}), f, indent=1)
  return failures == 0 and errors == 0


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--lib", required=True, help="path of libtfi_gpu_harness.so")
  ap.add_argument("--cpu-only", action="store_true",
                  help="no GPU: check the host emulation of the GPU pipeline instead")
  ap.add_argument("--cudnn", default=None, help="cuDNN library (default: PyTorch's)")
  ap.add_argument("--cuda", default="libcuda.so.1", help="CUDA driver library")
  ap.add_argument("--limit", type=int, default=0, help="run only the first N cases")
  ap.add_argument("--skip-perf", action="store_true", help="leave out the large timing shapes")
  ap.add_argument("--iters", type=int, default=20, help="timed iterations per shape")
  ap.add_argument("--seed", type=int, default=1234)
  ap.add_argument("--json", default=None, help="write all results here")
  ap.add_argument("--no-forced", action="store_true", help="skip the forced-path reruns")
  ap.add_argument("--verbose", action="store_true", help="print every autotuning candidate")
  args = ap.parse_args(argv)
  lib = Lib(args.lib)
  cases = make_cases()
  if args.skip_perf or args.cpu_only:
    cases = [c for c in cases if not c.perf]
  if args.limit:
    cases = cases[:args.limit]
  t0 = time.time()
  ok = run_cpu_only(lib, cases, args) if args.cpu_only else run_gpu(lib, cases, args)
  print(f"harness: {'PASS' if ok else 'FAIL'} in {time.time() - t0:.1f} s")
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
