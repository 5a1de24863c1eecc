#!/usr/bin/env bash
# Checks the aarch64 kernels on an x86-64 machine: cross-compiles the TF-free core (cc/core/*.cc,
# cc/core/cpu/**/*.cc with the aarch64 instruction-set files and their -march flags, no x86 ones)
# and tests/cc/core_test.cc statically for aarch64, then runs the test under qemu-user:
#
#   * qemu -cpu max (emulates dotprod and i8mm), once per path forced with
#     TF_FUSED_INT8_CPU_KERNEL: neon, dotprod, i8mm, auto (must pick i8mm), portable;
#     every path is compared bit for bit with the reference kernel (core_test's sweeps);
#   * qemu -cpu cortex-a72 (ARMv8.0: no dotprod, no i8mm): auto must fall back to neon (and
#     pass), forcing dotprod or i8mm, or an x86 path, must be refused with a clean error.
#
# Prints one line per run and exits non-zero if any run fails. qemu says nothing about speed.
#
#   tools/arm64_check.sh
#
# Environment: ARM64_CXX (default aarch64-linux-gnu-g++), ARM64_QEMU (default qemu-aarch64),
#              ARM64_CASES (random cases of core_test's reference sweep per run; default 300, as
#              in the native `bazel test` run; with 60 the whole check took 159 s on 2 cores,
#              2026-12-03, after core_test moved to a pool of reused threads: test_pool.h).
# Installs g++-aarch64-linux-gnu and qemu-user with apt-get when missing (root, or sudo).
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

log() { echo "arm64_check: $*" >&2; }
die() { echo "arm64_check: error: $*" >&2; exit 1; }

# apt packages, as configure.sh: only when something is missing.
# shellcheck source=tools/apt.sh
source tools/apt.sh

CXX="${ARM64_CXX:-aarch64-linux-gnu-g++}"
QEMU="${ARM64_QEMU:-qemu-aarch64}"
CASES="${ARM64_CASES:-300}"
[[ "${CASES}" =~ ^[1-9][0-9]*$ ]] || die "ARM64_CASES must be a positive count, got '${CASES}'"
command -v "${CXX}" >/dev/null 2>&1 || apt_install g++-aarch64-linux-gnu
command -v "${QEMU}" >/dev/null 2>&1 || apt_install qemu-user
command -v "${CXX}" >/dev/null 2>&1 || die "${CXX} not found"
command -v "${QEMU}" >/dev/null 2>&1 || die "${QEMU} not found"

work="$(mktemp -d "${TMPDIR:-/tmp}/arm64_check.XXXXXX")"
trap 'rm -rf "${work}"' EXIT

# ---------------------------------------------------------------------------------------------
# Build. The file selection and flags mirror BUILD (CORE_COPTS but -O2, ARM_ISA_COPTS).
FLAGS=(-std=c++17 -O2 -ffp-contract=off -Wall -I. -D_GLIBCXX_USE_CXX11_ABI=1)
declare -A ISA_FLAGS=(
  [neon]=""
  [dotprod]="-march=armv8.2-a+dotprod"
  [i8mm]="-march=armv8.2-a+dotprod+i8mm"
)
X86_ISAS=(avx2 avxvnni avx512vnni amx)

# "<source> <extra flags>" per translation unit.
units=()
while IFS= read -r src; do
  base="${src##*/}"
  base="${base%.cc}"
  isa="${base##*_}"
  skip=0
  for x in "${X86_ISAS[@]}"; do [[ "${isa}" == "${x}" ]] && skip=1; done
  [[ "${skip}" == 1 ]] && continue
  # (No trailing blank: xargs -L would join the next line.)
  if [[ -n "${ISA_FLAGS[${isa}]:-}" ]]; then
    units+=("${src} ${ISA_FLAGS[${isa}]}")
  else
    units+=("${src}")
  fi
done < <(find cc/core -path cc/core/gpu -prune -o -name '*.cc' -print | sort)
# The core test as BUILD's //:core_test: tests/cc/*_test.cc but the GPU ones; asserts on.
while IFS= read -r src; do
  units+=("${src} -UNDEBUG")
done < <(find tests/cc -maxdepth 1 -name '*_test.cc' ! -name 'gpu_*' | sort)

