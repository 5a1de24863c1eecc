// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/gpu/plan.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace tf_fused_int8 {
namespace gpu {

Status ValidateGpuGeometry(const ConvGeometry& g) {
  if (g.in_c % 4 != 0) {
    return InvalidArgument("NCHW_VECT_C needs an input depth that is a multiple of 4, got " +
                           std::to_string(g.in_c));
  }
  if (g.out_c % 4 != 0) {
    return InvalidArgument(
        "NCHW_VECT_C needs an output depth (filter dimension 0) that is a multiple of 4, got " +
        std::to_string(g.out_c) +
        "; pad the filter's output channels with zeros (and bias with anything) and drop them "
        "afterwards");
  }
  // Grouped convolutions (the direct kernel). ComputeGeometry checks the
  // first two; checked again here because the kernels divide by groups and by
  // out_c / groups.
  const std::string groups = "groups (" + std::to_string(g.groups) +
                             " = conv_input depth / filter input depth)";
  if (g.groups < 1) return InvalidArgument(groups + " must be at least 1");
  if (g.in_c % g.groups != 0) {
    return InvalidArgument("conv_input depth (" + std::to_string(g.in_c) +
                           ") must be a multiple of " + groups);
  }
  if (g.out_c % g.groups != 0) {
    return InvalidArgument("filter output depth (filter dimension 0, " + std::to_string(g.out_c) +
                           ") must be a multiple of " + groups);
  }
  if (g.GroupInC() % 4 != 0) {
    // Unreachable from the op: NCHW_VECT_C's filter input depth is
    // 4 * filter dimension 1.
    return InvalidArgument(
        groups + " leaves " + std::to_string(g.GroupInC()) +
        " input channels per group (the filter input depth); NCHW_VECT_C needs a multiple of 4: "
        "filter shape [out_depth, conv_input depth / groups / 4, height, width, 4]. A depthwise "
        "layer runs as groups of 4 channels with one channel per lane "
        "(tf_fused_int8.depthwise_filter_to_oihw_vect_i)");
  }
  // ComputeGeometry already bounds every tensor below 2^31 elements, so the
  // device kernels' 32-bit word indices (elements / 4) cannot overflow.
  return Status::Ok();
}

bool SymmetricPadding(const ConvGeometry& g) {
  return g.pad_top == g.pad_bottom && g.pad_left == g.pad_right;
}

const char* ConvLayoutName(ConvLayout l) {
  switch (l) {
    case ConvLayout::kVect4: return "x4";
    case ConvLayout::kVect32: return "x32";
    case ConvLayout::kNhwcInt32: return "nhwc-i32";
    case ConvLayout::kNhwcFloat: return "nhwc-f32";
  }
  return "?";
}

bool LayoutIsVectorized(ConvLayout l) {
  return l == ConvLayout::kVect4 || l == ConvLayout::kVect32;
}

int64_t TensorSpec::Bytes() const {
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    if (dims[i] == 0) return 0;
    last += (dims[i] - 1) * strides[i];
  }
  return (last + 1) * UnitBytes();
}

int64_t TensorSpec::ByteOffset(int64_t n, int64_t c, int64_t h, int64_t w) const {
  const int64_t v = vector_count;
  return UnitBytes() * (n * strides[0] + (c / v) * strides[1] + h * strides[2] + w * strides[3]) +
         (type == ElementType::kInt8 ? c % v : 0);
}

ConvOutput ConvSpec::Output(const void* y_ptr) const {
  ConvOutput o{};
  o.ptr = y_ptr;
  o.n_stride = y.strides[0];
  o.c_stride = y.strides[1];
  o.p_stride = y.strides[3];  // p = oy * Wo + ox: the W stride, when H stride = Wo * W stride
  o.is_int32 = y.type == ElementType::kInt32 ? 1 : 0;
  return o;
}

