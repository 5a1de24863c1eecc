// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Weights packed once per filter into a micro-kernel's layout (see gemm_kernels.h
// for the layouts), and a process-wide cache of them.
//
// The driver (gemm_driver.cc) uses the cache for every call, but two: the
// GEMV (gemm_kernels.h: one or two output pixels and a filter larger than
// kCopyCheckMaxBytes, where the ISA has one) reads the filter in place
// (unless pinned: avx2's IsaKernels::gemv_packed reads the packing);
// and a filter larger than kCopyCheckMaxBytes on a single M tile has
// every panel used by exactly one consumer, so it is packed from the
// filter right before use instead: that reads the filter once, which the
// panel check below must do anyway, and skips reading a packed copy; such
// calls neither read nor fill the cache (unless pinned: see below).
//
// Cache key: (filter pointer, Kh, Kw, Ci, Co, layout); for one group of a
// grouped convolution the pointer is the original filter's address plus the
// group index (grouped.h), the sizes the group's. A pointer hit is only
// a candidate: every call that uses a cached entry re-checks it against the
// filter's current bytes, panel by panel, while it computes (GemmTileArgs::
// verify; each (channel block, K panel) is checked exactly once per call,
// by one of the M tiles using it). On any difference the call's
// results are discarded, the entry is replaced by a fresh packing of the
// current filter and the call is recomputed, so a changed filter (same
// buffer, new contents, or a freed buffer reused for another filter) is
// never served stale. The check reads the filter once per call, overlapped
// with the computation; it needs no saved copy because it compares against
// the packed panel, which the kernel loads anyway. No hash is trusted.
//
// Filters of at most kCopyCheckMaxBytes bytes (GEMM formats; Winograd
// always) are different: the entry also keeps the filter bytes it was packed
// from (PackedView::filter_copy), and a call that hits it compares the
// filter with that copy in one memcmp before computing (gemm_driver.cc)
// instead of repacking panels while computing. For such filters (in L2)
// the compare costs a third of a packing (bench_core, Zen 4, one thread:
// 154 KB 3 us against about 10 us), so small weight-heavy calls (batch 1,
// one M tile) use the cache too instead of packing on the fly; larger
// filters, which stream from L3 or memory, keep the panel check (a memcmp
// reads twice the bytes of a packing there).
//
// Pinned filters (FusedConvArgs::filter_pin, the TF resource op's variable
// buffers): a call that passes a pin promises the filter's bytes cannot
// change while the pin lives. The entry keeps the pin, so the buffer stays
// allocated and its address names those bytes only; a later call that
// passes a pin for the same key then uses the entry with no check at all
// (no memcmp, no panel check). A pinned call that finds an entry packed
// without a pin repacks it under its pin (the bytes may have changed since);
// an unpinned call that finds a pinned entry checks it as usual. The pinned
// buffer's bytes count in the entry's bytes (for a filter without a copy).
//
// Bound and eviction: at most kMaxEntries entries and kMaxBytes bytes of
// packed data from unpinned filters; inserting beyond either evicts least
// recently used entries first. A packing larger than kMaxBytes alone is used
// for its call and not cached. Pinned entries are outside both bounds
// (bounded_lru.h): they stay while their pin is Held() (conv_params.h), that
// is while the model owning the buffer lives, and every insertion drops
// those whose pin no longer is (stats: released). So the memory they take
// is about one packing of each live model's weights, as in any engine that
// packs its weights once. Entries are reference counted (std::shared_ptr),
// so evicting or replacing an entry that a running call still uses is
// safe.
//
// Thread safety: every cache operation takes one mutex; packing runs outside
// it (two threads missing on the same filter may both pack; one wins).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_GEMM_PACKED_WEIGHTS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_GEMM_PACKED_WEIGHTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "cc/core/conv_params.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/cpu/weight_cache_stats.h"

namespace tf_fused_int8 {
namespace cpu {

class PackedWeights {
 public:
  // Packs `filter` (HWIO, geometry g) for `isa`'s layout.
  static std::shared_ptr<const PackedWeights> Pack(const int8_t* filter,
                                                   const ConvGeometry& g,
                                                   const IsaKernels& isa);
  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;

  // Filters up to this size keep a copy of their bytes (header comment).
  static constexpr int64_t kCopyCheckMaxBytes = int64_t{512} << 10;

  const PackedView& view() const { return view_; }
  size_t bytes() const { return bytes_; }

 private:
  PackedWeights() = default;
  void* memory_ = nullptr;  // 64-byte aligned: data, then col_offset
  size_t bytes_ = 0;
  PackedView view_{};
};

using PackedWeightsCacheStats = WeightCacheStats;

// The process-wide cache (see the header comment).
class PackedWeightsCache {
 public:
  // Bounds on unpinned entries: enough for every GEMM layer of the large
  // keras.applications models (DenseNet121: 120 convolutions), which now
  // cache at batch 1 too.
  static constexpr int64_t kMaxEntries = 256;
  static constexpr int64_t kMaxBytes = int64_t{256} << 20;  // 256 MiB

  static PackedWeightsCache& Global();

  // Returns packed weights for the filter. *fresh is true when no check
  // is needed: packed by this call from the current filter bytes, or a
  // pinned entry found by a call passing `pin` (header comment); false for
  // a cache hit that the caller must verify while computing.
  // key_address is the filter's identity in the key: the filter itself,
  // or for one group of a grouped filter copied out (grouped.h) the
  // original filter's address plus the group index. `pin` is the call's
  // FusedConvArgs::filter_pin (may be null).
  std::shared_ptr<const PackedWeights> Get(const int8_t* filter,
                                           const int8_t* key_address,
                                           const ConvGeometry& g,
                                           const IsaKernels& isa,
                                           const std::shared_ptr<const WeightPin>& pin,
                                           bool* fresh);
  // Repacks after a failed verification and replaces the entry.
  std::shared_ptr<const PackedWeights> Replace(const int8_t* filter,
                                               const int8_t* key_address,
                                               const ConvGeometry& g,
                                               const IsaKernels& isa,
                                               const std::shared_ptr<const WeightPin>& pin);
  void Clear();
  PackedWeightsCacheStats Stats() const;

 private:
  PackedWeightsCache();
  ~PackedWeightsCache();
  struct Impl;
  Impl* impl_;
};

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_GEMM_PACKED_WEIGHTS_H_
