// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Instruction-throughput loops: the limits the benchmark's --peak reports and
// every "ours" row is measured against (% of peak of the path that ran).
//
// Each loop is a block of independent multiply-accumulate instructions on
// registers only (no loads, no stores: an upper bound no convolution can
// pass), with enough accumulators in flight to hide the instruction's latency
// on every CPU seen here (latency x ports <= accumulators). The operations
// counted are 2 per multiply-accumulate, as in the benchmark's GOPS:
//   vpmaddwd_ymm  VPMADDWD + VPADDD, ymm        16 int16 MACs per pair (avx2 path)
//   vpmaddubsw_ymm VPMADDUBSW + VPMADDWD + VPADDD, ymm  32 u8 x s8 MACs per triple (avx2
//                 path on inputs in [0, 127], gemm_avx2.cc)
//   vpdpbusd_ymm  {vex} VPDPBUSD, ymm           32 u8 x s8 MACs (avxvnni path)
//   vpdpbusd_zmm  VPDPBUSD, zmm                 64 u8 x s8 MACs (avx512vnni path)
//   vpdpwssd_zmm  VPDPWSSD, zmm                 32 int16 MACs (avx512vnni depthwise)
//   fma_ymm       VFMADD231PS, ymm              8 fp32 FMAs (what TF's fp32 conv can reach, AVX2)
//   fma_zmm       VFMADD231PS, zmm              16 fp32 FMAs (AVX-512)
//   tdpbssd       AMX TDPBSSD                   16 x 16 x 64 s8 x s8 MACs (amx path)
//   tdpbssd_loads TDPBSSD x 4 after 4 TILELOADDs from L1 (the amx micro-tile's K step; not a
//                 register-only loop: the limit of that micro-tile, see peak_amx.cc)
//   epilogue_ymm  the contract epilogue on ymm accumulators (avx2 and avxvnni paths)
//   epilogue_zmm  the contract epilogue on zmm accumulators (avx512vnni and amx paths)
// The epilogue loops count one op per output (an int8 written), not 2 per
// multiply-accumulate: every output of every layer pays the contract's
// requantization (epilogue.h) once, whatever its K, in the kernels' leanest
// form (no side input, no upper clamp: epilogue_avx2.h's Epilogue16x2,
// epilogue_avx512.h's Epilogue64Bytes), on registers: per vector of int32
// accumulators VCVTDQ2PS, VMULPS, VADDPS, VCVTPS2DQ, then the saturating
// packs, PMAXSB (and, on ymm, the VPERMD that orders the bytes). A layer's
// time can be set against its MACs at its path's instruction limit plus
// its outputs at that path's epilogue limit (the benchmark's %lim): on the
// VNNI paths both use the same vector ports, and on this project's Xeon
// AMX's tile work and the vector epilogue did not overlap (2026-12-06, a
// loop of both took the sum of each alone).
// The loops live in peak_<isa>.cc, built with that instruction set's flags.
//
// The memory limit (MeasureCopyGBps) is a loop of another kind: it reads one
// buffer and writes another with ymm loads and plain stores, as the
// depthwise kernels read their input and write their output, and reports
// the bytes read plus the bytes written per second. The benchmark's --peak
// times it with each depthwise layer's own input and output sizes, so that a
// layer is set against moving its own bytes from wherever they live (L2 at
// batch 1, L3 or DRAM at larger batches).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_PEAK_PEAK_H_
#define TF_FUSED_INT8_CC_CORE_CPU_PEAK_PEAK_H_

#include <cstdint>

namespace tf_fused_int8 {
namespace cpu {

// One loop: run(iters) executes iters blocks of ops_per_block operations.
struct PeakLoop {
  const char* name;
  double ops_per_block;
  bool (*supported)();
  void (*run)(int64_t iters);
};

// Every loop this build has, in a fixed order; *count is set to their number.
const PeakLoop* PeakLoops(int* count);

// Runs loop `name` on `threads` threads at once for about min_seconds and
// returns the measured operations per second of all threads together, in
// GOPS. Returns -1 for an unknown name, -2 when this CPU lacks the
// instruction (the loop is never run then).
double MeasurePeakGops(const char* name, int threads, double min_seconds);

// Bytes read plus bytes written per second (GB/s, all threads together)
// of `threads` threads that each read their share of a src_bytes buffer and
// write their share of a dst_bytes buffer (contiguous shares, reads and
// writes interleaved in proportion), repeated for about min_seconds; the
// best of five timed runs after one untimed run. Both sizes are rounded up
// to 256 bytes a thread. Returns -1 for a size below 1 or above 4 GiB, -2
// where this build or CPU has no copy loop (it needs AVX2).
double MeasureCopyGBps(int64_t src_bytes, int64_t dst_bytes, int threads,
                       double min_seconds);

// Loop bodies (defined in the ISA translation units; call only when the
// matching supported() is true).
void PeakVpmaddwdYmm(int64_t iters);
void PeakVpmaddubswYmm(int64_t iters);
void PeakFmaYmm(int64_t iters);
void PeakVpdpbusdYmm(int64_t iters);
void PeakVpdpbusdZmm(int64_t iters);
void PeakVpdpwssdZmm(int64_t iters);
void PeakFmaZmm(int64_t iters);
void PeakTdpbssd(int64_t iters);
void PeakTdpbssdLoads(int64_t iters);
void PeakEpilogueYmm(int64_t iters);
void PeakEpilogueZmm(int64_t iters);
// Reads src_chunks and writes dst_chunks chunks of 256 bytes (64-byte
// aligned), interleaved: before writing dst chunk j it has read the src
// chunks below (j + 1) * src_chunks / dst_chunks. What it stores depends on
// what it read, so no load can be dropped.
void CopyChunksYmm(const uint8_t* src, int64_t src_chunks, uint8_t* dst,
                   int64_t dst_chunks);

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_PEAK_PEAK_H_
