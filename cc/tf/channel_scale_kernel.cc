// Copyright tf-fused-int8 authors. Apache 2.0.
//
// CPU OpKernel of FusedInt8ChannelScale: validates x ([N, H, W, C] int8)
// and multiplier (float32 [N, C] or [N, 1, 1, C]) and hands the elements to
// the TF-free core (cc/core/channel_scale.h) with TF's intra-op pool.
#include <cstdint>
#include <string>

#include "cc/core/channel_scale.h"
#include "cc/tf/pool_parallel_for.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_fused_int8 {
namespace {

class FusedInt8ChannelScaleCpuOp : public tensorflow::OpKernel {
 public:
  explicit FusedInt8ChannelScaleCpuOp(tensorflow::OpKernelConstruction* ctx)
      : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& x = ctx->input(0);
    const tensorflow::Tensor& m = ctx->input(1);
    OP_REQUIRES(ctx, x.dtype() == tensorflow::DT_INT8 && x.dims() == 4,
                absl::InvalidArgumentError(
                    "FusedInt8ChannelScale: x must be int8 [N, H, W, C], got " +
                    tensorflow::DataTypeString(x.dtype()) + " " +
                    x.shape().DebugString()));
    const int64_t n = x.dim_size(0), c = x.dim_size(3);
    const std::string expected = "float32 [" + std::to_string(n) + ", " +
                                 std::to_string(c) + "] or [" +
                                 std::to_string(n) + ", 1, 1, " +
                                 std::to_string(c) + "]";
    const bool shape_ok =
        (m.dims() == 2 && m.dim_size(0) == n && m.dim_size(1) == c) ||
        (m.dims() == 4 && m.dim_size(0) == n && m.dim_size(1) == 1 &&
         m.dim_size(2) == 1 && m.dim_size(3) == c);
    OP_REQUIRES(ctx, m.dtype() == tensorflow::DT_FLOAT && shape_ok,
                absl::InvalidArgumentError(
                    "FusedInt8ChannelScale: multiplier must be " + expected +
                    " (one value per image and channel of x " +
                    x.shape().DebugString() + "), got " +
                    tensorflow::DataTypeString(m.dtype()) + " " +
                    m.shape().DebugString()));
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    if (x.NumElements() == 0) return;
    ChannelScaleArgs a;
    a.x = x.flat<int8_t>().data();
    a.m = m.flat<float>().data();
    a.out = out->flat<int8_t>().data();
    a.batch = n;
    a.pixels = x.dim_size(1) * x.dim_size(2);
    a.channels = c;
    RunChannelScale(
        a, PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers));
  }
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedInt8ChannelScale").Device(tensorflow::DEVICE_CPU),
                        FusedInt8ChannelScaleCpuOp);

}  // namespace tf_fused_int8
