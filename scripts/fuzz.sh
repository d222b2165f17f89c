#!/usr/bin/env bash
# Builds the libFuzzer harnesses in fuzz/ (clang 19, the library under AddressSanitizer and
# UndefinedBehaviorSanitizer) into build-fuzz and runs each for SECONDS (default 60) from its seed corpus
# fuzz/corpus/NAME; new inputs go to a scratch directory, so the repository is not changed. A crash, a sanitizer
# report or a failed harness check stops that harness, prints its report and fails the script; the input is kept
# as build-fuzz/artifacts/NAME-crash-*. Replay one with: build-fuzz/NAME_fuzzer FILE
#
#   scripts/fuzz.sh [SECONDS] [NAME...]      NAME: npy, args, aclnn (default: all three)
#   scripts/fuzz.sh --merge SECONDS NAME     fuzz, then add the inputs that reach new code to fuzz/corpus/NAME
set -euo pipefail
cd "$(dirname "$0")/.."
merge=0
if [ "${1:-}" = "--merge" ]; then
  merge=1
  shift
fi
seconds=${1:-60}
[ $# -gt 0 ] && shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(npy args aclnn)

clangxx=$(./scripts/install-fuzz-deps.sh | tail -n 1)
# Line tables only (-g1): reports keep file and line at a fraction of full debug information's build time.
cmake -S fuzz -B build-fuzz -DCMAKE_CXX_COMPILER="$clangxx" -DCMAKE_C_COMPILER="${clangxx/clang++/clang}" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" >/dev/null
cmake --build build-fuzz -j2 --target "${names[@]/%/_fuzzer}"
mkdir -p build-fuzz/artifacts
status=0
for name in "${names[@]}"; do
  scratch=$(mktemp -d)
  log=build-fuzz/artifacts/$name.log
  if build-fuzz/"$name"_fuzzer -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=4096 \
    -artifact_prefix=build-fuzz/artifacts/"$name"- "$scratch" fuzz/corpus/"$name" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz $name: $runs inputs in $seconds s, no failure"
    if [ $merge -eq 1 ]; then
      build-fuzz/"$name"_fuzzer -merge=1 fuzz/corpus/"$name" "$scratch" >>"$log" 2>&1
      echo "fuzz $name: corpus now $(ls fuzz/corpus/"$name" | wc -l) inputs"
    fi
  else
    echo "fuzz $name: FAILED (log: $log)"
    tail -n 60 "$log"
    status=1
  fi
  rm -rf "$scratch"
done
exit $status
