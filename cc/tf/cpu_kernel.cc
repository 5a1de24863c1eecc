// Copyright tf-fused-int8 authors. Apache 2.0.
//
// CPU OpKernel: validates every input in the kernel (never trusting the shape
// function, which eager execution may skip), then hands plain pointers to the
// TF-free compute core, with TF's intra-op thread pool as its parallel-for.
#include <string>
#include <vector>

#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace tf_fused_int8 {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
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

// Attribute checks shared by every device: strides and dilations are
// [1, h, w, 1] in NHWC, positive.
absl::Status CheckWindowAttr(const char* name, const std::vector<int32_t>& v) {
  if (v.size() != 4) {
    return absl::InvalidArgumentError(
        std::string(name) + " must have 4 elements [1, height, width, 1], got " +
        ListString(v));
  }
  if (v[0] != 1 || v[3] != 1) {
    return absl::InvalidArgumentError(
        std::string(name) +
        " must be 1 in the batch and depth dimensions ([1, height, width, 1]), "
        "got " + ListString(v));
  }
  if (v[1] < 1 || v[2] < 1) {
    return absl::InvalidArgumentError(std::string(name) +
                                      " must be positive, got " + ListString(v));
  }
  return absl::OkStatus();
}

class FusedInt8ConvCpuOp : public OpKernel {
 public:
  explicit FusedInt8ConvCpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string data_format, filter_format, padding, activation;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("data_format", &data_format));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("filter_format", &filter_format));
    OP_REQUIRES(ctx, data_format == "NHWC",
                absl::UnimplementedError(
                    "data_format " + data_format +
                    " is not supported on CPU; use NHWC (convert with "
                    "tf_fused_int8.nchw_vect_c_to_nhwc) or run on a GPU"));
    OP_REQUIRES(ctx, filter_format == "HWIO",
                absl::UnimplementedError(
                    "filter_format " + filter_format +
                    " is not supported on CPU; use HWIO (convert with "
                    "tf_fused_int8.oihw_vect_i_to_hwio)"));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("strides", &strides_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dilations", &dilations_));
    OP_REQUIRES_OK(ctx, CheckWindowAttr("strides", strides_));
    OP_REQUIRES_OK(ctx, CheckWindowAttr("dilations", dilations_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("padding", &padding));
    if (padding == "SAME") {
      padding_ = Padding::kSame;
    } else if (padding == "VALID") {
      padding_ = Padding::kValid;
    } else {
      ctx->CtxFailure(absl::InvalidArgumentError(
          "padding must be SAME or VALID, got " + padding));
      return;
    }
    OP_REQUIRES_OK(ctx, ctx->GetAttr("activation_mode", &activation));
    if (activation == "Relu") {
      activation_ = Activation::kRelu;
    } else if (activation == "None") {
      activation_ = Activation::kNone;
    } else {
      ctx->CtxFailure(absl::InvalidArgumentError(
          "activation_mode must be Relu or None, got " + activation));
      return;
    }
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& input = ctx->input(0);
    const Tensor& filter = ctx->input(1);
    const Tensor& bias = ctx->input(2);
    const Tensor& side_input = ctx->input(3);
    const Tensor& scale = ctx->input(4);
    const Tensor& side_scale = ctx->input(5);

    OP_REQUIRES(ctx, input.dims() == 4,
                absl::InvalidArgumentError(
                    "conv_input must be rank 4 [batch, height, width, depth] "
                    "(NHWC), got shape " + input.shape().DebugString()));
    OP_REQUIRES(ctx, filter.dims() == 4,
                absl::InvalidArgumentError(
                    "filter must be rank 4 [height, width, in_depth, "
                    "out_depth] (HWIO), got shape " +
                    filter.shape().DebugString()));
    OP_REQUIRES(ctx, input.dim_size(3) == filter.dim_size(2),
                absl::InvalidArgumentError(
                    "filter input depth (dimension 2 of filter " +
                    filter.shape().DebugString() +
                    ") must equal conv_input depth (dimension 3 of " +
                    input.shape().DebugString() + ")"));
    const int64_t out_c = filter.dim_size(3);
    OP_REQUIRES(ctx, bias.dims() == 1 && bias.dim_size(0) == out_c,
                absl::InvalidArgumentError(
                    "bias must have shape [" + std::to_string(out_c) +
                    "] (filter output depth), got " + bias.shape().DebugString()));
    OP_REQUIRES(ctx, bias.dtype() == tensorflow::DT_FLOAT,
                absl::InvalidArgumentError("bias must be float32"));
    const int64_t scale_len = scale.NumElements();
    OP_REQUIRES(ctx,
                scale.dims() <= 1 && (scale_len == 1 || scale_len == out_c) &&
                    (scale.dims() == 0 || scale_len >= 1),
                absl::InvalidArgumentError(
                    "conv_input_scale must be a scalar or have shape [1] or [" +
                    std::to_string(out_c) + "] (filter output depth), got " +
                    scale.shape().DebugString()));
    OP_REQUIRES(ctx, TensorShapeUtilsIsScalar(side_scale),
                absl::InvalidArgumentError(
                    "side_input_scale must be a scalar, got shape " +
                    side_scale.shape().DebugString()));

    ConvGeometry g;
    g.batch = input.dim_size(0);
    g.in_h = input.dim_size(1);
    g.in_w = input.dim_size(2);
    g.in_c = input.dim_size(3);
    g.filter_h = filter.dim_size(0);
    g.filter_w = filter.dim_size(1);
    g.out_c = out_c;
    g.stride_h = strides_[1];
    g.stride_w = strides_[2];
    g.dilation_h = dilations_[1];
    g.dilation_w = dilations_[2];
    const std::string geo_error = ComputeGeometry(padding_, &g);
    OP_REQUIRES(ctx, geo_error.empty(), absl::InvalidArgumentError(geo_error));

    const TensorShape out_shape({g.batch, g.out_h, g.out_w, g.out_c});
    const bool has_side_tensor = side_input.NumElements() > 0;
    OP_REQUIRES(ctx, !has_side_tensor || side_input.shape() == out_shape,
                absl::InvalidArgumentError(
                    "side_input must be empty or have the output shape " +
                    out_shape.DebugString() + ", got " +
                    side_input.shape().DebugString()));

    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &output));
    if (out_shape.num_elements() == 0) return;

    FusedConvArgs args;
    args.geo = g;
    args.input = reinterpret_cast<const int8_t*>(input.tensor_data().data());
    args.filter = reinterpret_cast<const int8_t*>(filter.tensor_data().data());
    args.bias = bias.flat<float>().data();
    args.side_input =
        has_side_tensor
            ? reinterpret_cast<const int8_t*>(side_input.tensor_data().data())
            : nullptr;
    args.conv_input_scale = scale.flat<float>().data();
    args.per_channel_scale = scale_len != 1;
    args.side_input_scale = side_scale.scalar<float>()();
    args.activation = activation_;
    args.output = reinterpret_cast<int8_t*>(
        const_cast<char*>(output->tensor_data().data()));

    auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    ParallelFor parallel_for;
    parallel_for.num_threads = pool->NumThreads();
    parallel_for.run = [pool](int64_t total, int64_t cost,
                              const std::function<void(int64_t, int64_t)>& fn) {
      pool->ParallelFor(total, cost, fn);
    };
    const std::string err = RunFusedConv(args, KernelPath::kAuto, parallel_for);
    OP_REQUIRES(ctx, err.empty(), absl::InvalidArgumentError(err));
  }

 private:
  static bool TensorShapeUtilsIsScalar(const Tensor& t) { return t.dims() == 0; }

  std::vector<int32_t> strides_;
  std::vector<int32_t> dilations_;
  Padding padding_ = Padding::kSame;
  Activation activation_ = Activation::kRelu;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedInt8Conv2DBiasActivation")
                            .Device(tensorflow::DEVICE_CPU)
                            .TypeConstraint<int8_t>("T"),
                        FusedInt8ConvCpuOp);
REGISTER_KERNEL_BUILDER(Name("FusedInt8Conv2DBiasActivation")
                            .Device(tensorflow::DEVICE_CPU)
                            .TypeConstraint<tensorflow::qint8>("T"),
                        FusedInt8ConvCpuOp);

}  // namespace tf_fused_int8
