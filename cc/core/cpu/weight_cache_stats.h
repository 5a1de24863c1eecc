// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The counters both weight caches keep (gemm/packed_weights.h,
// depthwise/depthwise.h; their bounds: bounded_lru.h). A plain struct, for
// baseline and ISA translation units alike.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_WEIGHT_CACHE_STATS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_WEIGHT_CACHE_STATS_H_

#include <cstdint>

namespace tf_fused_int8 {
namespace cpu {

struct WeightCacheStats {
  // stale: hits whose weights had changed (packed or prepared again);
  // pinned_hits: hits of a pinned call on a pinned entry (used unchecked);
  // evictions: unpinned entries dropped for the bounds; released: pinned
  // entries dropped because their owner was gone; entries and bytes: all
  // of them now; pinned_entries: those of entries kept outside the bounds.
  int64_t hits = 0, misses = 0, stale = 0, evictions = 0, pinned_hits = 0;
  int64_t entries = 0, bytes = 0, released = 0, pinned_entries = 0;
};

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_WEIGHT_CACHE_STATS_H_
