// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Registration of the FusedInt8Conv2DBiasActivation op and its shape
// function, and of FusedInt8Quantize (a model's float input to int8). The op name is our own: TensorFlow special-cases
// FusedConv2DBiasActivation in grappler, so that name is not reused.
#include <limits>
#include <string>
#include <vector>

#include "cc/core/depth_to_space.h"
#include "cc/core/pad.h"
#include "cc/core/pool.h"
#include "cc/core/transposed_conv.h"
#include "cc/tf/conv_validation.h"
#include "cc/tf/pool_attrs.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/padding.h"

namespace tf_fused_int8 {
namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

absl::Status CheckWindowAttr(const char* name, const std::vector<int32_t>& v,
                             int batch_dim, int channel_dim,
                             const std::string& data_format) {
  if (v.size() != 4) {
    return absl::InvalidArgumentError(
        std::string(name) + " must have 4 elements (one per dimension of " +
        data_format + "), got " + std::to_string(v.size()));
  }
  if (v[batch_dim] != 1 || v[channel_dim] != 1) {
    return absl::InvalidArgumentError(
        std::string(name) + " must be 1 in the batch and depth dimensions of " +
        data_format + ", got [" + std::to_string(v[0]) + ", " +
        std::to_string(v[1]) + ", " + std::to_string(v[2]) + ", " +
        std::to_string(v[3]) + "]");
  }
  for (int32_t x : v) {
    if (x < 1) {
      return absl::InvalidArgumentError(std::string(name) +
                                        " must be positive, got " +
                                        std::to_string(x));
    }
  }
  return absl::OkStatus();
}

// Makes `a` and `b` equal or fails with a message naming both arguments.
absl::Status MergeNamed(InferenceContext* c, DimensionHandle a, DimensionHandle b,
                        const std::string& what_a, const std::string& what_b,
                        DimensionHandle* out) {
  if (c->ValueKnown(a) && c->ValueKnown(b) && c->Value(a) != c->Value(b)) {
    return absl::InvalidArgumentError(
        what_a + " (" + std::to_string(c->Value(a)) + ") must equal " + what_b +
        " (" + std::to_string(c->Value(b)) + ")");
  }
  return c->Merge(a, b, out);
}

// The shape function of both ops, given the shapes of filter, bias and
// conv_input_scale (input tensors, or what their resource variables hold).
absl::Status FusedInt8ConvShapeFrom(InferenceContext* c, ShapeHandle filter_in,
                                    ShapeHandle bias_in, ShapeHandle scale_in) {
  std::string data_format, filter_format, padding_name;
  TF_RETURN_IF_ERROR(c->GetAttr("data_format", &data_format));
  TF_RETURN_IF_ERROR(c->GetAttr("filter_format", &filter_format));
  TF_RETURN_IF_ERROR(c->GetAttr("padding", &padding_name));
  const bool vect = data_format == "NCHW_VECT_C";
  if (vect != (filter_format == "OIHW_VECT_I")) {
    return absl::InvalidArgumentError(
        "data_format " + data_format + " requires filter_format " +
        (vect ? "OIHW_VECT_I" : "HWIO") + ", got " + filter_format);
  }
  std::vector<int32_t> strides, dilations;
  TF_RETURN_IF_ERROR(c->GetAttr("strides", &strides));
  TF_RETURN_IF_ERROR(c->GetAttr("dilations", &dilations));
  const int channel_dim = vect ? 1 : 3;
  const int h_dim = vect ? 2 : 1;
  TF_RETURN_IF_ERROR(
      CheckWindowAttr("strides", strides, 0, channel_dim, data_format));
  TF_RETURN_IF_ERROR(
      CheckWindowAttr("dilations", dilations, 0, channel_dim, data_format));
  tensorflow::Padding padding;
  TF_RETURN_IF_ERROR(tensorflow::GetPaddingFromString(padding_name, &padding));
  int64_t output_min = 0, output_max = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("output_min", &output_min));
  TF_RETURN_IF_ERROR(c->GetAttr("output_max", &output_max));
  if (output_min < -128 || output_max > 127 || output_min > output_max) {
    return absl::InvalidArgumentError(
        "output_min and output_max must satisfy -128 <= output_min <= "
        "output_max <= 127, got " + std::to_string(output_min) + " and " +
        std::to_string(output_max));
  }
  std::vector<int64_t> output_lut;
  TF_RETURN_IF_ERROR(c->GetAttr("output_lut", &output_lut));
  TF_RETURN_IF_ERROR(CheckOutputLut(output_lut));
  std::vector<int64_t> explicit_paddings;
  TF_RETURN_IF_ERROR(c->GetAttr("explicit_paddings", &explicit_paddings));
  int64_t pad_h_before = -1, pad_h_after = -1, pad_w_before = -1,
          pad_w_after = -1;
  if (padding == tensorflow::Padding::EXPLICIT) {
    if (explicit_paddings.size() != 8) {
      return absl::InvalidArgumentError(
          "explicit_paddings must have 8 elements (a [before, after] pair per "
          "dimension of " + data_format + ") with padding EXPLICIT, got " +
          std::to_string(explicit_paddings.size()));
    }
    for (int64_t p : explicit_paddings) {
      if (p < 0) {
        return absl::InvalidArgumentError(
            "explicit_paddings must be non-negative, got " + std::to_string(p));
      }
    }
    if (explicit_paddings[0] != 0 || explicit_paddings[1] != 0 ||
        explicit_paddings[2 * channel_dim] != 0 ||
        explicit_paddings[2 * channel_dim + 1] != 0) {
      return absl::InvalidArgumentError(
          "explicit_paddings must be 0 in the batch and depth dimensions of " +
          data_format);
    }
    pad_h_before = explicit_paddings[2 * h_dim];
    pad_h_after = explicit_paddings[2 * h_dim + 1];
    pad_w_before = explicit_paddings[2 * h_dim + 2];
    pad_w_after = explicit_paddings[2 * h_dim + 3];
  } else if (!explicit_paddings.empty()) {
    return absl::InvalidArgumentError(
        "explicit_paddings must be empty unless padding is EXPLICIT, got " +
        std::to_string(explicit_paddings.size()) + " values with padding " +
        padding_name);
  }

