// Copyright tf-fused-int8 authors. Apache 2.0.
//
// CPU OpKernel: validates every input in the kernel (conv_validation.h), then
// hands plain pointers to the TF-free compute core, with TF's intra-op thread
// pool as its parallel-for. NHWC/HWIO runs in place; NCHW_VECT_C/OIHW_VECT_I
// (a graph exported for the GPU) is converted to NHWC/HWIO in temporary
// buffers and back, so it gives the same bits as on the GPU.
#include <cstdint>
#include <functional>
#include <string>

#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"
#include "cc/core/layout.h"
#include "cc/tf/conv_validation.h"
#include "cc/tf/pool_parallel_for.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace tf_fused_int8 {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

const int8_t* Int8Data(const Tensor& t) {
  return reinterpret_cast<const int8_t*>(t.tensor_data().data());
}
int8_t* MutableInt8Data(Tensor* t) {
  return reinterpret_cast<int8_t*>(const_cast<char*>(t->tensor_data().data()));
}

class FusedInt8ConvCpuOp : public OpKernel {
 public:
  explicit FusedInt8ConvCpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseConvAttrs(ctx, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    ValidatedConv v;
    OP_REQUIRES_OK(ctx, ValidateConvInputs(ctx, attrs_, &v));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, v.output_shape, &output));
    if (v.output_shape.num_elements() == 0) return;
    const ConvGeometry& g = v.geo;

    FusedConvArgs args;
    args.geo = g;
    args.bias = ctx->input(2).flat<float>().data();
    args.conv_input_scale = ctx->input(4).flat<float>().data();
    args.per_channel_scale = v.per_channel_scale;
    args.side_input_scale = v.side_input_scale;
    args.activation = attrs_.activation;
    args.output_min = attrs_.output_min;
    args.output_max = attrs_.output_max;

    Tensor input_nhwc, filter_hwio, side_nhwc, output_nhwc;
    if (!attrs_.vect) {
      args.input = Int8Data(ctx->input(0));
      args.filter = Int8Data(ctx->input(1));
      args.side_input = v.has_side_input ? Int8Data(ctx->input(3)) : nullptr;
      args.output = MutableInt8Data(output);
    } else {
      auto temp = [ctx](TensorShape shape, Tensor* t) {
        return ctx->allocate_temp(tensorflow::DT_INT8, shape, t);
      };
      OP_REQUIRES_OK(ctx, temp(TensorShape({g.batch, g.in_h, g.in_w, g.in_c}), &input_nhwc));
      // The filter's input depth is the group's (in_c / groups, a multiple
      // of 4 here because both depths are).
      const int64_t filter_in_c = g.GroupInC();
      OP_REQUIRES_OK(ctx, temp(TensorShape({g.filter_h, g.filter_w, filter_in_c, g.out_c}),
                               &filter_hwio));
      OP_REQUIRES_OK(ctx, temp(TensorShape({g.batch, g.out_h, g.out_w, g.out_c}),
                               &output_nhwc));
      NchwVectCToNhwc(Int8Data(ctx->input(0)), g.batch, g.in_c, g.in_h, g.in_w, 4,
                      g.in_c, MutableInt8Data(&input_nhwc));
      OihwVectIToHwio(Int8Data(ctx->input(1)), g.out_c, filter_in_c, g.filter_h,
                      g.filter_w, 4, filter_in_c, MutableInt8Data(&filter_hwio));
      args.input = Int8Data(input_nhwc);
      args.filter = Int8Data(filter_hwio);
      if (v.has_side_input) {
        OP_REQUIRES_OK(ctx, temp(TensorShape({g.batch, g.out_h, g.out_w, g.out_c}),
                                 &side_nhwc));
        NchwVectCToNhwc(Int8Data(ctx->input(3)), g.batch, g.out_c, g.out_h, g.out_w, 4,
                        g.out_c, MutableInt8Data(&side_nhwc));
        args.side_input = Int8Data(side_nhwc);
      }
      args.output = MutableInt8Data(&output_nhwc);
    }

    const ParallelFor parallel_for =
        PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers);
    const std::string err = RunFusedConv(args, KernelPath::kAuto, parallel_for);
    OP_REQUIRES(ctx, err.empty(), absl::InvalidArgumentError(err));

    if (attrs_.vect) {
      NhwcToNchwVectC(Int8Data(output_nhwc), g.batch, g.out_h, g.out_w, g.out_c, 4,
                      MutableInt8Data(output));
    }
  }

 private:
  ConvAttrs attrs_;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedInt8Conv2DBiasActivation")
                            .Device(tensorflow::DEVICE_CPU)
                            .TypeConstraint<int8_t>("T"),
                        FusedInt8ConvCpuOp);
REGISTER_KERNEL_BUILDER(Name("FusedInt8Conv2DBiasActivation")
                            .Device(tensorflow::DEVICE_CPU)
                            .TypeConstraint<tensorflow::qint8>("T"),
                        FusedInt8ConvCpuOp);

}  // namespace tf_fused_int8
