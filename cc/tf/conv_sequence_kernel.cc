// Copyright tf-fused-int8 authors. Apache 2.0.
//
// ResourceFusedInt8ConvSequence and FusedInt8ConvSequence (CPU): a chain
// of fused convolutions, with residual side inputs taken from earlier steps,
// in one graph node, its weights in two vectors. What it saves is
// TensorFlow's cost around the ops, not arithmetic: every step runs
// RunFusedConvCpu exactly as ResourceFusedInt8Conv2DBiasActivation does (the
// same validation, the same core call, the same bits) on the first call
// with its input's shape, and later calls run the same core calls from that
// call's step plan (StepPlan). Measured on the Zen 5
// VM, MobileNetV2 int8 (52 convolutions in one sequence), medians of 15
// alternated rounds: batch 1 2.48 -> 1.96 ms on one thread, 1.95 -> 1.40 ms
// on two; an eager Keras call 13.9 -> 3.8 ms. A first version that took
// three or four resource inputs per step (the layers' own variables) gave
// the eager gain but nothing in a tf.function: the call's cost there grows
// with the number of captured variables (172 -> 5 here), not of nodes.
// One op holding a run of layers is also where work across layers (tiles
// of an inverted residual block kept in cache) would go.
//
// Intermediate outputs are temporaries, each released after its last reader
// (so TF's allocator hands the memory to the next step while it is still in
// cache; a step plan places them in one buffer the same way); the last
// step writes the op's output. A batch that the intra-op
// pool's thread count divides runs as batch slices, one per thread, each
// through every step on its own (BatchSlices); their last outputs are
// copied into the op's output. Where one thread runs the steps on several
// images, the first steps run image by image (ImagePrefix).
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include "cc/core/channel_scale.h"
#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"
#include "cc/core/transposed_conv.h"
#include "cc/tf/conv_validation.h"
#include "cc/tf/cpu_conv.h"
#include "cc/tf/pool_parallel_for.h"
#include "cc/tf/step_times.h"
#include "cc/tf/weight_constant.h"
#include "cc/tf/weight_pin.h"
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

// Input `index` (named `name`) as a tensor: the variable's value for the
// resource op (*shared: its own buffer, see ReadVariableInput), else the
// input itself (*shared only for a FusedInt8WeightConstant's value: any
// other tensor input may be a fresh buffer, or one written again, on every
// call, so it pins nothing).
absl::Status WeightInput(OpKernelContext* ctx, bool resource, int index,
                         const char* name, Tensor* value, bool* shared) {
  if (resource) return ReadVariableInput(ctx, index, name, value, shared);
  *value = ctx->input(index);
  // A frozen graph's FusedInt8WeightConstant is as immutable as a
  // variable's buffer (weight_constant.h).
  *shared = IsWeightConstant(*value);
  return absl::OkStatus();
}

std::atomic<int64_t> g_batch_split_calls{0};

// Whether TF_FUSED_INT8_SEQUENCE_BATCH_SPLIT allows batch slices (unset or
// anything but "0").
bool BatchSplitAllowed() {
  const char* v = std::getenv("TF_FUSED_INT8_SEQUENCE_BATCH_SPLIT");
  return v == nullptr || std::string(v) != "0";
}

// TF_FUSED_INT8_SEQUENCE_PREFIX: unset or not a number -1 (ImagePrefix's
// rule), "0" off, n > 0 the first n steps (for measurements).
int64_t PrefixMode() {
  const char* v = std::getenv("TF_FUSED_INT8_SEQUENCE_PREFIX");
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return *end == '\0' && n >= 0 ? static_cast<int64_t>(n) : -1;
}

// Whether TF_FUSED_INT8_SEQUENCE_PLAN allows step plans (unset or anything
// but "0"; see StepPlan).
bool StepPlansAllowed() {
  const char* v = std::getenv("TF_FUSED_INT8_SEQUENCE_PLAN");
  return v == nullptr || std::string(v) != "0";
}

// The L2 cache of one core, in bytes (1 MiB where the OS does not say).
int64_t L2Bytes() {
  static const int64_t bytes = [] {
    const long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return v > 0 ? static_cast<int64_t>(v) : int64_t{1} << 20;
  }();
  return bytes;
}

int64_t RoundUp64(int64_t x) { return (x + 63) / 64 * 64; }
int64_t RoundUp16(int64_t x) { return (x + 15) / 16 * 16; }

// *t itself when its data is 64-byte aligned, else an aligned copy
// (*shared = false: the copy is this call's).
absl::Status Aligned(OpKernelContext* ctx, Tensor* t, bool* shared) {
  const auto data = t->tensor_data();
  if (reinterpret_cast<uintptr_t>(data.data()) % 64 == 0) return absl::OkStatus();
  Tensor copy;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(t->dtype(), t->shape(), &copy));
  if (!data.empty()) {
    std::memcpy(const_cast<char*>(copy.tensor_data().data()), data.data(), data.size());
  }
  *t = copy;
  *shared = false;
  return absl::OkStatus();
}

// Input `index` (`name`), one of the two weight vectors: exactly `dtype`
// (spelled `type_name` in the message) [total], where `layout` says what it
// holds; 64-byte aligned on return (Aligned).
absl::Status WeightVector(OpKernelContext* ctx, bool resource, int index,
                          const char* name, tensorflow::DataType dtype,
                          const char* type_name, int64_t total, const char* layout,
                          Tensor* value, bool* shared) {
  TF_RETURN_IF_ERROR(WeightInput(ctx, resource, index, name, value, shared));
  if (value->dtype() != dtype || value->dims() != 1 || value->NumElements() != total) {
    return absl::InvalidArgumentError(
        std::string(kOp) + ": " + name + " must be " + type_name + " [" +
        std::to_string(total) + "] (" + layout + "), got " +
        tensorflow::DataTypeString(value->dtype()) + " " + value->shape().DebugString());
  }
  // The views (View) are at multiples of 64 bytes from the vector's start,
  // and TF's flat<float>() aborts on data that is not 64-byte aligned: a
  // vector that does not start aligned (a slice forwarded as an input) is
  // copied first.
  return Aligned(ctx, value, shared);
}

// A view of `n` elements of the vector `blob` from `offset`, with `shape`.
Tensor View(const Tensor& blob, int64_t offset, int64_t n, const TensorShape& shape) {
  Tensor view;
  const bool ok = view.CopyFrom(blob.Slice(offset, offset + n), shape);
  (void)ok;  // n == shape.num_elements() by construction
  return view;
}

// step_kinds: a convolution, or a channel scale (the op doc): out =
// clip(round_half_to_even(float32(x) * m[n, c])), m[n, c] = (float32(gate[n,
// c]) * gate_scale) * ratio, two float32 multiplies (a squeeze-excite gate as
// quantize_model's Dequantize and Int8ChannelMultiply compute it).
constexpr int64_t kConvStep = 0;
constexpr int64_t kChannelScaleStep = 1;
// A transposed convolution (cc/core/transposed_conv.h): the step's attrs
// are its sub-pixel convolution's, its phases a transpose_steps record.
constexpr int64_t kTransposeStep = 2;

