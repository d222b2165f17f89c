#!/usr/bin/env bash
# Installs what building and testing conv3d-dx needs: Debian packages for the C++ build, PyPI packages for the
# Python module and its tests. Safe to run again: only what is missing is installed.
set -euo pipefail
packages=(g++ cmake make googletest libgtest-dev python3-dev python3-pip)
source "$(dirname "${BASH_SOURCE[0]}")/apt-packages.sh"
install_missing_apt_packages "${packages[@]}"
echo "conv3d-dx build dependencies present: ${packages[*]}"

# The Python module (nanobind, scikit-build-core, numpy) and its tests (pytest; the 8-bit numpy dtypes;
# PyTorch and TensorFlow, the peers the tests compare against), for the python3 on PATH, which is the one
# CMake builds the module for.
python=${PYTHON:-python3}
python_packages=(nanobind scikit-build-core numpy pytest ml-dtypes en-dtypes torch tensorflow-cpu)
read -r -a python_missing <<<"$("$python" - "${python_packages[@]}" <<'EOF'
import importlib.metadata, sys
missing = []
for name in sys.argv[1:]:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        missing.append(name)
print(" ".join(missing))
EOF
)"
if [ ${#python_missing[@]} -gt 0 ]; then
  # A Debian-managed interpreter refuses pip installs without this (PEP 668); others ignore it.
  PIP_BREAK_SYSTEM_PACKAGES=1 "$python" -m pip install "${python_missing[@]}"
fi
echo "conv3d-dx Python dependencies present for $("$python" -c 'import sys; print(sys.executable)'): ${python_packages[*]}"
