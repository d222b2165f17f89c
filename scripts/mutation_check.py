#!/usr/bin/env python3
"""Mutation check: plants small bugs one at a time and expects the test suite to catch each.

The repository's files (tracked and untracked, not ignored) are copied to a work directory (default
/tmp/conv3d-dx-mutation), built there once (Release), and for every mutation below: the one line is
changed, the build is brought up to date, ctest runs (the tests named by the mutation's regex, or all), and
the line is restored. A mutation the tests do not catch is reported as SURVIVED, one that does not compile
as INVALID (it would test nothing), and either makes the script exit 1; so does a baseline that is not
green, or a mutation whose text no longer occurs exactly once (exit 2). The repository is never modified.

    scripts/mutation_check.py [--work DIR] [--only SUBSTRING] [--list]

Takes one full build plus about a minute per mutation on two cores.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

# (file, text to replace (must occur exactly once), replacement, what the bug is, ctest -R regex or None)
MUTATIONS = [
    ("src/cpu/direct.cpp",
     "const float* w_ci = filter_.data() + (g * p_.Cin_g + ci) * taps * Co;",
     "const float* w_ci = filter_.data() + ci * taps * Co;",
     "direct engine: the filter offset ignores the group", None),
    ("src/cpu/direct.cpp",
     "numeric::store_f32(p_.y_dtype, y, dst, acc, p_.overflow);",
     "numeric::store_f32(p_.y_dtype, y, dst, acc, OverflowMode::ieee);",
     "direct engine: saturate mode ignored", None),
    ("src/cpu/direct.cpp",
     "*out++ = numeric::load_rounded(p_.dy_dtype, dy, src, p_.input_rounding);",
     "*out++ = numeric::load_rounded(p_.dy_dtype, dy, src, InputRounding::none);",
     "direct engine: dy skips the HF32 rounding", None),
    ("src/cpu/direct.cpp",
     "*out++ = numeric::load_rounded(p_.filter_dtype, filter, src, p_.input_rounding);",
     "*out++ = numeric::load_rounded(p_.filter_dtype, filter, src, InputRounding::none);",
     "direct engine: the filter skips the HF32 rounding", None),
    ("src/cpu/direct.cpp",
     "const std::int64_t pos = i + pad - k * dilation;",
     "const std::int64_t pos = i + pad - k;",
     "direct engine: dilation ignored", None),
    ("src/reference/accuracy.cpp",
     "return (gamma * abs_sum + std::ldexp(n, -150)) * (1.0 + std::ldexp(1.0, -20));",
     "return 4096 * (gamma * abs_sum + std::ldexp(n, -150)) * (1.0 + std::ldexp(1.0, -20));",
     "accuracy rule: the fp32 allowance widened 4096x", None),
    ("src/reference/accuracy.cpp",
     "  if (std::isnan(lo) && std::isnan(hi)) return false;\n",
     "",
     "accuracy rule: a band wholly beyond an 8-bit type's range accepts finite values", None),
    ("src/reference/reference.cpp",
     "static_cast<float>(values[index++]), p_.overflow);",
     "static_cast<float>(values[index++]), OverflowMode::ieee);",
     "reference engine: saturate mode ignored", None),
    ("src/plan.cpp",
     "  require_y_disjoint(s.problem, out_backprop, filter, y);\n",
     "",
     "Plan::execute: y overlapping out_backprop or the filter accepted", None),
    ("src/problem/overlap.cpp",
     "if (written.bytes.begin < other.bytes.end && other.bytes.begin < written.bytes.end)",
     "if (written.bytes.begin <= other.bytes.end && other.bytes.begin <= written.bytes.end)",
     "overlap rule: touching tensors refused", None),
    ("src/acl/convolution_backward.cpp",
     "require_disjoint(gw, {dy, x, gb});",
     "require_disjoint(gw, {dy, gb});",
     "aclnn: gradWeight over input accepted", None),
    ("src/acl/meta.cpp",
     "if (__builtin_mul_overflow(storage_elements, size, &storage_bytes)) {",
     "if (false && __builtin_mul_overflow(storage_elements, size, &storage_bytes)) {",
     "aclCreateTensor: storage bytes beyond 64 bits accepted", None),
    ("src/common/parallel.hpp",
     "end = q * (t + 1) + r * (t + 1) / j.used;",
     "end = q * (t + 1) + r * t / j.used;",
     "parallel_for: chunks miss indices", None),
    ("src/plan.cpp",
     "const int most = 4 * hardware;",
     "const int most = 8 * hardware;",
     "Plan: more than 4 threads per hardware thread accepted", None),
    ("tools/npy.cpp",
     "    ::fchmod(fd_, st.st_mode & 07777);\n",
     "",
     "CLI: the output file loses its mode", None),
    ("tools/npy.cpp",
     "  if (g_armed) ::unlink(g_temp);",
     "  if (g_armed && false) ::unlink(g_temp);",
     "CLI: the temporary file survives a signal", None),
    ("tools/npy.cpp",
     "  std::string name = dir + \"/.c3dx-XXXXXX\";",
     "  std::string name = dir + \"/.\" + target.filename().string() + \".tmp.XXXXXX\";",
     "CLI: temporary names longer than the output's", None),
    ("tests/cpu_engine_test.cpp",
     "return isa != Isa::avx512_bf16 || (exact_in_bf16(p.dy_dtype) && exact_in_bf16(p.filter_dtype) &&",
     "return isa != Isa::avx512_bf16 && (exact_in_bf16(p.dy_dtype) && exact_in_bf16(p.filter_dtype) &&",
     "tests: the ISA sweeps skip cases the engines take", None),
]


def run(cmd, cwd, log):
    with open(log, "a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        return subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT).returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="/tmp/conv3d-dx-mutation")
    parser.add_argument("--only", default="", help="run the mutations whose description contains this")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = parser.parse_args()
    mutations = [m for m in MUTATIONS if args.only in m[3]]
    if args.list:
        for m in mutations:
            print(f"{m[0]}: {m[3]}")
        return 0

    repo = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.abspath(__file__)), check=True).stdout.strip()
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True,
                           cwd=repo, check=True).stdout.split("\n")
    src = os.path.join(args.work, "src-tree")
    os.makedirs(src, exist_ok=True)
    for f in files:
        if not f or not os.path.isfile(os.path.join(repo, f)):
            continue
        dst = os.path.join(src, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.exists(dst) or open(dst, "rb").read() != open(os.path.join(repo, f), "rb").read():
            shutil.copy2(os.path.join(repo, f), dst)
    # Every mutation must apply to the current sources.
    for path, old, new, what, _ in mutations:
        text = open(os.path.join(src, path)).read()
        if text.count(old) != 1:
            print(f"mutation '{what}' does not apply: its text occurs {text.count(old)} times in {path}")
            return 2

    build = os.path.join(args.work, "build")
    log = os.path.join(args.work, "log.txt")
    open(log, "w").close()
    print(f"building in {build} (log: {log})", flush=True)
    if (run(["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DCONV3D_DX_BUILD_PYTHON=OFF"], src, log)
            or run(["cmake", "--build", build, "-j2"], src, log)):
        print("baseline build failed")
        return 1
    if run(["ctest", "--test-dir", build, "-j2", "-E", "install_and_find_package"], src, log):
        print("baseline tests fail: fix them first")
        return 1

    survived = []
    for path, old, new, what, regex in mutations:
        start = time.time()
        file = os.path.join(src, path)
        original = open(file).read()
        open(file, "w").write(original.replace(old, new))
        try:
            built = run(["cmake", "--build", build, "-j2"], src, log) == 0
            caught = not built
            if built:
                cmd = ["ctest", "--test-dir", build, "-j2", "-E", "install_and_find_package"]
                if regex:
                    cmd += ["-R", regex]
                caught = run(cmd, src, log) != 0
        finally:
            open(file, "w").write(original)
            os.utime(file)
        verdict = "caught  " if built and caught else "SURVIVED" if built else "INVALID "
        print(f"{verdict} {what} ({path}, {time.time() - start:.0f} s"
              f"{'; the mutation does not build, so it tests nothing' if not built else ''})", flush=True)
        if not (built and caught):
            survived.append(what)
    run(["cmake", "--build", build, "-j2"], src, log)  # back to the unmutated build
    if survived:
        print(f"{len(survived)} of {len(mutations)} mutations survived or do not build")
        return 1
    print(f"all {len(mutations)} mutations caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
