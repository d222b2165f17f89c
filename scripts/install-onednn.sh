#!/usr/bin/env bash
# Installs oneDNN for the peer benchmark (bench/), never for the library. Idempotent.
# Prints the install prefix (with include/oneapi/dnnl/dnnl.hpp and lib/libdnnl.so) on the last line;
# pass it to CMake as -DONEDNN_ROOT=<prefix> (bench/CMakeLists.txt also looks there by itself).
#
# An OpenMP build, as PyTorch uses inside (PyPI's plain `onednn` runs its CPU engine through SYCL and TBB
# and is slower): first PyPI `onednn-devel-cpu-gomp` into the Python environment of $PYTHON (default
# python3), else Debian `libdnnl-dev` under /usr.
set -euo pipefail

PYTHON=${PYTHON:-python3}
ONEDNN_PIP_VERSION=${ONEDNN_PIP_VERSION:-2023.2.0}

log() { echo "install-onednn: $*" >&2; }

install_pip() {
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    "onednn-devel-cpu-gomp==$ONEDNN_PIP_VERSION" >&2 || return 1
  local prefix
  prefix=$("$PYTHON" -c 'import sys; print(sys.prefix)')
  if [ ! -f "$prefix/include/oneapi/dnnl/dnnl.hpp" ] || [ ! -e "$prefix/lib/libdnnl.so" ]; then
    log "onednn-devel-cpu-gomp installed but no headers or libdnnl.so under $prefix"
    return 1
  fi
  if ! grep -q '#define DNNL_CPU_RUNTIME DNNL_RUNTIME_OMP' "$prefix/include/oneapi/dnnl/dnnl_config.h"; then
    log "the oneDNN under $prefix is not an OpenMP build (another oneDNN package installed over it?)"
    return 1
  fi
  echo "$prefix"
}

install_debian() {
  if ! dpkg -s libdnnl-dev >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libdnnl-dev >&2
  fi
  echo /usr
}

if prefix=$(install_pip); then
  log "oneDNN from PyPI onednn-devel-cpu-gomp $ONEDNN_PIP_VERSION"
else
  log "PyPI install failed; falling back to Debian libdnnl-dev"
  prefix=$(install_debian)
fi
grep -h 'define DNNL_VERSION_\(MAJOR\|MINOR\|PATCH\)' "$prefix/include/oneapi/dnnl/dnnl_version.h" \
  | awk '{printf "%s%s", sep, $3; sep="."} END {print ""}' | sed 's/^/install-onednn: version /' >&2
echo "$prefix"
