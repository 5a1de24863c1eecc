// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Per-step wall times of the convolution sequence op, for finding where a
// whole model's time goes (python -m tf_fused_int8.benchmark.step_times).
// Off unless TF_FUSED_INT8_STEP_TIMES=1 when a kernel is constructed; then
// each step of each sequence node adds its time here, process-wide, and
// tf_fused_int8_step_times() (c_api.cc) reads the table as text.
#ifndef TF_FUSED_INT8_CC_TF_STEP_TIMES_H_
#define TF_FUSED_INT8_CC_TF_STEP_TIMES_H_

#include <cstdint>
#include <functional>
#include <string>

namespace tf_fused_int8 {

// TF_FUSED_INT8_STEP_TIMES=1 in the environment (read on each call).
bool StepTimesRequested();

// Adds `nanoseconds` to (node, step); `describe` names the step (called
// once, when the entry is new).
void RecordStepTime(const std::string& node, int64_t step, int64_t nanoseconds,
                    const std::function<std::string()>& describe);

// One line per (node, step), in the order first recorded:
// "node\tstep\tcalls\ttotal_ns\tdescription\n".
std::string StepTimesText();

void ClearStepTimes();

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_TF_STEP_TIMES_H_
