// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/cpu/lut/lut.h"

#include <algorithm>
#include <cstdint>

#include "cc/core/cpu/vector_isa.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

// Bytes per parallel unit: a slice that a thread looks up in a few
// microseconds with the vector bodies.
constexpr int64_t kSliceBytes = 16 << 10;

void PortableLut(const int8_t* lut, int8_t* data, int64_t n) {
  LutBytes(lut, data, 0, n);
}

}  // namespace

LutBody LutBodyFor(KernelPath path) {
#if defined(__x86_64__)
  switch (VectorIsaOf(path)) {
    case VectorIsa::kAvx512:
      return CpuHasAvx512Vbmi() ? LutAvx512Vbmi : LutAvx512Bw;
    case VectorIsa::kAvx2:
      return LutAvx2;
    case VectorIsa::kBaseline:
      break;
  }
#elif defined(__aarch64__)
  if (path != KernelPath::kReference) return LutNeon;
#else
  (void)path;
#endif
  return PortableLut;
}

void ApplyLut(const int8_t* lut, int8_t* data, int64_t n, KernelPath path,
              const ParallelFor& parallel_for) {
  const LutBody body = LutBodyFor(path);
  const int64_t slices = (n + kSliceBytes - 1) / kSliceBytes;
  parallel_for(slices, kSliceBytes, [&](int64_t begin, int64_t end) {
    const int64_t b = begin * kSliceBytes;
    const int64_t e = std::min(n, end * kSliceBytes);
    body(lut, data + b, e - b);
  });
}

}  // namespace cpu
}  // namespace tf_fused_int8
