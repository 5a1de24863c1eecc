// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise row kernel, AVX2 (the avx2 path; the avxvnni path runs it on the
// channels past its VPDPBUSD blocks, depthwise_avxvnni.cc): 16 channels as two
// ymm of int32, one PMADDWD + PADDD per tap and 8 channels (sign-extended
// int8 activations times the widened weights of depthwise.h: w * x
// exactly), or, in the interior of 3-, 5- and 7-wide windows, per two
// filter rows (LoadPair: the two rows' activations as int16 pairs times
// pair weights, both taps in one PMADDWD); a last block of fewer than 16
// channels goes through a zeroed 16-byte copy. The row walk is
// depthwise_rows.h; the epilogue is Epilogue16 / Epilogue16x2
// (epilogue_avx2.h, natural order).
//
// Tried and dropped: running the two 8-channel halves of a block one after
// the other in the interior, so that 8 pixels' accumulators and the weights
// fit the 16 ymm registers (perf shows a seventh of the interior's samples
// on spills): no faster at stride 1 (0.98-1.03x the time), 1.13-1.21x at
// stride 2 and on 7x7x960 (bench_core, one Zen 5 thread, alternated).
#include <cstdint>

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/depthwise/depthwise_ymm.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

// Every channel's single-row (widened) weights too: borders and odd rows.
// Pairs against one row at a time (bench_core, one Zen 5 thread, forced
// avx2, 11 rounds alternated, median time ratio): 112x112x32 0.89,
// 56x56x144 0.94 (batch 8 0.97), 112x112x96 / 2 0.97, 56x56x144 / 2 0.95,
// 28x28x192 0.96, 14x14x384 0.99, 7x7x960 0.95.
int64_t PairWideFrom(const DepthwiseRowArgs&) { return 0; }

}  // namespace

extern const DepthwisePrep kDepthwisePrepAvx2 = {PairBytes, PairFill, PairWideFrom};

void DepthwiseRowsAvx2(const DepthwiseRowArgs& d) {
  DepthwiseRowKernel<Ymm2x8>::Rows(d);
}

}  // namespace cpu
}  // namespace tf_fused_int8
