"""conv3d_dx.bench, the benchmark against PyTorch: its warm-up rule, its rounds, and a run whose rows agree
with PyTorch (the diff column), pair the two libraries' blocks round by round and name the engine."""

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


def test_rounds_share_out_the_runs_and_alternate_which_library_goes_first(monkeypatch):
    blocks = []

    def timed_block(fn, warmup, repeat):
        blocks.append((fn(), repeat))
        return [float(len(blocks))] * repeat

    monkeypatch.setattr(bench, "_time", timed_block)
    ta, tb = bench._time_both(lambda: "a", lambda: "b", warmup=0, repeat=7, rounds=3)
    assert blocks == [("a", 3), ("b", 3), ("b", 2), ("a", 2), ("a", 2), ("b", 2)]
    assert ta == [[1.0] * 3, [4.0] * 2, [5.0] * 2]  # each round's own block
    assert tb == [[2.0] * 3, [3.0] * 2, [6.0] * 2]


def test_rounds_outside_one_to_repeat_are_refused(capsys):
    for argv in (["--rounds", "0"], ["--rounds", "8", "--repeat", "7"], ["--repeat", "0"]):
        try:
            bench.main(["--shapes", "g"] + argv)
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(f"{argv} accepted")
    assert "--rounds is 8 but must be from 1 to --repeat (7)" in capsys.readouterr().err


def test_suite_rows_match_pytorch(capsys):
    threads = torch.get_num_threads()
    try:
        bench.main(["--shapes", "g,h", "--repeat", "3", "--rounds", "3", "--threads", "1", "--channels-last"])
    finally:
        torch.set_num_threads(threads)  # main sets PyTorch's threads for the whole process
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("runs: 1 warm-up (or more, for 50 ms), 3 timed, in 3 rounds")
    rows = {line.split()[0]: line.split() for line in lines[4:]}
    assert set(rows) == {"g", "h", "geomean"}
    for name in ("g", "h"):
        assert float(rows[name][5]) > 0 and float(rows[name][6]) > 0, rows[name]  # ratio, paired
        assert float(rows[name][7]) < 1e-5, rows[name]  # max |conv3d-dx - PyTorch| / max |PyTorch|
        assert re.fullmatch(r"(gemm|pixel|pointwise|stream)_\w+", rows[name][8]), rows[name]  # the engine
    assert len(rows["geomean"]) == 5 and float(rows["geomean"][4]) > 0, rows["geomean"]


def test_extra_suite_rows_match_pytorch(capsys):
    threads = torch.get_num_threads()
    try:
        bench.main(["--suite", "extra", "--shapes", "depthwise,k311", "--repeat", "1", "--rounds", "1",
                    "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[4:]}
    assert list(rows) == ["k311", "depthwise", "geomean"]  # suite order
    for name in ("k311", "depthwise"):
        assert float(rows[name][7]) < 1e-5, rows[name]


def test_unknown_suite_or_shape_is_refused(capsys):
    for argv in (["--suite", "huge"], ["--suite", "extra", "--shapes", "a"]):
        try:
            bench.main(argv)
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(f"{argv} accepted")
    err = capsys.readouterr().err
    assert "suite is 'huge' but must be one of default, extra" in err
    assert "the extra suite has ['unet16'" in err
    try:
        bench._core.suite("huge")
    except ValueError as e:
        assert "suite is 'huge' but must be one of default, extra" in str(e)
    else:
        raise AssertionError("suite('huge') accepted")
