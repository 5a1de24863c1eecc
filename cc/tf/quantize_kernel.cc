// Copyright tf-fused-int8 authors. Apache 2.0.
//
// CPU OpKernel of FusedInt8Quantize: the scale is checked once, when the
// kernel is built; the elements go to the TF-free core (cc/core/quantize.h)
// with TF's intra-op pool as its parallel-for.
#include <cstdint>
#include <string>

#include "cc/core/quantize.h"
#include "cc/tf/pool_parallel_for.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_fused_int8 {
namespace {

class FusedInt8QuantizeCpuOp : public tensorflow::OpKernel {
 public:
  explicit FusedInt8QuantizeCpuOp(tensorflow::OpKernelConstruction* ctx)
      : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
    OP_REQUIRES(ctx, ValidQuantizeScale(scale_),
                absl::InvalidArgumentError(
                    "FusedInt8Quantize: scale must be a positive finite "
                    "float32, got " + std::to_string(scale_)));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    // What follows a Quantize is int8 work, ours: have the helpers awake
    // for it. A model call starts more than kSpinMicros after the previous
    // one ended (TF's call overhead), so without this the first parallel
    // convolution waits for a pool thread to wake. MobileNetV2 int8 (fused),
    // batch 1, 2 threads, Zen 5, the sequence's steps timed inside the op:
    // the stem 97-113 -> 49-70 us, all 53 steps 1.02-1.40 -> 0.83-1.08 ms
    // (noisy runs, one after the other).
    WakeHelpers(ctx->device()->tensorflow_cpu_worker_threads()->workers);
    const tensorflow::Tensor& x = ctx->input(0);
    OP_REQUIRES(ctx, x.dtype() == tensorflow::DT_FLOAT,
                absl::InvalidArgumentError(
                    "FusedInt8Quantize: x must be float32, got " +
                    tensorflow::DataTypeString(x.dtype())));
    tensorflow::Tensor* q = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &q));
    const int64_t n = x.NumElements();
    if (n == 0) return;
    QuantizeFloatToInt8(
        x.flat<float>().data(), n, scale_,
        reinterpret_cast<int8_t*>(q->flat<int8_t>().data()),
        PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers));
  }

 private:
  float scale_ = 1.0f;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedInt8Quantize").Device(tensorflow::DEVICE_CPU),
                        FusedInt8QuantizeCpuOp);

}  // namespace tf_fused_int8
