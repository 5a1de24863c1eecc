// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Host-side planning of one GPU call: pure functions of the geometry, with no
// CUDA or cuDNN call, so that all of it is unit-tested on machines without a
// GPU (tests/cc/gpu_host_test.cc).
//
// The GPU call is, for NCHW_VECT_C int8x4 tensors:
//
//   [x, w int8x4 -> int8x32 (device_kernels.h), only for an INT8x32 plan]
//   cuDNN convolution, int32 accumulation, float32 NCHW output = float32(acc)
//     (grouped convolutions: our direct kernel instead, DirectConvParams)
//   contract epilogue (device_kernels.h) -> NCHW_VECT_C int8x4 output
//
// The epilogue is ours, not cuDNN's: see docs/gpu.md for why cuDNN's fused
// epilogues cannot promise the contract's bits.
#ifndef TF_FUSED_INT8_CC_CORE_GPU_PLAN_H_
#define TF_FUSED_INT8_CC_CORE_GPU_PLAN_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "cc/core/conv_params.h"
#include "cc/core/gpu/device_kernels.h"
#include "cc/core/gpu/status.h"

namespace tf_fused_int8 {
namespace gpu {

// One call of the GPU kernel: NCHW_VECT_C int8x4 tensors, device pointers
// (host pointers for the host emulation). geo holds logical channel counts
// (in_c = 4 * conv_input.dim(1), out_c = filter.dim(0)) and must have been
// filled in by ComputeGeometry().
struct GpuConvArgs {
  ConvGeometry geo;
  const int8_t* input = nullptr;       // [N, in_c/4, H, W, 4]
  const int8_t* filter = nullptr;      // [out_c, in_c/groups/4, Kh, Kw, 4]
  const float* bias = nullptr;         // [out_c]
  const int8_t* side_input = nullptr;  // [N, out_c/4, Ho, Wo, 4] or nullptr
  const float* conv_input_scale = nullptr;  // [1] or [out_c]
  bool per_channel_scale = false;
  float side_input_scale = 0.0f;  // host value
  Activation activation = Activation::kNone;
  int32_t output_min = -128, output_max = 127;  // see OutputBounds
  // 256 host bytes or nullptr: the output lookup table (FusedConvArgs::
  // output_lut), copied into the epilogue's kernel parameters.
  const int8_t* output_lut = nullptr;
  int8_t* output = nullptr;  // [N, out_c/4, Ho, Wo, 4]
};

// Checks what the GPU path needs beyond ComputeGeometry(): channel counts that
// are multiples of 4 (NCHW_VECT_C / OIHW_VECT_I), groups that divide both
// depths and span whole int8x4 words of input channels, and sizes that the
// 32-bit index arithmetic of the device kernels can address. `g` must have
// been filled in by ComputeGeometry (logical channel counts: in_c = 4 * C/4).
// InvalidArgument (never a crash) for anything else.
Status ValidateGpuGeometry(const ConvGeometry& g);

// Whether the call runs the direct kernel (DirectConvParams) instead of cuDNN:
// grouped and depthwise convolutions (groups > 1). cuDNN, autotuning and the
// forced path/layout options do not apply to them.
inline bool UsesDirectKernel(const ConvGeometry& g) { return g.groups > 1; }
constexpr const char* kDirectPlanName = "direct/grouped";

// Whether a direct-kernel call takes the fused fast path (DepthwiseConvParams,
// tfi_depthwise_conv): one int8x4 word of input channels per group
// (group_c4 == 1), i.e. every depthwise layer in NCHW_VECT_C and groups of 4
// channels. The exact sums and the epilogue run in one kernel, one thread per
// output word; other grouped calls keep tfi_direct_conv + tfi_epilogue_x4.
inline bool UsesDepthwiseKernel(const ConvGeometry& g) {
  return UsesDirectKernel(g) && g.GroupInC() == 4;
}
constexpr const char* kDepthwisePlanName = "direct/depthwise";

// Whether the padding is the same before and after in both dimensions (the
// legacy cuDNN API takes one padding per dimension).
bool SymmetricPadding(const ConvGeometry& g);

// The ways the GPU path hands the convolution to cuDNN. Each is one cuDNN
// configuration with integer accumulation; our device kernels convert the
// operands first when needed, and the epilogue reads whatever the
// convolution wrote:
//   kVect4      x, w as given (INT8x4, NCHW_VECT_C); y float32 NCHW
//   kVect32     x, w converted to INT8x32; y float32 NCHW (int8 tensor cores)
//   kNhwcInt32  x, w transposed to int8 NHWC / KRSC; y int32 NHWC (exact acc)
//   kNhwcFloat  x, w transposed to int8 NHWC / KRSC; y float32 NHWC
enum class ConvLayout { kVect4, kVect32, kNhwcInt32, kNhwcFloat };
const char* ConvLayoutName(ConvLayout l);  // "x4", "x32", "nhwc-i32", "nhwc-f32"
bool LayoutIsVectorized(ConvLayout l);

enum class ElementType { kInt8, kInt32, kFloat };

// How cuDNN sees one tensor (backend API conventions): logical dims are
// [N, C, H, W] (filters [K, C, R, S]); for a vectorized int8 tensor the dims
// count vectors in the vectorized dimension (C/vect) and strides are in units
// of vectors (as in cuDNN's own int8x4/int8x32 samples).
struct TensorSpec {
  int64_t uid = 0;
  ElementType type = ElementType::kInt8;
  int64_t dims[4] = {0, 0, 0, 0};
  int64_t strides[4] = {0, 0, 0, 0};
  int64_t vector_count = 1;      // 1, 4 or 32
  int64_t vectorized_dim = -1;   // 1 (channels) when vector_count > 1
  int64_t alignment = 16;        // bytes

