#!/usr/bin/env python3
"""Profiles behind the README's "What limits the shapes below target".

Three views, because this machine kind offers no hardware counters (`perf stat -e instructions true` prints
<not supported>) and valgrind cannot execute AVX-512:
  1. time decomposition from `conv3d-dx bench` on the real (AVX-512) engines: per-call filter packing
     (median_ms - packed_median_ms), the NCDHW conversions (NCDHW - NDHWC), 1 -> 2 thread scaling, and the
     share of peak counting only the taps inside the tensor (the peak of the engine's instruction, timed
     beside each call by `bench --peak`);
  2. llvm-mca on the inner loops of the AVX-512 micro-kernels, compiled with the build's own flags;
  3. callgrind instruction shares per function (the AVX2 build of the same engines, what valgrind runs).

usage: scripts/profile.py BUILD_DIR [--shapes a,b,...] [--callgrind-shapes c,g,...] (empty: none)
"""
import argparse
import json
import math
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile

KERNEL_LOOPS = [  # (symbol fragment, FMA mnemonic, FMAs per step)
    ("TileINS1_1VENS1_7F32StepIS3_EELi6ELi4EE6kernel", "vfmadd", 24),
    ("TileINS1_1VENS1_8Bf16StepELi6ELi4EE6kernel", "vdpbf16ps", 24),
    ("PixTileILi3ELi2ELNS1_7PixModeE1EE6kernel", "vdpbf16ps", 18),
]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw).stdout


def bench(cli, shapes, dtype, layout, threads, peak=False):
    out = run([cli, "bench", "--suite", "default", "--shapes", shapes, "--dtype", dtype, "--data-format",
               layout, "--threads", str(threads), "--repeat", "9", "--warmup", "2", "--json"]
              + (["--peak"] if peak else []))
    return {r["name"]: r for r in map(json.loads, out.splitlines())}


def decomposition(cli, shapes):
    print("== time decomposition (ms, medians of 9; conv3d-dx bench on this CPU's best engines; %peak in:"
          " share of the engine's multiply-add peak timed beside each 2-thread call, bench --peak)")
    print(f"{'shape':6} {'dtype':5} {'layout':6} {'call':>8} {'packed':>8} {'pack':>7} {'vs NDHWC':>9}"
          f" {'1 thr':>8} {'2/1 thr':>8} {'%peak in':>9}  engine")
    for dtype in ("fp32", "bf16"):
        runs = {(layout, t): bench(cli, shapes, dtype, layout, t, peak=t == 2)
                for layout in ("NCDHW", "NDHWC") for t in (1, 2)}
        for name in shapes.split(","):
            for layout in ("NCDHW", "NDHWC"):
                r2, r1 = runs[(layout, 2)][name], runs[(layout, 1)][name]
                ndhwc = runs[("NDHWC", 2)][name]["median_ms"]
                eff = r2.get("inside_of_peak", math.nan) * 100  # none for the portable kernels
                print(f"{name:6} {dtype:5} {layout:6} {r2['median_ms']:8.3f} {r2['packed_median_ms']:8.3f}"
                      f" {r2['median_ms'] - r2['packed_median_ms']:7.3f} {r2['median_ms'] - ndhwc:+9.3f}"
                      f" {r1['median_ms']:8.3f} {r1['median_ms'] / r2['median_ms']:8.2f} {eff:8.0f}%  {r2['engine']}")