// The channel scale's operands: x int8 [N, H, W, C], gate int8 [N, 1, 1, C].
absl::Status CheckChannelScale(const Tensor& x, const Tensor& gate, int64_t c,
                               int64_t x_source, int64_t gate_source) {
  if (x.dtype() != tensorflow::DT_INT8 || x.dims() != 4 || x.dim_size(3) != c) {
    return absl::InvalidArgumentError(
        "channel scale: its input (source " + std::to_string(x_source) +
        ") must be int8 [N, H, W, " + std::to_string(c) + "], got " +
        tensorflow::DataTypeString(x.dtype()) + " " + x.shape().DebugString());
  }
  if (gate.dtype() != tensorflow::DT_INT8 || gate.dims() != 4 ||
      gate.dim_size(0) != x.dim_size(0) || gate.dim_size(1) != 1 || gate.dim_size(2) != 1 ||
      gate.dim_size(3) != c) {
    return absl::InvalidArgumentError(
        "channel scale: its gate (source " + std::to_string(gate_source) +
        ") must be int8 [" + std::to_string(x.dim_size(0)) + ", 1, 1, " +
        std::to_string(c) + "], got " + tensorflow::DataTypeString(gate.dtype()) + " " +
        gate.shape().DebugString());
  }
  return absl::OkStatus();
}

// The channel scale on n images of `pixels` pixels and c channels.
void RunChannelScaleStep(const int8_t* x, const int8_t* gate, float gate_scale, float ratio,
                         int64_t n, int64_t pixels, int64_t c, int8_t* out,
                         const ParallelFor& parallel_for) {
  if (n * pixels * c == 0) return;
  std::vector<float> m(static_cast<size_t>(n * c));
  for (int64_t k = 0; k < n * c; ++k) {
    const float g = static_cast<float>(gate[k]) * gate_scale;  // Dequantize
    m[k] = g * ratio;                                           // Int8ChannelMultiply
  }
  ChannelScaleArgs a;
  a.x = x;
  a.m = m.data();
  a.out = out;
  a.batch = n;
  a.pixels = pixels;
  a.channels = c;
  RunChannelScale(a, parallel_for);
}