  const int rank = vect ? 5 : 4;
  ShapeHandle input, filter;
  if (!c->WithRank(c->input(0), rank, &input).ok()) {
    return absl::InvalidArgumentError(
        "conv_input must be rank " + std::to_string(rank) + " (" + data_format +
        "), got shape " + c->DebugString(c->input(0)));
  }
  if (!c->WithRank(filter_in, rank, &filter).ok()) {
    return absl::InvalidArgumentError(
        "filter must be rank " + std::to_string(rank) + " (" + filter_format +
        "), got shape " + c->DebugString(filter_in));
  }
  DimensionHandle batch = c->Dim(input, 0);
  DimensionHandle in_h = c->Dim(input, h_dim);
  DimensionHandle in_w = c->Dim(input, h_dim + 1);
  DimensionHandle in_c, k_h, k_w, filter_in_c, out_c;
  if (!vect) {
    in_c = c->Dim(input, 3);
    k_h = c->Dim(filter, 0);
    k_w = c->Dim(filter, 1);
    filter_in_c = c->Dim(filter, 2);
    out_c = c->Dim(filter, 3);
  } else {
    DimensionHandle unused;
    if (!c->WithValue(c->Dim(input, 4), 4, &unused).ok() ||
        !c->WithValue(c->Dim(filter, 4), 4, &unused).ok()) {
      return absl::InvalidArgumentError(
          "NCHW_VECT_C conv_input and OIHW_VECT_I filter must have 4 in their "
          "last dimension, got " + c->DebugString(c->input(0)) + " and " +
          c->DebugString(filter_in));
    }
    TF_RETURN_IF_ERROR(c->Multiply(c->Dim(input, 1), 4, &in_c));
    TF_RETURN_IF_ERROR(c->Multiply(c->Dim(filter, 1), 4, &filter_in_c));
    out_c = c->Dim(filter, 0);
    k_h = c->Dim(filter, 2);
    k_w = c->Dim(filter, 3);
  }
  // Grouped convolution as tf.nn.conv2d: groups = conv_input depth / filter
  // input depth, and the output depth must be a multiple of groups.
  if (c->ValueKnown(in_c) && c->ValueKnown(filter_in_c)) {
    const int64_t ci = c->Value(in_c), fci = c->Value(filter_in_c);
    if (fci == 0 ? ci != 0 : (ci == 0 || ci % fci != 0)) {
      return absl::InvalidArgumentError(
          "conv_input depth (" + std::to_string(ci) +
          ") must be a multiple of the filter input depth (" +
          std::to_string(fci) +
          "): the filter input depth is conv_input depth / groups (equal to "
          "it for an ordinary convolution)");
    }
  }

  ShapeHandle bias;
  if (!c->WithRank(bias_in, 1, &bias).ok()) {
    return absl::InvalidArgumentError("bias must be rank 1 [output depth], got " +
                                      c->DebugString(bias_in));
  }
  TF_RETURN_IF_ERROR(MergeNamed(c, c->Dim(bias, 0), out_c, "bias length",
                                "filter output depth", &out_c));
  if (c->ValueKnown(in_c) && c->ValueKnown(filter_in_c) && c->ValueKnown(out_c) &&
      c->Value(filter_in_c) > 0) {
    const int64_t groups = c->Value(in_c) / c->Value(filter_in_c);
    if (c->Value(out_c) % groups != 0) {
      return absl::InvalidArgumentError(
          "filter output depth (" + std::to_string(c->Value(out_c)) +
          ") must be a multiple of groups (" + std::to_string(groups) +
          " = conv_input depth " + std::to_string(c->Value(in_c)) +
          " / filter input depth " + std::to_string(c->Value(filter_in_c)) + ")");
    }
  }

  ShapeHandle scale;
  if (!c->WithRankAtMost(scale_in, 1, &scale).ok()) {
    return absl::InvalidArgumentError(
        "conv_input_scale must be a scalar or a vector of length 1 or output "
        "depth, got " + c->DebugString(scale_in));
  }
  if (c->RankKnown(scale) && c->Rank(scale) == 1) {
    DimensionHandle len = c->Dim(scale, 0);
    if (c->ValueKnown(len) && c->Value(len) != 1 && c->ValueKnown(out_c) &&
        c->Value(len) != c->Value(out_c)) {
      return absl::InvalidArgumentError(
          "conv_input_scale must have length 1 or output depth (" +
          std::to_string(c->Value(out_c)) + "), got " +
          std::to_string(c->Value(len)));
    }
  }
  ShapeHandle side_scale;
  if (!c->WithRank(c->input(5), 0, &side_scale).ok()) {
    return absl::InvalidArgumentError("side_input_scale must be a scalar, got " +
                                      c->DebugString(c->input(5)));
  }

