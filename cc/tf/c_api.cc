// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Plain C entry points of the op library for tools that reach it with
// ctypes (the benchmark: tf_fused_int8/benchmark/workers/impl_ours.py; the
// tests: the packed-weights cache's counters, the sequence ops' batch
// splits). They use the TF-free core (and one counter of the sequence
// kernel); they live here, in the always-linked binding,
// so that the linker keeps them in _fused_int8_ops.so.
#include <cstdint>
#include <string>

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/gemm/packed_weights.h"
#include "cc/core/cpu/peak/peak.h"
#include "cc/core/fused_conv.h"
#include "cc/tf/cpu_conv.h"
#include "cc/tf/step_times.h"
#include "cc/tf/weight_pin.h"

namespace {

// out[0..8] = hits, misses, stale, evictions, pinned_hits, entries, bytes,
// released, pinned_entries (tf_fused_int8/_loader.py weight_cache_stats).
void WriteCacheStats(const tf_fused_int8::cpu::WeightCacheStats& s, int64_t* out) {
  const int64_t v[] = {s.hits,    s.misses, s.stale,    s.evictions,     s.pinned_hits,
                       s.entries, s.bytes,  s.released, s.pinned_entries};
  for (int i = 0; i < 9; ++i) out[i] = v[i];
}

}  // namespace

extern "C" {

// Comma-separated names of the throughput loops this build has (see
// cc/core/cpu/peak/peak.h); "" when it has none.
__attribute__((visibility("default"))) const char* tf_fused_int8_peak_loops() {
  static const std::string names = [] {
    int n = 0;
    const tf_fused_int8::cpu::PeakLoop* loops = tf_fused_int8::cpu::PeakLoops(&n);
    std::string s;
    for (int i = 0; i < n; ++i) {
      if (i) s += ",";
      s += loops[i].name;
    }
    return s;
  }();
  return names.c_str();
}

// GOPS of loop `name` on `threads` threads (2 operations per
// multiply-accumulate); -1: unknown name, -2: this CPU lacks it.
__attribute__((visibility("default"))) double tf_fused_int8_peak_gops(
    const char* name, int threads, double min_seconds) {
  if (name == nullptr) return -1.0;
  return tf_fused_int8::cpu::MeasurePeakGops(name, threads, min_seconds);
}

// GB/s (bytes read + written) of the copy loop on `threads` threads moving
// src_bytes into dst_bytes (peak.h: MeasureCopyGBps); -1: a size out of
// range, -2: no copy loop on this build or CPU.
__attribute__((visibility("default"))) double tf_fused_int8_copy_gbps(
    int64_t src_bytes, int64_t dst_bytes, int threads, double min_seconds) {
  return tf_fused_int8::cpu::MeasureCopyGBps(src_bytes, dst_bytes, threads,
                                             min_seconds);
}

// The CPU kernel path a call would run now: TF_FUSED_INT8_CPU_KERNEL if
// set, else the fastest one this CPU supports; "error: ..." when the
// variable names an unknown or unsupported path.
__attribute__((visibility("default"))) const char* tf_fused_int8_kernel_path() {
  thread_local std::string result;
  tf_fused_int8::KernelPath path;
  const std::string err =
      tf_fused_int8::ResolveKernelPath(tf_fused_int8::KernelPath::kAuto, &path);
  result = err.empty() ? tf_fused_int8::KernelPathName(path) : "error: " + err;
  return result.c_str();
}

// The packed-weights cache's counters (WriteCacheStats), for tests and the
// benchmark (ctypes).
__attribute__((visibility("default"))) void tf_fused_int8_packed_weights_stats(
    int64_t* out) {
  WriteCacheStats(tf_fused_int8::cpu::PackedWeightsCache::Global().Stats(), out);
}

// The depthwise prepared-weights cache's counters, as above.
__attribute__((visibility("default"))) void tf_fused_int8_depthwise_cache_stats(
    int64_t* out) {
  WriteCacheStats(tf_fused_int8::cpu::GetDepthwiseCacheStats(), out);
}

// How many weight buffers the pins' registry knows (cc/tf/weight_pin.h),
// for tests.
__attribute__((visibility("default"))) int64_t tf_fused_int8_pinned_buffers() {
  return tf_fused_int8::PinnedBufferCountForTesting();
}

// The sequence op's per-step times (cc/tf/step_times.h) as text, one
// "node\tstep\tcalls\ttotal_ns\tdescription" line per step; clear != 0
// empties the table after reading it.
__attribute__((visibility("default"))) const char* tf_fused_int8_step_times(
    int clear) {
  thread_local std::string result;
  result = tf_fused_int8::StepTimesText();
  if (clear) tf_fused_int8::ClearStepTimes();
  return result.c_str();
}

// How many sequence-op calls ran as batch slices (cc/tf/cpu_conv.h), for
// tests.
__attribute__((visibility("default"))) int64_t tf_fused_int8_sequence_batch_splits() {
  return tf_fused_int8::SequenceBatchSplitCalls();
}

}  // extern "C"