  // Bytes per stride unit: the vector for int8 tensors, 4 for int32/float.
  int64_t UnitBytes() const { return type == ElementType::kInt8 ? vector_count : 4; }
  // Bytes covered (the largest offset + one unit).
  int64_t Bytes() const;
  // Byte offset of logical element (n, c, h, w): the layout the tensor
  // describes, used by the host emulation and tested against the layout
  // helpers.
  int64_t ByteOffset(int64_t n, int64_t c, int64_t h, int64_t w) const;
};

// The cuDNN convolution of one plan: cross-correlation, int32 compute,
// explicit pre/post padding (asymmetric SAME padding is native in the backend
// API; the legacy API needs it symmetric).
struct ConvSpec {
  ConvLayout layout = ConvLayout::kVect4;
  int64_t padded_in_c = 0;  // in_c rounded up to the vector width
  TensorSpec x, w, y;
  int64_t pre_pad[2] = {0, 0};
  int64_t post_pad[2] = {0, 0};
  int64_t stride[2] = {1, 1};
  int64_t dilation[2] = {1, 1};

  // Where the epilogue finds element (n, c, p) of y at `y_ptr`.
  ConvOutput Output(const void* y_ptr) const;
};

constexpr int64_t kUidX = 'x';
constexpr int64_t kUidW = 'w';
constexpr int64_t kUidY = 'y';

ConvSpec MakeConvSpec(const ConvGeometry& g, ConvLayout layout, int64_t alignment);

// Whether an INT8x32 plan is worth trying: in_c a multiple of 32 (no padding
// channels) and a GPU with int8 tensor cores (compute capability >= 7.5).
bool X32Candidate(const ConvGeometry& g, int cc_major, int cc_minor);

// The layouts tried when none is forced, in order: x4, x32 (X32Candidate),
// nhwc-f32. nhwc-i32 is left out: on its one GPU run (H200 sm_90, cuDNN 9.19)
// every int32-output engine and legacy algorithm wrote wrong sums in every
// shape (docs/gpu.md), and the sample check dropped each of them after a run;
// TF_FUSED_INT8_GPU_LAYOUT=nhwc still tries it, so another GPU can be checked.
std::vector<ConvLayout> AutoLayouts(const ConvGeometry& g, int cc_major, int cc_minor);

// The smallest power of two (1..16) that divides every address.
int64_t AlignmentOf(std::initializer_list<const void*> ptrs);

// Kernel parameters of the epilogue for the convolution result `conv`.
EpilogueParams MakeEpilogueParams(const ConvGeometry& g, const ConvOutput& conv,
                                  const float* scale, bool per_channel_scale,
                                  const float* bias, const int8_t* side,
                                  float side_scale, Activation activation,
                                  int8_t* out, int32_t output_min = -128,
                                  int32_t output_max = 127,
                                  const int8_t* output_lut = nullptr);
// The same for an op call's arguments (their scale, bias, side input,
// activation, bounds, lookup table and output).
EpilogueParams MakeEpilogueParams(const GpuConvArgs& args, const ConvOutput& conv);

// Kernel parameters of the int8x4 -> int8x32 conversion of an activation
// ([N, C/4, H, W, 4], is_filter = false) or a filter ([O, I/4, Kh, Kw, 4]).
VectParams MakeActivationX32Params(const ConvGeometry& g, const void* in,
                                   void* out);
VectParams MakeFilterX32Params(const ConvGeometry& g, const void* in,
                               void* out);

// Kernel parameters of the int8x4 -> int8 NHWC transposes (activation
// [N, C/4, H*W] words -> [N, H*W, C/4]; filter [O, I/4, R*S] -> [O, R*S, I/4]).
TransposeParams MakeActivationNhwcParams(const ConvGeometry& g, const void* in, void* out);
TransposeParams MakeFilterNhwcParams(const ConvGeometry& g, const void* in, void* out);

// The operands and geometry that ExactAcc reads (x, w: int8x4 as given).
ConvOperands MakeConvOperands(const ConvGeometry& g, const void* x, const void* w);

// Kernel parameters of the direct kernel (grouped convolutions): y is
// float32 NCHW, where MakeConvSpec(g, ConvLayout::kVect4, any).Output(y)
// finds each element, like the x4 cuDNN plan's.
DirectConvParams MakeDirectConvParams(const ConvGeometry& g, const void* x, const void* w,
                                      float* y);

// Kernel parameters of the fused depthwise kernel (UsesDepthwiseKernel): the
// operands as given and the epilogue's parameters (MakeEpilogueParams with no
// convolution result: the kernel forms the accumulators itself).
DepthwiseConvParams MakeDepthwiseConvParams(const GpuConvArgs& args);

// Kernel parameters of the autotuner's sample check (SampleCheckParams) of
// the convolution result `conv`, with x and w as given (int8x4) and `result`
// 4 words of device memory. Every pixel is checked when the output has at
// most kSampleCheckMaxPixels of them and the work fits the budget; else up to
// kSampleCheckMaxPixels pixels (never fewer than the corners and the centre)
// within kSampleCheckWordProducts products of 4-channel words (2^29
// multiply-adds), once per candidate at autotuning time.
constexpr int64_t kSampleCheckMaxPixels = 64;
constexpr int64_t kSampleCheckMinPixels = 5;
constexpr int64_t kSampleCheckWordProducts = int64_t{1} << 27;
SampleCheckParams MakeSampleCheckParams(const ConvGeometry& g, const ConvOutput& conv,
                                        const void* x, const void* w, uint32_t* result);

// Bytes of the converted x and w a layout needs (0 for kVect4).
int64_t ConvertedInputBytes(const ConvGeometry& g, ConvLayout layout);
int64_t ConvertedFilterBytes(const ConvGeometry& g, ConvLayout layout);

// Blocks of kThreadsPerBlock threads covering `words` words.
inline uint32_t BlocksFor(uint32_t words) {
  return (words + kThreadsPerBlock - 1) / kThreadsPerBlock;
}

}  // namespace gpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_GPU_PLAN_H_
