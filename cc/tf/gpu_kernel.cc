// Copyright tf-fused-int8 authors. Apache 2.0.
//
// GPU OpKernel for data_format NCHW_VECT_C / filter_format OIHW_VECT_I:
// validates every input in the kernel (like the CPU kernel), then hands device
// pointers, TF's CUDA stream and a scratch allocator over allocate_temp to the
// TF-free GPU backend (cc/core/gpu). Registered for T in {int8, qint8} with an
// attribute constraint data_format = NCHW_VECT_C, so that NHWC ops keep going
// to the CPU kernel even on machines with a GPU.
//
// CUDA and cuDNN are reached through the lazily loading stubs that
// libtensorflow_framework.so.2 exports (the op library already depends on it):
// the library gets no new DT_NEEDED entry and still loads where there is no
// GPU, no driver and no cuDNN; this file is compiled in every build.
#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "cc/core/conv_params.h"
#include "cc/core/gpu/fused_conv_gpu.h"
#include "cc/core/gpu/gpu_api.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/logging.h"
#include "tensorflow/core/util/determinism.h"
#include "xla/stream_executor/stream.h"

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

// strides / dilations in NCHW_VECT_C order: [1, 1, height, width].
absl::Status CheckWindowAttrVect(const char* name, const std::vector<int32_t>& v) {
  if (v.size() != 4) {
    return absl::InvalidArgumentError(
        std::string(name) + " must have 4 elements [1, 1, height, width] (NCHW_VECT_C), got " +
        ListString(v));
  }
  if (v[0] != 1 || v[1] != 1) {
    return absl::InvalidArgumentError(
        std::string(name) +
        " must be 1 in the batch and depth dimensions ([1, 1, height, width] for NCHW_VECT_C), "
        "got " + ListString(v));
  }
  if (v[2] < 1 || v[3] < 1) {
    return absl::InvalidArgumentError(std::string(name) + " must be positive, got " +
                                      ListString(v));
  }
  return absl::OkStatus();
}

absl::Status ToAbsl(const gpu::Status& s) {
  switch (s.code()) {
    case gpu::StatusCode::kOk: return absl::OkStatus();
    case gpu::StatusCode::kInvalidArgument: return absl::InvalidArgumentError(s.message());
    case gpu::StatusCode::kUnimplemented: return absl::UnimplementedError(s.message());
    case gpu::StatusCode::kResourceExhausted: return absl::ResourceExhaustedError(s.message());
    case gpu::StatusCode::kUnavailable: return absl::UnavailableError(s.message());
    case gpu::StatusCode::kNotFound: return absl::NotFoundError(s.message());
    case gpu::StatusCode::kInternal: return absl::InternalError(s.message());
  }
  return absl::InternalError(s.message());
}

// The CUDA/cuDNN entry points: TF's exported stubs, resolved when the op
// library is loaded (they exist in every TF 2.21 build, GPU or not).
const gpu::GpuApi& TensorFlowGpuApi() {
  static const gpu::GpuApi* api = [] {
    auto* a = new gpu::GpuApi;
#define TFI_FROM_TF(name) a->name = &::name;
    TFI_CUDA_DRIVER_FUNCTIONS(TFI_FROM_TF)
    TFI_CUDNN_FUNCTIONS(TFI_FROM_TF)
#undef TFI_FROM_TF
    a->origin = "TensorFlow's CUDA/cuDNN stubs (libtensorflow_framework.so.2)";
    return a;
  }();
  return *api;
}

// Scratch from allocate_temp; the tensors live until Compute returns, and TF's
// GPU allocator orders reuse on the op's stream.
class TempAllocator : public gpu::ScratchAllocator {
 public:
  explicit TempAllocator(OpKernelContext* ctx) : ctx_(ctx) {}
  void* Allocate(size_t bytes) override {
    if (bytes == 0) bytes = 1;
    temps_.emplace_back();
    Tensor& t = temps_.back();
    const absl::Status s = ctx_->allocate_temp(
        tensorflow::DT_INT8, TensorShape({static_cast<int64_t>(bytes)}), &t);
    if (!s.ok()) {
      temps_.pop_back();
      return nullptr;
    }
    return const_cast<char*>(t.tensor_data().data());
  }

