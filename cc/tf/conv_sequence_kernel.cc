// Copyright tf-fused-int8 authors. Apache 2.0.
//
// ResourceFusedInt8ConvSequence and FusedInt8ConvSequence (CPU): a chain
// of fused convolutions, with residual side inputs taken from earlier steps,
// in one graph node. What it saves is TensorFlow's cost around each op, not
// arithmetic: every step runs RunFusedConvCpu exactly as
// ResourceFusedInt8Conv2DBiasActivation does (the same validation, the same
// core call, the same bits). Measured on the Zen 5 VM, one thread, batch 1,
// MobileNetV2 int8 (52 convolutions in one sequence): an eager Keras call
// 13.3 -> 4.3 ms (each eager op costs tens of microseconds in Python); in a
// tf.function no difference beyond the noise (15 alternated rounds, 3.64 vs
// 3.64 ms median): the executor's cost per node is small next to the
// tf.function call itself. One op holding a whole run of layers is also
// where work across layers (tiles of an inverted residual block kept in
// cache) would go.
//
// Intermediate outputs are temporaries, each released after its last reader
// (so TF's allocator hands the memory to the next step while it is still in
// cache); the last step writes the op's output.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cc/tf/conv_validation.h"
#include "cc/tf/cpu_conv.h"
#include "tensorflow/core/framework/op_kernel.h"
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

constexpr char kOp[] = "FusedInt8ConvSequence";

std::string Step(int64_t i) { return std::string(kOp) + " step " + std::to_string(i); }

// `list` must have `per_step` entries per step.
template <typename T>
absl::Status CheckLength(const char* name, const std::vector<T>& list, int64_t steps,
                         int64_t per_step) {
  if (static_cast<int64_t>(list.size()) != steps * per_step) {
    return absl::InvalidArgumentError(
        std::string(kOp) + ": " + name + " must have " + std::to_string(per_step) +
        " entr" + (per_step == 1 ? "y" : "ies") + " per step (" +
        std::to_string(steps * per_step) + " for " + std::to_string(steps) +
        " steps), got " + std::to_string(list.size()));
  }
  return absl::OkStatus();
}

// The same status with the step named in front of its message.
absl::Status InStep(int64_t i, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), Step(i) + ": " + std::string(s.message()));
}

// Input `index` (named name[at]) as a tensor: the variable's value for the
// resource op (*shared: its own buffer, see ReadVariableInput), else the
// input itself (*shared = false: a tensor input may be a fresh buffer on every
// call, so it pins nothing).
absl::Status StepInput(OpKernelContext* ctx, bool resource, int index,
                       const std::string& name, Tensor* value, bool* shared) {
  if (resource) return ReadVariableInput(ctx, index, name.c_str(), value, shared);
  *value = ctx->input(index);
  *shared = false;
  return absl::OkStatus();
}

// kResource: ResourceFusedInt8ConvSequence (weights in resource variables),
// else FusedInt8ConvSequence (weights as tensors).
template <bool kResource>
class FusedInt8ConvSequenceCpuOp : public OpKernel {
 public:
  explicit FusedInt8ConvSequenceCpuOp(OpKernelConstruction* ctx)
      : OpKernel(ctx) {
    int64_t sides = 0;
    std::vector<int64_t> strides, dilations, pads, mins, maxes;
    std::vector<std::string> paddings, activations;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("steps", &steps_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("sides", &sides));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("input_sources", &input_sources_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("side_sources", &side_sources_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("strides", &strides));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dilations", &dilations));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("paddings", &paddings));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("explicit_paddings", &pads));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("activation_modes", &activations));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_mins", &mins));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_maxes", &maxes));
    OP_REQUIRES(ctx, steps_ >= 1,
                absl::InvalidArgumentError(std::string(kOp) + ": steps must be >= 1"));
    OP_REQUIRES_OK(ctx, CheckLength("input_sources", input_sources_, steps_, 1));
    OP_REQUIRES_OK(ctx, CheckLength("side_sources", side_sources_, steps_, 1));
    OP_REQUIRES_OK(ctx, CheckLength("strides", strides, steps_, 2));
    OP_REQUIRES_OK(ctx, CheckLength("dilations", dilations, steps_, 2));
    OP_REQUIRES_OK(ctx, CheckLength("paddings", paddings, steps_, 1));
    OP_REQUIRES_OK(ctx, CheckLength("explicit_paddings", pads, steps_, 4));
    OP_REQUIRES_OK(ctx, CheckLength("activation_modes", activations, steps_, 1));
    OP_REQUIRES_OK(ctx, CheckLength("output_mins", mins, steps_, 1));
    OP_REQUIRES_OK(ctx, CheckLength("output_maxes", maxes, steps_, 1));

