"""labsupport.onnxutil.timing: statistics of timing samples, ratio tables, interleaving, JSON and plots.

Speeds are never asserted: the arithmetic is checked on injected durations, the measuring loops on call counts and order.
"""

import json

import matplotlib
import pytest

from labsupport.bench.__main__ import SUITES, main
from labsupport.onnxutil import timing

matplotlib.use("Agg")


def _table(baseline="fast", **medians_ms):
    return timing.BenchTable([timing.Timing.from_samples(name, 1, [ms / 1e3]) for name, ms in medians_ms.items()], baseline)


def test_statistics_of_injected_samples():
    stats = timing.Timing.from_samples("x", 8, [0.004, 0.001, 0.002, 0.003, 0.010])
    assert stats.runs == 5 and stats.batch_size == 8 and stats.min_ms == pytest.approx(1.0)
    assert stats.median_ms == pytest.approx(3.0) and stats.mean_ms == pytest.approx(4.0)
    assert stats.p90_ms == pytest.approx(7.6) and stats.p99_ms == pytest.approx(9.76)
    assert stats.throughput == pytest.approx(8 / 0.003)
    assert timing.Timing.from_samples("instant", 1, [0.0]).throughput == float("inf")


def test_measure_counts_warmup_and_timed_calls():
    calls = []
    result = timing.measure(lambda: calls.append(1), name="noop", batch_size=4, warmup=2, repeat=7)
    assert len(calls) == 9 and result.runs == 7 and result.batch_size == 4 and result.name == "noop"
    assert 0 <= result.median_ms <= result.p90_ms <= result.p99_ms


def test_ratios_and_rows_from_injected_timings():
    table = _table(fast=2.0, slow=10.0)
    assert table.ratio("fast") == 1.0 and table.ratio("slow") == pytest.approx(5.0)
    rows = table.rows()
    assert [row["candidate"] for row in rows] == ["fast", "slow"]
    assert rows[1]["speed-up vs fast"] == 0.2 and rows[1]["median ms"] == 10.0 and rows[1]["items/s"] == 100.0
    assert "slow" in str(table)


def test_ratio_of_the_fastest_calls():
    table = timing.BenchTable(
        [timing.Timing.from_samples("base", 1, [0.002, 0.009, 0.008]), timing.Timing.from_samples("new", 1, [0.003, 0.004, 0.005])], "base"
    )
    assert table.ratio("new") == pytest.approx(0.5)  # medians 4 / 8 ms: a loaded baseline
    assert table.ratio("new", statistic="min") == pytest.approx(1.5)  # fastest 3 / 2 ms
    with pytest.raises(ValueError, match="'median' or 'min'"):
        table.ratio("new", statistic="mean")


