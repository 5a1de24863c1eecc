// Copyright tf-fused-int8 authors. Apache 2.0.
//
// CPU OpKernel: validates every input in the kernel (conv_validation.h), then
// hands plain pointers to the TF-free compute core, with TF's intra-op thread
// pool as its parallel-for. NHWC/HWIO runs in place; NCHW_VECT_C/OIHW_VECT_I
// (a graph exported for the GPU) is converted to NHWC/HWIO in temporary
// buffers and back, so it gives the same bits as on the GPU.
//
// ResourceFusedInt8Conv2DBiasActivation (what the Keras layers run) reads its
// filter, bias and conv_input_scale from resource variables here, as
// ReadVariableOp would, and then computes exactly like the tensor op: one
// graph node per layer instead of four (measured alone in a tf.function on
// the Zen 4 VM, a ReadVariableOp costs about 0.8 us per call; an eager call
// of the op with variables 147 -> 75 us). The filter variable's buffer is
// pinned for the packed-weights cache (see ResourceFusedInt8ConvCpuOp).
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"
#include "cc/core/layout.h"
#include "cc/tf/conv_validation.h"
#include "cc/tf/cpu_conv.h"
#include "cc/tf/pool_parallel_for.h"
#include "cc/tf/weight_constant.h"
#include "cc/tf/weight_pin.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
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

}  // namespace

absl::Status AllocateTemp(OpKernelContext* ctx, const CpuConvOptions& options,
                          tensorflow::DataType dtype, const TensorShape& shape,
                          const char* what, Tensor* out) {
  if (!options.plain_temp) return ctx->allocate_temp(dtype, shape, out);
  *out = Tensor(dtype, shape);
  if (!out->IsInitialized()) {
    return absl::ResourceExhaustedError(std::string("out of memory for a ") +
                                        shape.DebugString() + " " + what);
  }
  return absl::OkStatus();
}

absl::Status RunFusedConvCpu(OpKernelContext* ctx, const ConvAttrs& attrs,
                             const ConvInputs& in, const WeightPins& pins,
                             Tensor* temp, const CpuConvOptions& options,
                             ValidatedConv* validated) {
  ValidatedConv v;
  TF_RETURN_IF_ERROR(ValidateConvInputs(in, attrs, &v));
  if (validated != nullptr) *validated = v;
  if (options.plain_temp && (temp == nullptr || attrs.vect)) {
    return absl::InternalError("plain_temp needs a temp and NHWC");
  }
  Tensor* output = temp;
  if (temp == nullptr) {
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, v.output_shape, &output));
  } else {
    TF_RETURN_IF_ERROR(
        AllocateTemp(ctx, options, in.input->dtype(), v.output_shape, "output", temp));
  }
  if (v.output_shape.num_elements() == 0) return absl::OkStatus();
  const ConvGeometry& g = v.geo;

  FusedConvArgs args;
  args.geo = g;
  args.bias = in.bias->flat<float>().data();
  args.conv_input_scale = in.conv_input_scale->flat<float>().data();
  args.per_channel_scale = v.per_channel_scale;
  args.side_input_scale = v.side_input_scale;
  args.activation = attrs.activation;
  args.output_min = attrs.output_min;
  args.output_max = attrs.output_max;
  args.output_lut = attrs.output_lut.empty() ? nullptr : attrs.output_lut.data();
  args.input_non_negative = options.input_non_negative;

  Tensor input_nhwc, filter_hwio, side_nhwc, output_nhwc;
  if (!attrs.vect) {
    args.input = Int8Data(*in.input);
    args.filter = Int8Data(*in.filter);
    args.filter_pin = pins.filter;
    args.epilogue_pin = pins.epilogue;
    args.side_input = v.has_side_input ? Int8Data(*in.side_input) : nullptr;
    args.output = MutableInt8Data(output);
  } else {
    auto temp = [ctx](TensorShape shape, Tensor* t) {
      return ctx->allocate_temp(tensorflow::DT_INT8, shape, t);
    };
    TF_RETURN_IF_ERROR(temp(TensorShape({g.batch, g.in_h, g.in_w, g.in_c}), &input_nhwc));
    // The filter's input depth is the group's (in_c / groups, a multiple
    // of 4 here because both depths are).
    const int64_t filter_in_c = g.GroupInC();
    TF_RETURN_IF_ERROR(temp(TensorShape({g.filter_h, g.filter_w, filter_in_c, g.out_c}),
                            &filter_hwio));
    TF_RETURN_IF_ERROR(temp(TensorShape({g.batch, g.out_h, g.out_w, g.out_c}),
                            &output_nhwc));
    NchwVectCToNhwc(Int8Data(*in.input), g.batch, g.in_c, g.in_h, g.in_w, 4,
                    g.in_c, MutableInt8Data(&input_nhwc));
    OihwVectIToHwio(Int8Data(*in.filter), g.out_c, filter_in_c, g.filter_h,
                    g.filter_w, 4, filter_in_c, MutableInt8Data(&filter_hwio));
    args.input = Int8Data(input_nhwc);
    args.filter = Int8Data(filter_hwio);
    if (v.has_side_input) {
      TF_RETURN_IF_ERROR(temp(TensorShape({g.batch, g.out_h, g.out_w, g.out_c}),
                              &side_nhwc));
      NchwVectCToNhwc(Int8Data(*in.side_input), g.batch, g.out_c, g.out_h, g.out_w, 4,
                      g.out_c, MutableInt8Data(&side_nhwc));
      args.side_input = Int8Data(side_nhwc);
    }
    args.output = MutableInt8Data(&output_nhwc);
  }

  const ParallelFor parallel_for =
      options.parallel_for != nullptr
          ? *options.parallel_for
          : PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers);
  const std::string err = RunFusedConv(args, KernelPath::kAuto, parallel_for);
  if (!err.empty()) return absl::InvalidArgumentError(err);

  if (attrs.vect) {
    NhwcToNchwVectC(Int8Data(output_nhwc), g.batch, g.out_h, g.out_w, g.out_c, 4,
                    MutableInt8Data(output));
  }
  return absl::OkStatus();
}

