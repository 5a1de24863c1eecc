// Copyright tf-fused-int8 authors. Apache 2.0.
//
// CPU OpKernel of FusedInt8Pad2D: the paddings are checked when the kernel
// is built, the input's shape on every call; the bytes are copied by the
// TF-free core (cc/core/pad.h) on our parallel-for.
#include <cstdint>
#include <string>
#include <vector>

#include "cc/core/pad.h"
#include "cc/tf/pool_parallel_for.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_fused_int8 {
namespace {

class FusedInt8Pad2DCpuOp : public tensorflow::OpKernel {
 public:
  explicit FusedInt8Pad2DCpuOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::vector<int64_t> pads;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("paddings", &pads));
    OP_REQUIRES(ctx, pads.size() == 4,
                absl::InvalidArgumentError(
                    "FusedInt8Pad2D: paddings must have 4 entries [top, bottom, left, right], "
                    "got " + std::to_string(pads.size())));
    for (int i = 0; i < 4; ++i) {
      OP_REQUIRES(ctx, PadAmountInRange(pads[i]),
                  absl::InvalidArgumentError("FusedInt8Pad2D: paddings[" + std::to_string(i) +
                                             "] out of range: " + std::to_string(pads[i])));
      pads_[i] = pads[i];
    }
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& x = ctx->input(0);
    OP_REQUIRES(ctx, x.dtype() == tensorflow::DT_INT8,
                absl::InvalidArgumentError("FusedInt8Pad2D: input must be int8, got " +
                                           tensorflow::DataTypeString(x.dtype())));
    OP_REQUIRES(ctx, x.dims() == 4,
                absl::InvalidArgumentError(
                    "FusedInt8Pad2D: input must be [batch, height, width, channels] (rank 4), "
                    "got shape " + x.shape().DebugString()));
    const int64_t n = x.dim_size(0), h = x.dim_size(1), w = x.dim_size(2), c = x.dim_size(3);
    const int64_t oh = h + pads_[0] + pads_[1], ow = w + pads_[2] + pads_[3];
    OP_REQUIRES(ctx, oh >= 0 && ow >= 0,
                absl::InvalidArgumentError(
                    "FusedInt8Pad2D: paddings [" + std::to_string(pads_[0]) + ", " +
                    std::to_string(pads_[1]) + ", " + std::to_string(pads_[2]) + ", " +
                    std::to_string(pads_[3]) + "] would leave an output of " +
                    std::to_string(oh) + "x" + std::to_string(ow) + " from input shape " +
                    x.shape().DebugString()));
    tensorflow::TensorShape shape;
    OP_REQUIRES_OK(ctx, tensorflow::TensorShape::BuildTensorShape({n, oh, ow, c}, &shape));
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    if (out->NumElements() == 0) return;
    PadCropNhwc(reinterpret_cast<const int8_t*>(x.tensor_data().data()), n, h, w, c, pads_,
                reinterpret_cast<int8_t*>(const_cast<char*>(out->tensor_data().data())),
                PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers));
  }

 private:
  int64_t pads_[4] = {0, 0, 0, 0};
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedInt8Pad2D").Device(tensorflow::DEVICE_CPU),
                        FusedInt8Pad2DCpuOp);

}  // namespace tf_fused_int8