namespace {

// Packed strides of [d0, d1, d2, d3] in NCHW order (dims given as N, C, H, W).
void PackedNchw(int64_t n, int64_t c, int64_t h, int64_t w, TensorSpec* t) {
  t->dims[0] = n;
  t->dims[1] = c;
  t->dims[2] = h;
  t->dims[3] = w;
  t->strides[3] = 1;
  t->strides[2] = w;
  t->strides[1] = h * w;
  t->strides[0] = c * h * w;
}

// Packed strides with channels innermost (NHWC / KRSC), dims still N, C, H, W.
void PackedNhwc(int64_t n, int64_t c, int64_t h, int64_t w, TensorSpec* t) {
  t->dims[0] = n;
  t->dims[1] = c;
  t->dims[2] = h;
  t->dims[3] = w;
  t->strides[1] = 1;
  t->strides[3] = c;
  t->strides[2] = w * c;
  t->strides[0] = h * w * c;
}

}  // namespace

ConvSpec MakeConvSpec(const ConvGeometry& g, ConvLayout layout, int64_t alignment) {
  ConvSpec s;
  s.layout = layout;
  s.x.uid = kUidX;
  s.w.uid = kUidW;
  s.y.uid = kUidY;
  s.x.alignment = s.w.alignment = alignment;
  s.y.alignment = 16;  // our own scratch
  if (LayoutIsVectorized(layout)) {
    const int64_t vect = layout == ConvLayout::kVect32 ? 32 : 4;
    s.padded_in_c = (g.in_c + vect - 1) / vect * vect;
    const int64_t cv = s.padded_in_c / vect;
    PackedNchw(g.batch, cv, g.in_h, g.in_w, &s.x);
    PackedNchw(g.out_c, cv, g.filter_h, g.filter_w, &s.w);
    s.x.vector_count = s.w.vector_count = vect;
    s.x.vectorized_dim = s.w.vectorized_dim = 1;
    s.y.type = ElementType::kFloat;
    PackedNchw(g.batch, g.out_c, g.out_h, g.out_w, &s.y);
  } else {
    s.padded_in_c = g.in_c;
    PackedNhwc(g.batch, g.in_c, g.in_h, g.in_w, &s.x);
    PackedNhwc(g.out_c, g.in_c, g.filter_h, g.filter_w, &s.w);
    s.y.type = layout == ConvLayout::kNhwcInt32 ? ElementType::kInt32 : ElementType::kFloat;
    PackedNhwc(g.batch, g.out_c, g.out_h, g.out_w, &s.y);
  }
  s.pre_pad[0] = g.pad_top;
  s.pre_pad[1] = g.pad_left;
  s.post_pad[0] = g.pad_bottom;
  s.post_pad[1] = g.pad_right;
  s.stride[0] = g.stride_h;
  s.stride[1] = g.stride_w;
  s.dilation[0] = g.dilation_h;
  s.dilation[1] = g.dilation_w;
  return s;
}

bool X32Candidate(const ConvGeometry& g, int cc_major, int cc_minor) {
  return g.in_c > 0 && g.in_c % 32 == 0 && (cc_major * 10 + cc_minor) >= 75;
}

std::vector<ConvLayout> AutoLayouts(const ConvGeometry& g, int cc_major, int cc_minor) {
  std::vector<ConvLayout> layouts = {ConvLayout::kVect4};
  if (X32Candidate(g, cc_major, cc_minor)) layouts.push_back(ConvLayout::kVect32);
  layouts.push_back(ConvLayout::kNhwcFloat);
  return layouts;
}

int64_t AlignmentOf(std::initializer_list<const void*> ptrs) {
  uintptr_t bits = 16;
  for (const void* p : ptrs) bits |= reinterpret_cast<uintptr_t>(p);
  return static_cast<int64_t>(bits & (~bits + 1));  // lowest set bit, <= 16
}

