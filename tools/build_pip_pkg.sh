#!/usr/bin/env bash
# Builds the tf-fused-int8 wheel (platform wheel, the op library inside the package).
#
#   bazel build //:build_pip_pkg && bazel-bin/build_pip_pkg <outdir>
#   (or: bazel run //:build_pip_pkg -- <outdir>)
#
# Stages tf_fused_int8/**/*.py (and the benchmark's cpuid_mask.c), _fused_int8_ops.so (into tf_fused_int8/) and setup.py from this
# target's runfiles into a temporary directory and runs `pip wheel` there with the project's venv
# python (PYTHON_BIN_PATH overrides it). No network, no rsync.
set -euo pipefail

if [[ $# -ne 1 || "$1" == -* ]]; then
  echo "usage: $0 <outdir>" >&2
  exit 2
fi

out="$1"
# Under `bazel run` the cwd is the runfiles tree; resolve relative paths against the user's cwd.
if [[ "${out}" != /* && -n "${BUILD_WORKING_DIRECTORY:-}" ]]; then
  out="${BUILD_WORKING_DIRECTORY}/${out}"
fi
mkdir -p "${out}"
out="$(cd "${out}" && pwd -P)"

# Runfiles of this sh_binary: <runfiles>/tf_fused_int8/{setup.py,_fused_int8_ops.so,tf_fused_int8/...}
if [[ -n "${RUNFILES_DIR:-}" && -d "${RUNFILES_DIR}" ]]; then
  runfiles="${RUNFILES_DIR}"
elif [[ -d "$0.runfiles" ]]; then
  runfiles="$0.runfiles"
else
  echo "$0: cannot find the runfiles; run it as bazel-bin/build_pip_pkg after bazel build //:build_pip_pkg" >&2
  exit 1
fi
src="${runfiles}/tf_fused_int8"
for f in setup.py _fused_int8_ops.so; do
  [[ -e "${src}/${f}" ]] || { echo "$0: ${src}/${f} is missing" >&2; exit 1; }
done

# The venv python: setup.py in the runfiles is a symlink into the source tree.
python="${PYTHON_BIN_PATH:-}"
if [[ -z "${python}" ]]; then
  workspace="$(dirname "$(readlink -f "${src}/setup.py")")"
  for candidate in "${workspace}/.venv/bin/python" "${BUILD_WORKSPACE_DIRECTORY:-/nonexistent}/.venv/bin/python"; do
    if [[ -x "${candidate}" ]]; then python="${candidate}"; break; fi
  done
fi
if [[ -z "${python}" ]]; then
  echo "$0: no .venv/bin/python found (run ./configure.sh), set PYTHON_BIN_PATH" >&2
  exit 1
fi

stage="$(mktemp -d "${TMPDIR:-/tmp}/tf_fused_int8_wheel.XXXXXX")"
trap 'chmod -R u+w "${stage}" 2>/dev/null; rm -rf "${stage}"' EXIT

# -L: runfiles are symlinks; the wheel needs the files.
cp -L "${src}/setup.py" "${stage}/"
for f in README.md LICENSE; do
  if [[ -e "${src}/${f}" ]]; then cp -L "${src}/${f}" "${stage}/"; fi
done
if [[ -d "${src}/tf_fused_int8" ]]; then
  (cd "${src}" && find -L tf_fused_int8 \( -name '*.py' -o -name '*.c' \) -type f) | while IFS= read -r f; do
    mkdir -p "${stage}/$(dirname "${f}")"
    cp -L "${src}/${f}" "${stage}/${f}"
  done
fi
mkdir -p "${stage}/tf_fused_int8"
cp -L "${src}/_fused_int8_ops.so" "${stage}/tf_fused_int8/_fused_int8_ops.so"
chmod -R u+w "${stage}"

echo "build_pip_pkg: building the wheel with ${python}" >&2
(cd "${stage}" && "${python}" -m pip wheel --no-deps --no-build-isolation --no-index \
    --disable-pip-version-check -q --wheel-dir "${out}" .)

wheel="$(ls -1t "${out}"/tf_fused_int8-*.whl | head -n 1)"
echo "build_pip_pkg: wrote ${wheel}"
