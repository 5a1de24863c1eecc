// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The benchmarks' weight pin (cc/core/conv_params.h WeightPin): they own
// their weights for the whole run, so the pin is always Held(), as a live
// model's variables are to the TF ops.
#ifndef TF_FUSED_INT8_TOOLS_BENCH_HELD_PIN_H_
#define TF_FUSED_INT8_TOOLS_BENCH_HELD_PIN_H_

#include <memory>

#include "cc/core/conv_params.h"

namespace tf_fused_int8 {
namespace bench {

class HeldPin : public WeightPin {
 public:
  bool Held() const override { return true; }
};

inline std::shared_ptr<const WeightPin> MakeHeldPin() {
  return std::make_shared<const HeldPin>();
}

}  // namespace bench
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_TOOLS_BENCH_HELD_PIN_H_