EpilogueParams MakeEpilogueParams(const ConvGeometry& g, const ConvOutput& conv,
                                  const float* scale, bool per_channel_scale,
                                  const float* bias, const int8_t* side,
                                  float side_scale, Activation activation,
                                  int8_t* out, int32_t output_min,
                                  int32_t output_max, const int8_t* output_lut) {
  EpilogueParams p{};
  const int64_t pixels = g.out_h * g.out_w;
  p.conv = conv;
  p.scale = scale;
  p.bias = bias;
  p.side = side;
  p.out = out;
  p.c4 = static_cast<uint32_t>(g.out_c / 4);
  p.pixels = static_cast<uint32_t>(pixels);
  p.words = static_cast<uint32_t>(g.batch * (g.out_c / 4) * pixels);
  p.side_scale = side_scale;
  int32_t lo, hi;
  OutputBounds(activation, output_min, output_max, &lo, &hi);
  p.lo = static_cast<float>(lo);
  p.hi = static_cast<float>(hi);
  p.per_channel = per_channel_scale ? 1 : 0;
  p.has_side = (side != nullptr && side_scale != 0.0f) ? 1 : 0;
  if (!p.has_side) p.side = nullptr;
  if (output_lut != nullptr) {
    p.has_lut = 1;
    std::memcpy(p.lut, output_lut, sizeof(p.lut));
  }
  return p;
}

namespace {

VectParams X32Params(int64_t outer, int64_t c4, int64_t inner, const void* in, void* out) {
  VectParams p{};
  p.in = static_cast<const uint32_t*>(in);
  p.out = static_cast<uint32_t*>(out);
  p.outer = static_cast<uint32_t>(outer);
  p.c4_in = static_cast<uint32_t>(c4);
  p.c32_out = static_cast<uint32_t>((c4 + 7) / 8);
  p.inner = static_cast<uint32_t>(inner);
  p.words = static_cast<uint32_t>(outer * p.c32_out * inner * 8);
  return p;
}

}  // namespace

VectParams MakeActivationX32Params(const ConvGeometry& g, const void* in, void* out) {
  return X32Params(g.batch, g.in_c / 4, g.in_h * g.in_w, in, out);
}

VectParams MakeFilterX32Params(const ConvGeometry& g, const void* in, void* out) {
  return X32Params(g.out_c, g.in_c / 4, g.filter_h * g.filter_w, in, out);
}

namespace {

TransposeParams Transpose(int64_t outer, int64_t rows, int64_t cols, const void* in, void* out) {
  TransposeParams p{};
  p.in = static_cast<const uint32_t*>(in);
  p.out = static_cast<uint32_t*>(out);
  p.outer = static_cast<uint32_t>(outer);
  p.rows = static_cast<uint32_t>(rows);
  p.cols = static_cast<uint32_t>(cols);
  p.words = static_cast<uint32_t>(outer * rows * cols);
  return p;
}

}  // namespace

TransposeParams MakeActivationNhwcParams(const ConvGeometry& g, const void* in, void* out) {
  return Transpose(g.batch, g.in_c / 4, g.in_h * g.in_w, in, out);
}

TransposeParams MakeFilterNhwcParams(const ConvGeometry& g, const void* in, void* out) {
  return Transpose(g.out_c, g.in_c / 4, g.filter_h * g.filter_w, in, out);
}

ConvOperands MakeConvOperands(const ConvGeometry& g, const void* x, const void* w) {
  ConvOperands p{};
  p.x = static_cast<const uint32_t*>(x);
  p.w = static_cast<const uint32_t*>(w);
  const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  p.batch = u32(g.batch);
  p.in_c4 = u32(g.in_c / 4);
  p.in_h = u32(g.in_h);
  p.in_w = u32(g.in_w);
  p.out_c = u32(g.out_c);
  p.out_h = u32(g.out_h);
  p.out_w = u32(g.out_w);
  p.filter_h = u32(g.filter_h);
  p.filter_w = u32(g.filter_w);
  p.stride_h = u32(g.stride_h);
  p.stride_w = u32(g.stride_w);
  p.dilation_h = u32(g.dilation_h);
  p.dilation_w = u32(g.dilation_w);
  p.pad_top = static_cast<int32_t>(g.pad_top);
  p.pad_left = static_cast<int32_t>(g.pad_left);
  p.group_c4 = u32(g.GroupInC() / 4);
  p.group_out_c = u32(g.GroupOutC());
  return p;
}

