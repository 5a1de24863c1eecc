// Copyright tf-fused-int8 authors. Apache 2.0.
//
// CPU OpKernel of FusedInt8Quantize: the scale is checked once, when the
// kernel is built; the elements go to the TF-free core (cc/core/quantize.h)
// with TF's intra-op pool as its parallel-for.
#include <cstdint>
#include <string>
#include <vector>

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
    std::vector<std::string> ops;
    std::vector<int64_t> sizes;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("preprocess_ops", &ops));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("preprocess_sizes", &sizes));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("preprocess_values", &values_));
    OP_REQUIRES(ctx, sizes.size() == ops.size(),
                absl::InvalidArgumentError(
                    "FusedInt8Quantize: preprocess_sizes must have one entry per "
                    "preprocess_ops entry (" + std::to_string(ops.size()) + "), got " +
                    std::to_string(sizes.size())));
    int64_t total = 0;
    std::vector<int64_t> offsets;  // each step's first value in values_
    for (size_t k = 0; k < ops.size(); ++k) {
      PreprocessStep step;
      if (ops[k] == "mul") {
        step.op = PreprocessOp::kMul;
      } else if (ops[k] == "add") {
        step.op = PreprocessOp::kAdd;
      } else if (ops[k] == "sub") {
        step.op = PreprocessOp::kSub;
      } else if (ops[k] == "div") {
        step.op = PreprocessOp::kDiv;
      } else {
        ctx->CtxFailure(absl::InvalidArgumentError(
            "FusedInt8Quantize: preprocess_ops[" + std::to_string(k) +
            "] must be \"mul\", \"add\", \"sub\" or \"div\", got \"" + ops[k] + "\""));
        return;
      }
      const int64_t size = sizes[k];
      OP_REQUIRES(ctx, size >= 1 && (size == 1 || channels_ == 1 || size == channels_),
                  absl::InvalidArgumentError(
                      "FusedInt8Quantize: preprocess_sizes[" + std::to_string(k) +
                      "] must be 1 or the channel count C of every per-channel step" +
                      (channels_ > 1 ? " (" + std::to_string(channels_) + ")" : "") +
                      ", got " + std::to_string(size)));
      if (size > 1) channels_ = size;
      step.count = size;
      offsets.push_back(total);
      total += size;
      steps_.push_back(step);
    }
    OP_REQUIRES(ctx, total == static_cast<int64_t>(values_.size()),
                absl::InvalidArgumentError(
                    "FusedInt8Quantize: preprocess_values must hold the sum of "
                    "preprocess_sizes (" + std::to_string(total) + ") values, got " +
                    std::to_string(values_.size())));
    for (size_t k = 0; k < steps_.size(); ++k) steps_[k].values = values_.data() + offsets[k];
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
    if (channels_ > 1) {
      OP_REQUIRES(ctx, x.dims() >= 1 && x.dim_size(x.dims() - 1) == channels_,
                  absl::InvalidArgumentError(
                      "FusedInt8Quantize: x's last dimension must be " +
                      std::to_string(channels_) +
                      " (the per-channel preprocess values), got shape " +
                      x.shape().DebugString()));
    }
    tensorflow::Tensor* q = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &q));
    const int64_t n = x.NumElements();
    if (n == 0) return;
    int8_t* out = reinterpret_cast<int8_t*>(q->flat<int8_t>().data());
    const auto pool =
        PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers);
    if (steps_.empty()) {
      QuantizeFloatToInt8(x.flat<float>().data(), n, scale_, out, pool);
    } else {
      PreprocessQuantizeFloatToInt8(x.flat<float>().data(), n, channels_, steps_.data(),
                                    static_cast<int64_t>(steps_.size()), scale_, out,
                                    pool);
    }
  }

 private:
  float scale_ = 1.0f;
  // The preprocessing steps (their values point into values_).
  std::vector<float> values_;
  std::vector<PreprocessStep> steps_;
  int64_t channels_ = 1;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedInt8Quantize").Device(tensorflow::DEVICE_CPU),
                        FusedInt8QuantizeCpuOp);

}  // namespace tf_fused_int8