log "compiling ${#units[@]} files with $(${CXX} --version | head -n1) (2 at a time)"
build_start=${SECONDS}
export CXX work
export FLAGS_STR="${FLAGS[*]}"
# One line per unit: the source, then its extra flags (split into arguments by xargs -L 1).
# shellcheck disable=SC2016
printf '%s\n' "${units[@]}" | xargs -P 2 -L 1 bash -c '
  src="$1"
  shift
  obj="${work}/$(echo "${src}" | tr / _).o"
  # shellcheck disable=SC2086
  if ! ${CXX} ${FLAGS_STR} "$@" -c "${src}" -o "${obj}" 2> "${obj}.err"; then
    cat "${obj}.err" >&2
    echo "arm64_check: error: compiling ${src} failed" >&2
    exit 255
  fi
  cat "${obj}.err" >&2
' _ || die "build failed"
bin="${work}/core_test"
${CXX} -static -pthread -o "${bin}" "${work}"/*.o || die "link failed"
log "built ${bin##*/} in $((SECONDS - build_start)) s"

# ---------------------------------------------------------------------------------------------
# Runs. run <cpu> <TF_FUSED_INT8_CPU_KERNEL> <expectation> where the expectation is
# "pass:<path>" (the forced value resolves to <path> and every comparison is exact) or
# "refused" (a clean "not available" error, exit code 3, nothing else run).
failures=0
run() {
  local cpu="$1" kernel="$2" expect="$3"
  local out="${work}/run_${cpu}_${kernel}.log" rc=0 start=${SECONDS}
  TF_FUSED_INT8_CPU_KERNEL="${kernel}" TF_FUSED_INT8_CORE_TEST_CASES="${CASES}" \
    "${QEMU}" -cpu "${cpu}" "${bin}" > "${out}" 2>&1 || rc=$?
  local secs=$((SECONDS - start)) verdict detail
  case "${expect}" in
    pass:*)
      local want="${expect#pass:}" got runs
      got="$(sed -n 's/^forced CPU kernel: \([a-z0-9]*\) .*/\1/p' "${out}")"
      runs="$(awk '/runs checked/ { for (i = 1; i < NF; ++i) if ($(i + 1) == "runs") s += $i }
                   END { print s + 0 }' "${out}")"
      if [[ "${rc}" == 0 && "${got}" == "${want}" ]] && grep -q '^core_test: all passed$' "${out}"; then
        verdict="PASS"
        detail="ran ${got}, ${runs} runs bit-exact vs reference"
      else
        verdict="FAIL"
        detail="exit ${rc}, ran '${got}' (want ${want}), $(grep -c '^FAIL' "${out}" || true) mismatches"
      fi
      ;;
    refused)
      local msg
      msg="$(sed -n 's/^forced CPU kernel refused: //p' "${out}")"
      if [[ "${rc}" == 3 && "${msg}" == *"is not available on this CPU or in this build"* ]]; then
        verdict="PASS"
        detail="refused cleanly: ${msg}"
      else
        verdict="FAIL"
        detail="exit ${rc} (want 3 and a clean refusal)"
      fi
      ;;
  esac
  printf 'arm64_check: %-8s qemu -cpu %-10s %s  %s (%d s)\n' "${kernel}" "${cpu}" "${verdict}" \
    "${detail}" "${secs}"
  if [[ "${verdict}" != PASS ]]; then
    failures=$((failures + 1))
    tail -n 30 "${out}" | sed 's/^/    /' >&2
  fi
}

log "running core_test under ${QEMU} (${CASES} random cases per run)"
run max neon pass:neon
run max dotprod pass:dotprod
run max i8mm pass:i8mm
run max auto pass:i8mm
run max portable pass:portable
# An ARMv8.0 core: no SDOT, no SMMLA.
run cortex-a72 auto pass:neon
run cortex-a72 dotprod refused
run cortex-a72 i8mm refused
run cortex-a72 avx2 refused
run cortex-a72 amx refused

if [[ "${failures}" != 0 ]]; then
  echo "arm64_check: ${failures} run(s) FAILED" >&2
  exit 1
fi
echo "arm64_check: all runs passed (total $((SECONDS)) s)"