  DimensionHandle out_h, out_w;
  TF_RETURN_IF_ERROR(tensorflow::shape_inference::GetWindowedOutputSizeFromDimsV2(
      c, in_h, k_h, dilations[h_dim], strides[h_dim], padding, pad_h_before,
      pad_h_after, &out_h));
  TF_RETURN_IF_ERROR(tensorflow::shape_inference::GetWindowedOutputSizeFromDimsV2(
      c, in_w, k_w, dilations[h_dim + 1], strides[h_dim + 1], padding,
      pad_w_before, pad_w_after, &out_w));

  ShapeHandle output;
  if (!vect) {
    output = c->MakeShape({batch, out_h, out_w, out_c});
  } else {
    DimensionHandle out_c4;
    if (!c->Divide(out_c, 4, /*evenly_divisible=*/true, &out_c4).ok()) {
      return absl::InvalidArgumentError(
          "NCHW_VECT_C needs an output depth divisible by 4, got " +
          c->DebugString(out_c));
    }
    output = c->MakeShape({batch, out_c4, out_h, out_w, c->MakeDim(4)});
  }

  // side_input: empty, or exactly the output shape.
  ShapeHandle side = c->input(3);
  if (c->RankKnown(side)) {
    bool empty = false;
    for (int i = 0; i < c->Rank(side); ++i) {
      if (c->ValueKnown(c->Dim(side, i)) && c->Value(c->Dim(side, i)) == 0) {
        empty = true;
      }
    }
    if (!empty) {
      ShapeHandle merged;
      if (c->Rank(side) != rank || !c->Merge(side, output, &merged).ok()) {
        return absl::InvalidArgumentError(
            "side_input must be empty or have the output shape " +
            c->DebugString(output) + ", got " + c->DebugString(side));
      }
      output = merged;
    }
  }
  c->set_output(0, output);
  return absl::OkStatus();
}

absl::Status FusedInt8ConvShape(InferenceContext* c) {
  return FusedInt8ConvShapeFrom(c, c->input(1), c->input(2), c->input(4));
}

// The shape a resource variable input holds, from the handle's shape-and-type
// data where the graph has it (a variable created with a known shape), else
// unknown. A known dtype other than `want` fails, naming the input.
absl::Status VariableShape(InferenceContext* c, int index, const char* name,
                           tensorflow::DataType want, ShapeHandle* shape) {
  const auto* data = c->input_handle_shapes_and_types(index);
  if (data == nullptr || data->size() != 1) {
    *shape = c->UnknownShape();
    return absl::OkStatus();
  }
  const auto& held = (*data)[0];
  if (held.dtype != tensorflow::DT_INVALID && held.dtype != want) {
    return absl::InvalidArgumentError(
        std::string(name) + " must be a resource variable of " +
        tensorflow::DataTypeString(want) + ", got one of " +
        tensorflow::DataTypeString(held.dtype));
  }
  *shape = held.shape;
  return absl::OkStatus();
}

absl::Status ResourceFusedInt8ConvShape(InferenceContext* c) {
  tensorflow::DataType t;
  TF_RETURN_IF_ERROR(c->GetAttr("T", &t));
  ShapeHandle filter, bias, scale;
  TF_RETURN_IF_ERROR(VariableShape(c, 1, "filter", t, &filter));
  TF_RETURN_IF_ERROR(VariableShape(c, 2, "bias", tensorflow::DT_FLOAT, &bias));
  TF_RETURN_IF_ERROR(
      VariableShape(c, 4, "conv_input_scale", tensorflow::DT_FLOAT, &scale));
  return FusedInt8ConvShapeFrom(c, filter, bias, scale);
}

// FusedInt8MaxPool / FusedInt8AvgPool: [N, Ho, Wo, C] from the attrs and
// the input's height and width where known.
absl::Status PoolShape(InferenceContext* c, const char* op_name) {
  std::vector<int32_t> ksize, strides, zero_paddings;
  std::string padding_name;
  TF_RETURN_IF_ERROR(c->GetAttr("ksize", &ksize));
  TF_RETURN_IF_ERROR(c->GetAttr("strides", &strides));
  TF_RETURN_IF_ERROR(c->GetAttr("zero_paddings", &zero_paddings));
  TF_RETURN_IF_ERROR(c->GetAttr("padding", &padding_name));
  PoolGeometry g;
  Padding padding;
  TF_RETURN_IF_ERROR(PoolAttrs(op_name, ksize, strides, zero_paddings,
                               padding_name, &g, &padding));
  ShapeHandle in;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &in));
  DimensionHandle h = c->Dim(in, 1), w = c->Dim(in, 2);
  DimensionHandle out_h = c->UnknownDim(), out_w = c->UnknownDim();
  if (c->ValueKnown(h) && c->ValueKnown(w)) {
    g.batch = 1;
    g.channels = 1;
    g.in_h = c->Value(h);
    g.in_w = c->Value(w);
    const std::string err = ComputePoolGeometry(padding, &g);
    if (!err.empty()) {
      return absl::InvalidArgumentError(std::string(op_name) + ": " + err);
    }
    out_h = c->MakeDim(g.out_h);
    out_w = c->MakeDim(g.out_w);
  }
  c->set_output(0, c->MakeShape({c->Dim(in, 0), out_h, out_w, c->Dim(in, 3)}));
  return absl::OkStatus();
}


