// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The one parameter struct of the compute core. No TensorFlow header may be
// included anywhere under cc/core/.
#ifndef TF_FUSED_INT8_CC_CORE_CONV_PARAMS_H_
#define TF_FUSED_INT8_CC_CORE_CONV_PARAMS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace tf_fused_int8 {

// kExplicit: the caller sets pad_top/pad_bottom/pad_left/pad_right in the
// ConvGeometry before ComputeGeometry (like tf.nn.conv2d's EXPLICIT padding).
enum class Padding { kSame, kValid, kExplicit };
enum class Activation { kNone, kRelu };

// Geometry of one 2-D convolution, NHWC input, HWIO filter, NHWC output.
//
// Grouped convolution (as tf.nn.conv2d): the input channels and the output
// channels are split into `groups` equal parts; output channel c belongs to
// group c / (out_c / groups) and reads only that group's in_c / groups
// input channels. The filter is [Kh, Kw, in_c / groups, out_c]. groups ==
// in_c is a depthwise convolution with channel multiplier out_c / in_c
// (output channel c reads input channel c / multiplier).
struct ConvGeometry {
  int64_t batch = 0;
  int64_t in_h = 0, in_w = 0, in_c = 0;
  int64_t filter_h = 0, filter_w = 0, out_c = 0;
  int64_t groups = 1;  // in_c % groups == 0, out_c % groups == 0
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  // Filled in by ComputeGeometry().
  int64_t out_h = 0, out_w = 0;
  // Filled in by ComputeGeometry() for SAME/VALID; inputs for kExplicit
  // (each in [0, 2^31-1]).
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;

  int64_t InputElements() const { return batch * in_h * in_w * in_c; }
  // Input channels per group: the filter's in-depth.
  int64_t GroupInC() const { return groups > 0 ? in_c / groups : 0; }
  int64_t GroupOutC() const { return groups > 0 ? out_c / groups : 0; }
  bool IsDepthwise() const { return groups > 1 && GroupInC() == 1; }
  int64_t FilterElements() const {
    return filter_h * filter_w * GroupInC() * out_c;
  }
  int64_t OutputElements() const { return batch * out_h * out_w * out_c; }
  // Depth of one output element's reduction: Kh * Kw * Ci / groups.
  int64_t ReductionDepth() const { return filter_h * filter_w * GroupInC(); }
};

// Fills out_h/out_w and the paddings from the sizes, strides, dilations and
// padding mode, with TensorFlow's SAME/VALID rules; for kExplicit the pads
// given in *g are kept and out = (in + before + after - effective) / stride + 1
// (an error when in + before + after < effective). Validates every value
// (positive strides/dilations, non-negative sizes, no int32/int64 overflow of
// any element count or index the kernels use, exact int32 accumulation).
// Returns an empty string on success, otherwise a human-readable message that
// names the offending argument and what was expected. Never aborts.
std::string ComputeGeometry(Padding padding, ConvGeometry* g);

// The int8 output range [*lo, *hi] of a call: output_min/output_max clamped to
// [-128, 127], Relu raises lo to at least 0, and hi is at least lo (so with
// Relu and output_max < 0 every output is 0).
inline void OutputBounds(Activation activation, int32_t output_min,
                         int32_t output_max, int32_t* lo, int32_t* hi) {
  int32_t l = output_min < -128 ? -128 : (output_min > 127 ? 127 : output_min);
  int32_t h = output_max < -128 ? -128 : (output_max > 127 ? 127 : output_max);
  if (activation == Activation::kRelu && l < 0) l = 0;
  if (h < l) h = l;
  *lo = l;
  *hi = h;
}

// What keeps a caller's weight buffer allocated and unchanged for the
// weight caches (FusedConvArgs::filter_pin and epilogue_pin): the TF layer's
// pin holds a reference to a resource variable's (or a weight constant's)
// buffer. The caches keep the pin with what they packed or prepared from
// that buffer, and keep such an entry outside their LRU bounds for as long
// as Held() says the buffer's owner still holds it (gemm/packed_weights.h):
// a model that is alive keeps its packed weights, however many models or
// bytes the process has; once the owner is gone (the model deleted, the
// variable assigned a new buffer) the entry is dropped at the cache's next
// insertion.
class WeightPin {
 public:
  virtual ~WeightPin() = default;
  // Whether anything besides pins still holds the pinned bytes. Once false
  // it must stay false (nothing can reach the bytes but the pins).
  virtual bool Held() const = 0;
};

