# Sourced (not run) by configure.sh and tools/arm64_check.sh, from the repository root, after they
# define log and die: apt_install PACKAGE... installs Debian packages as root, or through sudo when
# available, with one apt-get update per script run. Callers install only what is missing.
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