def kernel_loops(build):
    print("\n== micro-kernel inner loops (llvm-mca, Sapphire Rapids model: LLVM 14 has no Zen 4/5 model)")
    entry = next(e for e in json.loads((build / "compile_commands.json").read_text())
                 if e["file"].endswith("kernels_avx512.cpp"))
    args = shlex.split(entry["command"])
    cmd, skip = [], False
    for a in args:
        if skip or a == "-c":
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        cmd.append(a)
    with tempfile.TemporaryDirectory() as tmp:
        asm_path = pathlib.Path(tmp) / "k.s"
        run(cmd + ["-S", "-o", str(asm_path)], cwd=entry["directory"])
        lines = asm_path.read_text().split("\n")
        for fragment, fma, per_step in KERNEL_LOOPS:
            start = next(i for i, l in enumerate(lines) if fragment in l and l.endswith(":"))
            end = next(i for i in range(start, len(lines)) if lines[i].startswith("\t.size"))
            body = lines[start:end]
            labels = {l[:-1]: i for i, l in enumerate(body) if re.match(r"^\.L\w+:$", l)}
            loop = None  # the shortest backward-jumping block holding a whole step's FMAs
            for i, l in enumerate(body):
                m = re.match(r"\s+j\w+\s+(\.L\w+)", l)
                if m and m.group(1) in labels and labels[m.group(1)] < i:
                    seg = body[labels[m.group(1)]:i + 1]
                    if sum(fma in x for x in seg) >= per_step and (loop is None or len(seg) < len(loop)):
                        loop = seg
            loop_path = pathlib.Path(tmp) / "loop.s"
            loop_path.write_text("\n".join(x for x in loop if not x.startswith(".L")) + "\n")
            mca = run(["llvm-mca", "-mcpu=sapphirerapids", "-iterations=500", str(loop_path)])
            cycles = float(re.search(r"Block RThroughput:\s+([\d.]+)", mca).group(1))
            fmas = sum(fma in x for x in loop)
            print(f"{fragment:48} {len(loop) - 1:3} instructions, {fmas} {fma}: {cycles:5.1f} cycles/iteration"
                  f" = {fmas / cycles:.2f} per cycle (2 FMA pipes: {fmas / cycles / 2 * 100:.0f} %)")


def callgrind(cli, shapes):
    print("\n== callgrind (one call + one packed call, 1 thread; valgrind runs the AVX2 engines)")
    with tempfile.TemporaryDirectory() as tmp:
        for name in shapes.split(","):
            for dtype, layout in (("bf16", "NCDHW"), ("bf16", "NDHWC")):
                out = pathlib.Path(tmp) / f"cg.{name}"
                subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", cli, "bench",
                                "--suite", "default", "--shapes", name, "--dtype", dtype, "--data-format", layout,
                                "--threads", "1", "--repeat", "1", "--warmup", "0"], check=True,
                               capture_output=True)
                text = run(["callgrind_annotate", "--threshold=95", str(out)])
                rows = [l for l in text.split("\n") if re.match(r"^\s*[\d,]+ \(", l)]
                total = int(rows[0].split()[0].replace(",", ""))
                print(f"-- {name} {dtype} {layout}: {total / 1e6:.0f} M instructions")
                for l in rows[1:7]:
                    ir, _, fn = l.strip().partition(" ")
                    fn = re.sub(r"\[.*\]|conv3d_dx::|cpu::|\(anonymous namespace\)::|\?\?\?:", "", fn.split(")  ", 1)[-1])
                    print(f"   {int(ir.replace(',', '')) / total * 100:5.1f} %  {fn.strip()[:110]}")


def main():
    sys.stdout.reconfigure(line_buffering=True)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", type=pathlib.Path)
    ap.add_argument("--shapes", default="a,b,c,d,e,f,g,h,i")
    ap.add_argument("--callgrind-shapes", default="b,c,g", help="slow under valgrind: a few small ones")
    a = ap.parse_args()
    cli = str(a.build / "tools" / "conv3d-dx")
    try:
        perf = subprocess.run(["perf", "stat", "-e", "instructions", "true"], text=True, capture_output=True)
        print("perf hardware counters:", "not supported here" if "not supported" in perf.stderr else "available")
    except FileNotFoundError:
        print("perf hardware counters: perf is not installed")
    decomposition(cli, a.shapes)
    kernel_loops(a.build)
    if a.callgrind_shapes:
        callgrind(cli, a.callgrind_shapes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
