// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The VPSHUFB lookup of a 256-entry table, for any vector width (included by
// lut_avx2.cc and lut_avx512vnni.cc, each with its own policy and flags).
//
// VPSHUFB looks up 16 entries and gives 0 where the index byte is negative.
// Row s of the table (entries 16 s .. 16 s + 15, i = q + 128) is reached by
// two index chains stepped down 16 at a time with signed saturation:
//  * upper half (i >= 128, q >= 0): x = q, q - 16, ... For q = 16 h + l
//    (h < 8) the steps s <= h look up entry l of their row, the later ones
//    are negative (0); a negative q stays negative (saturation: never wraps
//    back to a positive index) and contributes 0 everywhere.
//  * lower half (q < 0): the same chain from q ^ 0x80 = q + 128, which is
//    negative for q >= 0.
// The rows are stored as differences, D_0 = R_0 and D_s = R_s ^ R_(s-1), so
// that the XOR of the steps s <= h is R_h: entry l of row h, the table value.
//
// Policy P: Vec, Broadcast16 (16 table bytes to every 128-bit lane),
// Splat (one byte everywhere), Shuffle (VPSHUFB), SubSat (VPSUBSB), Xor.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_LUT_LUT_PSHUFB_H_
#define TF_FUSED_INT8_CC_CORE_CPU_LUT_LUT_PSHUFB_H_

#include <cstdint>

namespace tf_fused_int8 {
namespace cpu {

template <typename P>
struct PshufbLut {
  typename P::Vec lo_rows[8], hi_rows[8];

  explicit PshufbLut(const int8_t* lut) {
    for (int s = 0; s < 8; ++s) {
      lo_rows[s] = P::Broadcast16(lut + 16 * s, s > 0 ? lut + 16 * (s - 1) : nullptr);
      hi_rows[s] = P::Broadcast16(lut + 128 + 16 * s,
                                  s > 0 ? lut + 128 + 16 * (s - 1) : nullptr);
    }
  }

  typename P::Vec LookUp(typename P::Vec hi) const {
    const typename P::Vec step = P::Splat(16);
    typename P::Vec lo = P::Xor(hi, P::Splat(static_cast<char>(0x80)));
    typename P::Vec r = P::Xor(P::Shuffle(lo_rows[0], lo), P::Shuffle(hi_rows[0], hi));
    for (int s = 1; s < 8; ++s) {
      lo = P::SubSat(lo, step);
      hi = P::SubSat(hi, step);
      r = P::Xor(r, P::Shuffle(lo_rows[s], lo));
      r = P::Xor(r, P::Shuffle(hi_rows[s], hi));
    }
    return r;
  }
};

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_LUT_LUT_PSHUFB_H_