 private:
  OpKernelContext* ctx_;
  std::list<Tensor> temps_;
};

class FusedInt8ConvGpuOp : public OpKernel {
 public:
  explicit FusedInt8ConvGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string data_format, filter_format, padding, activation;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("data_format", &data_format));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("filter_format", &filter_format));
    OP_REQUIRES(ctx, data_format == "NCHW_VECT_C",
                absl::UnimplementedError(
                    "data_format " + data_format +
                    " is not supported on GPU; use NCHW_VECT_C (convert with "
                    "tf_fused_int8.nhwc_to_nchw_vect_c) or run on the CPU"));
    OP_REQUIRES(ctx, filter_format == "OIHW_VECT_I",
                absl::InvalidArgumentError(
                    "data_format NCHW_VECT_C requires filter_format OIHW_VECT_I, got " +
                    filter_format + " (convert with tf_fused_int8.hwio_to_oihw_vect_i)"));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("strides", &strides_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dilations", &dilations_));
    OP_REQUIRES_OK(ctx, CheckWindowAttrVect("strides", strides_));
    OP_REQUIRES_OK(ctx, CheckWindowAttrVect("dilations", dilations_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("padding", &padding));
    if (padding == "SAME") {
      padding_ = Padding::kSame;
    } else if (padding == "VALID") {
      padding_ = Padding::kValid;
    } else {
      ctx->CtxFailure(absl::InvalidArgumentError("padding must be SAME or VALID, got " + padding));
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
    const Tensor& side_scale = ctx->input(5);  // host memory

    OP_REQUIRES(ctx, input.dims() == 5 && input.dim_size(4) == 4,
                absl::InvalidArgumentError(
                    "conv_input must be rank 5 [batch, depth/4, height, width, 4] "
                    "(NCHW_VECT_C), got shape " + input.shape().DebugString()));
    OP_REQUIRES(ctx, filter.dims() == 5 && filter.dim_size(4) == 4,
                absl::InvalidArgumentError(
                    "filter must be rank 5 [out_depth, in_depth/4, height, width, 4] "
                    "(OIHW_VECT_I), got shape " + filter.shape().DebugString()));
    OP_REQUIRES(ctx, input.dim_size(1) == filter.dim_size(1),
                absl::InvalidArgumentError(
                    "filter input depth (4 * dimension 1 of filter " +
                    filter.shape().DebugString() +
                    ") must equal conv_input depth (4 * dimension 1 of " +
                    input.shape().DebugString() + ")"));
    const int64_t out_c = filter.dim_size(0);
    OP_REQUIRES(ctx, out_c % 4 == 0,
                absl::InvalidArgumentError(
                    "NCHW_VECT_C needs an output depth (filter dimension 0) that is a multiple "
                    "of 4, got " + std::to_string(out_c)));
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
    OP_REQUIRES(ctx, side_scale.dims() == 0,
                absl::InvalidArgumentError("side_input_scale must be a scalar, got shape " +
                                           side_scale.shape().DebugString()));

    ConvGeometry g;
    g.batch = input.dim_size(0);
    g.in_c = input.dim_size(1) * 4;
    g.in_h = input.dim_size(2);
    g.in_w = input.dim_size(3);
    g.out_c = out_c;
    g.filter_h = filter.dim_size(2);
    g.filter_w = filter.dim_size(3);
    g.stride_h = strides_[2];
    g.stride_w = strides_[3];
    g.dilation_h = dilations_[2];
    g.dilation_w = dilations_[3];
    const std::string geo_error = ComputeGeometry(padding_, &g);
    OP_REQUIRES(ctx, geo_error.empty(), absl::InvalidArgumentError(geo_error));

    const TensorShape out_shape({g.batch, g.out_c / 4, g.out_h, g.out_w, 4});
    const bool has_side_tensor = side_input.NumElements() > 0;
    OP_REQUIRES(ctx, !has_side_tensor || side_input.shape() == out_shape,
                absl::InvalidArgumentError(
                    "side_input must be empty or have the output shape " +
                    out_shape.DebugString() + ", got " + side_input.shape().DebugString()));

    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &output));
    if (out_shape.num_elements() == 0) return;

    auto* device_context = ctx->op_device_context();
    OP_REQUIRES(ctx, device_context != nullptr && device_context->stream() != nullptr,
                absl::InternalError("no GPU stream for FusedInt8Conv2DBiasActivation"));
    CUstream stream = static_cast<CUstream>(
        device_context->stream()->platform_specific_handle().stream);
    OP_REQUIRES(ctx, stream != nullptr, absl::InternalError("the GPU stream has no CUDA handle"));

    gpu::GpuConvArgs args;
    args.geo = g;
    args.input = reinterpret_cast<const int8_t*>(input.tensor_data().data());
    args.filter = reinterpret_cast<const int8_t*>(filter.tensor_data().data());
    args.bias = reinterpret_cast<const float*>(bias.tensor_data().data());
    args.side_input =
        has_side_tensor ? reinterpret_cast<const int8_t*>(side_input.tensor_data().data())
                        : nullptr;
    args.conv_input_scale = reinterpret_cast<const float*>(scale.tensor_data().data());
    args.per_channel_scale = scale_len != 1;
    args.side_input_scale = side_scale.scalar<float>()();
    args.activation = activation_;
    args.output = reinterpret_cast<int8_t*>(const_cast<char*>(output->tensor_data().data()));

    const gpu::GpuOptions options =
        gpu::GpuOptions::FromEnvironment(tensorflow::OpDeterminismRequired());
    if (!options.warnings.empty()) {
      LOG_FIRST_N(WARNING, 1) << "FusedInt8Conv2DBiasActivation: " << options.warnings;
    }
    TempAllocator scratch(ctx);
    gpu::GpuRunInfo info;
    const gpu::Status s =
        gpu::RunFusedConvGpu(TensorFlowGpuApi(), stream, args, options, &scratch, &info);
    if (info.tuned_now) {
      VLOG(1) << "FusedInt8Conv2DBiasActivation autotuned on " << info.device << " ["
              << info.cache_key << "]: " << info.plan << " (" << info.plan_time_ms << " ms)";
      for (const auto& c : info.candidates) {
        VLOG(2) << "  " << c.name << ": " << c.outcome << " " << c.time_ms << " ms, workspace "
                << c.workspace_bytes;
      }
    }
    OP_REQUIRES_OK(ctx, ToAbsl(s));
  }

 private:
  std::vector<int32_t> strides_;
  std::vector<int32_t> dilations_;
  Padding padding_ = Padding::kSame;
  Activation activation_ = Activation::kRelu;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedInt8Conv2DBiasActivation")
                            .Device(tensorflow::DEVICE_GPU)
                            .TypeConstraint<int8_t>("T")
                            .AttrConstraint<const char*>("data_format", "NCHW_VECT_C")
                            .HostMemory("side_input_scale"),
                        FusedInt8ConvGpuOp);
REGISTER_KERNEL_BUILDER(Name("FusedInt8Conv2DBiasActivation")
                            .Device(tensorflow::DEVICE_GPU)
                            .TypeConstraint<tensorflow::qint8>("T")
                            .AttrConstraint<const char*>("data_format", "NCHW_VECT_C")
                            .HostMemory("side_input_scale"),
                        FusedInt8ConvGpuOp);

}  // namespace tf_fused_int8