// ResourceFusedInt8ConvSequence / FusedInt8ConvSequence: each step's
// [N, Ho, Wo, Co] from its source's shape and its attrs (filter_shapes gives
// Kh, Kw, Co); the output is the last step's. The kernel validates
// everything again.
absl::Status ConvSequenceShape(InferenceContext* c) {
  int64_t steps = 0;
  std::vector<int64_t> sources, strides, dilations, pads, filter_shapes;
  std::vector<std::string> paddings;
  TF_RETURN_IF_ERROR(c->GetAttr("steps", &steps));
  TF_RETURN_IF_ERROR(c->GetAttr("input_sources", &sources));
  TF_RETURN_IF_ERROR(c->GetAttr("filter_shapes", &filter_shapes));
  TF_RETURN_IF_ERROR(c->GetAttr("strides", &strides));
  TF_RETURN_IF_ERROR(c->GetAttr("dilations", &dilations));
  TF_RETURN_IF_ERROR(c->GetAttr("paddings", &paddings));
  TF_RETURN_IF_ERROR(c->GetAttr("explicit_paddings", &pads));
  std::vector<int64_t> records;
  TF_RETURN_IF_ERROR(c->GetAttr("transpose_steps", &records));
  std::vector<std::pair<int64_t, TransposedConvPhases>> transposed;
  const std::string parse = ParseTransposedConvRecords(records, steps, &transposed);
  if (!parse.empty()) {
    return absl::InvalidArgumentError("FusedInt8ConvSequence: " + parse);
  }
  size_t next_transposed = 0;
  if (static_cast<int64_t>(sources.size()) != steps ||
      static_cast<int64_t>(filter_shapes.size()) != 4 * steps ||
      static_cast<int64_t>(strides.size()) != 2 * steps ||
      static_cast<int64_t>(dilations.size()) != 2 * steps ||
      static_cast<int64_t>(paddings.size()) != steps ||
      static_cast<int64_t>(pads.size()) != 4 * steps) {
    return absl::InvalidArgumentError(
        "FusedInt8ConvSequence: input_sources and paddings need one entry per "
        "step, strides and dilations 2, filter_shapes and explicit_paddings 4");
  }
  std::vector<ShapeHandle> shapes;
  ShapeHandle in;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &in));
  shapes.push_back(in);
  for (int64_t i = 0; i < steps; ++i) {
    if (sources[i] < 0 || sources[i] > i) {
      return absl::InvalidArgumentError(
          "FusedInt8ConvSequence: input_sources[" + std::to_string(i) +
          "] must be in [0, " + std::to_string(i) + "], got " +
          std::to_string(sources[i]));
    }
    ShapeHandle x = shapes[sources[i]];
    tensorflow::Padding padding;
    if (paddings[i] == "SAME") {
      padding = tensorflow::SAME;
    } else if (paddings[i] == "VALID") {
      padding = tensorflow::VALID;
    } else {
      padding = tensorflow::EXPLICIT;
    }
    DimensionHandle out_h = c->UnknownDim(), out_w = c->UnknownDim();
    const int64_t* f = &filter_shapes[4 * i];
    if (strides[2 * i] >= 1 && strides[2 * i + 1] >= 1 &&
        dilations[2 * i] >= 1 && dilations[2 * i + 1] >= 1 && f[0] >= 1 &&
        f[1] >= 1 && pads[4 * i] >= 0 && pads[4 * i + 1] >= 0 &&
        pads[4 * i + 2] >= 0 && pads[4 * i + 3] >= 0) {
      TF_RETURN_IF_ERROR(
          tensorflow::shape_inference::GetWindowedOutputSizeFromDimsV2(
              c, c->Dim(x, 1), c->MakeDim(f[0]), dilations[2 * i],
              strides[2 * i], padding, pads[4 * i], pads[4 * i + 1], &out_h));
      TF_RETURN_IF_ERROR(
          tensorflow::shape_inference::GetWindowedOutputSizeFromDimsV2(
              c, c->Dim(x, 2), c->MakeDim(f[1]), dilations[2 * i + 1],
              strides[2 * i + 1], padding, pads[4 * i + 2], pads[4 * i + 3],
              &out_w));
    }
    DimensionHandle out_c = f[3] >= 0 ? c->MakeDim(f[3]) : c->UnknownDim();
    if (next_transposed < transposed.size() && transposed[next_transposed].first == i) {
      // A transposed convolution: its sub-pixel convolution's output
      // interleaved (block_h x block_w) and cropped (the kernel checks the
      // rest).
      const TransposedConvPhases& p = transposed[next_transposed++].second;
      if (f[3] % p.Phases() != 0) {
        return absl::InvalidArgumentError(
            "FusedInt8ConvSequence: step " + std::to_string(i) + "'s " +
            std::to_string(f[3]) + " channels are not a multiple of its " +
            std::to_string(p.Phases()) + " phases");
      }
      out_c = c->MakeDim(f[3] / p.Phases());
      TF_RETURN_IF_ERROR(c->Multiply(out_h, p.block_h, &out_h));
      TF_RETURN_IF_ERROR(c->Multiply(out_w, p.block_w, &out_w));
      TF_RETURN_IF_ERROR(c->Subtract(out_h, p.crop_top + p.crop_bottom, &out_h));
      TF_RETURN_IF_ERROR(c->Subtract(out_w, p.crop_left + p.crop_right, &out_w));
    }
    shapes.push_back(c->MakeShape({c->Dim(x, 0), out_h, out_w, out_c}));
  }
  c->set_output(0, shapes.back());
  return absl::OkStatus();
}

}  // namespace

