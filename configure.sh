#!/usr/bin/env bash
# Sets up everything a build needs, on a fresh Debian 12 machine or an old checkout. Safe to re-run;
# a re-run with nothing to do takes about a second.
#
#   1. bazel (Debian's bazel-bootstrap 4.2.3), via apt-get if missing
#   2. .venv (python3 -m venv) with requirements.txt installed; skipped while the stamp
#      .venv/.requirements.sha256 matches requirements.txt
#   3. .bazelrc, generated from the venv's tf.sysconfig compile/link flags
#
# Environment: PYTHON=/path/to/python3 picks the interpreter that creates the venv (default python3).
#              CONFIGURE_FORCE=1 reinstalls the requirements and rewrites .bazelrc.
set -euo pipefail

cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
ROOT="$(pwd -P)"
VENV="${ROOT}/.venv"
VENV_PY="${VENV}/bin/python"
REQS="${ROOT}/requirements.txt"
STAMP="${VENV}/.requirements.sha256"
BAZELRC="${ROOT}/.bazelrc"
FORCE="${CONFIGURE_FORCE:-0}"

log() { echo "configure: $*" >&2; }
die() { echo "configure: error: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# apt packages (only when something is missing; runs as root, or through sudo when available)
APT_UPDATED=0
apt_install() {
  local sudo=""
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to apt-get install $*"
    sudo="sudo"
  fi
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install $* by hand"
  if [[ "${APT_UPDATED}" == 0 ]]; then
    log "apt-get update"
    ${sudo} env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    APT_UPDATED=1
  fi
  log "apt-get install $*"
  ${sudo} env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2
}

# 1. bazel. Note: `bazel version` fails on Debian's unstamped build; use `bazel --version`.
#    The C++ toolchain (g++) comes in as a dependency of bazel-bootstrap.
if ! command -v bazel >/dev/null 2>&1; then
  apt_install bazel-bootstrap
fi
command -v g++ >/dev/null 2>&1 || apt_install g++
[[ -e "${ROOT}/.bazelversion" ]] && die ".bazelversion makes Debian's bazel wrapper look for a bazel-<version> binary that does not exist; delete it"

# 2. Python venv.
PYTHON="${PYTHON:-python3}"
if ! command -v "${PYTHON}" >/dev/null 2>&1; then
  apt_install python3 python3-venv
fi
if [[ -x "${VENV_PY}" ]] && ! "${VENV_PY}" -c 'import sys' >/dev/null 2>&1; then
  log "${VENV} is broken (its interpreter does not start); recreating it"
  rm -rf "${VENV}"
fi
if [[ ! -x "${VENV_PY}" ]]; then
  # Debian's python3 only has ensurepip (which venv needs for pip) with python3-venv installed.
  if ! "${PYTHON}" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    apt_install python3-venv
  fi
  log "creating ${VENV} with $("${PYTHON}" --version 2>&1)"
  rm -rf "${VENV}"
  "${PYTHON}" -m venv "${VENV}"
fi

want_stamp="$(cat "${REQS}" <("${VENV_PY}" -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)"
if [[ "${FORCE}" != 0 || ! -f "${STAMP}" || "$(cat "${STAMP}")" != "${want_stamp}" ]]; then
  log "pip install -r requirements.txt (into ${VENV})"
  rm -f "${STAMP}"
  "${VENV_PY}" -m pip install --disable-pip-version-check -q -r "${REQS}" >&2
  echo "${want_stamp}" > "${STAMP}"
else
  log "requirements already installed (stamp matches requirements.txt)"
fi

# 3. .bazelrc. Regenerated only when its inputs change (the TF import takes a few seconds).
rc_key="$(cat "${STAMP}" "${ROOT}/configure.sh" | sha256sum | cut -d' ' -f1)-${ROOT}"
if [[ "${FORCE}" == 0 && -f "${BAZELRC}" ]] && grep -qxF "# configure-key: ${rc_key}" "${BAZELRC}"; then
  log ".bazelrc is up to date"
  log "done"
  exit 0
fi

log "reading TensorFlow's compile and link flags"
# One line per flag. The TF import logs to stderr; keep it out of the way unless it fails.
tf_flags_err="$(mktemp)"
trap 'rm -f "${tf_flags_err}"' EXIT
if ! tf_flags="$(TF_CPP_MIN_LOG_LEVEL=3 "${VENV_PY}" - 2>"${tf_flags_err}" <<'PY'
import tensorflow as tf
for f in tf.sysconfig.get_compile_flags():
    print("compile", f)
for f in tf.sysconfig.get_link_flags():
    print("link", f)
print("version", tf.__version__)
PY
)"; then
  cat "${tf_flags_err}" >&2
  die "could not import tensorflow from ${VENV_PY}"
