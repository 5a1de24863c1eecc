// Copyright tf-fused-int8 authors. Apache 2.0.
//
// CPU OpKernel of FusedInt8LayerNorm: validates x (int8, rank >= 1, its last
// dimension C in [1, 65536]), gamma and beta (float32 [C]) and epsilon
// (finite, >= 0), and hands the rows to the TF-free core
// (cc/core/layer_norm.h) with TF's intra-op pool.
#include <cmath>
#include <cstdint>
#include <string>

#include "cc/core/layer_norm.h"
#include "cc/tf/pool_parallel_for.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_fused_int8 {
namespace {

class FusedInt8LayerNormCpuOp : public tensorflow::OpKernel {
 public:
  explicit FusedInt8LayerNormCpuOp(tensorflow::OpKernelConstruction* ctx)
      : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
    OP_REQUIRES(ctx, std::isfinite(epsilon_) && epsilon_ >= 0.0f,
                absl::InvalidArgumentError(
                    "FusedInt8LayerNorm: epsilon must be finite and >= 0, got " +
                    std::to_string(epsilon_)));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& x = ctx->input(0);
    OP_REQUIRES(ctx, x.dtype() == tensorflow::DT_INT8 && x.dims() >= 1,
                absl::InvalidArgumentError(
                    "FusedInt8LayerNorm: x must be int8 [..., C] (rank >= 1), got " +
                    tensorflow::DataTypeString(x.dtype()) + " " + x.shape().DebugString()));
    const int64_t c = x.dim_size(x.dims() - 1);
    OP_REQUIRES(ctx, c >= 1 && c <= kLayerNormMaxChannels,
                absl::InvalidArgumentError(
                    "FusedInt8LayerNorm: x's last dimension C must be in [1, " +
                    std::to_string(kLayerNormMaxChannels) + "], got x " +
                    x.shape().DebugString()));
    const std::string expected = "float32 [" + std::to_string(c) + "] (one value per "
                                 "channel of x " + x.shape().DebugString() + ")";
    for (int i : {1, 2}) {
      const tensorflow::Tensor& t = ctx->input(i);
      OP_REQUIRES(ctx, t.dtype() == tensorflow::DT_FLOAT && t.dims() == 1 &&
                           t.dim_size(0) == c,
                  absl::InvalidArgumentError(
                      std::string("FusedInt8LayerNorm: ") + (i == 1 ? "gamma" : "beta") +
                      " must be " + expected + ", got " +
                      tensorflow::DataTypeString(t.dtype()) + " " + t.shape().DebugString()));
    }
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    if (x.NumElements() == 0) return;
    LayerNormArgs a;
    a.x = x.flat<int8_t>().data();
    a.gamma = ctx->input(1).flat<float>().data();
    a.beta = ctx->input(2).flat<float>().data();
    a.epsilon = epsilon_;
    a.out = out->flat<int8_t>().data();
    a.channels = c;
    a.rows = x.NumElements() / c;
    RunLayerNorm(a, PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers));
  }

 private:
  float epsilon_ = 0.0f;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedInt8LayerNorm").Device(tensorflow::DEVICE_CPU),
                        FusedInt8LayerNormCpuOp);

}  // namespace tf_fused_int8
