// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The bound and eviction order shared by the weight caches
// (gemm/packed_weights.cc, depthwise/depthwise.cc): entries kept most
// recently used first, at most max_entries of them and max_bytes of their
// declared sizes, least recently used evicted first. Not thread-safe: each
// cache holds its own mutex around every call (with its statistics). A
// linear search: the caches hold a few hundred entries at most, and a
// lookup costs far less than the convolution that follows.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_BOUNDED_LRU_H_
#define TF_FUSED_INT8_CC_CORE_CPU_BOUNDED_LRU_H_

#include <cstdint>
#include <iterator>
#include <list>
#include <utility>

namespace tf_fused_int8 {
namespace cpu {

// Key: equality comparable; Value: copyable or movable.
template <class Key, class Value>
class BoundedLru {
 public:
  BoundedLru(int64_t max_entries, int64_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // The value of key, made the most recently used; nullptr if absent.
  Value* Find(const Key& key) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->key == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return &entries_.front().value;
      }
    }
    return nullptr;
  }

  // Puts value under key (replacing the key's entry, if any) as the most
  // recently used, first evicting the least recently used entries until
  // both bounds hold with it; a value larger than max_bytes alone is not
  // kept (the old entry is still dropped). Returns the number evicted.
  int64_t Insert(const Key& key, Value value, int64_t bytes) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->key == key) {
        Erase(it);
        break;
      }
    }
    if (bytes > max_bytes_) return 0;
    int64_t evicted = 0;
    while (!entries_.empty() &&
           (static_cast<int64_t>(entries_.size()) >= max_entries_ ||
            bytes_ + bytes > max_bytes_)) {
      Erase(std::prev(entries_.end()));
      ++evicted;
    }
    entries_.push_front(Entry{key, std::move(value), bytes});
    bytes_ += bytes;
    return evicted;
  }

  void Clear() {
    entries_.clear();
    bytes_ = 0;
  }
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  int64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    Key key;
    Value value;
    int64_t bytes;
  };
  void Erase(typename std::list<Entry>::iterator it) {
    bytes_ -= it->bytes;
    entries_.erase(it);
  }

  const int64_t max_entries_, max_bytes_;
  std::list<Entry> entries_;  // most recently used first
  int64_t bytes_ = 0;
};

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_BOUNDED_LRU_H_
