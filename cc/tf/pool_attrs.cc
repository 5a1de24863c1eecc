// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/tf/pool_attrs.h"

#include <algorithm>
#include <string>
#include <vector>

namespace tf_fused_int8 {
namespace {

std::string List(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

absl::Status Window(const char* op_name, const char* name,
                    const std::vector<int32_t>& v) {
  if (v.size() != 4 || v[0] != 1 || v[3] != 1 || v[1] < 1 || v[2] < 1) {
    return absl::InvalidArgumentError(
        std::string(op_name) + ": " + name +
        " must be [1, height, width, 1] (NHWC) with positive height and "
        "width, got " + List(v));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PoolAttrs(const char* op_name, const std::vector<int32_t>& ksize,
                       const std::vector<int32_t>& strides,
                       const std::vector<int32_t>& zero_paddings,
                       const std::string& padding_name, PoolGeometry* g,
                       Padding* padding) {
  absl::Status s = Window(op_name, "ksize", ksize);
  if (!s.ok()) return s;
  s = Window(op_name, "strides", strides);
  if (!s.ok()) return s;
  if (!zero_paddings.empty() &&
      (zero_paddings.size() != 4 ||
       *std::min_element(zero_paddings.begin(), zero_paddings.end()) < 0)) {
    return absl::InvalidArgumentError(
        std::string(op_name) +
        ": zero_paddings must be empty or 4 non-negative values [top, "
        "bottom, left, right], got " + List(zero_paddings));
  }
  if (padding_name != "SAME" && padding_name != "VALID") {
    return absl::InvalidArgumentError(std::string(op_name) +
                                      ": padding must be SAME or VALID, got " +
                                      padding_name);
  }
  *padding = padding_name == "SAME" ? Padding::kSame : Padding::kValid;
  g->window_h = ksize[1];
  g->window_w = ksize[2];
  g->stride_h = strides[1];
  g->stride_w = strides[2];
  if (!zero_paddings.empty()) {
    g->zero_top = zero_paddings[0];
    g->zero_bottom = zero_paddings[1];
    g->zero_left = zero_paddings[2];
    g->zero_right = zero_paddings[3];
  }
  return absl::OkStatus();
}

}  // namespace tf_fused_int8
