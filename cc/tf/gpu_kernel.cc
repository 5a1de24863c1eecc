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
#include "cc/tf/conv_validation.h"
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
    OP_REQUIRES_OK(ctx, ParseConvAttrs(ctx, &attrs_));
    // Registered with data_format = NCHW_VECT_C only; NHWC runs on the CPU.
    OP_REQUIRES(ctx, attrs_.vect,
                absl::UnimplementedError(
                    "the GPU kernel takes data_format NCHW_VECT_C (convert with "
                    "tf_fused_int8.nhwc_to_nchw_vect_c) or run NHWC on the CPU"));
  }

  void Compute(OpKernelContext* ctx) override {
    ValidatedConv v;
    OP_REQUIRES_OK(ctx, ValidateConvInputs(ConvInputsFromContext(ctx), attrs_, &v));
    const ConvGeometry& g = v.geo;
    const TensorShape& out_shape = v.output_shape;
    const Tensor& input = ctx->input(0);
    const Tensor& filter = ctx->input(1);
    const Tensor& bias = ctx->input(2);
    const Tensor& side_input = ctx->input(3);
    const Tensor& scale = ctx->input(4);
    const bool has_side_tensor = v.has_side_input;

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
    args.per_channel_scale = v.per_channel_scale;
    args.side_input_scale = v.side_input_scale;
    // The 256 bytes go into the epilogue kernel's parameters (by value).
    args.output_lut = attrs_.output_lut.empty() ? nullptr : attrs_.output_lut.data();
    args.activation = attrs_.activation;
    args.output_min = attrs_.output_min;
    args.output_max = attrs_.output_max;
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
  ConvAttrs attrs_;
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