DirectConvParams MakeDirectConvParams(const ConvGeometry& g, const void* x, const void* w,
                                      float* y) {
  DirectConvParams p{};
  p.ops = MakeConvOperands(g, x, w);
  p.y = y;
  p.elements = static_cast<uint32_t>(g.OutputElements());
  return p;
}

EpilogueParams MakeEpilogueParams(const GpuConvArgs& a, const ConvOutput& conv) {
  return MakeEpilogueParams(a.geo, conv, a.conv_input_scale, a.per_channel_scale, a.bias,
                            a.side_input, a.side_input_scale, a.activation, a.output,
                            a.output_min, a.output_max, a.output_lut);
}

DepthwiseConvParams MakeDepthwiseConvParams(const GpuConvArgs& a) {
  DepthwiseConvParams p{};
  p.ops = MakeConvOperands(a.geo, a.input, a.filter);
  p.epi = MakeEpilogueParams(a, ConvOutput{});
  return p;
}

SampleCheckParams MakeSampleCheckParams(const ConvGeometry& g, const ConvOutput& conv,
                                        const void* x, const void* w, uint32_t* result) {
  SampleCheckParams p{};
  p.conv = conv;
  p.ops = MakeConvOperands(g, x, w);
  p.result = result;
  p.images = g.batch > 1 ? 2 : 1;
  const int64_t pixels = g.out_h * g.out_w;
  const int64_t per_pixel =
      std::max<int64_t>(1, p.images * g.out_c * (g.GroupInC() / 4) * g.filter_h * g.filter_w);
  const int64_t pixels_in_budget = kSampleCheckWordProducts / per_pixel;
  const int64_t want = std::max<int64_t>(kSampleCheckMinPixels,
                                         std::min<int64_t>(kSampleCheckMaxPixels, pixels_in_budget));
  p.sample_pixels = static_cast<uint32_t>(std::min<int64_t>(pixels, want));
  p.samples = static_cast<uint32_t>(p.images * p.sample_pixels * g.out_c);
  return p;
}

int64_t ConvertedInputBytes(const ConvGeometry& g, ConvLayout layout) {
  if (layout == ConvLayout::kVect4) return 0;
  const int64_t c = layout == ConvLayout::kVect32 ? (g.in_c + 31) / 32 * 32 : g.in_c;
  return g.batch * c * g.in_h * g.in_w;
}

int64_t ConvertedFilterBytes(const ConvGeometry& g, ConvLayout layout) {
  if (layout == ConvLayout::kVect4) return 0;
  const int64_t c = layout == ConvLayout::kVect32 ? (g.in_c + 31) / 32 * 32 : g.in_c;
  return g.out_c * c * g.filter_h * g.filter_w;
}

// The kernel parameter blocks are shared with the PTX (see the .param sizes in
// device_kernels_ptx.inc).
static_assert(sizeof(ConvOutput) == 40, "ConvOutput layout");
static_assert(sizeof(EpilogueParams) == 368, "EpilogueParams layout");
static_assert(sizeof(VectParams) == 40, "VectParams layout");
static_assert(sizeof(TransposeParams) == 32, "TransposeParams layout");
static_assert(sizeof(CompareParams) == 104, "CompareParams layout");
static_assert(sizeof(ConvOperands) == 88, "ConvOperands layout");
static_assert(sizeof(SampleCheckParams) == 152, "SampleCheckParams layout");
static_assert(sizeof(DirectConvParams) == 104, "DirectConvParams layout");
static_assert(sizeof(DepthwiseConvParams) == 456, "DepthwiseConvParams layout");

}  // namespace gpu
}  // namespace tf_fused_int8
