#!/usr/bin/env bash
# Installs what building and testing conv3d-dx needs, from Debian packages. Safe to run again.
set -euo pipefail
packages=(g++ cmake make googletest libgtest-dev)
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
echo "conv3d-dx build dependencies present: ${packages[*]}"