// The attrs of both convolution ops, identical by construction: freezing
// turns one op into the other by renaming it (tf_fused_int8/_freeze.py).
#define FUSED_INT8_CONV_ATTRS                                   \
  .Attr("T: {int8, qint8}")                                     \
      .Attr("strides: list(int)")                               \
      .Attr("padding: {'SAME', 'VALID', 'EXPLICIT'}")           \
      .Attr("explicit_paddings: list(int) = []")                \
      .Attr("data_format: {'NHWC', 'NCHW_VECT_C'} = 'NHWC'")    \
      .Attr("filter_format: {'HWIO', 'OIHW_VECT_I'} = 'HWIO'")  \
      .Attr("activation_mode: {'Relu', 'None'} = 'Relu'")       \
      .Attr("dilations: list(int) = [1, 1, 1, 1]")              \
      .Attr("output_min: int = -128")                           \
      .Attr("output_max: int = 127")                            \
      .Attr("output_lut: list(int) = []")

REGISTER_OP("FusedInt8Conv2DBiasActivation")
    .Input("conv_input: T")
    .Input("filter: T")
    .Input("bias: float")
    .Input("side_input: T")
    .Input("conv_input_scale: float")
    .Input("side_input_scale: float")
    .Output("output: T")
    FUSED_INT8_CONV_ATTRS
    .SetShapeFn(FusedInt8ConvShape)
    .Doc(R"doc(
Fused int8 convolution: conv2d + scale + side input + bias + activation.

Per output element, with acc the exact int32 sum of int8 products:
  y = float32(acc) * conv_input_scale[c]
  if side_input is non-empty and side_input_scale != 0:
    y = fmaf(side_input, side_input_scale, y)
  y = y + bias[c]
  output = clip(round_half_to_even(y), lo, output_max)
with lo = Relu ? max(0, output_min) : output_min; -128 <= output_min <=
output_max <= 127 (defaults -128/127; Relu6 is output_max = round(6 /
output_scale)); a NaN y gives lo.
With output_lut (256 int8 values; default empty: none), the output is
output_lut[output + 128] instead: an activation such as SiLU tabulated at
quantization time, applied after the clip (CPU; the GPU kernel refuses it).
conv_input_scale is a scalar or has one value per output channel.
Grouped convolution as in tf.nn.conv2d: groups = conv_input depth / filter
input depth; output channel c of group g = c / (output depth / groups) reads
input channels [g, g + 1) * conv_input depth / groups. groups = conv_input
depth is a depthwise convolution (filter [Kh, Kw, 1, depth * multiplier],
TF's depthwise_conv2d channel order).
padding EXPLICIT takes explicit_paddings: 8 non-negative values, a
[before, after] pair per dimension in data_format order (0 for batch and
depth), as in tf.nn.conv2d.
)doc");

REGISTER_OP("ResourceFusedInt8Conv2DBiasActivation")
    .Input("conv_input: T")
    .Input("filter: resource")
    .Input("bias: resource")
    .Input("side_input: T")
    .Input("conv_input_scale: resource")
    .Input("side_input_scale: float")
    .Output("output: T")
    FUSED_INT8_CONV_ATTRS
    .SetShapeFn(ResourceFusedInt8ConvShape)
    .Doc(R"doc(
FusedInt8Conv2DBiasActivation with filter, bias and conv_input_scale read
from resource variables (of dtype T, float32 and float32) in the kernel: the
same result bit for bit, in one graph node instead of one per variable read.
CPU only. What the Keras layers run when their variables live on the CPU.
)doc");

// The two conv sequence ops' attrs (per step, in lists) and shape function.
#define FUSED_INT8_CONV_SEQUENCE_ATTRS                \
  .Attr("steps: int >= 1")                            \
      .Attr("input_sources: list(int)")               \
      .Attr("side_sources: list(int)")                \
      .Attr("filter_shapes: list(int)")               \
      .Attr("per_channel_scales: list(bool)")         \
      .Attr("strides: list(int)")                     \
      .Attr("dilations: list(int)")                   \
      .Attr("paddings: list(string)")                 \
      .Attr("explicit_paddings: list(int)")           \
      .Attr("activation_modes: list(string)")         \
      .Attr("output_mins: list(int)")                 \
      .Attr("output_maxes: list(int)")                \
      .Attr("lut_steps: list(int) = []")              \
      .Attr("output_luts: list(int) = []")            \
      .Attr("step_kinds: list(int) = []")             \
      .Attr("transpose_steps: list(int) = []")        \
      .SetShapeFn(ConvSequenceShape)

REGISTER_OP("ResourceFusedInt8ConvSequence")
    .Input("conv_input: int8")
    .Input("filters: resource")
    .Input("epilogue: resource")
    .Output("output: int8")
    FUSED_INT8_CONV_SEQUENCE_ATTRS
    .Doc(R"doc(
Several fused convolutions (NHWC / HWIO, each exactly
FusedInt8Conv2DBiasActivation) in one graph node, run in order; the output
is the last step's. Step i's conv_input is source input_sources[i] (0 =
conv_input, k >= 1 = the output of step k - 1, an earlier step), its side
input source side_sources[i] (-1 = none). Its attrs are the single op's, one
entry (strides, dilations: height and width; explicit_paddings: top, bottom,
left, right, 0 unless its padding is EXPLICIT) per step. The steps listed in
lut_steps (increasing) have an output_lut each, the next 256 values of
output_luts, as the single op's output_lut; the others have none.

step_kinds (default: every step 0, a convolution) marks channel scales with
1: a squeeze-excite gate applied to source input_sources[i], x int8 [N, H,
W, C], from source side_sources[i], gate int8 [N, 1, 1, C]:
  m[n, c] = (float32(gate[n, c]) * gate_scale) * ratio
  output = clip(round_half_to_even(float32(x) * m[n, c]), -128, 127)
(three float32 multiplies, each correctly rounded: what a Dequantize of the
gate and FusedInt8ChannelScale give). Its attrs are those of a 1x1 depthwise
step that changes nothing (filter_shapes (1, 1, 1, C), strides and
dilations 1, VALID, None, -128 / 127, a scalar scale); gate_scale is its
conv_input_scale slot and ratio its side_input_scale slot in `epilogue`
(its filter and bias slots are not read).

step_kinds 2 marks a transposed convolution (a Conv2DTranspose in
quantize_model's sub-pixel form, dilation 1): its attrs are those of its
sub-pixel convolution (filter_shapes (Th, Tw, Ci, P * Co), strides and
dilations 1, groups 1, no side input), whose output channel (r_h * s_w +
r_w) * Co + c is phase (r_h, r_w) of channel c; its output is that
convolution's output put through a depth-to-space of block s_h x s_w and
cropped, [N, Hq * s_h - top - bottom, Wq * s_w - left - right, Co], each
phase computed from only the taps it reads. Each such step has one record
in transpose_steps, in step order: [step, s_h, s_w, top, bottom, left,
right, then (start, taps) per phase row r_h (the sub-pixel filter rows
[start, start + taps) that phase reads), then the same per phase column].
Its filters slot holds the phases' filters instead of the sub-pixel
filter, in phase order, each HWIO [row taps, column taps, Ci, Co] from a
multiple of 64 bytes (zeros between); its epilogue slots are the sub-pixel
convolution's (bias [P * Co], conv_input_scale [1] or [P * Co]). The
result is the sub-pixel convolution's bits wherever that filter is zero
outside the phases' taps.

The weights are two resource variables: `filters`, int8 [F], every step's
HWIO filter of filter_shapes[4i..4i+3] = (Kh, Kw, Ci / groups, Co) in step
order, each starting at a multiple of 64 bytes (zeros between); `epilogue`,
float32 [E], per step its bias [Co], its conv_input_scale ([Co] where
per_channel_scales[i], else [1]) and, with a side input, its
side_input_scale [1], in step order, each starting at a multiple of 16
elements (64 bytes; zeros between). F and E must be exactly
those totals. Two variables instead of three or four per layer: a
tf.function captures every variable it reads, and each capture costs time
on every call. CPU only.
)doc");

REGISTER_OP("FusedInt8ConvSequence")
    .Input("conv_input: int8")
    .Input("filters: int8")
    .Input("epilogue: float")
    .Output("output: int8")
    FUSED_INT8_CONV_SEQUENCE_ATTRS
    .Doc(R"doc(
ResourceFusedInt8ConvSequence with its two weight vectors as tensors (what
freezing a graph makes of it): the same steps, the same bits. CPU only.
)doc");

REGISTER_OP("FusedInt8WeightConstant")
    .Output("output: dtype")
    .Attr("value: tensor")
    .Attr("dtype: {int8, qint8, float}")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      const tensorflow::TensorProto* proto = nullptr;
      TF_RETURN_IF_ERROR(c->GetAttr("value", &proto));
      TF_RETURN_IF_ERROR(tensorflow::TensorShape::IsValidShape(proto->tensor_shape()));
      tensorflow::TensorShape shape(proto->tensor_shape());
      ShapeHandle out;
      TF_RETURN_IF_ERROR(c->MakeShapeFromTensorShape(shape, &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc(R"doc(
A constant, as Const, for the weights of the fused int8 ops: the same value
and output, and a buffer that those ops know never changes, so that they
keep their packed weights for it unchecked, as for a resource variable's
buffer. Freezing a graph (convert_variables_to_constants_v2) makes their
variables into these once tf_fused_int8 is imported. CPU only. Stateful so
that no graph pass folds or merges it into a plain Const.
)doc");

REGISTER_OP("FusedInt8Quantize")
    .Input("x: float")
    .Output("q: int8")
    .Attr("scale: float")
    .Attr("preprocess_ops: list(string) = []")
    .Attr("preprocess_sizes: list(int) = []")
    .Attr("preprocess_values: list(float) = []")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
float32 -> int8 in one pass: q = clip(round_half_to_even(x / scale), -128,
127), NaN -> 0 (x / scale is IEEE float32 division). scale must be a
positive finite float32. The same bits as tf.round(x / scale) clipped to
[-128, 127] and cast, with NaN mapped to 0.

With preprocess_ops (default none), x first goes through those elementwise
float32 steps in order, each one IEEE operation per element, as TF's Mul /
AddV2 / Sub / RealDiv would compute it: "mul" x * v, "add" x + v, "sub"
x - v, "div" x / v (a model's Rescaling and Normalization layers). Step k
takes the next preprocess_sizes[k] values of preprocess_values: 1 (every
element) or C, one per index of x's last dimension, which must then be C
(every per-channel step the same C).
)doc");

REGISTER_OP("FusedInt8ChannelScale")
    .Input("x: int8")
    .Input("multiplier: float")
    .Output("output: int8")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle x, m;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
      const int rank = c->Rank(c->input(1));
      if (rank != InferenceContext::kUnknownRank && rank != 2 && rank != 4) {
        return absl::InvalidArgumentError(
            "FusedInt8ChannelScale: multiplier must be float32 [N, C] or "
            "[N, 1, 1, C], got rank " + std::to_string(rank));
      }
      if (rank == 2 || rank == 4) {
        m = c->input(1);
        DimensionHandle unused;
        TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 0), c->Dim(m, 0), &unused));
        TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 3), c->Dim(m, rank - 1), &unused));
        if (rank == 4) {
          TF_RETURN_IF_ERROR(c->WithValue(c->Dim(m, 1), 1, &unused));
          TF_RETURN_IF_ERROR(c->WithValue(c->Dim(m, 2), 1, &unused));
        }
      }
      c->set_output(0, x);
      return absl::OkStatus();
    })
    .Doc(R"doc(
int8 x [N, H, W, C] times a float32 multiplier per image and channel
([N, C] or [N, 1, 1, C]: a squeeze-excite gate times s_x / s_out):
  output = clip(round_half_to_even(float32(x) * multiplier[n, c]), -128, 127)
with one IEEE float32 multiply; a NaN product gives 0. CPU.
)doc");

