// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The register-only loop bodies of the throughput loops (peak.h), as macros
// of inline assembly shared by the peak_<isa>.cc files: INSN(acc) expands to
// one instruction accumulating into register number acc from the loop's two
// operand registers. Macros only (no code), so nothing of one instruction set
// can end up in another translation unit.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_PEAK_PEAK_ASM_H_
#define TF_FUSED_INT8_CC_CORE_CPU_PEAK_PEAK_ASM_H_

// 12 independent ymm accumulator chains (ymm0-11), operands ymm14 / ymm15
// set to all ones (INIT: the instruction that sets a register to all ones,
// or to zero for float loops).
#define TFI_YMM12_LOOP(INIT, INSN, ITERS)                                      \
  __asm__ volatile(                                                            \
      INIT(14) INIT(15) "1:\n\t" INSN(0) INSN(1) INSN(2) INSN(3) INSN(4)       \
          INSN(5) INSN(6) INSN(7) INSN(8) INSN(9) INSN(10) INSN(11)            \
              "dec %0\n\t"                                                     \
              "jnz 1b\n\t"                                                     \
              "vzeroupper\n\t"                                                 \
      : "+r"(ITERS)                                                            \
      :                                                                        \
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",  \
        "xmm8", "xmm9", "xmm10", "xmm11", "xmm14", "xmm15")

// 16 independent zmm accumulator chains (zmm0-15), operands zmm30 / zmm31
// all ones.
#define TFI_ZMM16_LOOP(INSN, ITERS)                                         \
  __asm__ volatile(                                                         \
      "vpternlogd $0xff, %%zmm30, %%zmm30, %%zmm30\n\t"                     \
      "vpternlogd $0xff, %%zmm31, %%zmm31, %%zmm31\n\t"                     \
      "1:\n\t" INSN(0) INSN(1) INSN(2) INSN(3) INSN(4) INSN(5) INSN(6)      \
          INSN(7) INSN(8) INSN(9) INSN(10) INSN(11) INSN(12) INSN(13)       \
              INSN(14) INSN(15) "dec %0\n\t"                                \
                                "jnz 1b\n\t"                                \
                                "vzeroupper\n\t"                            \
      : "+r"(ITERS)                                                         \
      :                                                                     \
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",       \
        "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",         \
        "xmm14", "xmm15", "xmm30", "xmm31")

#define TFI_YMM_ONES(r) "vpcmpeqd %%ymm" #r ", %%ymm" #r ", %%ymm" #r "\n\t"
#define TFI_YMM_ZERO(r) "vxorps %%ymm" #r ", %%ymm" #r ", %%ymm" #r "\n\t"

#endif  // TF_FUSED_INT8_CC_CORE_CPU_PEAK_PEAK_ASM_H_
