// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/cpu/gemm/packed_weights.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>

#include "cc/core/cpu/bounded_lru.h"
#include "cc/core/cpu/winograd/winograd.h"

namespace tf_fused_int8 {
namespace cpu {

int64_t ZmmNarrowZmms(int64_t block_channels) {
  return block_channels <= 48 ? (block_channels + 15) / 16 : 0;
}

int64_t PackedGroups(const IsaKernels& isa, int64_t k) {
  const int64_t groups = (k + isa.k_per_group - 1) / isa.k_per_group;
  return (groups + isa.group_multiple - 1) / isa.group_multiple * isa.group_multiple;
}

int64_t BlockLaneChannel(PackFormatId format, int64_t block_channels,
                         int64_t p) {
  if (format == kFormatZmmU8 && ZmmNarrowZmms(block_channels) == 0) {
    // p = 16 * j + 4 * L + i  ->  channel 16 * L + 4 * j + i.
    const int64_t j = p / 16, lane = (p / 4) % 4, i = p % 4;
    return 16 * lane + 4 * j + i;
  }
  return p;
}

std::shared_ptr<const PackedWeights> PackedWeights::Pack(
    const int8_t* filter, const ConvGeometry& g, const IsaKernels& isa) {
  const int64_t k = g.filter_h * g.filter_w * g.in_c;
  const int64_t co = g.out_c;
  // Winograd: 16 transformed [Ci, Co] matrices per block, not one [K, Co]
  // (the panel function gets the filter's K and derives Ci from it).
  const int64_t groups = isa.format == kFormatWinogradI16
                             ? WinogradPackedGroups(g.in_c)
                             : PackedGroups(isa, k);
  const int64_t blocks = (co + isa.block - 1) / isa.block;
  const size_t data_bytes =
      static_cast<size_t>(blocks * groups * isa.block * isa.lane_bytes);
  const size_t data_rounded = (data_bytes + 63) / 64 * 64;
  const size_t offset_bytes = static_cast<size_t>(blocks * isa.block * 4);
  // Winograd's U' is not the filter's bytes, so a call cannot verify it by
  // repacking a panel cheaply: the entry keeps the filter bytes it was
  // computed from (packed from that copy, never from the caller's buffer
  // twice), and calls compare the filter with them. Small GEMM filters keep
  // the copy as well: one memcmp checks them (packed_weights.h).
  const bool keep_copy = isa.format == kFormatWinogradI16 ||
                         k * co <= kCopyCheckMaxBytes;
  const size_t copy_bytes = keep_copy ? static_cast<size_t>(k * co) : 0;
  const size_t total = data_rounded + offset_bytes + copy_bytes;

  std::shared_ptr<PackedWeights> w(new PackedWeights());
  w->memory_ = std::aligned_alloc(64, (total + 63) / 64 * 64);
  if (w->memory_ == nullptr) throw std::bad_alloc();
  w->bytes_ = total;
  int8_t* data = static_cast<int8_t*>(w->memory_);
  int32_t* col_offset = reinterpret_cast<int32_t*>(data + data_rounded);
  int8_t* copy = nullptr;
  if (keep_copy) {
    copy = data + data_rounded + offset_bytes;
    std::memcpy(copy, filter, copy_bytes);
    filter = copy;
  }

  for (int64_t b = 0; b < blocks; ++b) {
    PanelArgs p;
    p.filter = filter;
    p.k = k;
    p.out_c = co;
    p.block_index = b;
    p.g0 = 0;
    p.g1 = groups;
    p.panel = data + b * groups * isa.block * isa.lane_bytes;
    p.verify = false;
    isa.panel(p);
  }

  // Starting accumulator: -128 * sum_k w[k][c] undoes the +128 shift of
  // uint8 activations exactly (int32 arithmetic wraps identically).
  std::memset(col_offset, 0, offset_bytes);
  if (isa.u8_activations) {
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t p = 0; p < isa.block; ++p) {
        const int64_t c =
            b * isa.block +
            BlockLaneChannel(isa.format, std::min(isa.block, co - b * isa.block), p);
        if (c >= co) continue;
        int64_t sum = 0;
        for (int64_t kk = 0; kk < k; ++kk) sum += filter[kk * co + c];
        col_offset[b * isa.block + p] = static_cast<int32_t>(-128 * sum);
      }
    }
  }

  w->view_.data = data;
  w->view_.col_offset = col_offset;
  w->view_.k_groups = groups;
  w->view_.out_c = co;
  w->view_.block = isa.block;
  w->view_.filter_copy = copy;
  w->view_.any_int8_min = std::memchr(filter, 0x80, static_cast<size_t>(k * co)) != nullptr;
  return w;
}