REGISTER_OP("FusedInt8LayerNorm")
    .Input("x: int8")
    .Input("gamma: float")
    .Input("beta: float")
    .Output("output: int8")
    .Attr("epsilon: float = 0.0")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle x, v;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &x));
      DimensionHandle channels = c->Dim(x, -1);
      for (int i : {1, 2}) {
        TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 1, &v));
        TF_RETURN_IF_ERROR(c->Merge(channels, c->Dim(v, 0), &channels));
      }
      c->set_output(0, x);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Layer normalization of int8 x [..., C] over its last axis, to int8. Per row
q[0..C): S1 = sum q, S2 = sum q^2 (exact), D = C * S2 - S1^2,
r = float32(1 / sqrt(double(D) + double(epsilon) * C^2)) (0 where D == 0),
output[c] = clip(round_half_to_even(fmaf(float32(C * q[c] - S1) * r,
gamma[c], beta[c])), -128, 127), NaN -> 0. With x at scale s_in and the
output at s_out: epsilon = Keras's epsilon / s_in^2, gamma = gamma / s_out,
beta = beta / s_out. C <= 65536. CPU.
)doc");

REGISTER_OP("FusedInt8MaxPool")
    .Input("input: int8")
    .Output("output: int8")
    .Attr("ksize: list(int) >= 4")
    .Attr("strides: list(int) >= 4")
    .Attr("padding: {'SAME', 'VALID'}")
    .Attr("zero_paddings: list(int) = []")
    .SetShapeFn([](InferenceContext* c) {
      return PoolShape(c, "FusedInt8MaxPool");
    })
    .Doc(R"doc(
int8 max pooling, NHWC (a quantized model's activations; exact at the
input's scale). The input is first surrounded by zero_paddings zeros
([top, bottom, left, right], as keras.layers.ZeroPadding2D; int8 0 is real
0), then pooled as tf.nn.max_pool with ksize, strides and padding (SAME's
padding cells are ignored, never zeros).
)doc");

REGISTER_OP("FusedInt8AvgPool")
    .Input("input: int8")
    .Output("output: int8")
    .Attr("ksize: list(int) >= 4")
    .Attr("strides: list(int) >= 4")
    .Attr("padding: {'SAME', 'VALID'}")
    .Attr("zero_paddings: list(int) = []")
    .SetShapeFn([](InferenceContext* c) {
      return PoolShape(c, "FusedInt8AvgPool");
    })
    .Doc(R"doc(
int8 average pooling, NHWC, at the input's scale (a quantized model's
activations). The input is first surrounded by zero_paddings zeros (as
FusedInt8MaxPool), then each window of tf.nn.avg_pool (ksize, strides,
padding) gives
  output = round_half_to_even(S / D)
with S the exact sum of its cells and D their number: zero padding cells
count, SAME's padding cells do not (a border window is divided by the cells
it holds, as tf.nn.avg_pool and keras.layers.AveragePooling2D do). The exact
rational is rounded once, ties to even; it never leaves [-128, 127].
)doc");