// kResource: ResourceFusedInt8ConvSequence (weights in resource variables),
// else FusedInt8ConvSequence (weights as tensors).
template <bool kResource>
class FusedInt8ConvSequenceCpuOp : public OpKernel {
 public:
  explicit FusedInt8ConvSequenceCpuOp(OpKernelConstruction* ctx)
      : OpKernel(ctx) {
    std::vector<int64_t> strides, dilations, pads, mins, maxes, lut_steps, luts;
    std::vector<int64_t> kinds, transpose_records;
    std::vector<std::string> paddings, activations;
    std::vector<bool> per_channel;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("steps", &steps_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("input_sources", &input_sources_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("side_sources", &side_sources_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("filter_shapes", &filter_shapes_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("per_channel_scales", &per_channel));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("strides", &strides));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dilations", &dilations));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("paddings", &paddings));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("explicit_paddings", &pads));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("activation_modes", &activations));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_mins", &mins));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_maxes", &maxes));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("lut_steps", &lut_steps));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_luts", &luts));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("step_kinds", &kinds));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("transpose_steps", &transpose_records));
    OP_REQUIRES(ctx, steps_ >= 1,
                absl::InvalidArgumentError(std::string(kOp) + ": steps must be >= 1"));
    OP_REQUIRES_OK(ctx, CheckLength("input_sources", input_sources_, steps_, 1));
    OP_REQUIRES_OK(ctx, CheckLength("side_sources", side_sources_, steps_, 1));
    OP_REQUIRES_OK(ctx, CheckLength("filter_shapes", filter_shapes_, steps_, 4));
    OP_REQUIRES_OK(ctx, CheckLength("per_channel_scales", per_channel, steps_, 1));
    OP_REQUIRES_OK(ctx, CheckLength("strides", strides, steps_, 2));
    OP_REQUIRES_OK(ctx, CheckLength("dilations", dilations, steps_, 2));
    OP_REQUIRES_OK(ctx, CheckLength("paddings", paddings, steps_, 1));
    OP_REQUIRES_OK(ctx, CheckLength("explicit_paddings", pads, steps_, 4));
    OP_REQUIRES_OK(ctx, CheckLength("activation_modes", activations, steps_, 1));
    OP_REQUIRES_OK(ctx, CheckLength("output_mins", mins, steps_, 1));
    OP_REQUIRES_OK(ctx, CheckLength("output_maxes", maxes, steps_, 1));
    for (size_t k = 0; k < lut_steps.size(); ++k) {
      OP_REQUIRES(ctx,
                  lut_steps[k] >= 0 && lut_steps[k] < steps_ &&
                      (k == 0 || lut_steps[k] > lut_steps[k - 1]),
                  absl::InvalidArgumentError(
                      std::string(kOp) + ": lut_steps must be increasing step indices "
                      "in [0, " + std::to_string(steps_) + "), got " +
                      std::to_string(lut_steps[k]) + " at position " + std::to_string(k)));
    }
    OP_REQUIRES(ctx, luts.size() == 256 * lut_steps.size(),
                absl::InvalidArgumentError(
                    std::string(kOp) + ": output_luts must have 256 entries per "
                    "lut_steps entry (" + std::to_string(256 * lut_steps.size()) +
                    "), got " + std::to_string(luts.size())));

    if (!kinds.empty()) {
      OP_REQUIRES_OK(ctx, CheckLength("step_kinds", kinds, steps_, 1));
    }
    kinds_.assign(steps_, kConvStep);
    for (int64_t i = 0; i < static_cast<int64_t>(kinds.size()); ++i) {
      OP_REQUIRES(ctx, kinds[i] >= kConvStep && kinds[i] <= kTransposeStep,
                  absl::InvalidArgumentError(
                      Step(i) + ": step_kinds[" + std::to_string(i) +
                      "] must be 0 (a convolution), 1 (a channel scale) or 2 (a "
                      "transposed convolution), got " + std::to_string(kinds[i])));
      kinds_[i] = kinds[i];
    }
    // Each transposed convolution step has one transpose_steps record and
    // each record's step is one.
    std::vector<std::pair<int64_t, TransposedConvPhases>> records;
    const std::string parse = ParseTransposedConvRecords(transpose_records, steps_, &records);
    OP_REQUIRES(ctx, parse.empty(), absl::InvalidArgumentError(std::string(kOp) + ": " + parse));
    phases_.resize(steps_);
    std::vector<bool> has_record(steps_, false);
    for (auto& [step, phases] : records) {
      OP_REQUIRES(ctx, kinds_[step] == kTransposeStep,
                  absl::InvalidArgumentError(
                      Step(step) + ": has a transpose_steps record but step_kinds[" +
                      std::to_string(step) + "] is " + std::to_string(kinds_[step]) +
                      ", not 2 (a transposed convolution)"));
      has_record[step] = true;
      phases_[step] = std::move(phases);
    }
    for (int64_t i = 0; i < steps_; ++i) {
      OP_REQUIRES(ctx, kinds_[i] != kTransposeStep || has_record[i],
                  absl::InvalidArgumentError(
                      Step(i) + ": a transposed convolution step (step_kinds 2) needs a "
                      "transpose_steps record"));
    }
    // last_reader_[k]: the last step reading source k (-1: none).
    last_reader_.assign(steps_ + 1, -1);
    attrs_.resize(steps_);
    layout_.resize(steps_);
    int64_t filter_end = 0, epilogue_end = 0;
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
      if (side >= 0) last_reader_[side] = i;

      // The step's slices of the two weight vectors (op doc).
      const int64_t* f = &filter_shapes_[4 * i];
      int64_t size = 1;
      for (int d = 0; d < 4; ++d) {
        OP_REQUIRES(ctx, f[d] >= 1 && f[d] <= (int64_t{1} << 24),
                    absl::InvalidArgumentError(
                        Step(i) + ": filter_shapes must be 4 positive sizes per "
                                  "step (Kh, Kw, Ci / groups, Co), each at most "
                                  "2^24, got (" + std::to_string(f[0]) + ", " +
                        std::to_string(f[1]) + ", " + std::to_string(f[2]) + ", " +
                        std::to_string(f[3]) + ")"));
        size *= f[d];
        OP_REQUIRES(ctx, size <= (int64_t{1} << 40),
                    absl::InvalidArgumentError(Step(i) + ": the filter is too large"));
      }
      if (kinds_[i] == kTransposeStep) {
        // The phase filters instead of the sub-pixel filter (op doc).
        size = TransposedConvFilterBytes(f[2], f[3], phases_[i]);
        OP_REQUIRES(ctx, size >= 1,
                    absl::InvalidArgumentError(
                        Step(i) + ": a transposed convolution step needs filter_shapes' Co "
                        "(" + std::to_string(f[3]) + ") to be a multiple of its " +
                        std::to_string(phases_[i].Phases()) +
                        " phases and each phase's taps in [1, 2^24]"));
      }
      StepLayout& l = layout_[i];
      l.filter = RoundUp64(filter_end);
      l.filter_size = size;
      filter_end = l.filter + size;
      // Each float array at a multiple of 16 (64 bytes): TF's flat<float>()
      // checks the alignment of the data it maps.
      l.bias = RoundUp16(epilogue_end);
      l.scale = RoundUp16(l.bias + f[3]);
      l.scale_size = per_channel[i] ? f[3] : 1;
      epilogue_end = l.scale + l.scale_size;
      if (side >= 0) {
        l.side_scale = RoundUp16(epilogue_end);
        epilogue_end = l.side_scale + 1;
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
      const auto lut = std::lower_bound(lut_steps.begin(), lut_steps.end(), i);
      if (lut != lut_steps.end() && *lut == i) {
        const int64_t at = 256 * (lut - lut_steps.begin());
        v.output_lut.assign(luts.begin() + at, luts.begin() + at + 256);
      }
      OP_REQUIRES_OK(ctx, InStep(i, MakeConvAttrs(v, &attrs_[i])));
      if (kinds_[i] == kChannelScaleStep) {
        // A channel scale is written as a 1x1 depthwise step with nothing
        // else (so that the shapes come out right everywhere), a gate, and
        // its two factors in the scale and side-scale slots.
        OP_REQUIRES(
            ctx,
            side >= 0 && f[0] == 1 && f[1] == 1 && f[2] == 1 && !per_channel[i] &&
                strides[2 * i] == 1 && strides[2 * i + 1] == 1 &&
                dilations[2 * i] == 1 && dilations[2 * i + 1] == 1 &&
                v.padding == "VALID" && v.activation_mode == "None" && mins[i] == -128 &&
                maxes[i] == 127 && v.output_lut.empty(),
            absl::InvalidArgumentError(
                Step(i) + ": a channel scale step (step_kinds 1) needs its gate as "
                "side_sources[" + std::to_string(i) + "], filter_shapes (1, 1, 1, C), "
                "a scalar scale, strides and dilations 1, padding VALID, activation "
                "None, output bounds -128 and 127 and no output_lut"));
      }
      if (kinds_[i] == kTransposeStep) {
        OP_REQUIRES(ctx,
                    side < 0 && strides[2 * i] == 1 && strides[2 * i + 1] == 1 &&
                        dilations[2 * i] == 1 && dilations[2 * i + 1] == 1,
                    absl::InvalidArgumentError(
                        Step(i) + ": a transposed convolution step (step_kinds 2) is its "
                        "sub-pixel convolution: no side input (side_sources -1), strides "
                        "and dilations 1"));
      }
    }
    // A step whose input is an earlier step's output that Relu or
    // output_min keeps in [0, 127] (and no output_lut maps elsewhere) tells
    // the kernels so (CpuConvOptions::input_non_negative): the avx2 and
    // avxvnni paths then skip their check of the input.
    input_non_negative_.assign(steps_, false);
    for (int64_t i = 0; i < steps_; ++i) {
      const int64_t src = input_sources_[i];
      if (src == 0) continue;
      const ConvAttrs& producer = attrs_[src - 1];
      int32_t lo, hi;
      OutputBounds(producer.activation, producer.output_min, producer.output_max, &lo, &hi);
      input_non_negative_[i] = lo >= 0 && producer.output_lut.empty();
    }
    filter_total_ = filter_end;
    epilogue_total_ = epilogue_end;
    no_side_ = Tensor(tensorflow::DT_INT8, TensorShape({0}));
    zero_scale_ = Tensor(tensorflow::DT_FLOAT, TensorShape({}));
    zero_scale_.scalar<float>()() = 0.0f;
  }

  void Compute(OpKernelContext* ctx) override {
    Tensor filters, epilogue;
    bool filters_shared = false, epilogue_shared = false;
    OP_REQUIRES_OK(ctx, WeightVector(ctx, kResource, 1, "filters", tensorflow::DT_INT8,
                                     "int8", filter_total_,
                                     "every step's filter of filter_shapes, each at a "
                                     "multiple of 64",
                                     &filters, &filters_shared));
    OP_REQUIRES_OK(ctx, WeightVector(ctx, kResource, 2, "epilogue", tensorflow::DT_FLOAT,
                                     "float32", epilogue_total_,
                                     "per step: bias, conv_input_scale, "
                                     "side_input_scale, each at a multiple of 16",
                                     &epilogue, &epilogue_shared));
    // As ResourceFusedInt8ConvCpuOp: the variables' own buffers pin the
    // packed and prepared weights (each step's filter, bias and scale are
    // slices of them).
    WeightPins pin;
    if (filters_shared) pin.filter = PinBuffer(filters);
    if (epilogue_shared) pin.epilogue = PinBuffer(epilogue);

    const Tensor& input = ctx->input(0);
    const int64_t slices = BatchSlices(ctx, input);
    if (slices <= 1) {
      const bool one_thread =
          ctx->device()->tensorflow_cpu_worker_threads()->workers->NumThreads() <= 1;
      OP_REQUIRES_OK(ctx, RunSteps(ctx, filters, epilogue, pin, input, CpuConvOptions(),
                                   time_steps_, nullptr, -1, one_thread));
      return;
    }
    // Batch slices (BatchSlices): slice s is images [s * per, (s + 1) *
    // per), run through every step by one pool thread with a serial
    // parallel-for into its own tensors; the caller takes slice 0.
    const int64_t batch = input.dim_size(0), per = batch / slices;
    std::vector<Tensor> outs(slices);
    std::vector<absl::Status> status(slices);
    const ParallelFor serial;
    CpuConvOptions options;
    options.parallel_for = &serial;
    options.plain_temp = true;
    const ParallelFor pool =
        PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers);
    // A cost far above PoolParallelFor's inline bounds: every slice is a
    // whole network.
    pool(slices, int64_t{1} << 40, [&](int64_t begin, int64_t end) {
      for (int64_t s = begin; s < end; ++s) {
        status[s] = RunSteps(ctx, filters, epilogue, pin,
                             input.Slice(s * per, (s + 1) * per), options,
                             time_steps_ && s == 0, &outs[s], batch,
                             /*one_thread=*/true);
      }
    });
    for (const absl::Status& st : status) {
      if (!st.ok()) {
        // Run unsplit in this thread instead: the error (if any) is then
        // the one the whole batch gives, named with its shapes.
        OP_REQUIRES_OK(ctx, RunSteps(ctx, filters, epilogue, pin, input,
                                     CpuConvOptions(), false, nullptr, -1,
                                     /*one_thread=*/false));
        return;
      }
    }
    g_batch_split_calls.fetch_add(1, std::memory_order_relaxed);
    TensorShape shape = outs[0].shape();
    shape.set_dim(0, batch);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    char* dst = const_cast<char*>(out->tensor_data().data());
    for (const Tensor& t : outs) {
      const auto src = t.tensor_data();
      std::memcpy(dst, src.data(), src.size());
      dst += src.size();
    }
  }

 private:
  // How many batch slices a call runs as (1: the whole batch, each step
  // split across the pool's threads by the core). At batch >= 2 each
  // thread can instead run its own images through every step: no hand-off
  // between the threads at every step, and each slice's activations stay
  // in its own core's caches. So a batch that the pool's thread count
  // divides runs as that many slices, one per thread
  // (TF_FUSED_INT8_SEQUENCE_BATCH_SPLIT=0 turns this off, for
  // comparisons). Measured on the Zen 5 VM (2 vCPUs, KVM), the model's
  // tf.function with kernels made with the split off and on in one
  // process, alternated call by call, median of the per-pair time ratios
  // (split / off): MobileNetV2 batch 8 0.977, batch 4 0.968, batch 2
  // 0.942; ResNet50 batch 8 0.979, batch 4 0.993; alternated in blocks
  // of 15 calls: MobileNetV2 batch 8 0.949-0.968, batch 4 0.923-1.015,
  // ResNet50 batch 8 0.956-0.988. Smaller units, claimed one at a time
  // (a thread that finishes early takes more), were no better: in one
  // process, off / one slice per thread / slices of batch / (2 x threads)
  // / one image each rotated call by call, time against off: MobileNetV2
  // batch 8 0.959 / 0.960 / 0.946, batch 4 0.955 / 0.968 / 0.955,
  // ResNet50 batch 8 0.975 / 0.977 / 1.018, batch 4 0.979 / 1.024 /
  // 1.022 (its 25 MB of weights read once per unit). Not handled: a pool
  // thread that starts late delays the call by as much (instrumented,
  // MobileNetV2 batch 8: in one call in ten the second slice started over
  // 0.5 ms after the first).
  int64_t BatchSlices(OpKernelContext* ctx, const Tensor& input) const {
    if (!batch_split_ || input.dims() != 4 || input.dtype() != tensorflow::DT_INT8) {
      return 1;
    }
    const int64_t threads =
        ctx->device()->tensorflow_cpu_worker_threads()->workers->NumThreads();
    const int64_t batch = input.dim_size(0);
    if (threads < 2 || batch < threads || batch % threads != 0) return 1;
    return threads;
  }

  // Runs every step on `input` (the op's input, or a batch slice of it)
  // with `options`; the last step writes the op's output (out null) or
  // *out. record: time the steps (time_steps_), described with batch
  // `batch` (-1: the input's). one_thread: the steps run on this thread
  // alone (a batch slice, or a pool of one thread), where the first
  // ImagePrefix steps run image by image.
  absl::Status RunSteps(OpKernelContext* ctx, const Tensor& filters,
                        const Tensor& epilogue, const WeightPins& pin,
                        const Tensor& input, const CpuConvOptions& options, bool record,
                        Tensor* out, int64_t batch, bool one_thread) const {
    // sources[0] = conv_input, sources[k] = step k - 1's output.
    std::vector<Tensor> sources(steps_ + 1);
    sources[0] = input;
    const int64_t images = input.dims() == 4 ? input.dim_size(0) : 1;
    const int64_t prefix = one_thread && images >= 2 ? ImagePrefix(input) : 0;
    if (prefix > 0) {
      StepClock clock;
      const absl::Status s = RunPrefixByImage(ctx, filters, epilogue, pin, input, options,
                                              prefix, record ? &clock : nullptr,
                                              batch >= 0 ? batch : images, &sources);
      if (s.ok()) {
        for (int64_t i = 0; record && i < prefix; ++i) {
          RecordStepTime(name(), i, clock.ns[i], [&] { return clock.what[i]; });
        }
        return RunStepRange(ctx, filters, epilogue, pin, &sources, prefix, steps_,
                            options, record, nullptr, out, batch);
      }
      // A step failed on one image: run the whole input from the start
      // instead, so that the error (if any) is the one the whole input
      // gives, named with its shapes.
      sources.assign(steps_ + 1, Tensor());
      sources[0] = input;
    }
    return RunStepRange(ctx, filters, epilogue, pin, &sources, 0, steps_, options,
                        record, nullptr, out, batch);
  }

  // Per-step times of the steps run image by image, summed over the
  // images, and their descriptions.
  struct StepClock {
    std::vector<int64_t> ns;
    std::vector<std::string> what;
  };

  // Steps [0, prefix) on each image of `input` in turn; the outputs that
  // a later step reads are gathered into whole-input tensors in
  // (*sources)[k], the others released after their last reader within the
  // image. clock: sum the steps' times there (described with `batch`
  // images); nullptr: no timing.
  absl::Status RunPrefixByImage(OpKernelContext* ctx, const Tensor& filters,
                                const Tensor& epilogue, const WeightPins& pin,
                                const Tensor& input, const CpuConvOptions& options,
                                int64_t prefix, StepClock* clock, int64_t batch,
                                std::vector<Tensor>* sources) const {
    const int64_t images = input.dim_size(0);
    if (clock != nullptr) {
      clock->ns.assign(prefix, 0);
      clock->what.assign(prefix, std::string());
    }
    std::vector<Tensor> image(steps_ + 1);
    for (int64_t j = 0; j < images; ++j) {
      image.assign(steps_ + 1, Tensor());
      image[0] = input.Slice(j, j + 1);
      TF_RETURN_IF_ERROR(RunStepRange(ctx, filters, epilogue, pin, &image, 0, prefix,
                                      options, clock != nullptr, clock, nullptr, batch));
      for (int64_t k = 1; k <= prefix; ++k) {
        if (last_reader_[k] < prefix) continue;  // no later step reads it
        const Tensor& t = image[k];
        if (j == 0) {
          TensorShape shape = t.shape();
          shape.set_dim(0, images);
          // From a pool thread (a batch slice) a plain tensor, as the
          // steps' own temporaries there (CpuConvOptions::plain_temp).
          TF_RETURN_IF_ERROR(
              AllocateTemp(ctx, options, t.dtype(), shape, "tensor", &(*sources)[k]));
        }
        const auto src = t.tensor_data();
        if (!src.empty()) {
          std::memcpy(const_cast<char*>((*sources)[k].tensor_data().data()) +
                          j * src.size(),
                      src.data(), src.size());
        }
      }
    }
    return absl::OkStatus();
  }

  // Runs steps [begin, end) on *sources_ptr (sources as in RunSteps),
  // releasing each source after its last reader; the last step of the
  // sequence writes *out (or the op's output). record: time each step, into
  // clock (if not null) or the step-times table.
  absl::Status RunStepRange(OpKernelContext* ctx, const Tensor& filters,
                            const Tensor& epilogue, const WeightPins& pin,
                            std::vector<Tensor>* sources_ptr, int64_t begin, int64_t end,
                            const CpuConvOptions& options, bool record,
                            StepClock* clock, Tensor* out, int64_t batch) const {
    std::vector<Tensor>& sources = *sources_ptr;
    // A range runs from a step plan once one call has validated its shapes
    // (StepPlan), else as below.
    if (plans_allowed_) {
      if (const std::shared_ptr<const StepPlan> plan = FindPlan(begin, end, sources)) {
        return RunPlanned(ctx, *plan, filters, epilogue, pin, &sources, options, record,
                          clock, out, batch);
      }
    }
    // Every step's input has the range's first input's dtype (each output
    // takes its input's).
    const tensorflow::DataType dtype = sources[input_sources_[begin]].dtype();
    std::vector<PlannedStep> planned(plans_allowed_ ? end - begin : 0);
    for (int64_t i = begin; i < end; ++i) {
      const StepLayout& l = layout_[i];
      const int64_t* f = &filter_shapes_[4 * i];
      const bool last = i == steps_ - 1;
      // Its input's shape, kept: the input itself may be released below.
      const TensorShape input_shape = sources[input_sources_[i]].shape();
      const auto t0 = record ? std::chrono::steady_clock::now()
                             : std::chrono::steady_clock::time_point();
      ValidatedConv v;
      if (kinds_[i] == kChannelScaleStep) {
        TF_RETURN_IF_ERROR(InStep(i, RunChannelScaleCpu(ctx, epilogue, sources, i, options,
                                                        last ? out : &sources[i + 1])));
        v.output_shape = input_shape;
      } else if (kinds_[i] == kTransposeStep) {
        TF_RETURN_IF_ERROR(InStep(i, RunTransposeCpu(ctx, filters, epilogue, pin, sources, i,
                                                     options, last ? out : &sources[i + 1],
                                                     &v)));
      } else {
        const Tensor filter =
            View(filters, l.filter, l.filter_size, TensorShape({f[0], f[1], f[2], f[3]}));
        const Tensor bias = View(epilogue, l.bias, f[3], TensorShape({f[3]}));
        const Tensor scale =
            View(epilogue, l.scale, l.scale_size, TensorShape({l.scale_size}));
        Tensor side_scale;
        ConvInputs in;
        in.input = &sources[input_sources_[i]];
        in.filter = &filter;
        in.bias = &bias;
        in.conv_input_scale = &scale;
        if (l.side_scale >= 0) {
          side_scale = View(epilogue, l.side_scale, 1, TensorShape({}));
          in.side_input = &sources[side_sources_[i]];
          in.side_input_scale = &side_scale;
        } else {
          in.side_input = &no_side_;
          in.side_input_scale = &zero_scale_;
        }
        CpuConvOptions step_options = options;
        step_options.input_non_negative = input_non_negative_[i];
        TF_RETURN_IF_ERROR(InStep(i, RunFusedConvCpu(ctx, attrs_[i], in, pin,
                                                     last ? out : &sources[i + 1],
                                                     step_options, &v)));
      }
      if (plans_allowed_) {
        PlannedStep& p = planned[i - begin];
        p.geo = v.geo;
        p.input_shape = input_shape;
        p.output_shape = v.output_shape;
      }
      if (record) RecordStep(i, t0, input_shape, batch, clock);
      for (int64_t k = 0; k <= i; ++k) {
        if (last_reader_[k] == i) sources[k] = Tensor();
      }
    }
    if (plans_allowed_) AddPlan(begin, end, dtype, std::move(planned));
    return absl::OkStatus();
  }

  // The core's parallel-for of the steps: options' own, else the context's
  // intra-op pool.
  static ParallelFor StepsParallelFor(OpKernelContext* ctx, const CpuConvOptions& options) {
    return options.parallel_for != nullptr
               ? *options.parallel_for
               : PoolParallelFor(ctx->device()->tensorflow_cpu_worker_threads()->workers);
  }

  // Channel scale step i on its sources, checked, into a new tensor: the
  // op's output 0 when `temp` is null, else *temp (as RunFusedConvCpu).
  absl::Status RunChannelScaleCpu(OpKernelContext* ctx, const Tensor& epilogue,
                                  const std::vector<Tensor>& sources, int64_t i,
                                  const CpuConvOptions& options, Tensor* temp) const {
    const Tensor& x = sources[input_sources_[i]];
    const Tensor& gate = sources[side_sources_[i]];
    const int64_t c = filter_shapes_[4 * i + 3];
    TF_RETURN_IF_ERROR(
        CheckChannelScale(x, gate, c, input_sources_[i], side_sources_[i]));
    if (temp == nullptr) {
      TF_RETURN_IF_ERROR(ctx->allocate_output(0, x.shape(), &temp));
    } else {
      TF_RETURN_IF_ERROR(AllocateTemp(ctx, options, x.dtype(), x.shape(), "output", temp));
    }
    const float* e = reinterpret_cast<const float*>(epilogue.tensor_data().data());
    const StepLayout& l = layout_[i];
    RunChannelScaleStep(reinterpret_cast<const int8_t*>(x.tensor_data().data()),
                        reinterpret_cast<const int8_t*>(gate.tensor_data().data()),
                        e[l.scale], e[l.side_scale], x.dim_size(0),
                        x.dim_size(1) * x.dim_size(2), c,
                        reinterpret_cast<int8_t*>(const_cast<char*>(temp->tensor_data().data())),
                        StepsParallelFor(ctx, options));
    return absl::OkStatus();
  }

  // Transposed convolution step i on its input, checked, into a new
  // tensor: the op's output 0 when `temp` is null, else *temp. *v: its
  // sub-pixel geometry and output shape.
  absl::Status RunTransposeCpu(OpKernelContext* ctx, const Tensor& filters,
                               const Tensor& epilogue, const WeightPins& pin,
                               const std::vector<Tensor>& sources, int64_t i,
                               const CpuConvOptions& options, Tensor* temp,
                               ValidatedConv* v) const {
    const Tensor& x = sources[input_sources_[i]];
    const int64_t* f = &filter_shapes_[4 * i];
    if (x.dtype() != tensorflow::DT_INT8 || x.dims() != 4 || x.dim_size(3) != f[2]) {
      return absl::InvalidArgumentError(
          "transposed convolution: its input (source " + std::to_string(input_sources_[i]) +
          ") must be int8 [N, H, W, " + std::to_string(f[2]) + "], got " +
          tensorflow::DataTypeString(x.dtype()) + " " + x.shape().DebugString());
    }
    ConvGeometry& g = v->geo;
    g = ConvGeometry();
    g.batch = x.dim_size(0);
    g.in_h = x.dim_size(1);
    g.in_w = x.dim_size(2);
    g.in_c = x.dim_size(3);
    g.filter_h = f[0];
    g.filter_w = f[1];
    g.out_c = f[3];
    std::string err = ComputeGeometryWithAttrs(attrs_[i], &g);
    if (err.empty()) err = CheckTransposedConvPhases(g, phases_[i]);
    if (!err.empty()) return absl::InvalidArgumentError("transposed convolution: " + err);
    int64_t h, w, c;
    TransposedConvOutputShape(g, phases_[i], &h, &w, &c);
    v->output_shape = TensorShape({g.batch, h, w, c});
    if (temp == nullptr) {
      TF_RETURN_IF_ERROR(ctx->allocate_output(0, v->output_shape, &temp));
    } else {
      TF_RETURN_IF_ERROR(
          AllocateTemp(ctx, options, x.dtype(), v->output_shape, "output", temp));
    }
    return RunTransposeStep(
        ctx, g, i, reinterpret_cast<const int8_t*>(x.tensor_data().data()),
        reinterpret_cast<const int8_t*>(filters.tensor_data().data()),
        reinterpret_cast<const float*>(epilogue.tensor_data().data()), pin, options,
        reinterpret_cast<int8_t*>(const_cast<char*>(temp->tensor_data().data())));
  }

  // Conv or transposed step i's core arguments from a validated geometry,
  // its weights read from the two vectors' data, without a side input.
  FusedConvArgs StepArgs(int64_t i, const ConvGeometry& geo, const int8_t* input,
                         const int8_t* filter_data, const float* epilogue_data,
                         const WeightPins& pin, int8_t* output) const {
    const StepLayout& l = layout_[i];
    const ConvAttrs& attrs = attrs_[i];
    FusedConvArgs args;
    args.geo = geo;
    args.input = input;
    args.filter = filter_data + l.filter;
    args.bias = epilogue_data + l.bias;
    args.conv_input_scale = epilogue_data + l.scale;
    args.per_channel_scale = l.scale_size != 1;
    args.activation = attrs.activation;
    args.output_min = attrs.output_min;
    args.output_max = attrs.output_max;
    args.output_lut = attrs.output_lut.empty() ? nullptr : attrs.output_lut.data();
    args.input_non_negative = input_non_negative_[i];
    args.filter_pin = pin.filter;
    args.epilogue_pin = pin.epilogue;
    args.output = output;
    return args;
  }

  // The core call of transposed convolution step i (its sub-pixel geometry
  // g checked), with a scratch tensor for the phases.
  absl::Status RunTransposeStep(OpKernelContext* ctx, const ConvGeometry& g, int64_t i,
                                const int8_t* input, const int8_t* filter_data,
                                const float* epilogue_data, const WeightPins& pin,
                                const CpuConvOptions& options, int8_t* output) const {
    if (g.OutputElements() == 0) return absl::OkStatus();
    Tensor scratch;
    TF_RETURN_IF_ERROR(AllocateTemp(ctx, options, tensorflow::DT_INT8,
                                    TensorShape({TransposedConvScratchBytes(g)}),
                                    "buffer of the phases", &scratch));
    const FusedConvArgs args =
        StepArgs(i, g, input, filter_data, epilogue_data, pin, output);
    const std::string err = RunTransposedConv(
        args, phases_[i], reinterpret_cast<int8_t*>(const_cast<char*>(scratch.tensor_data().data())),
        KernelPath::kAuto, StepsParallelFor(ctx, options));
    if (!err.empty()) return absl::InvalidArgumentError(err);
    return absl::OkStatus();
  }

  // Step i's time since t0: into clock (summed, described once, "by
  // image") if not null, else the step-times table. input: its input's
  // shape, described with `batch` images.
  void RecordStep(int64_t i, std::chrono::steady_clock::time_point t0,
                  const TensorShape& input, int64_t batch, StepClock* clock) const {
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - t0)
                           .count();
    if (clock == nullptr) {
      RecordStepTime(name(), i, ns, [&] { return Describe(i, input, batch); });
    } else {
      clock->ns[i] += ns;
      if (clock->what[i].empty()) clock->what[i] = Describe(i, input, batch) + " by image";
    }
  }

  // A step as the first call with its shapes validated it.
  struct PlannedStep {
    ConvGeometry geo;
    TensorShape input_shape, output_shape;
  };

  // Steps [begin, end) for one set of input shapes: each step's validated
  // geometry, and where the outputs (but the op's own, from the last step)
  // live in one buffer (the arena), allotted as TF's allocator hands
  // tensors on: each output takes the smallest free block that holds it,
  // and a block is freed after its output's last reader. Made from a call
  // that ran every step through RunFusedConvCpu (the validation, the
  // errors, the outputs, all as without a plan); later calls with the
  // same shapes and dtype call the core directly (RunPlanned) with the
  // same arguments, read from the weight vectors at every call.
  // Around the core's call each step cost about 3.4 us (three tensor
  // views, the validation, an allocation and a release, a parallel-for
  // made per step): 180 us of MobileNetV2's 2.15 ms at batch 1 on one
  // thread (Intel Xeon with AMX, KVM, instrumented). With plans, the
  // builds' .so alternated (InferenceRunner, medians of 2000-3000 calls):
  // MobileNetV2 batch 1 on one thread 2185-2276 -> 2021-2070 us (0.92-
  // 0.95x), on two threads lower in 7 of 8 pairs (the median of the
  // ratios 0.89x, of the minima 0.93x); ResNet50 batch 1 on one thread
  // 0.93-0.97x (minima 0.86-0.92x); MobileNetV2 batch 8 within the VM's
  // noise.
  // The ranges that end before the last step (the image-by-image prefix,
  // RunPrefixByImage: each image after the first runs from the plan) leave
  // the outputs that later steps read as tensors viewing the arena: the
  // builds alternated, MobileNetV2 batch 8 on one thread 0.91-0.97x
  // (medians of 150 calls, four pairs), on two (slices of four images)
  // lower in 3 of 4 pairs; ResNet50 batch 8 on one thread 0.97-1.0x.
  // TF_FUSED_INT8_SEQUENCE_PLAN=0 (read when the kernel is made) runs
  // every call as the first.
  struct StepPlan {
    int64_t begin = 0, end = 0;
    tensorflow::DataType dtype = tensorflow::DT_INVALID;
    // The sources the steps read from outside the range (k <= begin), with
    // the shapes they had.
    std::vector<std::pair<int64_t, TensorShape>> inputs;
    std::vector<PlannedStep> steps;     // steps [begin, end)
    std::vector<int64_t> arena_offset;  // per source k; -1 if not in the arena
    int64_t arena_bytes = 0;
  };

  std::shared_ptr<const StepPlan> FindPlan(int64_t begin, int64_t end,
                                           const std::vector<Tensor>& sources) const {
    std::lock_guard<std::mutex> lock(plans_mu_);
    for (const std::shared_ptr<const StepPlan>& p : plans_) {
      if (p->begin != begin || p->end != end) continue;
      bool same = true;
      for (const auto& [k, shape] : p->inputs) {
        const Tensor& t = sources[k];
        if (!t.IsInitialized() || t.dtype() != p->dtype || t.shape() != shape) {
          same = false;
          break;
        }
      }
      if (same) return p;
    }
    return nullptr;
  }

  // Records the plan of a successful run of steps [begin, end) on inputs of
  // `dtype`, from what each step validated.
  void AddPlan(int64_t begin, int64_t end, tensorflow::DataType dtype,
               std::vector<PlannedStep> steps) const {
    auto plan = std::make_shared<StepPlan>();
    plan->begin = begin;
    plan->end = end;
    const int64_t n = end - begin;
    if (n <= 0) return;  // no steps (not called so)
    for (int64_t j = 0; j < n; ++j) {
      if (steps[j].output_shape.num_elements() == 0) return;  // nothing to run
    }
    plan->dtype = dtype;
    // The outside sources each step reads, with the shapes it read them in.
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = begin + j;
      const int64_t src = input_sources_[i], side = side_sources_[i];
      const auto add = [&](int64_t k, const TensorShape& shape) {
        for (const auto& e : plan->inputs) {
          if (e.first == k) return;
        }
        plan->inputs.emplace_back(k, shape);
      };
      if (src <= begin) add(src, steps[j].input_shape);
      // A side input has the step's output shape (validated).
      if (side >= 0 && side <= begin) add(side, steps[j].output_shape);
    }
    // The arena: outputs of steps [begin, end) but the op's last step
    // (sources begin + 1 .. end, or .. steps_ - 1), best fit among the free
    // blocks, 64-byte aligned. An output read after the range is never
    // freed here (its last reader is at or after end).
    plan->arena_offset.assign(steps_ + 1, -1);
    struct Block {
      int64_t offset, size;
    };
    std::vector<Block> free_blocks;
    int64_t top = 0;
    const auto release = [&](int64_t k) {
      const int64_t offset = plan->arena_offset[k];
      const int64_t size = RoundUp64(steps[k - 1 - begin].output_shape.num_elements());
      free_blocks.push_back({offset, size});
      std::sort(free_blocks.begin(), free_blocks.end(),
                [](const Block& a, const Block& b) { return a.offset < b.offset; });
      std::vector<Block> merged;
      for (const Block& b : free_blocks) {
        if (!merged.empty() && merged.back().offset + merged.back().size == b.offset) {
          merged.back().size += b.size;
        } else {
          merged.push_back(b);
        }
      }
      free_blocks = std::move(merged);
    };
    for (int64_t i = begin; i < std::min(end, steps_ - 1); ++i) {
      const int64_t k = i + 1;
      const int64_t need = RoundUp64(steps[i - begin].output_shape.num_elements());
      int best = -1;
      for (int b = 0; b < static_cast<int>(free_blocks.size()); ++b) {
        if (free_blocks[b].size >= need &&
            (best < 0 || free_blocks[b].size < free_blocks[best].size)) {
          best = b;
        }
      }
      if (best >= 0) {
        plan->arena_offset[k] = free_blocks[best].offset;
        free_blocks[best].offset += need;
        free_blocks[best].size -= need;
        if (free_blocks[best].size == 0) free_blocks.erase(free_blocks.begin() + best);
      } else {
        plan->arena_offset[k] = top;
        top += need;
      }
      // The sources in the arena whose last reader is step i (an output
      // no step reads is freed at once).
      for (int64_t s = begin + 1; s <= k; ++s) {
        if (last_reader_[s] == i || (s == k && last_reader_[s] < 0)) release(s);
      }
    }
    plan->arena_bytes = top;
    plan->steps = std::move(steps);
    std::lock_guard<std::mutex> lock(plans_mu_);
    for (const std::shared_ptr<const StepPlan>& p : plans_) {
      // Made already (by a batch slice that ran beside this one).
      if (p->begin == begin && p->end == end && p->dtype == plan->dtype &&
          p->inputs == plan->inputs) {
        return;
      }
    }
    if (plans_.size() >= kMaxPlans) plans_.erase(plans_.begin());
    plans_.push_back(std::move(plan));
  }

  // Steps [plan.begin, plan.end) as RunStepRange runs them, from the plan:
  // each step's FusedConvArgs exactly as RunFusedConvCpu fills them for
  // the views RunStepRange makes (the weights' offsets in the two vectors,
  // the side input and its scale read at every call), the outputs but the
  // op's own in one arena buffer; those read after the range are left in
  // *sources_ptr as views of it.
  absl::Status RunPlanned(OpKernelContext* ctx, const StepPlan& plan,
                          const Tensor& filters, const Tensor& epilogue,
                          const WeightPins& pin, std::vector<Tensor>* sources_ptr,
                          const CpuConvOptions& options, bool record, StepClock* clock,
                          Tensor* out, int64_t batch) const {
    std::vector<Tensor>& sources = *sources_ptr;
    Tensor arena;
    if (plan.arena_bytes > 0) {
      TF_RETURN_IF_ERROR(AllocateTemp(ctx, options, plan.dtype,
                                      TensorShape({plan.arena_bytes}),
                                      "buffer of step outputs", &arena));
    }
    int8_t* arena_data =
        plan.arena_bytes > 0 ? reinterpret_cast<int8_t*>(const_cast<char*>(arena.tensor_data().data()))
                             : nullptr;
    // Each source's bytes: the given tensors, then the arena.
    std::vector<const int8_t*> data(steps_ + 1, nullptr);
    for (const auto& e : plan.inputs) {
      data[e.first] = reinterpret_cast<const int8_t*>(sources[e.first].tensor_data().data());
    }
    const int8_t* filter_data = reinterpret_cast<const int8_t*>(filters.tensor_data().data());
    const float* epilogue_data = reinterpret_cast<const float*>(epilogue.tensor_data().data());
    const ParallelFor parallel_for = StepsParallelFor(ctx, options);
    for (int64_t i = plan.begin; i < plan.end; ++i) {
      const PlannedStep& p = plan.steps[i - plan.begin];
      const StepLayout& l = layout_[i];
      const bool last = i == steps_ - 1;
      int8_t* output;
      if (last) {
        Tensor* t = out;
        if (t == nullptr) {
          TF_RETURN_IF_ERROR(InStep(i, ctx->allocate_output(0, p.output_shape, &t)));
        } else {
          TF_RETURN_IF_ERROR(InStep(
              i, AllocateTemp(ctx, options, plan.dtype, p.output_shape, "output", t)));
        }
        output = reinterpret_cast<int8_t*>(const_cast<char*>(t->tensor_data().data()));
      } else {
        output = arena_data + plan.arena_offset[i + 1];
        data[i + 1] = output;
      }
      const auto t0 = record ? std::chrono::steady_clock::now()
                             : std::chrono::steady_clock::time_point();
      if (kinds_[i] == kChannelScaleStep) {
        const TensorShape& x = p.input_shape;
        RunChannelScaleStep(data[input_sources_[i]], data[side_sources_[i]],
                            epilogue_data[l.scale], epilogue_data[l.side_scale],
                            x.dim_size(0), x.dim_size(1) * x.dim_size(2), x.dim_size(3),
                            output, parallel_for);
      } else if (kinds_[i] == kTransposeStep) {
        TF_RETURN_IF_ERROR(InStep(i, RunTransposeStep(ctx, p.geo, i, data[input_sources_[i]],
                                                      filter_data, epilogue_data, pin,
                                                      options, output)));
      } else {
        FusedConvArgs args = StepArgs(i, p.geo, data[input_sources_[i]], filter_data,
                                      epilogue_data, pin, output);
        if (l.side_scale >= 0) {
          args.side_input = data[side_sources_[i]];
          args.side_input_scale = epilogue_data[l.side_scale];
        }
        const std::string err = RunFusedConv(args, KernelPath::kAuto, parallel_for);
        if (!err.empty()) return InStep(i, absl::InvalidArgumentError(err));
      }
      if (record) RecordStep(i, t0, p.input_shape, batch, clock);
      // The given tensors are released after their last reader, as without
      // a plan (the arena goes at the end).
      for (const auto& e : plan.inputs) {
        if (last_reader_[e.first] == i) sources[e.first] = Tensor();
      }
    }
    // The outputs that steps after the range read, as tensors (a range that
    // ends with the op's last step has none).
    if (plan.end < steps_) {
      for (int64_t k = plan.begin + 1; k <= plan.end; ++k) {
        if (last_reader_[k] >= plan.end) {
          const TensorShape& shape = plan.steps[k - 1 - plan.begin].output_shape;
          sources[k] = View(arena, plan.arena_offset[k], shape.num_elements(), shape);
        }
      }
    }
    return absl::OkStatus();
  }

  // How many of the first steps run image by image when one thread runs
  // them all on several images (RunSteps): those whose activations
  // outweigh their filters (a filter larger than one image's input and
  // output together is read once per batch, not once per image) and whose
  // activations for all the images would not stay in the core's L2
  // (more than half of it, L2Bytes): run image by image, each image's
  // activations stay there from one step to the next. The prefix ends at
  // the first step that is not both. 0 (none) when the sizes do not give a
  // valid geometry (the steps then report it) or when
  // TF_FUSED_INT8_SEQUENCE_PREFIX=0; a number there forces that prefix.
  // Measured on an Intel Xeon with AMX (2 MB L2), InferenceRunners with
  // the prefix off and on in one process, alternated, median time ratio:
  // ResNet50 batch 8, one thread, 0.90 (the rule's 24 steps, through its
  // 28x28 stage; 10 steps 0.94, 30 steps 0.92, 42 steps 0.97: the 14x14
  // stage's 0.5-2.4 MB filters read once per image cost more than its
  // activations save), two threads (slices of 4) 0.97; MobileNetV2 batch
  // 8, one thread, 0.90 (20 steps, through the 28x28 layers; 33 steps
  // 0.93, before the L2 bound 42 steps 0.95), two threads 0.98; batch 2,
  // one thread, 0.97-0.99; forced avx512vnni MobileNetV2 batch 8 0.87.
  int64_t ImagePrefix(const Tensor& input) const {
    if (prefix_mode_ == 0 || input.dims() != 4) return 0;
    if (prefix_mode_ > 0) return std::min(prefix_mode_, steps_ - 1);
    const double budget = static_cast<double>(L2Bytes()) / 2;
    const double images = static_cast<double>(input.dim_size(0));
    // Each source's [height, width, channels] for one image.
    std::vector<std::array<int64_t, 3>> hwc(steps_ + 1);
    hwc[0] = {input.dim_size(1), input.dim_size(2), input.dim_size(3)};
    for (int64_t i = 0; i < steps_ - 1; ++i) {
      // Not measured image by image: the prefix ends before one.
      if (kinds_[i] == kTransposeStep) return i;
      const std::array<int64_t, 3>& in = hwc[input_sources_[i]];
      const int64_t* f = &filter_shapes_[4 * i];
      ConvGeometry g;
      g.batch = 1;
      g.in_h = in[0];
      g.in_w = in[1];
      g.in_c = in[2];
      g.filter_h = f[0];
      g.filter_w = f[1];
      g.out_c = f[3];
      if (f[2] <= 0 || g.in_c % f[2] != 0) return 0;
      g.groups = g.in_c / f[2];
      if (g.out_c % g.groups != 0) return 0;
      if (!ComputeGeometryWithAttrs(attrs_[i], &g).empty()) return 0;
      hwc[i + 1] = {g.out_h, g.out_w, g.out_c};
      const int64_t activations =
          g.InputElements() + g.OutputElements() * (side_sources_[i] >= 0 ? 2 : 1);
      if (g.FilterElements() > activations ||
          images * static_cast<double>(activations) <= budget) {
        return i;
      }
    }
    return steps_ - 1;  // the last step writes the op's output
  }

  // "NxHxWxC KhxKwxCixCo s2 d2 g4 +side" for the step-times table (N:
  // `batch` unless -1).
  std::string Describe(int64_t i, const TensorShape& input, int64_t batch) const {
    const int64_t* f = &filter_shapes_[4 * i];
    std::string s;
    for (int d = 0; d < input.dims(); ++d) {
      s += (d ? "x" : "") +
           std::to_string(d == 0 && batch >= 0 ? batch : input.dim_size(d));
    }
    if (kinds_[i] == kChannelScaleStep) return s + " channel scale";
    s += " " + std::to_string(f[0]) + "x" + std::to_string(f[1]) + "x" +
         std::to_string(f[2]) + "x" + std::to_string(f[3]);
    const ConvAttrs& a = attrs_[i];
    if (a.stride_h != 1 || a.stride_w != 1) {
      s += " s" + std::to_string(a.stride_h) +
           (a.stride_w != a.stride_h ? "x" + std::to_string(a.stride_w) : "");
    }
    if (a.dilation_h != 1 || a.dilation_w != 1) {
      s += " d" + std::to_string(a.dilation_h) +
           (a.dilation_w != a.dilation_h ? "x" + std::to_string(a.dilation_w) : "");
    }
    if (input.dims() == 4 && input.dim_size(3) != f[2]) {
      s += " g" + std::to_string(input.dim_size(3) / f[2]);
    }
    if (side_sources_[i] >= 0) s += " +side";
    if (kinds_[i] == kTransposeStep) {
      s += " transposed " + std::to_string(phases_[i].block_h) + "x" +
           std::to_string(phases_[i].block_w);
    }
    return s;
  }

  // Offsets (elements) of a step's weights in the two vectors; side_scale
  // -1 without a side input.
  struct StepLayout {
    int64_t filter = 0, filter_size = 0, bias = 0, scale = 0, scale_size = 0,
            side_scale = -1;
  };
  int64_t steps_ = 0, filter_total_ = 0, epilogue_total_ = 0;
  std::vector<int64_t> input_sources_, side_sources_, filter_shapes_;
  std::vector<int64_t> last_reader_;
  std::vector<StepLayout> layout_;
  std::vector<ConvAttrs> attrs_;
  std::vector<int64_t> kinds_;  // kConvStep, kChannelScaleStep or kTransposeStep
  // A transposed convolution step's phases (empty for the other steps).
  std::vector<TransposedConvPhases> phases_;
  // Whether step i's input is known to be in [0, 127] (see the constructor).
  std::vector<bool> input_non_negative_;
  Tensor no_side_, zero_scale_;
  // Step plans made so far (StepPlan), the oldest dropped beyond kMaxPlans.
  static constexpr size_t kMaxPlans = 8;
  mutable std::mutex plans_mu_;
  mutable std::vector<std::shared_ptr<const StepPlan>> plans_;
  // Not TF_FUSED_INT8_SEQUENCE_PLAN=0 when the kernel was made.
  bool plans_allowed_ = StepPlansAllowed();
  // TF_FUSED_INT8_STEP_TIMES=1 when the kernel was made (step_times.h).
  bool time_steps_ = StepTimesRequested();
  // Not TF_FUSED_INT8_SEQUENCE_BATCH_SPLIT=0 when the kernel was made
  // (BatchSlices).
  bool batch_split_ = BatchSplitAllowed();
  // TF_FUSED_INT8_SEQUENCE_PREFIX when the kernel was made (ImagePrefix):
  // -1 unset (the rule), 0 off, n > 0 forced.
  int64_t prefix_mode_ = PrefixMode();
};

}  // namespace

int64_t SequenceBatchSplitCalls() {
  return g_batch_split_calls.load(std::memory_order_relaxed);
}

REGISTER_KERNEL_BUILDER(Name("ResourceFusedInt8ConvSequence")
                            .Device(tensorflow::DEVICE_CPU),
                        FusedInt8ConvSequenceCpuOp<true>);
REGISTER_KERNEL_BUILDER(Name("FusedInt8ConvSequence").Device(tensorflow::DEVICE_CPU),
                        FusedInt8ConvSequenceCpuOp<false>);

}  // namespace tf_fused_int8
