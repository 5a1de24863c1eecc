// Copyright tf-fused-int8 authors. Apache 2.0.
//
// PinBuffer's registry and the pins (weight_pin.h).
#include "cc/tf/weight_pin.h"

#include <mutex>
#include <unordered_map>
#include <utility>

#include "tensorflow/core/common_runtime/dma_helper.h"

namespace tf_fused_int8 {
namespace {

using ::tensorflow::Tensor;

class BufferPin : public WeightPin {
 public:
  explicit BufferPin(const Tensor& t) : tensor_(t) {}
  // Not Tensor::RefCountIsOne: that is also false for a buffer that does
  // not own its memory (one wrapping a caller's array), which would keep
  // such a pin Held() for ever.
  bool Held() const override {
    // root_buffer() is not const (it changes nothing).
    tensorflow::TensorBuffer* b = tensorflow::DMAHelper::buffer(const_cast<Tensor*>(&tensor_));
    return b != nullptr && !(b->RefCountIsOne() && b->root_buffer()->RefCountIsOne());
  }
  const Tensor& tensor() const { return tensor_; }

 private:
  const Tensor tensor_;
};

class BothPin : public WeightPin {
 public:
  BothPin(std::shared_ptr<const WeightPin> a, std::shared_ptr<const WeightPin> b)
      : a_(std::move(a)), b_(std::move(b)) {}
  bool Held() const override { return a_->Held() && b_->Held(); }

 private:
  const std::shared_ptr<const WeightPin> a_, b_;
};

// Buffers by data address. While a pin lives its buffer stays allocated, so
// no other buffer can have that address; an expired entry is replaced.
struct Registry {
  std::mutex mu;
  std::unordered_map<const void*, std::weak_ptr<const BufferPin>> pins;
};

Registry& Pins() {
  static Registry* r = new Registry;  // never destroyed (TF threads at exit)
  return *r;
}

}  // namespace

std::shared_ptr<const WeightPin> PinBuffer(const Tensor& t) {
  const void* address = t.tensor_data().data();
  Registry& r = Pins();
  std::lock_guard<std::mutex> lock(r.mu);
  auto& slot = r.pins[address];
  if (std::shared_ptr<const BufferPin> pin = slot.lock()) {
    if (pin->tensor().SharesBufferWith(t)) return pin;
  }
  // A new buffer (or one whose pins had all been dropped): forget the
  // registry's other expired entries too, then pin it.
  for (auto it = r.pins.begin(); it != r.pins.end();) {
    it = (it->first != address && it->second.expired()) ? r.pins.erase(it) : std::next(it);
  }
  auto pin = std::make_shared<const BufferPin>(t);
  slot = pin;
  return pin;
}

std::shared_ptr<const WeightPin> PinBoth(std::shared_ptr<const WeightPin> a,
                                         std::shared_ptr<const WeightPin> b) {
  return std::make_shared<const BothPin>(std::move(a), std::move(b));
}

int64_t PinnedBufferCountForTesting() {
  Registry& r = Pins();
  std::lock_guard<std::mutex> lock(r.mu);
  return static_cast<int64_t>(r.pins.size());
}

}  // namespace tf_fused_int8
