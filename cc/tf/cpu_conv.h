// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The CPU convolution step shared by the CPU kernels (cpu_kernel.cc: one
// convolution per op; conv_sequence_kernel.cc: several per op).
#ifndef TF_FUSED_INT8_CC_TF_CPU_CONV_H_
#define TF_FUSED_INT8_CC_TF_CPU_CONV_H_

#include <memory>

#include "cc/core/conv_params.h"
#include "cc/tf/conv_validation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_fused_int8 {

// How RunFusedConvCpu runs a call besides its inputs.
struct CpuConvOptions {
  // The core's parallel-for: nullptr for the context's intra-op pool
  // (PoolParallelFor).
  const ParallelFor* parallel_for = nullptr;
  // *temp is a plain tensor from TF's CPU allocator instead of the
  // context's allocate_temp: for calls made from a pool thread while the
  // kernel's own thread runs others (conv_sequence_kernel.cc's batch
  // slices). NHWC only (the NCHW_VECT_C conversion buffers come from the
  // context).
  bool plain_temp = false;
  // The input is known to be in [0, 127]: FusedConvArgs::input_non_negative
  // (the sequence op sets it for a step that reads a Relu step's output).
  bool input_non_negative = false;
};

// FusedConvArgs::filter_pin and epilogue_pin for an NHWC call (each may be
// null): what keeps the resource variables' buffers that the filter, and
// the bias and conv_input_scale, are read from.
struct WeightPins {
  std::shared_ptr<const WeightPin> filter, epilogue;  // weight_pin.h
};

// A temporary tensor as the options ask: a plain tensor from TF's CPU
// allocator where options.plain_temp (ResourceExhausted naming `what` and
// the shape if it cannot be had), else the context's allocate_temp.
absl::Status AllocateTemp(tensorflow::OpKernelContext* ctx, const CpuConvOptions& options,
                          tensorflow::DataType dtype, const tensorflow::TensorShape& shape,
                          const char* what, tensorflow::Tensor* out);

// Validates `in` (ValidateConvInputs) and runs the convolution on the CPU
// into a new tensor: the op's output 0 when `temp` is null, else *temp
// (allocate_temp, conv_input's dtype). NCHW_VECT_C is converted to NHWC and
// back (the pins are not used then: the converted filter is a fresh buffer).
// validated: where not null, what the validation found (when it passed).
absl::Status RunFusedConvCpu(tensorflow::OpKernelContext* ctx,
                             const ConvAttrs& attrs, const ConvInputs& in,
                             const WeightPins& pins, tensorflow::Tensor* temp,
                             const CpuConvOptions& options = CpuConvOptions(),
                             ValidatedConv* validated = nullptr);

// Calls of the sequence ops (conv_sequence_kernel.cc) run as batch slices
// so far in this process, for tests.
int64_t SequenceBatchSplitCalls();

// The value of the resource variable that input `index` (named `name`)
// refers to, as ReadVariableOp reads it: the variable's buffer, shared
// (*shared = true: while anything else holds it, TF's variable ops copy it
// before writing, so it never changes under a reference), or a copy where
// the variable is in copy-on-read mode (*shared = false).
absl::Status ReadVariableInput(tensorflow::OpKernelContext* ctx, int index,
                               const char* name, tensorflow::Tensor* value,
                               bool* shared);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_TF_CPU_CONV_H_
