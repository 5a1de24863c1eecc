// Copyright tf-fused-int8 authors. Apache 2.0.
//
// CPU OpKernel of FusedInt8Concat: the inputs' shapes are checked here, the
// bytes copied by the TF-free core (cc/core/concat.h) on our parallel-for.
#include <cstdint>
#include <string>
#include <vector>

#include "cc/core/concat.h"
#include "cc/tf/pool_parallel_for.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_fused_int8 {
namespace {

using ::tensorflow::OpInputList;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

class FusedInt8ConcatCpuOp : public tensorflow::OpKernel {
 public:
  explicit FusedInt8ConcatCpuOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    OpInputList values;
    OP_REQUIRES_OK(ctx, ctx->input_list("values", &values));
    const int count = values.size();
    OP_REQUIRES(ctx, count >= 1,
                absl::InvalidArgumentError("FusedInt8Concat: values must hold at least one "
                                           "tensor"));
    const Tensor& first = values[0];
    OP_REQUIRES(ctx, first.dims() >= 1,
                absl::InvalidArgumentError(
                    "FusedInt8Concat: values[0] must have rank 1 or more (concatenated "
                    "along its last dimension), got shape " + first.shape().DebugString()));
    const int rank = first.dims();
    std::vector<const int8_t*> inputs(count);
    std::vector<int64_t> widths(count);
    int64_t total = 0;
    for (int i = 0; i < count; ++i) {
      const Tensor& v = values[i];
      OP_REQUIRES(ctx, v.dtype() == tensorflow::DT_INT8,
                  absl::InvalidArgumentError(
                      "FusedInt8Concat: values[" + std::to_string(i) + "] must be int8, got " +
                      tensorflow::DataTypeString(v.dtype())));
      bool same = v.dims() == rank;
      for (int d = 0; same && d + 1 < rank; ++d) same = v.dim_size(d) == first.dim_size(d);
      if (!same) {
        std::string expected = "[";
        for (int d = 0; d + 1 < rank; ++d) expected += std::to_string(first.dim_size(d)) + ", ";
        expected += "any]";
        ctx->CtxFailure(absl::InvalidArgumentError(
            "FusedInt8Concat: values[" + std::to_string(i) + "] must have shape " + expected +
            " (values[0]'s but the last dimension), got " + v.shape().DebugString()));
        return;
      }
      inputs[i] = reinterpret_cast<const int8_t*>(v.tensor_data().data());
      widths[i] = v.dim_size(rank - 1);
      total += widths[i];
    }
    TensorShape shape = first.shape();
    OP_REQUIRES_OK(ctx, shape.SetDimWithStatus(rank - 1, total));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    if (out->NumElements() == 0) return;
    const int64_t rows = out->NumElements() / total;
    ConcatLastDim(inputs.data(), widths.data(), count, rows,
                  reinterpret_cast<int8_t*>(const_cast<char*>(out->tensor_data().data())),
                  PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers));
  }
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedInt8Concat").Device(tensorflow::DEVICE_CPU),
                        FusedInt8ConcatCpuOp);

}  // namespace tf_fused_int8
