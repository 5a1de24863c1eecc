// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX2 throughput loops (peak.h). Inline assembly, so that the compiler can
// neither hoist the loop-invariant multiplies nor drop the unused sums.
#include "cc/core/cpu/peak/peak.h"
#include "cc/core/cpu/peak/peak_asm.h"

#include <immintrin.h>

namespace tf_fused_int8 {
namespace cpu {

// 12 VPMADDWD (products of two int16 pairs, summed into int32 lanes) each
// followed by the VPADDD that accumulates it, as in the avx2 GEMM kernel:
// 6 accumulator chains (ymm0-5, one VPADDD latency each), 6 product
// registers (ymm6-11) renamed freely, operands in ymm14/ymm15.
void PeakVpmaddwdYmm(int64_t iters) {
#define TFI_MADD(t, acc)                      \
  "vpmaddwd %%ymm15, %%ymm14, %%ymm" #t "\n\t" \
  "vpaddd %%ymm" #t ", %%ymm" #acc ", %%ymm" #acc "\n\t"
  TFI_YMM6_CHAIN_LOOP(TFI_MADD, iters);
#undef TFI_MADD
}

// 12 VPMADDUBSW (u8 x s8 byte pairs summed into int16 lanes), each widened
// by a VPMADDWD by ones and accumulated by a VPADDD, as in the avx2 GEMM
// kernel for inputs in [0, 127] (gemm_avx2.cc): the same registers as
// above, the VPMADDWD operand in ymm13.
void PeakVpmaddubswYmm(int64_t iters) {
#define TFI_MADDUBS(t, acc)                       \
  "vpmaddubsw %%ymm15, %%ymm14, %%ymm" #t "\n\t"     \
  "vpmaddwd %%ymm13, %%ymm" #t ", %%ymm" #t "\n\t"   \
  "vpaddd %%ymm" #t ", %%ymm" #acc ", %%ymm" #acc "\n\t"
  TFI_YMM6_CHAIN_LOOP(TFI_MADDUBS, iters);
#undef TFI_MADDUBS
}

// 12 independent VFMADD231PS chains (latency 4-5 x 2 ports <= 12).
void PeakFmaYmm(int64_t iters) {
#define TFI_FMA(acc) "vfmadd231ps %%ymm15, %%ymm14, %%ymm" #acc "\n\t"
  TFI_YMM12_LOOP(TFI_YMM_ZERO, TFI_FMA, iters);
#undef TFI_FMA
}

// The contract epilogue on ymm (peak.h; epilogue_avx2.h's Epilogue16x2:
// two pixels' 16 channels, 32 outputs) from the accumulators in ymm0-3,
// twice a block into ymm4-7 and ymm8-11 (renamed freely, so the two and
// the iterations overlap); scale, bias, the int8 lower bound and the VPERMD
// order in ymm12-15.
void PeakEpilogueYmm(int64_t iters) {
  static const float kScale = 0.0123f, kBias = 1.5f;
#define TFI_EPI(a, b, c, d)                                 \
  TFI_EPI_BODY("ymm", a, b, c, d, 12, 13)                   \
  "vpermd %%ymm" #a ", %%ymm15, %%ymm" #a "\n\t"             \
  "vpmaxsb %%ymm14, %%ymm" #a ", %%ymm" #a "\n\t"
  __asm__ volatile(
      "vpcmpeqd %%ymm0, %%ymm0, %%ymm0\n\t"
      "vpabsd %%ymm0, %%ymm1\n\t"
      "vpaddd %%ymm1, %%ymm1, %%ymm2\n\t"
      "vpaddd %%ymm2, %%ymm1, %%ymm3\n\t"
      "vbroadcastss %1, %%ymm12\n\t"
      "vbroadcastss %2, %%ymm13\n\t"
      "vpxor %%ymm14, %%ymm14, %%ymm14\n\t"
      "vpsrld $29, %%ymm0, %%ymm15\n\t"
      "1:\n\t" TFI_EPI(4, 5, 6, 7) TFI_EPI(8, 9, 10, 11)
      TFI_LOOP_END
      : "+r"(iters)
      : "m"(kScale), "m"(kBias)
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
        "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
#undef TFI_EPI
}

// The copy loop (peak.h): 8 ymm loads per source chunk, XORed into four
// accumulators (one XOR latency each: two loads a cycle keep them busy), 8
// plain ymm stores of those per destination chunk.
void CopyChunksYmm(const uint8_t* src, int64_t src_chunks, uint8_t* dst,
                   int64_t dst_chunks) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  int64_t read = 0;
  for (int64_t j = 0; j < dst_chunks; ++j) {
    const int64_t until = (j + 1) * src_chunks / dst_chunks;
    for (; read < until; ++read) {
      const __m256i* p = reinterpret_cast<const __m256i*>(src + 256 * read);
      a0 = _mm256_xor_si256(a0, _mm256_load_si256(p + 0));
      a1 = _mm256_xor_si256(a1, _mm256_load_si256(p + 1));
      a2 = _mm256_xor_si256(a2, _mm256_load_si256(p + 2));
      a3 = _mm256_xor_si256(a3, _mm256_load_si256(p + 3));
      a0 = _mm256_xor_si256(a0, _mm256_load_si256(p + 4));
      a1 = _mm256_xor_si256(a1, _mm256_load_si256(p + 5));
      a2 = _mm256_xor_si256(a2, _mm256_load_si256(p + 6));
      a3 = _mm256_xor_si256(a3, _mm256_load_si256(p + 7));
    }
    __m256i* q = reinterpret_cast<__m256i*>(dst + 256 * j);
    _mm256_store_si256(q + 0, a0);
    _mm256_store_si256(q + 1, a1);
    _mm256_store_si256(q + 2, a2);
    _mm256_store_si256(q + 3, a3);
    _mm256_store_si256(q + 4, a0);
    _mm256_store_si256(q + 5, a1);
    _mm256_store_si256(q + 6, a2);
    _mm256_store_si256(q + 7, a3);
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
