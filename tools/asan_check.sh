#!/usr/bin/env bash
# Builds the op library and the TF-free core tests with AddressSanitizer + UBSan
# (bazel --config=asan, written into .bazelrc by configure.sh) and runs the core
# test and the whole pytest suite against that library. Any sanitizer report
# aborts the process and fails the run (-fno-sanitize-recover=all).
#
#   tools/asan_check.sh                 # everything
#   tools/asan_check.sh -k fuzz         # extra pytest arguments
#
# Notes:
# - Python and TensorFlow are not instrumented; the sanitizer runtimes are
#   LD_PRELOADed so that our instrumented .so can be dlopen'ed into them.
#   Child processes the tests start inherit LD_PRELOAD and
#   TF_FUSED_INT8_LIBRARY, so the fuzz batches run under ASan too.
# - Leak checking is off (CPython and TF keep allocations alive at exit) and so
#   are ODR / alloc-dealloc checks, which flag TensorFlow's own libraries.
# - The resident-memory test is deselected: under ASan resident memory measures
#   the sanitizer's quarantine of freed blocks, not this library.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

./configure.sh
bazel build --config=asan //:_fused_int8_ops.so //:core_test //:core_test_emulated //:gpu_host_test \
  //:libtfi_gpu_harness.so
out="$(bazel info --config=asan bazel-bin)"
# bazel-bin now points at the ASan outputs (tests/test_gpu_build.py loads the
# harness library from there); restore it to the normal build afterwards.
trap 'bazel build //:all >/dev/null 2>&1 || true' EXIT

export ASAN_OPTIONS="detect_leaks=0:detect_odr_violation=0:alloc_dealloc_mismatch=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
echo "asan_check: core tests (the emulated avxvnni and amx paths too) and GPU host test"
"${out}/core_test"
"${out}/core_test_emulated"
"${out}/gpu_host_test"

libasan="$(g++ -print-file-name=libasan.so)"
libubsan="$(g++ -print-file-name=libubsan.so)"
echo "asan_check: pytest with ${out}/_fused_int8_ops.so"
LD_PRELOAD="${libasan} ${libubsan}" TF_FUSED_INT8_LIBRARY="${out}/_fused_int8_ops.so" \
  .venv/bin/python -m pytest -q tests -k "not ten_thousand_calls" -p no:cacheprovider "$@"
