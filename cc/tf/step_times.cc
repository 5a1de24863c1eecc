// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/tf/step_times.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tf_fused_int8 {
namespace {

struct Entry {
  std::string node, description;
  int64_t step = 0, calls = 0, total_ns = 0;
};

struct Table {
  std::mutex mu;
  std::map<std::pair<std::string, int64_t>, size_t> index;
  std::vector<Entry> entries;
};

Table& Global() {
  static Table* t = new Table;
  return *t;
}

}  // namespace

bool StepTimesRequested() {
  const char* env = std::getenv("TF_FUSED_INT8_STEP_TIMES");
  return env != nullptr && env[0] == '1';
}

void RecordStepTime(const std::string& node, int64_t step, int64_t nanoseconds,
                    const std::function<std::string()>& describe) {
  Table& t = Global();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.index.find({node, step});
  if (it == t.index.end()) {
    it = t.index.emplace(std::make_pair(node, step), t.entries.size()).first;
    Entry e;
    e.node = node;
    e.step = step;
    e.description = describe();
    t.entries.push_back(std::move(e));
  }
  Entry& e = t.entries[it->second];
  ++e.calls;
  e.total_ns += nanoseconds;
}

std::string StepTimesText() {
  Table& t = Global();
  std::lock_guard<std::mutex> lock(t.mu);
  std::string s;
  for (const Entry& e : t.entries) {
    s += e.node + "\t" + std::to_string(e.step) + "\t" + std::to_string(e.calls) +
         "\t" + std::to_string(e.total_ns) + "\t" + e.description + "\n";
  }
  return s;
}

void ClearStepTimes() {
  Table& t = Global();
  std::lock_guard<std::mutex> lock(t.mu);
  t.index.clear();
  t.entries.clear();
}

}  // namespace tf_fused_int8
