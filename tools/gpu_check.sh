#!/usr/bin/env bash
# GPU check of the fused int8 convolution, on an NVIDIA machine WITHOUT TensorFlow:
# builds the TF-free GPU backend (cc/core/gpu) + the reference kernel into
# libtfi_gpu_harness.so with plain g++, then runs
#   1. the host-side unit test (tests/cc/gpu_host_test.cc, same as CI),
#   2. tools/gpu_harness/harness.py: >= 50 shapes on the GPU (grouped and depthwise ones on our
#      direct kernel included), every output compared bit for bit with the CPU reference,
#      autotuning choice and time per shape next to PyTorch fp16 (channels_last), plus
#      forced-path reruns (legacy cuDNN API, INT8x32, autotuning off).
#
#   tools/gpu_check.sh                 # everything (a few minutes on an H200)
#   tools/gpu_check.sh --skip-perf     # only the correctness sweep (extra args go to harness.py)
#
# Needs: g++ (C++17), numpy + PyTorch with CUDA (for cuDNN 9 and for the fp16 baseline), the
# NVIDIA driver, cuDNN 9 headers (pip nvidia-cudnn-cu1x ships them; or CUDNN_INCLUDE=...), CUDA
# headers (CUDA_HOME/include or pip nvidia-cuda-runtime-cu1x; or CUDA_INCLUDE=...).
# Environment: PYTHON (default python3), OUT (results directory, default build/gpu_check; the
# results JSON and the log go there), CXX (default g++).
# Exit status 0 only when every output matched and nothing failed.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
ROOT="$(pwd -P)"
PYTHON="${PYTHON:-python3}"
CXX="${CXX:-g++}"
OUT="${OUT:-${ROOT}/build/gpu_check}"
BUILD="${ROOT}/build/gpu_check"
mkdir -p "${OUT}" "${BUILD}"
LOG="${OUT}/gpu_check.log"
exec > >(tee "${LOG}") 2>&1

log() { echo "gpu_check: $*"; }
die() { echo "gpu_check: error: $*" >&2; exit 1; }

command -v "${CXX}" >/dev/null || die "${CXX} not found"
command -v "${PYTHON}" >/dev/null || die "${PYTHON} not found"
command -v nvidia-smi >/dev/null && nvidia-smi -L || log "nvidia-smi not found (continuing)"

# --- headers ---------------------------------------------------------------------------------
py_pkg_include() {  # prints <site-packages>/nvidia/<name>/include if it has file $2
  "${PYTHON}" - "$1" "$2" <<'PY' 2>/dev/null || true
import importlib, os, sys
name, header = sys.argv[1], sys.argv[2]
for mod in (f"nvidia.{name}", "nvidia"):
    try:
        m = importlib.import_module(mod)
    except Exception:
        continue
    for base in list(getattr(m, "__path__", [])):
        for cand in (os.path.join(base, "include"), os.path.join(base, name, "include"),
                     os.path.join(base, "cu13", "include"), os.path.join(base, "cu12", "include")):
            if os.path.isfile(os.path.join(cand, header)):
                print(cand); sys.exit(0)
PY
}
find_include() {  # $1 header, then candidate dirs
  local header="$1"; shift
  for d in "$@"; do
    [[ -n "${d}" && -f "${d}/${header}" ]] && { echo "${d}"; return 0; }
  done
  return 1
}
CUDA_HOME="${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")}"
CUDA_INCLUDE="${CUDA_INCLUDE:-$(find_include cuda.h "${CUDA_HOME}/include" /usr/local/cuda/include \
    /usr/include "$(py_pkg_include cuda_runtime cuda.h)" || true)}"
[[ -n "${CUDA_INCLUDE}" ]] || die "cuda.h not found; set CUDA_INCLUDE"
CUDNN_INCLUDE="${CUDNN_INCLUDE:-$(find_include cudnn.h "$(py_pkg_include cudnn cudnn.h)" \
    /usr/include /usr/include/x86_64-linux-gnu "${CUDA_HOME}/include" /usr/local/cuda/include || true)}"
[[ -n "${CUDNN_INCLUDE}" ]] || die "cudnn.h not found (pip install nvidia-cudnn-cu12/cu13 ships it); set CUDNN_INCLUDE"
# cudnn.h includes cuda_runtime_api.h; find it too if it is elsewhere.
RT_INCLUDE="$(find_include cuda_runtime_api.h "${CUDA_INCLUDE}" "$(py_pkg_include cuda_runtime cuda_runtime_api.h)" || true)"
[[ -n "${RT_INCLUDE}" ]] || die "cuda_runtime_api.h not found; set CUDA_INCLUDE"
log "CUDA headers ${CUDA_INCLUDE} (runtime ${RT_INCLUDE}); cuDNN headers ${CUDNN_INCLUDE}"
grep -hE '^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL)' "${CUDNN_INCLUDE}"/cudnn_version*.h | head -3 || true

# --- build -----------------------------------------------------------------------------------
if command -v nvcc >/dev/null && [[ -x tools/gpu_harness/gen_ptx.sh ]]; then
  tools/gpu_harness/gen_ptx.sh --check || die "embedded PTX is stale: run tools/gpu_harness/gen_ptx.sh"
fi
CXXFLAGS=(-std=c++17 -O2 -fPIC -ffp-contract=off -fvisibility=hidden -I"${ROOT}"
          -isystem "${CUDA_INCLUDE}" -isystem "${RT_INCLUDE}" -isystem "${CUDNN_INCLUDE}")
SRCS=(cc/core/conv_params.cc cc/core/reference.cc cc/core/layout.cc cc/core/gpu/*.cc tools/gpu_harness/harness_api.cc)
log "compiling ${#SRCS[@]} files"
pids=()
for src in "${SRCS[@]}"; do
  obj="${BUILD}/$(echo "${src}" | tr / _).o"
  "${CXX}" "${CXXFLAGS[@]}" -c "${src}" -o "${obj}" & pids+=($!)
done
for p in "${pids[@]}"; do wait "${p}" || die "compilation failed"; done
OBJS=()
for src in "${SRCS[@]}"; do OBJS+=("${BUILD}/$(echo "${src}" | tr / _).o"); done
"${CXX}" -shared -o "${BUILD}/libtfi_gpu_harness.so" "${OBJS[@]}" -Wl,--no-undefined -ldl -lpthread
log "built ${BUILD}/libtfi_gpu_harness.so"

# --- 1. host-side unit test ------------------------------------------------------------------
"${CXX}" "${CXXFLAGS[@]}" -UNDEBUG tests/cc/gpu_host_test.cc \
    $(for o in "${OBJS[@]}"; do [[ "${o}" == *harness_api* ]] || echo "${o}"; done) \
    -o "${BUILD}/gpu_host_test" -ldl -lpthread
"${BUILD}/gpu_host_test"

# --- 2. the GPU harness ----------------------------------------------------------------------
"${PYTHON}" -c 'import numpy, torch; assert torch.cuda.is_available(), "no CUDA device"' \
  || die "numpy and a CUDA-enabled PyTorch are needed"
"${PYTHON}" tools/gpu_harness/harness.py --lib "${BUILD}/libtfi_gpu_harness.so" \
    --json "${OUT}/results.json" "$@"
log "results in ${OUT}/results.json, log in ${LOG}"
