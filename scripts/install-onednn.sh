#!/usr/bin/env bash
# Installs oneDNN for the peer benchmark (bench/), never for the library. Idempotent.
# Prints the install prefix (with include/oneapi/dnnl/dnnl.hpp and lib/libdnnl.so) on the last line;
# pass it to CMake as -DONEDNN_ROOT=<prefix> (bench/CMakeLists.txt also looks there by itself).
#
# First choice: PyPI `onednn-devel` (oneDNN 3.x) into the Python environment of $PYTHON (default python3).
# That build uses the SYCL runtime for the CPU too: its CPU device comes from the OpenCL CPU runtime
# (intel-opencl-rt, a dependency) through Unified Runtime's OpenCL adapter, which the current
# intel-cmplr-lib-ur wheel no longer ships. We take that adapter from an earlier intel-cmplr-lib-ur wheel
# of the same Unified Runtime version and put it beside the other runtime libraries.
# Fallback: Debian `libdnnl-dev` (oneDNN 2.6, OpenMP) under /usr.
set -euo pipefail

PYTHON=${PYTHON:-python3}
ONEDNN_PIP_VERSION=${ONEDNN_PIP_VERSION:-2026.1.0}
# An intel-cmplr-lib-ur release that still ships libur_adapter_opencl.so for the loader's UR version.
UR_OPENCL_FROM=${UR_OPENCL_FROM:-2026.1.2}

log() { echo "install-onednn: $*" >&2; }

install_adapter() {
  local lib=$1 loader adapter tmp
  loader=$(find "$lib" -maxdepth 1 -name 'libur_loader.so.0.*' | head -n 1)
  [ -n "$loader" ] || { log "no libur_loader in $lib"; return 1; }
  local ur_version=${loader##*/libur_loader.so.}
  adapter="$lib/libur_adapter_opencl.so.$ur_version"
  if [ ! -f "$adapter" ]; then
    log "fetching the Unified Runtime OpenCL adapter $ur_version from intel-cmplr-lib-ur==$UR_OPENCL_FROM"
    tmp=$(mktemp -d)
    "$PYTHON" -m pip download --quiet --no-deps --dest "$tmp" "intel-cmplr-lib-ur==$UR_OPENCL_FROM" >&2
    "$PYTHON" - "$tmp" "libur_adapter_opencl.so.$ur_version" "$adapter" <<'EOF'
import glob, shutil, sys, zipfile
folder, name, target = sys.argv[1:]
(wheel,) = glob.glob(folder + "/*.whl")
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.endswith("/lib/" + name)]
    if not members:
        sys.exit(f"{wheel} has no {name}")
    with z.open(members[0]) as src, open(target + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
shutil.move(target + ".part", target)
EOF
    rm -rf "$tmp"
    chmod 755 "$adapter"
  fi
  ln -sf "libur_adapter_opencl.so.$ur_version" "$lib/libur_adapter_opencl.so.0"
  ln -sf libur_adapter_opencl.so.0 "$lib/libur_adapter_opencl.so"
}

install_pip() {
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "onednn-devel==$ONEDNN_PIP_VERSION" >&2 || return 1
  local prefix
  prefix=$("$PYTHON" -c 'import sys; print(sys.prefix)')
  if [ ! -f "$prefix/include/oneapi/dnnl/dnnl.hpp" ] || [ ! -e "$prefix/lib/libdnnl.so" ]; then
    log "onednn-devel installed but no headers or libdnnl.so under $prefix"
    return 1
  fi
  if grep -q '#define DNNL_CPU_RUNTIME DNNL_RUNTIME_SYCL' "$prefix/include/oneapi/dnnl/dnnl_config.h"; then
    install_adapter "$prefix/lib" || return 1
  fi
  echo "$prefix"
}

install_debian() {
  if ! dpkg -s libdnnl-dev >/dev/null 2>&1; then
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libdnnl-dev >&2
  fi
  echo /usr
}

if prefix=$(install_pip); then
  log "oneDNN $ONEDNN_PIP_VERSION from PyPI"
else
  log "PyPI install failed; falling back to Debian libdnnl-dev"
  prefix=$(install_debian)
fi
grep -h 'define DNNL_VERSION_\(MAJOR\|MINOR\|PATCH\)' "$prefix/include/oneapi/dnnl/dnnl_version.h" \
  | awk '{printf "%s%s", sep, $3; sep="."} END {print ""}' | sed 's/^/install-onednn: version /' >&2
echo "$prefix"
