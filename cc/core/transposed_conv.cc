// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/transposed_conv.h"

#include <cstdint>
#include <string>

#include "cc/core/depth_to_space.h"

namespace tf_fused_int8 {
namespace {

int64_t RoundUp64(int64_t x) { return (x + 63) / 64 * 64; }

// The phase blocks in depth-to-space's block range (the interleave is one).
bool BlocksInRange(const TransposedConvPhases& p) {
  return DepthToSpaceBlockInRange(p.block_h) && DepthToSpaceBlockInRange(p.block_w);
}

// One axis of the check: `n` boxes (start, taps) inside a filter of `k`
// taps padded by `before` and `after`.
std::string CheckAxis(const char* axis, int64_t k, int64_t before, int64_t after,
                      const std::vector<int64_t>& start, const std::vector<int64_t>& taps) {
  for (size_t r = 0; r < start.size(); ++r) {
    const int64_t a = start[r], n = taps[r];
    if (a < 0 || n < 1 || a >= k || n > k - a) {
      return std::string("phase ") + axis + " " + std::to_string(r) + " reads taps [" +
             std::to_string(a) + ", " + std::to_string(a) + " + " + std::to_string(n) +
             ") of a filter of " + std::to_string(k) + ": need at least one tap, all inside";
    }
    if (before - a < 0 || after - (k - a - n) < 0) {
      return std::string("phase ") + axis + " " + std::to_string(r) + " (taps from " +
             std::to_string(a) + ", " + std::to_string(n) +
             " of them) would need a negative padding: the convolution's padding is " +
             std::to_string(before) + " before and " + std::to_string(after) + " after";
    }
  }
  return "";
}

}  // namespace

std::string CheckTransposedConvPhases(const ConvGeometry& g, const TransposedConvPhases& p) {
  if (!BlocksInRange(p)) {
    return "the phase blocks must be in [1, 65536], got " + std::to_string(p.block_h) + " x " +
           std::to_string(p.block_w);
  }
  if (static_cast<int64_t>(p.row_start.size()) != p.block_h ||
      static_cast<int64_t>(p.row_taps.size()) != p.block_h ||
      static_cast<int64_t>(p.col_start.size()) != p.block_w ||
      static_cast<int64_t>(p.col_taps.size()) != p.block_w) {
    return "the phase boxes need one (start, taps) per phase row (" + std::to_string(p.block_h) +
           ") and per phase column (" + std::to_string(p.block_w) + ")";
  }
  if (g.stride_h != 1 || g.stride_w != 1 || g.dilation_h != 1 || g.dilation_w != 1 ||
      g.groups != 1) {
    return "a transposed convolution's phases need the sub-pixel convolution's strides, "
           "dilations and groups to be 1";
  }
  if (g.out_c % p.Phases() != 0) {
    return "the sub-pixel convolution's " + std::to_string(g.out_c) +
           " output channels must be a multiple of the " + std::to_string(p.Phases()) +
           " phases (" + std::to_string(p.block_h) + " x " + std::to_string(p.block_w) + ")";
  }
  std::string err = CheckAxis("row", g.filter_h, g.pad_top, g.pad_bottom, p.row_start, p.row_taps);
  if (err.empty()) {
    err = CheckAxis("column", g.filter_w, g.pad_left, g.pad_right, p.col_start, p.col_taps);
  }
  if (!err.empty()) return err;
  const int64_t full_h = g.out_h * p.block_h, full_w = g.out_w * p.block_w;
  if (p.crop_top < 0 || p.crop_bottom < 0 || p.crop_left < 0 || p.crop_right < 0 ||
      p.crop_top > full_h || p.crop_bottom > full_h - p.crop_top || p.crop_left > full_w ||
      p.crop_right > full_w - p.crop_left) {
    return "the crop (" + std::to_string(p.crop_top) + ", " + std::to_string(p.crop_bottom) +
           ", " + std::to_string(p.crop_left) + ", " + std::to_string(p.crop_right) +
           ") must be non-negative and within the " + std::to_string(full_h) + " x " +
           std::to_string(full_w) + " interleaved phases";
  }
  return "";
}

std::string ParseTransposedConvRecords(const std::vector<int64_t>& records, int64_t steps,
                                       std::vector<std::pair<int64_t, TransposedConvPhases>>* out) {
  out->clear();
  const size_t n = records.size();
  size_t at = 0;
  while (at < n) {
    const std::string record = "transpose_steps record " + std::to_string(out->size()) +
                               " (from entry " + std::to_string(at) + ")";
    if (n - at < 7) {
      return record + ": needs at least 7 entries (step, block_h, block_w, four crops), " +
             std::to_string(n - at) + " left";
    }
    const int64_t step = records[at];
    if (step < 0 || step >= steps || (!out->empty() && step <= out->back().first)) {
      return record + ": its step must be in [0, " + std::to_string(steps) +
             ") and after the previous record's, got " + std::to_string(step);
    }
    TransposedConvPhases p;
    p.block_h = records[at + 1];
    p.block_w = records[at + 2];
    if (!BlocksInRange(p)) {
      return record + ": block_h and block_w must be in [1, 65536], got " +
             std::to_string(p.block_h) + " and " + std::to_string(p.block_w);
    }
    p.crop_top = records[at + 3];
    p.crop_bottom = records[at + 4];
    p.crop_left = records[at + 5];
    p.crop_right = records[at + 6];
    for (int64_t crop : {p.crop_top, p.crop_bottom, p.crop_left, p.crop_right}) {
      if (crop < 0 || crop > (int64_t{1} << 40)) {
        return record + ": the crops must be in [0, 2^40], got " + std::to_string(crop);
      }
    }
    at += 7;
    const size_t boxes = 2 * static_cast<size_t>(p.block_h + p.block_w);
    if (n - at < boxes) {
      return record + ": needs " + std::to_string(boxes) + " box entries ((start, taps) per " +
             "phase row and column), " + std::to_string(n - at) + " left";
    }
    for (int64_t r = 0; r < p.block_h; ++r, at += 2) {
      p.row_start.push_back(records[at]);
      p.row_taps.push_back(records[at + 1]);
    }
    for (int64_t r = 0; r < p.block_w; ++r, at += 2) {
      p.col_start.push_back(records[at]);
      p.col_taps.push_back(records[at + 1]);
    }
    out->emplace_back(step, std::move(p));
  }
  return "";
}

int64_t TransposedConvFilterBytes(int64_t in_c, int64_t out_c, const TransposedConvPhases& p) {
  if (!BlocksInRange(p) || static_cast<int64_t>(p.row_taps.size()) != p.block_h ||
      static_cast<int64_t>(p.col_taps.size()) != p.block_w || in_c < 1 || out_c < 1 ||
      out_c % p.Phases() != 0) {
    return -1;
  }
  // Every factor at most 2^24 (the sequence op's filter shape bound) or the
  // tap counts (at most the filter's): far from int64's range.
  const int64_t co = out_c / p.Phases();
  int64_t total = 0;
  for (int64_t n : p.row_taps) {
    for (int64_t m : p.col_taps) {
      if (n < 1 || m < 1 || n > (int64_t{1} << 24) || m > (int64_t{1} << 24)) return -1;
      const double size = static_cast<double>(n) * m * in_c * co;
      if (size > static_cast<double>(int64_t{1} << 40)) return -1;
      total = RoundUp64(total) + n * m * in_c * co;
      if (total > (int64_t{1} << 50)) return -1;
    }
  }
  return total;
}

void TransposedConvOutputShape(const ConvGeometry& g, const TransposedConvPhases& p,
                               int64_t* h, int64_t* w, int64_t* c) {
  *h = g.out_h * p.block_h - p.crop_top - p.crop_bottom;
  *w = g.out_w * p.block_w - p.crop_left - p.crop_right;
  *c = g.out_c / p.Phases();
}

std::string RunTransposedConv(const FusedConvArgs& a, const TransposedConvPhases& p,
                              int8_t* scratch, KernelPath path,
                              const ParallelFor& parallel_for) {
  const ConvGeometry& g = a.geo;
  const int64_t co = g.out_c / p.Phases();
  const int64_t phase_elements = g.batch * g.out_h * g.out_w * co;
  int64_t h, w, c;
  TransposedConvOutputShape(g, p, &h, &w, &c);
  if (phase_elements == 0 || h == 0 || w == 0) return "";
  int64_t filter_offset = 0;
  for (int64_t rh = 0; rh < p.block_h; ++rh) {
    for (int64_t rw = 0; rw < p.block_w; ++rw) {
      const int64_t phase = rh * p.block_w + rw;
      FusedConvArgs f = a;
      ConvGeometry& pg = f.geo;
      pg.filter_h = p.row_taps[rh];
      pg.filter_w = p.col_taps[rw];
      pg.out_c = co;
      // The box's taps of the padded input: the window moves by the box's
      // start, the padding after it by the taps past its end.
      pg.pad_top = g.pad_top - p.row_start[rh];
      pg.pad_bottom = g.pad_bottom - (g.filter_h - p.row_start[rh] - p.row_taps[rh]);
      pg.pad_left = g.pad_left - p.col_start[rw];
      pg.pad_right = g.pad_right - (g.filter_w - p.col_start[rw] - p.col_taps[rw]);
      std::string err = ComputeGeometry(Padding::kExplicit, &pg);
      if (err.empty() && (pg.out_h != g.out_h || pg.out_w != g.out_w)) {
        err = "internal: a phase's output size differs from the sub-pixel convolution's";
      }
      if (!err.empty()) return "phase (" + std::to_string(rh) + ", " + std::to_string(rw) + "): " + err;
      filter_offset = RoundUp64(filter_offset);
      f.filter = a.filter + filter_offset;
      filter_offset += pg.FilterElements();
      f.bias = a.bias + phase * co;
      if (a.per_channel_scale) f.conv_input_scale = a.conv_input_scale + phase * co;
      f.side_input = nullptr;
      f.side_input_scale = 0.0f;
      f.output = scratch + phase * phase_elements;
      err = RunFusedConv(f, path, parallel_for);
      if (!err.empty()) return err;
    }
  }
  InterleavePhasesNhwc(scratch, phase_elements, g.batch, g.out_h, g.out_w, co, p.block_h,
                       p.block_w, p.crop_top, p.crop_left, h, w, a.output, parallel_for);
  return "";
}

}  // namespace tf_fused_int8
