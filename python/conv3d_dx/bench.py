"""python -m conv3d_dx.bench: conv3d-dx against PyTorch's CPU dgrad on a benchmark suite, in one process.

PyTorch's route is torch.ops.aten.convolution_backward with output_mask [True, False, False], what autograd
runs for nn.Conv3d's input gradient. conv3d-dx's is conv3d_backprop_input_v2 on the same tensors, packing
the filter on every call as a training step does. Both allocate their result on every call and use the
same number of threads. Times are medians of the timed runs, after warm-up runs, in rounds of a block of
runs of each (see _time_both); 'paired' is the median over the rounds of each round's ratio, which a slow
phase of a noisy machine moves less than the ratio of the overall medians.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch

import conv3d_dx

from . import _core

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _forward_out(x: int, k: int, s: int, p: int, d: int) -> int:
    return (x + 2 * p - ((k - 1) * d + 1)) // s + 1


_SETTLE_S = 0.05  # longer than either library's worker threads spin after a call before they sleep
# Untimed runs last at least this long: after the pause, a core takes a while to reach full speed again (on a
# 2-core Xeon VM, a 0.45 ms call took 1.5-2.5 ms for its first 10 runs, about 15 ms), which would otherwise
# count against whichever library's calls are shorter.
_WARM_S = 0.05


def _time(fn: Callable[[], object], warmup: int, repeat: int) -> List[float]:
    """Milliseconds of `repeat` runs of fn, after the other library's threads have gone to sleep and
    untimed runs: `warmup` of them, and more until _WARM_S has passed."""
    time.sleep(_SETTLE_S)
    start, runs = time.perf_counter(), 0
    while runs < warmup or time.perf_counter() - start < _WARM_S:
        fn()
        runs += 1
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _time_both(a: Callable[[], object], b: Callable[[], object], warmup: int, repeat: int,
               rounds: int = 2) -> Tuple[List[List[float]], List[List[float]]]:
    """`rounds` rounds of a block of runs of a and one of b (a first in even rounds, b first in odd ones),
    the `repeat` timed runs of each shared out over the rounds; the times of each round's blocks. Each
    library's idle worker threads spin for a while after a call (PyTorch's OpenMP ones, and ours), so
    alternating run by run would time each library against the other's spinning threads; blocks, each after
    a pause, time each on its own, and rounds share out slow phases of a noisy machine. In a program that
    mixes the two, setting OMP_WAIT_POLICY=passive stops PyTorch's threads spinning on cores conv3d-dx is
    about to use."""
    ta: List[List[float]] = []
    tb: List[List[float]] = []
    for r in range(rounds):
        runs = repeat // rounds + (1 if r < repeat % rounds else 0)
        if r % 2 == 0:
            ta.append(_time(a, warmup, runs))
            tb.append(_time(b, warmup, runs))
        else:
            tb.append(_time(b, warmup, runs))
            ta.append(_time(a, warmup, runs))
    return ta, tb


def run_shape(shape: Dict, dtype: torch.dtype, channels_last: bool, threads: int, warmup: int,
              repeat: int, rounds: int = 2) -> Dict:
    n, cin, cout, groups = shape["N"], shape["Cin"], shape["Cout"], shape["groups"]
    k, s, p, d = shape["kernel"], shape["stride"], shape["pad"], shape["dilation"]
    x_size = [n, cin, *shape["x"]]
    dy_size = [n, cout] + [_forward_out(shape["x"][a], k[a], s[a], p[a], d[a]) for a in range(3)]
    gen = torch.Generator().manual_seed(0)
    dy = torch.randn(dy_size, generator=gen).to(dtype)
    w = torch.randn([cout, cin // groups, *k], generator=gen).to(dtype)
    x = torch.empty(x_size, dtype=dtype)  # convolution_backward reads only its shape for the input gradient
    if channels_last:
        dy, w, x = (t.contiguous(memory_format=torch.channels_last_3d) for t in (dy, w, x))
    pads = [p[0], p[0], p[1], p[1], p[2], p[2]]

    def torch_dgrad() -> torch.Tensor:
        return torch.ops.aten.convolution_backward(dy, x, w, None, list(s), list(p), list(d), False, [0, 0, 0],
                                                   groups, [True, False, False])[0]

    if channels_last:  # the NDHWC tensors these are in memory
        args = ([n, *shape["x"], cin], w.permute(0, 2, 3, 4, 1), dy.permute(0, 2, 3, 4, 1), [1, *s, 1], pads,
                [1, *d, 1], groups, "NDHWC", "NDHWC")
    else:
        args = (x_size, w, dy, [1, 1, *s], pads, [1, 1, *d], groups, "NCDHW", "NCDHW")

    def ours() -> torch.Tensor:
        return conv3d_dx.conv3d_backprop_input_v2(*args, threads=threads)

    plan = conv3d_dx.Plan(*args, threads=threads)
    ours_blocks, torch_blocks = _time_both(ours, torch_dgrad, warmup, repeat, rounds)
    ours_ms = [t for block in ours_blocks for t in block]
    torch_ms = [t for block in torch_blocks for t in block]
    paired = statistics.median(statistics.median(theirs) / statistics.median(mine)
                               for mine, theirs in zip(ours_blocks, torch_blocks))
    expected = torch_dgrad().float()
    got = ours().float()
    if channels_last:
        got = got.permute(0, 4, 1, 2, 3)
    scale = max(expected.abs().max().item(), 1e-30)
    flops = 2.0 * math.prod(dy_size) * (cin // groups) * math.prod(k)
    return {"name": shape["name"], "ours": statistics.median(ours_ms), "ours_min": min(ours_ms),
            "torch": statistics.median(torch_ms), "paired": paired,
            "gflops": flops / statistics.median(ours_ms) / 1e6,
            "diff": (got - expected).abs().max().item() / scale, "engine": plan.engine, "isa": plan.isa}


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m conv3d_dx.bench",
        description="Times conv3d-dx against PyTorch's CPU dgrad (aten.convolution_backward, input gradient "
                    "only) on the benchmark suite, in one process, with the same threads and tensors.")
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="fp32")
    parser.add_argument("--channels-last", action="store_true",
                        help="channels_last_3d tensors (conv3d-dx reads them as NDHWC) instead of contiguous")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads for both (default: all CPUs)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed runs first, at least this many and as many more as fill 50 ms "
                             "(default 1)")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs; the median is shown (default 7)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds of a block of runs of each library, the timed runs shared out over them "
                             "(default 2, at most --repeat)")
    parser.add_argument("--suite", default="default",
                        help="the benchmark suite (default), or more layer types of 3D networks (extra)")
    parser.add_argument("--shapes", default="", help="comma-separated names of the suite's shapes (default: all)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat is {args.repeat} but must be at least 1")
    if not 1 <= args.rounds <= args.repeat:
        parser.error(f"--rounds is {args.rounds} but must be from 1 to --repeat ({args.repeat})")

    torch.set_num_threads(args.threads)
    wanted = set(filter(None, args.shapes.split(",")))
    try:
        shapes = _core.suite(args.suite)
    except ValueError as e:
        parser.error(str(e))
    suite = [s for s in shapes if not wanted or s["name"] in wanted]
    unknown = wanted - {s["name"] for s in shapes}
    if unknown:
        parser.error(f"unknown shapes {sorted(unknown)}; the {args.suite} suite has {[s['name'] for s in shapes]}")
    layout = "channels_last_3d" if args.channels_last else "contiguous NCDHW"
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs online, {args.threads} threads for both")
    print(f"torch {torch.__version__}, conv3d-dx {conv3d_dx.__version__}; {args.dtype}, {layout}")
    print(f"runs: {args.warmup} warm-up (or more, for {_WARM_S * 1e3:.0f} ms), {args.repeat} timed, in "
          f"{args.rounds} rounds of a block per library; ratio = PyTorch median / conv3d-dx median (above 1: "
          "conv3d-dx is faster); paired = median over the rounds of that ratio within each round; "
          "diff = max|conv3d-dx - PyTorch| / max|PyTorch|")
    print(f"{'shape':<10} {'conv3d-dx ms':>12} {'min':>9} {'GFLOP/s':>8} {'PyTorch ms':>11} {'ratio':>7} "
          f"{'paired':>7} {'diff':>9}  engine")
    rows = []
    for shape in suite:
        r = run_shape(shape, _DTYPES[args.dtype], args.channels_last, args.threads, args.warmup, args.repeat,
                      args.rounds)
        rows.append(r)
        print(f"{r['name']:<10} {r['ours']:>12.3f} {r['ours_min']:>9.3f} {r['gflops']:>8.1f} {r['torch']:>11.3f} "
              f"{r['torch'] / r['ours']:>7.2f} {r['paired']:>7.2f} {r['diff']:>9.2e}  {r['engine']} ({r['isa']})",
              flush=True)
    if rows:
        ours = statistics.geometric_mean([r["ours"] for r in rows])
        theirs = statistics.geometric_mean([r["torch"] for r in rows])
        paired = statistics.geometric_mean([r["paired"] for r in rows])
        print(f"{'geomean':<10} {ours:>12.3f} {'':>9} {'':>8} {theirs:>11.3f} {theirs / ours:>7.2f} {paired:>7.2f}")


if __name__ == "__main__":
    main()