fi

tf_header_dir="" tf_lib_dir="" tf_lib_name="" tf_version=""
bazel_flags=()
while read -r kind flag; do
  case "${kind}:${flag}" in
    compile:-I*)          tf_header_dir="${flag#-I}" ;;
    compile:--std=*|compile:-std=*)
                          bazel_flags+=("build --cxxopt=-std=${flag#*std=}" "build --host_cxxopt=-std=${flag#*std=}") ;;
    compile:-D*)          bazel_flags+=("build --copt=${flag}" "build --host_copt=${flag}") ;;
    compile:*)            bazel_flags+=("build --copt=${flag}") ;;
    link:-L*)             tf_lib_dir="${flag#-L}" ;;
    link:-l:*)            tf_lib_name="${flag#-l:}" ;;
    link:-l*)             tf_lib_name="lib${flag#-l}.so" ;;
    link:*)               bazel_flags+=("build --linkopt=${flag}") ;;
    version:*)            tf_version="${flag}" ;;
  esac
done <<< "${tf_flags}"
[[ "${tf_version}" =~ ^[0-9A-Za-z.+-]+$ ]] || die "unexpected TensorFlow version string: '${tf_version}'"
[[ -n "${tf_header_dir}" && -d "${tf_header_dir}/tensorflow" ]] || die "no TF include dir in compile flags: ${tf_flags}"
[[ -n "${tf_lib_dir}" && -n "${tf_lib_name}" && -f "${tf_lib_dir}/${tf_lib_name}" ]] || die "no TF framework library in link flags: ${tf_flags}"

tmp_rc="$(mktemp "${BAZELRC}.XXXXXX")"
{
  echo "# Generated by ./configure.sh for TensorFlow ${tf_version} in ${VENV}. Do not edit; do not commit."
  echo "# configure-key: ${rc_key}"
  echo
  echo "# Nothing is ever downloaded: every external repository is local (see third_party/)."
  for cmd in build fetch query sync; do
    echo "${cmd} --experimental_repository_disable_download"
    echo "${cmd} --repo_env=PYTHON_BIN_PATH=${VENV_PY}"
    echo "${cmd} --repo_env=TF_HEADER_DIR=${tf_header_dir}"
    echo "${cmd} --repo_env=TF_SHARED_LIBRARY_DIR=${tf_lib_dir}"
    echo "${cmd} --repo_env=TF_SHARED_LIBRARY_NAME=${tf_lib_name}"
  done
  echo
  echo "build -c opt"
  echo "# One (position-independent) compile per source: without it a TF kernel file is compiled"
  echo "# twice by 'bazel test //:all', once for the .so and once for the static library."
  echo "build --force_pic"
  echo "build --spawn_strategy=local"
  echo "build --incompatible_strict_action_env"
  echo "build --nosandbox_debug"
  echo
  echo "# From tf.sysconfig.get_compile_flags() / get_link_flags() (include dir and library: @local_tf)."
  printf '%s\n' "${bazel_flags[@]}"
  echo
  echo "# The TF release the op library is compiled against: cc/tf/version_stamp.cc embeds it as a"
  echo "# string that tf_fused_int8/_loader.py reads (TF's pip headers do not carry the version)."
  echo "# Only the TF binding's files (paths matching cc/tf/) get it, so the core does not rebuild."
  echo "build --per_file_copt=cc/tf/@-DTF_FUSED_INT8_TF_VERSION=\\\"${tf_version}\\\""
  echo
  echo "test --test_output=errors"
  echo
  echo "# AddressSanitizer + UBSan build of the op library and the core test (tools/asan_check.sh)."
  echo "# Its own output directory (-asan suffix), so it never replaces the normal build's outputs."
  echo "build:asan --platform_suffix=-asan"
  echo "# UBSan only on our own core (TF's headers do not compile under GCC 12's -fsanitize=undefined)."
  echo "build:asan --copt=-fsanitize=address --copt=-fno-sanitize-recover=all"
  echo "build:asan --per_file_copt=cc/core/@-fsanitize=undefined"
  echo "build:asan --per_file_copt=tests/cc/@-fsanitize=undefined"
  echo "build:asan --copt=-fno-omit-frame-pointer --copt=-O1 --copt=-g"
  echo "build:asan --linkopt=-fsanitize=address,undefined"
  echo
  echo "# Personal, uncommitted overrides."
  echo "try-import %workspace%/.bazelrc.user"
} > "${tmp_rc}"
chmod 644 "${tmp_rc}"
mv -f "${tmp_rc}" "${BAZELRC}"
log "wrote .bazelrc (TensorFlow ${tf_version})"
log "done"