REGISTER_OP("FusedInt8Concat")
    .Input("values: N * int8")
    .Output("output: int8")
    .Attr("N: int >= 1")
    .SetShapeFn([](InferenceContext* c) {
      // Every input of one rank >= 1, the same dimensions but the last; the
      // output's last is their sum (unknown where one is).
      for (int i = 0; i < c->num_inputs(); ++i) {
        if (!c->RankKnown(c->input(i))) {
          c->set_output(0, c->UnknownShape());
          return absl::OkStatus();
        }
      }
      ShapeHandle first;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &first));
      const int rank = c->Rank(first);
      // The leading dimensions merged over the inputs; the last ones summed.
      ShapeHandle lead;
      TF_RETURN_IF_ERROR(c->Subshape(first, 0, rank - 1, &lead));
      DimensionHandle last = c->MakeDim(0);
      for (int i = 0; i < c->num_inputs(); ++i) {
        ShapeHandle v, lead_v;
        TF_RETURN_IF_ERROR(c->WithRank(c->input(i), rank, &v));
        TF_RETURN_IF_ERROR(c->Subshape(v, 0, rank - 1, &lead_v));
        TF_RETURN_IF_ERROR(c->Merge(lead, lead_v, &lead));
        TF_RETURN_IF_ERROR(c->Add(last, c->Dim(v, rank - 1), &last));
      }
      ShapeHandle out;
      TF_RETURN_IF_ERROR(c->Concatenate(lead, c->Vector(last), &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Concatenation of int8 tensors along their last dimension (a quantized
model's Concatenate of tensors that share one scale: a copy of bytes, exact).
Every input has the same rank (at least 1) and the same dimensions but the
last; the output's last dimension is the sum of theirs. CPU.
)doc");

REGISTER_OP("FusedInt8DepthToSpace")
    .Input("input: int8")
    .Output("output: int8")
    .Attr("block_height: int")
    .Attr("block_width: int")
    .SetShapeFn([](InferenceContext* c) {
      int64_t block[2] = {0, 0};
      TF_RETURN_IF_ERROR(c->GetAttr("block_height", &block[0]));
      TF_RETURN_IF_ERROR(c->GetAttr("block_width", &block[1]));
      for (int axis = 0; axis < 2; ++axis) {
        if (!DepthToSpaceBlockInRange(block[axis])) {
          return absl::InvalidArgumentError(
              std::string("FusedInt8DepthToSpace: block_") + (axis == 0 ? "height" : "width") +
              " must be in [1, " + std::to_string(kMaxDepthToSpaceBlock) + "], got " +
              std::to_string(block[axis]));
        }
      }
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
      DimensionHandle hw[2];
      for (int axis = 0; axis < 2; ++axis) {
        DimensionHandle d = c->Dim(x, 1 + axis);
        if (c->ValueKnown(d)) {
          if (c->Value(d) > std::numeric_limits<int64_t>::max() / block[axis]) {
            return absl::InvalidArgumentError(
                std::string("FusedInt8DepthToSpace: input ") + (axis == 0 ? "height " : "width ") +
                std::to_string(c->Value(d)) + " times block " + std::to_string(block[axis]) +
                " overflows");
          }
          hw[axis] = c->MakeDim(c->Value(d) * block[axis]);
        } else {
          hw[axis] = c->UnknownDim();
        }
      }
      DimensionHandle depth = c->Dim(x, 3);
      if (c->ValueKnown(depth)) {
        const int64_t phases = block[0] * block[1];
        if (c->Value(depth) % phases != 0) {
          return absl::InvalidArgumentError(
              "FusedInt8DepthToSpace: input channels must be a multiple of block_height * "
              "block_width = " + std::to_string(phases) + ", got " +
              std::to_string(c->Value(depth)));
        }
        depth = c->MakeDim(c->Value(depth) / phases);
      } else {
        depth = c->UnknownDim();
      }
      c->set_output(0, c->MakeShape({c->Dim(x, 0), hw[0], hw[1], depth}));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Depth-to-space of an int8 NHWC tensor with a block of bh x bw pixels
(block_height, block_width: 1 to 65536; TF's DepthToSpace, NHWC, bit for bit
when they are equal): [N, H, W, bh * bw * C] -> [N, H * bh, W * bw, C],
output pixel (y bh + i, x bw + j) channel k = input pixel (y, x) channel
(i bw + j) C + k. A copy (after the convolution that quantize_model makes of
a Conv2DTranspose). CPU.
)doc");

REGISTER_OP("FusedInt8Pad2D")
    .Input("input: int8")
    .Output("output: int8")
    .Attr("paddings: list(int)")
    .SetShapeFn([](InferenceContext* c) {
      std::vector<int64_t> pads;
      TF_RETURN_IF_ERROR(c->GetAttr("paddings", &pads));
      if (pads.size() != 4) {
        return absl::InvalidArgumentError(
            "FusedInt8Pad2D: paddings must have 4 entries [top, bottom, left, right], got " +
            std::to_string(pads.size()));
      }
      // The kernel's range: beyond it the sums below could overflow before
      // the kernel refuses the attr.
      for (size_t i = 0; i < pads.size(); ++i) {
        if (!PadAmountInRange(pads[i])) {
          return absl::InvalidArgumentError("FusedInt8Pad2D: paddings[" + std::to_string(i) +
                                            "] out of range: " + std::to_string(pads[i]));
        }
      }
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
      DimensionHandle h = c->Dim(x, 1), w = c->Dim(x, 2);
      for (int axis = 0; axis < 2; ++axis) {
        DimensionHandle d = axis == 0 ? h : w;
        const int64_t total = pads[2 * axis] + pads[2 * axis + 1];
        if (c->ValueKnown(d)) {
          const int64_t size = c->Value(d) + total;
          if (size < 0) {
            return absl::InvalidArgumentError(
                std::string("FusedInt8Pad2D: paddings would leave ") +
                (axis == 0 ? "height " : "width ") + std::to_string(size) + " < 0");
          }
          d = c->MakeDim(size);
        } else {
          d = c->UnknownDim();
        }
        (axis == 0 ? h : w) = d;
      }
      c->set_output(0, c->MakeShape({c->Dim(x, 0), h, w, c->Dim(x, 3)}));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Zero padding and cropping of an int8 NHWC tensor's rows and columns in one
op (keras ZeroPadding2D and Cropping2D of a quantized model's activations).
paddings = [top, bottom, left, right]: zero rows / columns added on that side,
or, negative, removed from it; the output is [N, H + top + bottom,
W + left + right, C], neither size negative. CPU.
)doc");

}  // namespace tf_fused_int8