// Everything a kernel needs for one call. Plain pointers, no ownership
// (filter_pin aside).
struct FusedConvArgs {
  ConvGeometry geo;
  const int8_t* input = nullptr;       // [N, H, W, Ci]
  const int8_t* filter = nullptr;      // [Kh, Kw, Ci / groups, Co]
  const float* bias = nullptr;         // [Co]
  const int8_t* side_input = nullptr;  // [N, Ho, Wo, Co] or nullptr
  const float* conv_input_scale = nullptr;  // [1] or [Co]
  bool per_channel_scale = false;           // true: conv_input_scale has Co
  float side_input_scale = 0.0f;  // used only when side_input != nullptr
  Activation activation = Activation::kNone;
  // Bounded activation (Relu6, clipped ReLU): the output range before Relu
  // raises the lower bound; -128 <= output_min <= output_max <= 127 (see
  // OutputBounds above).
  int32_t output_min = -128, output_max = 127;
  // Optional output lookup table (the op's output_lut): 256 entries; when
  // non-null the output is lut[out + 128] of the contract's clipped out
  // (an extension of the contract for activations such as SiLU, computed at
  // quantization time; epilogue.h). Null: the contract's out itself.
  const int8_t* output_lut = nullptr;
  // [N, Ho, Wo, Co]; shares no byte with an operand (the TF kernels
  // allocate it): a kernel may store an output byte twice, reading the
  // operands again in between (the depthwise blocks' overlapping last
  // block, depthwise_blocks_ymm.h OverlapBlock).
  int8_t* output = nullptr;
  // Optional. Non-null: the caller promises that the filter's bytes do not
  // change while this object lives (which also keeps the buffer allocated,
  // so its address names these bytes only): the buffer of a TF resource
  // variable, which TF copies before writing while anything else holds it.
  // A cached packing of a pinned filter keeps the pin, and later calls that
  // pass a pin for it skip the check against the filter (packed_weights.h).
  std::shared_ptr<const WeightPin> filter_pin;
  // Optional. true: the caller promises that every input byte is in [0,
  // 127] (it is the output of a convolution whose Relu or output_min made
  // it so: the sequence op knows its steps'); the avx2 and avxvnni paths
  // then skip their own check of the input (dispatch.cc, NonNegativeInput).
  // Never set it from anything less: a negative byte read as u8 by
  // VPMADDUBSW or VPDPBUSD gives a wrong answer.
  bool input_non_negative = false;
  // Optional, the same promise for bias and conv_input_scale. The depthwise
  // kernels prepare all three once (depthwise.h's cache): a call that pins
  // both uses a prepared entry that was pinned too without comparing its
  // operands with them.
  std::shared_ptr<const WeightPin> epilogue_pin;

  // Side input takes part only when given and its scale is non-zero.
  bool HasSideInput() const {
    return side_input != nullptr && side_input_scale != 0.0f;
  }
};

inline void OutputBounds(const FusedConvArgs& a, int32_t* lo, int32_t* hi) {
  OutputBounds(a.activation, a.output_min, a.output_max, lo, hi);
}

// A parallel-for supplied by the caller (TF's intra-op pool in the op, a
// plain loop or std::threads in stand-alone tests/benchmarks). It must run
// fn(begin, end) over disjoint sub-ranges that together cover [0, total); each
// unit costs about cost_per_unit cycles. An empty ParallelFor runs serially.
struct ParallelFor {
  int num_threads = 1;
  std::function<void(int64_t total, int64_t cost_per_unit,
                     const std::function<void(int64_t, int64_t)>& fn)>
      run;
  void operator()(int64_t total, int64_t cost_per_unit,
                  const std::function<void(int64_t, int64_t)>& fn) const {
    if (total <= 0) return;
    if (run && num_threads > 1) {
      run(total, cost_per_unit, fn);
    } else {
      fn(0, total);
    }
  }
};

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CONV_PARAMS_H_