absl::Status ReadVariableInput(OpKernelContext* ctx, int index, const char* name,
                               Tensor* value, bool* shared) {
  *shared = false;
  tensorflow::core::RefCountPtr<tensorflow::Var> var;
  const absl::Status found =
      tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, index), &var);
  if (!found.ok()) {
    return absl::FailedPreconditionError(
        std::string(name) + " must be a resource variable that exists: " +
        std::string(found.message()));
  }
  tensorflow::tf_shared_lock lock(*var->mu());
  if (!var->is_initialized) {
    return absl::FailedPreconditionError(
        std::string(name) + " is an uninitialized resource variable");
  }
  const Tensor& t = *var->tensor();
  if (!var->copy_on_read_mode.load()) {
    *value = t;
    *shared = true;
    return absl::OkStatus();
  }
  TF_RETURN_IF_ERROR(ctx->allocate_temp(t.dtype(), t.shape(), value));
  const auto src = t.tensor_data();
  if (!src.empty()) {
    std::memcpy(const_cast<char*>(value->tensor_data().data()), src.data(), src.size());
  }
  return absl::OkStatus();
}

namespace {

// The pins of an NHWC call whose filter, and bias and scale, come from
// immutable buffers (filter_shared, epilogue_shared): a variable's own
// buffer or a FusedInt8WeightConstant's. NCHW_VECT_C pins nothing (its
// filter is converted into a fresh buffer).
WeightPins PinsFor(const ConvAttrs& attrs, const Tensor& filter, bool filter_shared,
                   const Tensor& bias, const Tensor& scale, bool epilogue_shared) {
  WeightPins pins;
  if (attrs.vect) return pins;
  if (filter_shared) pins.filter = PinBuffer(filter);
  if (epilogue_shared) pins.epilogue = PinBoth(PinBuffer(bias), PinBuffer(scale));
  return pins;
}

class FusedInt8ConvCpuOp : public OpKernel {
 public:
  explicit FusedInt8ConvCpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseConvAttrs(ctx, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    const ConvInputs in = ConvInputsFromContext(ctx);
    // Weights from FusedInt8WeightConstant (a frozen graph's) pin the packed
    // weights as a variable's buffer does (weight_constant.h); any other
    // tensor is checked on every call.
    const WeightPins pins =
        PinsFor(attrs_, *in.filter, IsWeightConstant(*in.filter), *in.bias,
                *in.conv_input_scale,
                IsWeightConstant(*in.bias) && IsWeightConstant(*in.conv_input_scale));
    OP_REQUIRES_OK(ctx, RunFusedConvCpu(ctx, attrs_, in, pins, nullptr));
  }

 private:
  ConvAttrs attrs_;
};

class ResourceFusedInt8ConvCpuOp : public OpKernel {
 public:
  explicit ResourceFusedInt8ConvCpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ParseConvAttrs(ctx, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    Tensor filter, bias, scale;
    bool filter_shared = false, bias_shared = false, scale_shared = false;
    OP_REQUIRES_OK(ctx, ReadVariableInput(ctx, 1, "filter", &filter, &filter_shared));
    OP_REQUIRES_OK(ctx, ReadVariableInput(ctx, 2, "bias", &bias, &bias_shared));
    OP_REQUIRES_OK(ctx, ReadVariableInput(ctx, 4, "conv_input_scale", &scale,
                                          &scale_shared));
    ConvInputs in;
    in.input = &ctx->input(0);
    in.filter = &filter;
    in.bias = &bias;
    in.side_input = &ctx->input(3);
    in.conv_input_scale = &scale;
    in.side_input_scale = &ctx->input(5);
    // The variable's own buffer, pinned by a reference for the packed
    // weights cache: while the cache holds it, TF copies the variable on
    // every write (AssignVariableOp, the in-place updates, the sparse ones
    // through copy-on-read mode), so these bytes stay as they are and the
    // cached packing needs no check. Not a copy-on-read copy: a fresh buffer
    // each call, it would only fill the cache.
    // The bias's and the scale's buffers likewise (WeightPins::epilogue).
    const WeightPins pins =
        PinsFor(attrs_, filter, filter_shared, bias, scale, bias_shared && scale_shared);
    OP_REQUIRES_OK(ctx, RunFusedConvCpu(ctx, attrs_, in, pins, nullptr));
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
REGISTER_KERNEL_BUILDER(Name("ResourceFusedInt8Conv2DBiasActivation")
                            .Device(tensorflow::DEVICE_CPU)
                            .TypeConstraint<int8_t>("T"),
                        ResourceFusedInt8ConvCpuOp);
REGISTER_KERNEL_BUILDER(Name("ResourceFusedInt8Conv2DBiasActivation")
                            .Device(tensorflow::DEVICE_CPU)
                            .TypeConstraint<tensorflow::qint8>("T"),
                        ResourceFusedInt8ConvCpuOp);

}  // namespace tf_fused_int8
