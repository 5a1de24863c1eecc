#!/usr/bin/env bash
# Creates .venv-peers: the benchmark's peers (ONNX Runtime, PyTorch CPU, OpenVINO + NNCF,
# matplotlib) from requirements-bench.txt, for
#
#   .venv/bin/python -m tf_fused_int8.benchmark --peers=all [--suite=models]
#
# Idempotent and offline-safe once installed: while the stamp .venv-peers/.requirements.sha256
# matches requirements-bench.txt (and the interpreter), it checks the imports and touches nothing
# else. Neither the demo nor the tests need this venv. LiteRT needs nothing here: it is TF's own
# tf.lite, run from the project's .venv.
#
# Environment: PYTHON=/path/to/python3 picks the interpreter (default python3);
#              FORCE=1 reinstalls.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
VENV="$(pwd -P)/.venv-peers"
REQS="requirements-bench.txt"
STAMP="${VENV}/.requirements.sha256"
PYTHON="${PYTHON:-python3}"
log() { echo "setup_bench_peers: $*" >&2; }

if [[ -x "${VENV}/bin/python" ]] && ! "${VENV}/bin/python" -c 'import sys' >/dev/null 2>&1; then
  log "${VENV} is broken; recreating it"
  rm -rf "${VENV}"
fi
if [[ ! -x "${VENV}/bin/python" ]]; then
  if ! "${PYTHON}" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    log "${PYTHON} has no venv module; on Debian: apt-get install python3-venv"
    exit 1
  fi
  log "creating ${VENV} with $("${PYTHON}" --version 2>&1)"
  "${PYTHON}" -m venv "${VENV}"
fi
want="$(cat "${REQS}" <("${VENV}/bin/python" -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)"
if [[ "${FORCE:-0}" != 0 || ! -f "${STAMP}" || "$(cat "${STAMP}")" != "${want}" ]]; then
  log "pip install -r ${REQS} (into ${VENV}; about 1.5 GB)"
  rm -f "${STAMP}"
  "${VENV}/bin/python" -m pip install --disable-pip-version-check -q -r "${REQS}" >&2
  echo "${want}" > "${STAMP}"
else
  log "requirements already installed (stamp matches ${REQS})"
fi
"${VENV}/bin/python" - <<'PY'
import importlib
for name in ("numpy", "onnx", "onnxruntime", "torch", "openvino", "nncf", "matplotlib"):
  m = importlib.import_module(name)
  print(f"setup_bench_peers: {name} {getattr(m, '__version__', '?')}")
PY
