// Copyright tf-fused-int8 authors. Apache 2.0.
//
// CPU OpKernels of FusedInt8MaxPool and FusedInt8AvgPool: attributes
// checked once, when the kernel is built; the input's rank, dtype and sizes
// on every call; the pooling itself in the TF-free core (cc/core/pool.h)
// with TF's intra-op pool as its parallel-for.
#include <cstdint>
#include <string>
#include <vector>

#include "cc/core/pool.h"
#include "cc/tf/pool_attrs.h"
#include "cc/tf/pool_parallel_for.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_fused_int8 {
namespace {

// The core's pooling on the default path (MaxPoolInt8 / AvgPoolInt8: the
// template argument picks that overload).
using PoolFn = void (*)(const int8_t*, const PoolGeometry&, int8_t*,
                        const ParallelFor&);

template <PoolFn kPool>
class FusedInt8PoolCpuOp : public tensorflow::OpKernel {
 public:
  explicit FusedInt8PoolCpuOp(tensorflow::OpKernelConstruction* ctx)
      : OpKernel(ctx), name_(ctx->def().op()) {
    std::vector<int32_t> ksize, strides, zero_paddings;
    std::string padding;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("ksize", &ksize));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("strides", &strides));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("zero_paddings", &zero_paddings));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("padding", &padding));
    OP_REQUIRES_OK(ctx, PoolAttrs(name_.c_str(), ksize, strides,
                                  zero_paddings, padding, &attrs_, &padding_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& x = ctx->input(0);
    OP_REQUIRES(ctx, x.dtype() == tensorflow::DT_INT8,
                absl::InvalidArgumentError(
                    name_ + ": input must be int8, got " +
                    tensorflow::DataTypeString(x.dtype())));
    OP_REQUIRES(ctx, x.dims() == 4,
                absl::InvalidArgumentError(
                    name_ + ": input must be rank 4 [batch, height, width, "
                    "channels] (NHWC), got shape " +
                    x.shape().DebugString()));
    PoolGeometry g = attrs_;
    g.batch = x.dim_size(0);
    g.in_h = x.dim_size(1);
    g.in_w = x.dim_size(2);
    g.channels = x.dim_size(3);
    const std::string err = ComputePoolGeometry(padding_, &g);
    OP_REQUIRES(ctx, err.empty(),
                absl::InvalidArgumentError(name_ + ": " + err +
                                           " (input shape " +
                                           x.shape().DebugString() + ")"));
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, tensorflow::TensorShape({g.batch, g.out_h,
                                                        g.out_w, g.channels}),
                            &out));
    if (g.OutputElements() == 0) return;
    kPool(
        reinterpret_cast<const int8_t*>(x.flat<int8_t>().data()), g,
        reinterpret_cast<int8_t*>(out->flat<int8_t>().data()),
        PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers));
  }

 private:
  const std::string name_;
  PoolGeometry attrs_;
  Padding padding_ = Padding::kValid;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedInt8MaxPool").Device(tensorflow::DEVICE_CPU),
                        FusedInt8PoolCpuOp<MaxPoolInt8>);
REGISTER_KERNEL_BUILDER(Name("FusedInt8AvgPool").Device(tensorflow::DEVICE_CPU),
                        FusedInt8PoolCpuOp<AvgPoolInt8>);

}  // namespace tf_fused_int8
