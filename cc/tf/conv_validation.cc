// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/tf/conv_validation.h"

#include <limits>
#include <string>

#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"

namespace tf_fused_int8 {
namespace {

using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

std::string ListString(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

// strides / dilations: [1, h, w, 1] for NHWC, [1, 1, h, w] for NCHW_VECT_C.
absl::Status CheckWindowAttr(const char* name, const std::vector<int32_t>& v,
                             bool vect, int64_t* h, int64_t* w) {
  const std::string form =
      vect ? "[1, 1, height, width] (NCHW_VECT_C)" : "[1, height, width, 1] (NHWC)";
  if (v.size() != 4) {
    return absl::InvalidArgumentError(std::string(name) +
                                      " must have 4 elements " + form +
                                      ", got " + ListString(v));
  }
  const int hi = vect ? 2 : 1;
  if (v[0] != 1 || v[vect ? 1 : 3] != 1) {
    return absl::InvalidArgumentError(
        std::string(name) + " must be 1 in the batch and depth dimensions (" +
        form + "), got " + ListString(v));
  }
  if (v[hi] < 1 || v[hi + 1] < 1) {
    return absl::InvalidArgumentError(std::string(name) +
                                      " must be positive, got " + ListString(v));
  }
  *h = v[hi];
  *w = v[hi + 1];
  return absl::OkStatus();
}

// Grouped convolution as tf.nn.conv2d: groups = conv_input depth / filter
// input depth (1 for an ordinary convolution); the output depth must be a
// multiple of it (checked by ComputeGeometry). The messages name the
// depths as `in_what` + conv_input's shape and `filter_what` + the filter's;
// they are built only on the error paths (this runs for every step of every
// call: building them on success cost the sequence op about a third of its
// per-step fixed cost, see FusedInt8ConvSequenceCpuOp).
absl::Status InferGroups(int64_t in_c, int64_t filter_in_c, const char* in_what,
                         const Tensor& input, const char* filter_what,
                         const Tensor& filter, int64_t* groups) {
  auto in_desc = [&] {
    return "conv_input depth " + std::to_string(in_c) + " (" + in_what +
           input.shape().DebugString() + ")";
  };
  auto filter_desc = [&] {
    return "filter input depth " + std::to_string(filter_in_c) + " (" +
           filter_what + filter.shape().DebugString() + ")";
  };
  if (filter_in_c == 0) {
    if (in_c != 0) {
      return absl::InvalidArgumentError(
          filter_desc() + " is 0 but " + in_desc() +
          " is not: the filter input depth must be conv_input depth / groups");
    }
    *groups = 1;
    return absl::OkStatus();
  }
  if (filter_in_c < 0 || in_c <= 0 || in_c % filter_in_c != 0) {
    return absl::InvalidArgumentError(
        in_desc() + " must be a multiple of the " + filter_desc() +
        ": the filter input depth is conv_input depth / groups (equal to it "
        "for an ordinary convolution)");
  }
  *groups = in_c / filter_in_c;
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseConvAttrs(tensorflow::OpKernelConstruction* ctx,
                            ConvAttrs* attrs) {
  ConvAttrValues v;
  TF_RETURN_IF_ERROR(ctx->GetAttr("data_format", &v.data_format));
  TF_RETURN_IF_ERROR(ctx->GetAttr("filter_format", &v.filter_format));
  TF_RETURN_IF_ERROR(ctx->GetAttr("strides", &v.strides));
  TF_RETURN_IF_ERROR(ctx->GetAttr("dilations", &v.dilations));
  TF_RETURN_IF_ERROR(ctx->GetAttr("padding", &v.padding));
  TF_RETURN_IF_ERROR(ctx->GetAttr("explicit_paddings", &v.explicit_paddings));
  TF_RETURN_IF_ERROR(ctx->GetAttr("activation_mode", &v.activation_mode));
  TF_RETURN_IF_ERROR(ctx->GetAttr("output_min", &v.output_min));
  TF_RETURN_IF_ERROR(ctx->GetAttr("output_max", &v.output_max));
  TF_RETURN_IF_ERROR(ctx->GetAttr("output_lut", &v.output_lut));
  return MakeConvAttrs(v, attrs);
}

absl::Status MakeConvAttrs(const ConvAttrValues& v, ConvAttrs* attrs) {
  const std::string& data_format = v.data_format;
  const std::string& filter_format = v.filter_format;
  const std::string& padding = v.padding;
  const std::string& activation = v.activation_mode;
  if (data_format != "NHWC" && data_format != "NCHW_VECT_C") {
    return absl::UnimplementedError("data_format must be NHWC or NCHW_VECT_C, got " +
                                    data_format);
  }
  attrs->vect = data_format == "NCHW_VECT_C";
  const char* want_filter = attrs->vect ? "OIHW_VECT_I" : "HWIO";
  if (filter_format != want_filter) {
    return absl::InvalidArgumentError(
        "data_format " + data_format + " requires filter_format " + want_filter +
        ", got " + filter_format + " (convert with tf_fused_int8." +
        (attrs->vect ? "hwio_to_oihw_vect_i" : "oihw_vect_i_to_hwio") + ")");
  }
  const std::vector<int32_t>& strides = v.strides;
  const std::vector<int32_t>& dilations = v.dilations;
  TF_RETURN_IF_ERROR(CheckWindowAttr("strides", strides, attrs->vect,
                                     &attrs->stride_h, &attrs->stride_w));
  TF_RETURN_IF_ERROR(CheckWindowAttr("dilations", dilations, attrs->vect,
                                     &attrs->dilation_h, &attrs->dilation_w));
  if (padding == "SAME") {
    attrs->padding = Padding::kSame;
  } else if (padding == "VALID") {
    attrs->padding = Padding::kValid;
  } else if (padding == "EXPLICIT") {
    attrs->padding = Padding::kExplicit;
  } else {
    return absl::InvalidArgumentError(
        "padding must be SAME, VALID or EXPLICIT, got " + padding);
  }
  const std::vector<int64_t>& explicit_paddings = v.explicit_paddings;
  if (attrs->padding == Padding::kExplicit) {
    const std::string form =
        attrs->vect ? "[0, 0, 0, 0, top, bottom, left, right] (NCHW_VECT_C)"
                    : "[0, 0, top, bottom, left, right, 0, 0] (NHWC)";
    std::string list = "[";
    for (size_t i = 0; i < explicit_paddings.size(); ++i) {
      if (i) list += ", ";
      list += std::to_string(explicit_paddings[i]);
    }
    list += "]";
    if (explicit_paddings.size() != 8) {
      return absl::InvalidArgumentError(
          "explicit_paddings must have 8 elements " + form +
          " with padding EXPLICIT, got " + list);
    }
    for (int64_t p : explicit_paddings) {
      if (p < 0) {
        return absl::InvalidArgumentError(
            "explicit_paddings must be non-negative, got " + list);
      }
      if (p > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(
            "explicit_paddings must be at most 2^31-1, got " + list);
      }
    }
    const int cd = attrs->vect ? 1 : 3;
    const int hd = attrs->vect ? 2 : 1;
    if (explicit_paddings[0] != 0 || explicit_paddings[1] != 0 ||
        explicit_paddings[2 * cd] != 0 || explicit_paddings[2 * cd + 1] != 0) {
      return absl::InvalidArgumentError(
          "explicit_paddings must be 0 in the batch and depth dimensions " +
          form + ", got " + list);
    }
    attrs->pad_top = explicit_paddings[2 * hd];
    attrs->pad_bottom = explicit_paddings[2 * hd + 1];
    attrs->pad_left = explicit_paddings[2 * hd + 2];
    attrs->pad_right = explicit_paddings[2 * hd + 3];
  } else if (!explicit_paddings.empty()) {
    return absl::InvalidArgumentError(
        "explicit_paddings must be empty unless padding is EXPLICIT (padding " +
        padding + ", got " + std::to_string(explicit_paddings.size()) +
        " values)");
  }
  if (activation == "Relu") {
    attrs->activation = Activation::kRelu;
  } else if (activation == "None") {
    attrs->activation = Activation::kNone;
  } else {
    return absl::InvalidArgumentError("activation_mode must be Relu or None, got " +
                                      activation);
  }
  const int64_t output_min = v.output_min, output_max = v.output_max;
  if (output_min < -128 || output_max > 127 || output_min > output_max) {
    return absl::InvalidArgumentError(
        "output_min and output_max must satisfy -128 <= output_min <= "
        "output_max <= 127, got " + std::to_string(output_min) + " and " +
        std::to_string(output_max));
  }
  if (attrs->activation == Activation::kRelu && output_max < 0) {
    return absl::InvalidArgumentError(
        "activation_mode Relu raises the lower output bound to 0, so "
        "output_max must be >= 0, got " + std::to_string(output_max));
  }
  attrs->output_min = static_cast<int32_t>(output_min);
  attrs->output_max = static_cast<int32_t>(output_max);
  const std::vector<int64_t>& lut = v.output_lut;
  TF_RETURN_IF_ERROR(CheckOutputLut(lut));
  attrs->output_lut.assign(lut.begin(), lut.end());
  return absl::OkStatus();
}

absl::Status CheckOutputLut(const std::vector<int64_t>& lut) {
  if (!lut.empty() && lut.size() != 256) {
    return absl::InvalidArgumentError(
        "output_lut must be empty or have 256 entries (output value q maps to "
        "output_lut[q + 128]), got " + std::to_string(lut.size()) + " entries");
  }
  for (size_t i = 0; i < lut.size(); ++i) {
    if (lut[i] < -128 || lut[i] > 127) {
      return absl::InvalidArgumentError(
          "output_lut entries must be int8 values in [-128, 127], got "
          "output_lut[" + std::to_string(i) + "] = " + std::to_string(lut[i]));
    }
  }
  return absl::OkStatus();
}

ConvInputs ConvInputsFromContext(tensorflow::OpKernelContext* ctx) {
  ConvInputs in;
  in.input = &ctx->input(0);
  in.filter = &ctx->input(1);
  in.bias = &ctx->input(2);
  in.side_input = &ctx->input(3);
  in.conv_input_scale = &ctx->input(4);
  in.side_input_scale = &ctx->input(5);
  return in;
}

std::string ComputeGeometryWithAttrs(const ConvAttrs& attrs, ConvGeometry* g) {
  g->stride_h = attrs.stride_h;
  g->stride_w = attrs.stride_w;
  g->dilation_h = attrs.dilation_h;
  g->dilation_w = attrs.dilation_w;
  if (attrs.padding == Padding::kExplicit) {
    g->pad_top = attrs.pad_top;
    g->pad_bottom = attrs.pad_bottom;
    g->pad_left = attrs.pad_left;
    g->pad_right = attrs.pad_right;
  }
  return ComputeGeometry(attrs.padding, g);
}

absl::Status ValidateConvInputs(const ConvInputs& in, const ConvAttrs& attrs,
                                ValidatedConv* out) {
  const Tensor& input = *in.input;
  const Tensor& filter = *in.filter;
  const Tensor& bias = *in.bias;
  const Tensor& side_input = *in.side_input;
  const Tensor& scale = *in.conv_input_scale;
  const Tensor& side_scale = *in.side_input_scale;

  // The op's type attr makes these equal for tensor inputs; a resource
  // variable can hold any dtype.
  const tensorflow::DataType t = input.dtype();
  if (t != tensorflow::DT_INT8 && t != tensorflow::DT_QINT8) {
    return absl::InvalidArgumentError(
        "conv_input must be int8 or qint8, got " + tensorflow::DataTypeString(t));
  }
  if (filter.dtype() != t || side_input.dtype() != t) {
    return absl::InvalidArgumentError(
        "filter and side_input must have conv_input's dtype " +
        tensorflow::DataTypeString(t) + ", got filter " +
        tensorflow::DataTypeString(filter.dtype()) + " and side_input " +
        tensorflow::DataTypeString(side_input.dtype()));
  }
  if (bias.dtype() != tensorflow::DT_FLOAT || scale.dtype() != tensorflow::DT_FLOAT ||
      side_scale.dtype() != tensorflow::DT_FLOAT) {
    return absl::InvalidArgumentError(
        "bias, conv_input_scale and side_input_scale must be float32, got " +
        tensorflow::DataTypeString(bias.dtype()) + ", " +
        tensorflow::DataTypeString(scale.dtype()) + " and " +
        tensorflow::DataTypeString(side_scale.dtype()));
  }

  ConvGeometry& g = out->geo;
  g = ConvGeometry();
  if (!attrs.vect) {
    if (input.dims() != 4) {
      return absl::InvalidArgumentError(
          "conv_input must be rank 4 [batch, height, width, depth] (NHWC), got "
          "shape " + input.shape().DebugString());
    }
    if (filter.dims() != 4) {
      return absl::InvalidArgumentError(
          "filter must be rank 4 [height, width, in_depth, out_depth] (HWIO), "
          "got shape " + filter.shape().DebugString());
    }
    TF_RETURN_IF_ERROR(InferGroups(input.dim_size(3), filter.dim_size(2),
                                   "dimension 3 of conv_input ", input,
                                   "dimension 2 of filter ", filter, &g.groups));
    g.batch = input.dim_size(0);
    g.in_h = input.dim_size(1);
    g.in_w = input.dim_size(2);
    g.in_c = input.dim_size(3);
    g.filter_h = filter.dim_size(0);
    g.filter_w = filter.dim_size(1);
    g.out_c = filter.dim_size(3);
  } else {
    if (input.dims() != 5 || input.dim_size(4) != 4) {
      return absl::InvalidArgumentError(
          "conv_input must be rank 5 [batch, depth/4, height, width, 4] "
          "(NCHW_VECT_C), got shape " + input.shape().DebugString());
    }
    if (filter.dims() != 5 || filter.dim_size(4) != 4) {
      return absl::InvalidArgumentError(
          "filter must be rank 5 [out_depth, in_depth/4, height, width, 4] "
          "(OIHW_VECT_I), got shape " + filter.shape().DebugString());
    }
    TF_RETURN_IF_ERROR(InferGroups(input.dim_size(1) * 4, filter.dim_size(1) * 4,
                                   "4 * dimension 1 of conv_input ", input,
                                   "4 * dimension 1 of filter ", filter, &g.groups));
    if (filter.dim_size(0) % 4 != 0) {
      return absl::InvalidArgumentError(
          "NCHW_VECT_C needs an output depth (filter dimension 0) that is a "
          "multiple of 4, got " + std::to_string(filter.dim_size(0)));
    }
    g.batch = input.dim_size(0);
    g.in_c = input.dim_size(1) * 4;
    g.in_h = input.dim_size(2);
    g.in_w = input.dim_size(3);
    g.out_c = filter.dim_size(0);
    g.filter_h = filter.dim_size(2);
    g.filter_w = filter.dim_size(3);
  }
  const int64_t out_c = g.out_c;
  if (bias.dims() != 1 || bias.dim_size(0) != out_c) {
    return absl::InvalidArgumentError(
        "bias must have shape [" + std::to_string(out_c) +
        "] (filter output depth), got " + bias.shape().DebugString());
  }
  if (bias.dtype() != tensorflow::DT_FLOAT || scale.dtype() != tensorflow::DT_FLOAT ||
      side_scale.dtype() != tensorflow::DT_FLOAT) {
    return absl::InvalidArgumentError(
        "bias, conv_input_scale and side_input_scale must be float32");
  }
  const int64_t scale_len = scale.NumElements();
  if (!(scale.dims() <= 1 && (scale_len == 1 || scale_len == out_c) &&
        (scale.dims() == 0 || scale_len >= 1))) {
    return absl::InvalidArgumentError(
        "conv_input_scale must be a scalar or have shape [1] or [" +
        std::to_string(out_c) + "] (filter output depth), got " +
        scale.shape().DebugString());
  }
  if (side_scale.dims() != 0) {
    return absl::InvalidArgumentError("side_input_scale must be a scalar, got shape " +
                                      side_scale.shape().DebugString());
  }
  const std::string geo_error = ComputeGeometryWithAttrs(attrs, &g);
  if (!geo_error.empty()) return absl::InvalidArgumentError(geo_error);

  out->output_shape =
      attrs.vect ? TensorShape({g.batch, g.out_c / 4, g.out_h, g.out_w, 4})
                 : TensorShape({g.batch, g.out_h, g.out_w, g.out_c});
  out->has_side_input = side_input.NumElements() > 0;
  if (out->has_side_input && side_input.shape() != out->output_shape) {
    return absl::InvalidArgumentError(
        "side_input must be empty or have the output shape " +
        out->output_shape.DebugString() + ", got " + side_input.shape().DebugString());
  }
  out->per_channel_scale = scale_len != 1;
  out->side_input_scale = side_scale.scalar<float>()();
  return absl::OkStatus();
}

}  // namespace tf_fused_int8
