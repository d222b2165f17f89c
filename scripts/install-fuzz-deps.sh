#!/usr/bin/env bash
# Installs what the fuzzing and ThreadSanitizer steps of .ci/run need, from Debian packages: clang 19 and its
# runtime libraries (libFuzzer, AddressSanitizer, UndefinedBehaviorSanitizer, ThreadSanitizer). clang 14, the
# default of Debian 12, cannot compile the library (C++20 lambdas capturing structured bindings). Safe to
# run again: only what is missing is installed. Prints the clang++ to use on its last line.
set -euo pipefail
packages=(clang-19 libclang-rt-19-dev)
source "$(dirname "${BASH_SOURCE[0]}")/apt-packages.sh"
install_missing_apt_packages "${packages[@]}"
echo "fuzzing dependencies present: ${packages[*]}" >&2
echo /usr/bin/clang++-19