def test_candidates_are_interleaved_round_by_round():
    order = []
    table = timing.compare_candidates({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, baseline="a", warmup=1, repeat=3)
    assert order == ["a", "b"] * 4  # one warm-up call each, then three interleaved rounds
    assert [(t.name, t.runs) for t in table.timings] == [("a", 3), ("b", 3)]


def test_merge_json_and_plot(tmp_path):
    small = timing.BenchTable([timing.Timing.from_samples(n, 1, [s]) for n, s in (("x", 0.002), ("y", 0.001))], "x")
    large = timing.BenchTable([timing.Timing.from_samples(n, 8, [s]) for n, s in (("x", 0.004), ("y", 0.001))], "x")
    merged = timing.merge([small, large])
    assert merged.get("y", 8).batch_size == 8
    assert merged.ratio("y", 1) == pytest.approx(0.5) and merged.ratio("y", 8) == pytest.approx(0.25)
    payload = json.loads(merged.to_json(tmp_path / "timing.json", machine="test").read_text())
    assert payload["baseline"] == "x" and payload["machine"] == "test" and len(payload["timings"]) == 4
    assert payload["rows"][3]["speed-up vs x"] == 4.0
    figure = timing.plot(merged)
    assert len(figure.axes) == 2 and [line.get_label() for line in figure.axes[1].get_lines()] == ["x", "y"]
    assert list(figure.axes[1].get_lines()[1].get_xdata()) == [1, 8]


def test_blocks_time_each_candidate_on_its_own():
    order = []
    table = timing.compare_candidates(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")},
        baseline="a",
        batch_size=2,
        warmup=1,
        repeat=4,
        blocks=2,
        settle_s=0,
    )
    assert order == ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3  # per block: 1 warm-up + 2 timed calls, candidate by candidate
    assert [(t.name, t.runs, t.batch_size) for t in table.timings] == [("a", 4, 2), ("b", 4, 2)]
    assert table.ratio("a") == pytest.approx(1.0)
    with pytest.raises(KeyError, match="baseline"):
        timing.compare_candidates({"a": lambda: None}, baseline="z", blocks=2)
    for bad in ({"blocks": -1}, {"settle_s": -1}):
        with pytest.raises(ValueError, match="blocks >= 0"):
            timing.compare_candidates({"a": lambda: None}, baseline="a", **bad)


class _ScheduledSession:
    """A fake session: each ``run`` advances a fake clock by the next duration of the schedule."""

    def __init__(self, clock, durations):
        self.clock, self.durations = clock, iter(durations)
        self.marker = "the wrapped session's"

    def run(self, output_names, feeds):
        self.clock[0] += next(self.durations)
        return [feeds["x"] + 1]


def test_fastest_steps_takes_the_minimum_of_each_call_index(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    durations = [0, 0, 0, 1, 5, 3, 4, 2, 6, 2, 3, 1]  # a warm-up run (the fastest: it must not count), then 3 runs of 3 calls
    session = _ScheduledSession(clock, durations)
    seen = []

    def loop(timed):
        seen.append(timed.marker)  # attributes other than run are the session's
        value = 0
        for _ in range(3):
            value = timed.run(None, {"x": value})[0]

    assert timing.fastest_steps(loop, session, repeat=3).tolist() == [1, 2, 1]
    assert seen == ["the wrapped session's"] * 4


def test_fastest_steps_refuses_loops_of_different_lengths():
    calls = iter([2, 2, 3])

    class Session:
        def run(self, *args):
            return None

    def loop(timed):
        for _ in range(next(calls)):
            timed.run()

    with pytest.raises(ValueError, match=r"the same number of times .* got \[2, 3\]"):
        timing.fastest_steps(loop, Session(), repeat=2)
    with pytest.raises(ValueError, match="got \\[0\\]"):
        timing.fastest_steps(lambda timed: None, Session(), repeat=2)


def test_speed_verdict_claims_no_difference_inside_the_noise():
    assert timing.speed_verdict(0.5) == "2.00x faster than"
    assert timing.speed_verdict(1.25) == "1.25x slower than"
    assert timing.speed_verdict(1.08) == timing.speed_verdict(0.93) == "as fast as (within ±10%)"
    assert timing.speed_verdict(1.08, noise=0.05) == "1.08x slower than"
    for ratio, noise in ((0, 0.1), (float("nan"), 0.1), (1.0, -0.1), (1.0, 1.0)):
        with pytest.raises(ValueError, match="ratio"):
            timing.speed_verdict(ratio, noise)


def test_errors_name_what_was_expected():
    with pytest.raises(ValueError, match="repeat >= 1"):
        timing.measure(lambda: None, repeat=0)
    with pytest.raises(TypeError, match="callable"):
        timing.measure(42)
    with pytest.raises(KeyError, match="baseline 'z'"):
        timing.compare_candidates({"a": lambda: None}, baseline="z")
    table = _table(a=1.0, baseline="a")
    with pytest.raises(KeyError, match="no timing for 'b'"):
        table.get("b")
    with pytest.raises(KeyError, match="no baseline 'other' measured at batch size 1"):
        timing.BenchTable(table.timings, "other").ratio("a")
    with pytest.raises(ValueError, match="different baselines"):
        timing.merge([table, timing.BenchTable(table.timings, "other")])
    with pytest.raises(ValueError, match="at least one table"):
        timing.merge([])
    with pytest.raises(ValueError, match="no timing samples"):
        timing.Timing.from_samples("x", 1, [])


def test_command_line_names_the_suites_and_rejects_unknown_ones(capsys):
    assert list(SUITES) == ["runtime", "quantization", "service"]
    assert main(["nonsense"]) == 2
    assert "choose one of: runtime, quantization, service, all" in capsys.readouterr().err
