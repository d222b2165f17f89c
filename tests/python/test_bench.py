"""conv3d_dx.bench, the benchmark against PyTorch: its warm-up rule, and a run whose rows agree with
PyTorch (the diff column) and name the engine."""

import re

import torch

import conv3d_dx.bench as bench


def test_warm_up_runs_the_count_and_for_the_time():
    calls = []
    before = bench.time.perf_counter()
    times = bench._time(lambda: calls.append(bench.time.perf_counter()), warmup=3, repeat=2)
    assert len(times) == 2
    warm = calls[:-2]
    assert len(warm) >= 3
    # The timed runs start only after the pause and the warm-up time.
    assert calls[-2] - before >= bench._SETTLE_S + bench._WARM_S
    slow = []
    bench._time(lambda: slow.append(bench.time.sleep(0.03)), warmup=3, repeat=1)
    assert len(slow) == 4  # 3 warm-up runs outlast the warm-up time: no more are added


def test_suite_rows_match_pytorch(capsys):
    threads = torch.get_num_threads()
    try:
        bench.main(["--shapes", "g,h", "--repeat", "2", "--threads", "1", "--channels-last"])
    finally:
        torch.set_num_threads(threads)  # main sets PyTorch's threads for the whole process
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("runs: 1 warm-up (or more, for 50 ms), 2 timed")
    rows = {line.split()[0]: line.split() for line in lines[4:]}
    assert set(rows) == {"g", "h", "geomean"}
    for name in ("g", "h"):
        assert float(rows[name][6]) < 1e-5, rows[name]  # max |conv3d-dx - PyTorch| / max |PyTorch|
        assert re.fullmatch(r"(gemm|pixel|pointwise|stream)_\w+", rows[name][7]), rows[name]  # the engine
