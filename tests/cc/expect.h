// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The one assertion macro of the plain-main() C++ tests (the build is offline,
// so no test framework): EXPECT(cond, printf-args) counts and reports a
// failure and carries on; main() returns non-zero when ExpectFailures() > 0.
#ifndef TF_FUSED_INT8_TESTS_CC_EXPECT_H_
#define TF_FUSED_INT8_TESTS_CC_EXPECT_H_

#include <cstdio>

namespace tf_fused_int8 {
namespace testing {

inline int& ExpectFailures() {
  static int failures = 0;
  return failures;
}

}  // namespace testing
}  // namespace tf_fused_int8

#define EXPECT(cond, ...)                                                  \
  do {                                                                     \
    if (!(cond)) {                                                         \
      ++::tf_fused_int8::testing::ExpectFailures();                        \
      std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                   \
      std::fprintf(stderr, "\n");                                          \
    }                                                                      \
  } while (0)

#endif  // TF_FUSED_INT8_TESTS_CC_EXPECT_H_
