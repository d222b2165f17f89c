#!/usr/bin/env bash
# Installs what the fuzzing and ThreadSanitizer steps of .ci/run need, from Debian packages: clang 19 and its
# runtime libraries (libFuzzer, AddressSanitizer, UndefinedBehaviorSanitizer, ThreadSanitizer). clang 14, the
# default of Debian 12, cannot compile the library (C++20 lambdas capturing structured bindings). Safe to
# run again: only what is missing is installed. Prints the clang++ to use on its last line.
set -euo pipefail
packages=(clang-19 libclang-rt-19-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
echo "fuzzing dependencies present: ${packages[*]}" >&2
echo /usr/bin/clang++-19
