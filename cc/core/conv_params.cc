// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/conv_params.h"

#include <limits>
#include <string>

namespace tf_fused_int8 {
namespace {

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// a * b, or -1 when the product of two non-negative numbers exceeds int32.
int64_t MulCapped(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return -1;
  if (a == 0 || b == 0) return 0;
  if (a > kMaxInt32 / b) return -1;
  return a * b;
}

int64_t Product(std::initializer_list<int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims) {
    p = MulCapped(p, d);
    if (p < 0) return -1;
  }
  return p;
}

std::string Str(int64_t v) { return std::to_string(v); }

// TensorFlow's windowed output size for SAME/VALID padding.
std::string OutputSize(const char* dim_name, int64_t in, int64_t filter,
                       int64_t stride, int64_t dilation, Padding padding,
                       int64_t* out, int64_t* pad_before, int64_t* pad_after) {
  const int64_t effective = (filter - 1) * dilation + 1;
  if (padding == Padding::kExplicit) {
    // All terms are in [0, 2^31-1]: the int64 sum cannot overflow.
    const int64_t padded = in + *pad_before + *pad_after;
    if (padded < effective) {
      return std::string("conv_input ") + dim_name + " (" + Str(in) +
             ") plus explicit padding (" + Str(*pad_before) + " + " +
             Str(*pad_after) + ") is smaller than the effective filter " +
             dim_name + " (" + Str(effective) +
             " = (filter " + dim_name + " - 1) * dilation + 1): the output "
             "would be empty";
    }
    *out = (padded - effective) / stride + 1;
    return "";
  }
  if (padding == Padding::kValid) {
    if (in < effective) {
      return std::string("conv_input ") + dim_name + " (" + Str(in) +
             ") is smaller than the effective filter " + dim_name + " (" +
             Str(effective) + " = (filter " + dim_name + " - 1) * dilation + 1) "
             "with padding VALID: the output would be empty";
    }
    *out = (in - effective) / stride + 1;
    *pad_before = *pad_after = 0;
  } else {
    *out = (in + stride - 1) / stride;
    const int64_t needed = (*out - 1) * stride + effective - in;
    const int64_t total = needed > 0 ? needed : 0;
    *pad_before = total / 2;
    *pad_after = total - *pad_before;
  }
  return "";
}

}  // namespace

std::string ComputeGeometry(Padding padding, ConvGeometry* g) {
  struct Named { const char* name; int64_t value; };
  const Named sizes[] = {
      {"conv_input batch", g->batch},    {"conv_input height", g->in_h},
      {"conv_input width", g->in_w},     {"conv_input depth", g->in_c},
      {"filter height", g->filter_h},    {"filter width", g->filter_w},
      {"filter output depth", g->out_c},
  };
  for (const Named& s : sizes) {
    if (s.value < 0 || s.value > kMaxInt32) {
      return std::string(s.name) + " must be in [0, 2^31-1], got " +
             Str(s.value);
    }
  }
  if (g->groups < 1 || g->groups > kMaxInt32) {
    return "groups must be in [1, 2^31-1], got " + Str(g->groups);
  }
  if (g->in_c % g->groups != 0) {
    return "conv_input depth (" + Str(g->in_c) +
           ") must be a multiple of groups (" + Str(g->groups) +
           " = conv_input depth / filter input depth)";
  }
  if (g->out_c % g->groups != 0) {
    return "filter output depth (" + Str(g->out_c) +
           ") must be a multiple of groups (" + Str(g->groups) +
           " = conv_input depth / filter input depth)";
  }
  if (g->filter_h < 1 || g->filter_w < 1) {
    return "filter spatial dimensions must be positive, got " +
           Str(g->filter_h) + "x" + Str(g->filter_w);
  }
  const Named steps[] = {{"strides height", g->stride_h},
                         {"strides width", g->stride_w},
                         {"dilations height", g->dilation_h},
                         {"dilations width", g->dilation_w}};
  for (const Named& s : steps) {
    if (s.value < 1 || s.value > kMaxInt32) {
      return std::string(s.name) + " must be in [1, 2^31-1], got " +
             Str(s.value);
    }
  }
  if (padding == Padding::kExplicit) {
    const Named pads[] = {{"explicit padding top", g->pad_top},
                          {"explicit padding bottom", g->pad_bottom},
                          {"explicit padding left", g->pad_left},
                          {"explicit padding right", g->pad_right}};
    for (const Named& s : pads) {
      if (s.value < 0 || s.value > kMaxInt32) {
        return std::string(s.name) + " must be in [0, 2^31-1], got " +
               Str(s.value);
      }
    }
  }
  // Effective filter extent must not overflow.
  if (MulCapped(g->filter_h - 1, g->dilation_h) < 0 ||
      MulCapped(g->filter_w - 1, g->dilation_w) < 0) {
    return "(filter size - 1) * dilation exceeds 2^31-1";
  }
  if (Product({g->batch, g->in_h, g->in_w, g->in_c}) < 0) {
    return "conv_input has more than 2^31-1 elements";
  }
  const int64_t group_in_c = g->in_c / g->groups;
  if (Product({g->filter_h, g->filter_w, group_in_c, g->out_c}) < 0) {
    return "filter has more than 2^31-1 elements";
  }
  // Exact int32 accumulation: |acc| <= depth * 128 * 128 < 2^31.
  const int64_t depth = Product({g->filter_h, g->filter_w, group_in_c});
  if (depth < 0 || depth > kMaxInt32 / (128 * 128)) {
    return "filter height * width * input depth (" +
           Str(g->filter_h * g->filter_w) + " * " + Str(group_in_c) +
           ") exceeds " + Str(kMaxInt32 / (128 * 128)) +
           ", the largest reduction whose int32 accumulator cannot overflow";
  }
  std::string err = OutputSize("height", g->in_h, g->filter_h, g->stride_h,
                               g->dilation_h, padding, &g->out_h, &g->pad_top,
                               &g->pad_bottom);
  if (!err.empty()) return err;
  err = OutputSize("width", g->in_w, g->filter_w, g->stride_w, g->dilation_w,
                   padding, &g->out_w, &g->pad_left, &g->pad_right);
  if (!err.empty()) return err;
  if (g->out_h > kMaxInt32 || g->out_w > kMaxInt32) {
    return "output height/width (" + Str(g->out_h) + "x" + Str(g->out_w) +
           ") exceeds 2^31-1";
  }
  if (Product({g->batch, g->out_h, g->out_w, g->out_c}) < 0) {
    return "output has more than 2^31-1 elements";
  }
  return "";
}

}  // namespace tf_fused_int8
