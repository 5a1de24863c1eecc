// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Attribute parsing and input validation shared by the CPU and GPU kernels:
// every input's rank, dims, length and every attribute is checked here, in the
// kernel, with an InvalidArgument/Unimplemented error that names the argument
// and the expected shape (the shape function may not have run, e.g. eagerly).
#ifndef TF_FUSED_INT8_CC_TF_CONV_VALIDATION_H_
#define TF_FUSED_INT8_CC_TF_CONV_VALIDATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cc/core/conv_params.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_fused_int8 {

// The op's attributes, checked once at kernel construction.
struct ConvAttrs {
  // data_format NCHW_VECT_C with filter_format OIHW_VECT_I (else NHWC/HWIO).
  bool vect = false;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  Padding padding = Padding::kSame;
  // For Padding::kExplicit (from explicit_paddings), else 0.
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  Activation activation = Activation::kRelu;
  // -128 <= output_min <= output_max <= 127 (OutputBounds applies Relu).
  int32_t output_min = -128, output_max = 127;
  // output_lut: empty, or 256 entries (FusedConvArgs::output_lut).
  std::vector<int8_t> output_lut;
};

// The output_lut attr: empty or exactly 256 values in [-128, 127].
absl::Status CheckOutputLut(const std::vector<int64_t>& lut);

absl::Status ParseConvAttrs(tensorflow::OpKernelConstruction* ctx,
                            ConvAttrs* attrs);

// One convolution's attributes as the op spells them (FUSED_INT8_CONV_ATTRS
// in ops.cc), for ops that carry several convolutions' attributes in lists.
struct ConvAttrValues {
  std::string data_format = "NHWC", filter_format = "HWIO";
  std::string padding = "VALID", activation_mode = "None";
  // Empty here: OpKernelConstruction::GetAttr appends to a list.
  std::vector<int32_t> strides, dilations;
  std::vector<int64_t> explicit_paddings, output_lut;
  int64_t output_min = -128, output_max = 127;
};

// Checks `v` as ParseConvAttrs checks the op's attributes (the same
// messages) and fills `attrs`.
absl::Status MakeConvAttrs(const ConvAttrValues& v, ConvAttrs* attrs);

// What a validated call computes. geo is the logical NHWC/HWIO geometry (for
// NCHW_VECT_C, in_c counts the padded input channels, 4 * dimension 1).
struct ValidatedConv {
  ConvGeometry geo;
  tensorflow::TensorShape output_shape;  // in data_format layout
  bool has_side_input = false;           // a non-empty side_input tensor
  bool per_channel_scale = false;
  float side_input_scale = 0.0f;
};

// The op's six inputs, in its input order. For FusedInt8Conv2DBiasActivation
// they are the op's inputs 0..5; ResourceFusedInt8Conv2DBiasActivation reads
// filter, bias and conv_input_scale from its resource variables first.
struct ConvInputs {
  const tensorflow::Tensor* input = nullptr;
  const tensorflow::Tensor* filter = nullptr;
  const tensorflow::Tensor* bias = nullptr;
  const tensorflow::Tensor* side_input = nullptr;
  const tensorflow::Tensor* conv_input_scale = nullptr;
  const tensorflow::Tensor* side_input_scale = nullptr;
};

// ConvInputs of an op whose inputs 0..5 are all tensors.
ConvInputs ConvInputsFromContext(tensorflow::OpKernelContext* ctx);

// ComputeGeometry for *g's sizes (batch, input and filter sizes, out_c,
// groups) with `attrs`' strides, dilations and padding; "" or the message.
std::string ComputeGeometryWithAttrs(const ConvAttrs& attrs, ConvGeometry* g);

// Validates the inputs against `attrs` (including every dtype: filter and
// side_input must have conv_input's, the rest float32). side_input_scale must
// be readable on the host (host memory on GPU).
absl::Status ValidateConvInputs(const ConvInputs& in, const ConvAttrs& attrs,
                                ValidatedConv* out);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_TF_CONV_VALIDATION_H_
