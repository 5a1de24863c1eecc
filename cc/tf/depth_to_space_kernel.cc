// Copyright tf-fused-int8 authors. Apache 2.0.
//
// CPU OpKernel of FusedInt8DepthToSpace: block_size is checked when the
// kernel is built, the input's shape on every call; the bytes are copied by
// the TF-free core (cc/core/depth_to_space.h) on our parallel-for.
#include <cstdint>
#include <limits>
#include <string>

#include "cc/core/depth_to_space.h"
#include "cc/tf/pool_parallel_for.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_fused_int8 {
namespace {

class FusedInt8DepthToSpaceCpuOp : public tensorflow::OpKernel {
 public:
  explicit FusedInt8DepthToSpaceCpuOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("block_height", &bh_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("block_width", &bw_));
    for (int axis = 0; axis < 2; ++axis) {
      const int64_t b = axis == 0 ? bh_ : bw_;
      OP_REQUIRES(ctx, DepthToSpaceBlockInRange(b),
                  absl::InvalidArgumentError(
                      std::string("FusedInt8DepthToSpace: block_") +
                      (axis == 0 ? "height" : "width") + " must be in [1, " +
                      std::to_string(kMaxDepthToSpaceBlock) + "], got " + std::to_string(b)));
    }
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& x = ctx->input(0);
    OP_REQUIRES(ctx, x.dtype() == tensorflow::DT_INT8,
                absl::InvalidArgumentError("FusedInt8DepthToSpace: input must be int8, got " +
                                           tensorflow::DataTypeString(x.dtype())));
    OP_REQUIRES(ctx, x.dims() == 4,
                absl::InvalidArgumentError(
                    "FusedInt8DepthToSpace: input must be [batch, height, width, channels] "
                    "(rank 4), got shape " + x.shape().DebugString()));
    const int64_t n = x.dim_size(0), h = x.dim_size(1), w = x.dim_size(2), c = x.dim_size(3);
    const int64_t phases = bh_ * bw_;  // <= 2^32: both are in range
    OP_REQUIRES(ctx, c % phases == 0,
                absl::InvalidArgumentError(
                    "FusedInt8DepthToSpace: input channels must be a multiple of block_height * "
                    "block_width = " + std::to_string(phases) + ", got shape " +
                    x.shape().DebugString()));
    // (With no channels the other sizes may be huge: the products are
    // checked.)
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    OP_REQUIRES(ctx, h <= kMax / bh_ && w <= kMax / bw_,
                absl::InvalidArgumentError(
                    "FusedInt8DepthToSpace: input shape " + x.shape().DebugString() +
                    " times the block " + std::to_string(bh_) + "x" + std::to_string(bw_) +
                    " overflows"));
    tensorflow::TensorShape shape;
    OP_REQUIRES_OK(ctx, tensorflow::TensorShape::BuildTensorShape(
                            {n, h * bh_, w * bw_, c / phases}, &shape));
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    if (out->NumElements() == 0) return;
    DepthToSpaceNhwc(reinterpret_cast<const int8_t*>(x.tensor_data().data()), n, h, w,
                     c / phases, bh_, bw_,
                     reinterpret_cast<int8_t*>(const_cast<char*>(out->tensor_data().data())),
                     PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers));
  }

 private:
  int64_t bh_ = 1, bw_ = 1;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedInt8DepthToSpace").Device(tensorflow::DEVICE_CPU),
                        FusedInt8DepthToSpaceCpuOp);

}  // namespace tf_fused_int8