    // last_reader_[k]: the last step reading source k (-1: none).
    last_reader_.assign(steps_ + 1, -1);
    side_index_.assign(steps_, -1);
    int64_t side_count = 0;
    attrs_.resize(steps_);
    for (int64_t i = 0; i < steps_; ++i) {
      const int64_t src = input_sources_[i], side = side_sources_[i];
      OP_REQUIRES(ctx, src >= 0 && src <= i,
                  absl::InvalidArgumentError(
                      Step(i) + ": input_sources[" + std::to_string(i) +
                      "] must be 0 (conv_input) or an earlier step's output (1.." +
                      std::to_string(i) + "), got " + std::to_string(src)));
      OP_REQUIRES(ctx, side >= -1 && side <= i,
                  absl::InvalidArgumentError(
                      Step(i) + ": side_sources[" + std::to_string(i) +
                      "] must be -1 (none), 0 (conv_input) or an earlier step's "
                      "output (1.." + std::to_string(i) + "), got " +
                      std::to_string(side)));
      last_reader_[src] = i;
      if (side >= 0) {
        last_reader_[side] = i;
        side_index_[i] = side_count++;
      }
      ConvAttrValues v;
      v.strides = {1, static_cast<int32_t>(strides[2 * i]),
                   static_cast<int32_t>(strides[2 * i + 1]), 1};
      v.dilations = {1, static_cast<int32_t>(dilations[2 * i]),
                     static_cast<int32_t>(dilations[2 * i + 1]), 1};
      OP_REQUIRES(
          ctx,
          strides[2 * i] == v.strides[1] && strides[2 * i + 1] == v.strides[2] &&
              dilations[2 * i] == v.dilations[1] &&
              dilations[2 * i + 1] == v.dilations[2],
          absl::InvalidArgumentError(Step(i) +
                                     ": strides and dilations must fit in int32"));
      v.padding = paddings[i];
      if (v.padding == "EXPLICIT") {
        v.explicit_paddings = {0, 0, pads[4 * i], pads[4 * i + 1],
                               pads[4 * i + 2], pads[4 * i + 3], 0, 0};
      } else {
        OP_REQUIRES(ctx,
                    pads[4 * i] == 0 && pads[4 * i + 1] == 0 &&
                        pads[4 * i + 2] == 0 && pads[4 * i + 3] == 0,
                    absl::InvalidArgumentError(
                        Step(i) + ": explicit_paddings must be 0 unless its "
                                  "padding is EXPLICIT (padding " + v.padding + ")"));
      }
      v.activation_mode = activations[i];
      v.output_min = mins[i];
      v.output_max = maxes[i];
      OP_REQUIRES_OK(ctx, InStep(i, MakeConvAttrs(v, &attrs_[i])));
    }
    OP_REQUIRES(ctx, side_count == sides,
                absl::InvalidArgumentError(
                    std::string(kOp) + ": sides (" + std::to_string(sides) +
                    ") must be the number of steps with a side input (" +
                    std::to_string(side_count) + ")"));
    zero_scale_ = Tensor(tensorflow::DT_FLOAT, TensorShape({}));
    zero_scale_.scalar<float>()() = 0.0f;
    no_side_ = Tensor(tensorflow::DT_INT8, TensorShape({0}));
  }

  void Compute(OpKernelContext* ctx) override {
    // sources[0] = conv_input, sources[k] = step k - 1's output.
    std::vector<Tensor> sources(steps_ + 1);
    sources[0] = ctx->input(0);
    const int s = static_cast<int>(steps_);
    for (int64_t i = 0; i < steps_; ++i) {
      const int k = static_cast<int>(i);
      const std::string at = "[" + std::to_string(i) + "]";
      Tensor filter, bias, scale, side_scale;
      bool filter_shared = false, unused = false;
      OP_REQUIRES_OK(ctx, InStep(i, StepInput(ctx, kResource, 1 + k, "filters" + at,
                                              &filter, &filter_shared)));
      OP_REQUIRES_OK(ctx, InStep(i, StepInput(ctx, kResource, 1 + s + k, "biases" + at,
                                              &bias, &unused)));
      OP_REQUIRES_OK(ctx, InStep(i, StepInput(ctx, kResource, 1 + 2 * s + k,
                                              "conv_input_scales" + at, &scale,
                                              &unused)));
      ConvInputs in;
      in.input = &sources[input_sources_[i]];
      in.filter = &filter;
      in.bias = &bias;
      in.conv_input_scale = &scale;
      if (side_index_[i] >= 0) {
        const std::string side_at = "[" + std::to_string(side_index_[i]) + "]";
        OP_REQUIRES_OK(ctx, InStep(i, StepInput(ctx, kResource,
                                                1 + 3 * s + static_cast<int>(side_index_[i]),
                                                "side_input_scales" + side_at, &side_scale,
                                                &unused)));
        in.side_input = &sources[side_sources_[i]];
        in.side_input_scale = &side_scale;
      } else {
        in.side_input = &no_side_;
        in.side_input_scale = &zero_scale_;
      }
      // As ResourceFusedInt8ConvCpuOp: the variable's own buffer pins the
      // packed weights.
      std::shared_ptr<const void> pin;
      if (filter_shared) pin = std::make_shared<const Tensor>(filter);
      const bool last = i == steps_ - 1;
      OP_REQUIRES_OK(ctx, InStep(i, RunFusedConvCpu(ctx, attrs_[i], in, std::move(pin),
                                                    last ? nullptr : &sources[i + 1])));
      for (int64_t k2 = 0; k2 <= i; ++k2) {
        if (last_reader_[k2] == i) sources[k2] = Tensor();
      }
    }
  }

 private:
  int64_t steps_ = 0;
  std::vector<int64_t> input_sources_, side_sources_;
  std::vector<int64_t> last_reader_, side_index_;
  std::vector<ConvAttrs> attrs_;
  Tensor zero_scale_, no_side_;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("ResourceFusedInt8ConvSequence")
                            .Device(tensorflow::DEVICE_CPU),
                        FusedInt8ConvSequenceCpuOp<true>);
REGISTER_KERNEL_BUILDER(Name("FusedInt8ConvSequence").Device(tensorflow::DEVICE_CPU),
                        FusedInt8ConvSequenceCpuOp<false>);

}  // namespace tf_fused_int8