PackedWeights::~PackedWeights() { std::free(memory_); }

namespace {

struct Key {
  const int8_t* filter;
  int64_t kh, kw, ci, co;
  int format;
  bool operator==(const Key& o) const {
    return filter == o.filter && kh == o.kh && kw == o.kw && ci == o.ci &&
           co == o.co && format == o.format;
  }
  struct Hash {
    size_t operator()(const Key& k) const {
      size_t h = HashMix(0, reinterpret_cast<uintptr_t>(k.filter));
      h = HashMix(h, static_cast<uint64_t>(k.kh) << 32 | static_cast<uint64_t>(k.kw));
      h = HashMix(h, static_cast<uint64_t>(k.ci) << 32 ^ static_cast<uint64_t>(k.co));
      return HashMix(h, static_cast<uint64_t>(k.format));
    }
  };
};

Key MakeKey(const int8_t* filter, const ConvGeometry& g,
            const IsaKernels& isa) {
  return Key{filter, g.filter_h, g.filter_w, g.in_c, g.out_c, isa.format};
}

}  // namespace

struct PackedWeightsCache::Impl {
  struct Entry {
    std::shared_ptr<const PackedWeights> weights;
    std::shared_ptr<const WeightPin> pin;  // see the header comment
  };
  mutable std::mutex mu;
  BoundedLru<Key, Entry, Key::Hash> lru{kMaxEntries, kMaxBytes};
  PackedWeightsCacheStats stats;

  // Requires mu.
  // Every insertion first drops the pinned entries whose owner is gone
  // (header comment).
  void Insert(const Key& key, std::shared_ptr<const PackedWeights> w,
              std::shared_ptr<const WeightPin> pin, int64_t pin_bytes) {
    stats.released += lru.DropPinnedIf([](const Entry& e) { return !e.pin->Held(); });
    // A pinned filter without a copy in the entry is memory the entry keeps.
    const int64_t size = static_cast<int64_t>(w->bytes()) +
                         (pin != nullptr && w->view().filter_copy == nullptr
                              ? pin_bytes
                              : 0);
    if (pin != nullptr) {
      lru.InsertPinned(key, Entry{std::move(w), std::move(pin)}, size);
    } else {
      stats.evictions += lru.Insert(key, Entry{std::move(w), nullptr}, size);
    }
  }
};

PackedWeightsCache::PackedWeightsCache() : impl_(new Impl) {}
PackedWeightsCache::~PackedWeightsCache() { delete impl_; }

PackedWeightsCache& PackedWeightsCache::Global() {
  // Never destroyed: TF threads may still run convolutions at exit.
  static PackedWeightsCache* cache = new PackedWeightsCache();
  return *cache;
}

std::shared_ptr<const PackedWeights> PackedWeightsCache::Get(
    const int8_t* filter, const int8_t* key_address, const ConvGeometry& g,
    const IsaKernels& isa, const std::shared_ptr<const WeightPin>& pin, bool* fresh) {
  const Key key = MakeKey(key_address, g, isa);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    const Impl::Entry* it = impl_->lru.Find(key);
    // A pinned call does not trust an entry packed without a pin: repack.
    if (it != nullptr && (pin == nullptr || it->pin != nullptr)) {
      ++impl_->stats.hits;
      // Both pinned: the entry's pin has kept these bytes unchanged and at
      // this address since they were packed.
      *fresh = pin != nullptr;
      if (*fresh) ++impl_->stats.pinned_hits;
      return it->weights;
    }
    ++impl_->stats.misses;
  }
  std::shared_ptr<const PackedWeights> w = PackedWeights::Pack(filter, g, isa);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->Insert(key, w, pin, g.FilterElements());
  }
  *fresh = true;
  return w;
}

std::shared_ptr<const PackedWeights> PackedWeightsCache::Replace(
    const int8_t* filter, const int8_t* key_address, const ConvGeometry& g,
    const IsaKernels& isa, const std::shared_ptr<const WeightPin>& pin) {
  std::shared_ptr<const PackedWeights> w = PackedWeights::Pack(filter, g, isa);
  std::lock_guard<std::mutex> lock(impl_->mu);
  ++impl_->stats.stale;
  impl_->Insert(MakeKey(key_address, g, isa), w, pin, g.FilterElements());
  return w;
}

void PackedWeightsCache::Clear() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->lru.Clear();
}

PackedWeightsCacheStats PackedWeightsCache::Stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  PackedWeightsCacheStats s = impl_->stats;
  s.entries = impl_->lru.size();
  s.bytes = impl_->lru.bytes();
  s.pinned_entries = impl_->lru.pinned_size();
  return s;
}

}  // namespace cpu
}  // namespace tf_fused_int8
