"""labsupport.onnxutil.timing: statistics of timing samples, the two clocks, the load meter, ratio tables, interleaving,
JSON and plots.

Speeds are never asserted: the arithmetic is checked on injected durations and injected CPU counters, the measuring loops
on call counts and order, the clocks on calls that sleep (wall clock only) or that a child process makes (another program).
"""

import json
import subprocess
import sys
import time
from types import SimpleNamespace

import matplotlib
import pytest

from labsupport.bench.__main__ import SUITES, main
from labsupport.onnxutil import timing

matplotlib.use("Agg")


def _table(baseline="fast", **medians_ms):
    return timing.BenchTable([timing.Timing.from_samples(name, 1, [ms / 1e3], [ms / 1e3]) for name, ms in medians_ms.items()], baseline)


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
    assert rows[1]["speed-up vs fast (cpu)"] == 0.2 and rows[1]["median ms"] == 10.0 and rows[1]["items/s"] == 100.0
    assert "slow" in str(table)


def test_ratio_of_the_fastest_calls():
    table = timing.BenchTable(
        [timing.Timing.from_samples("base", 1, [0.002, 0.009, 0.008]), timing.Timing.from_samples("new", 1, [0.003, 0.004, 0.005])],
        "base",
        clock="wall",
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
    small = timing.BenchTable([timing.Timing.from_samples(n, 1, [s], [s]) for n, s in (("x", 0.002), ("y", 0.001))], "x")
    large = timing.BenchTable([timing.Timing.from_samples(n, 8, [s], [s]) for n, s in (("x", 0.004), ("y", 0.001))], "x")
    merged = timing.merge([small, large])
    assert merged.get("y", 8).batch_size == 8
    assert merged.ratio("y", 1) == pytest.approx(0.5) and merged.ratio("y", 8) == pytest.approx(0.25)
    payload = json.loads(merged.to_json(tmp_path / "timing.json", machine="test").read_text())
    assert payload["baseline"] == "x" and payload["machine"] == "test" and len(payload["timings"]) == 4
    assert payload["rows"][3]["speed-up vs x (cpu)"] == 4.0 and payload["clock"] == "cpu" and payload["load"] is None
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
    monkeypatch.setattr(timing, "cpu_clock", lambda: clock[0])  # the default clock: CPU time
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


def test_each_call_records_wall_clock_and_cpu_time_and_waiting_costs_no_cpu():
    sleeper = timing.measure(lambda: time.sleep(0.02), name="sleeps", warmup=0, repeat=3)
    assert sleeper.median_ms >= 20  # the wall clock counts the wait
    assert sleeper.cpu_median_ms < 10  # the CPU time does not: waiting is what a busy machine adds to a call
    assert sleeper.wall_per_cpu > 2


def test_ratios_follow_the_tables_clock(monkeypatch):
    waited = timing.Timing.from_samples("waited", 1, [0.010], [0.002])  # 8 ms of its 10 ms spent waiting for a CPU
    clean = timing.Timing.from_samples("clean", 1, [0.002], [0.002])
    cpu_table = timing.BenchTable([clean, waited], "clean")
    assert cpu_table.ratio("waited") == pytest.approx(1.0)  # the same cost
    assert cpu_table.ratio("waited", clock="wall") == pytest.approx(5.0)
    assert timing.BenchTable([clean, waited], "clean", clock="wall").ratio("waited") == pytest.approx(5.0)
    assert waited.wall_per_cpu == pytest.approx(5.0)
    with pytest.raises(ValueError, match="clock must be 'cpu'"):
        timing.BenchTable([clean], "clean", clock="cycles")
    with pytest.raises(ValueError, match="no CPU time was recorded"):
        timing.BenchTable([timing.Timing.from_samples("old", 1, [0.001])], "old").ratio("old")
    with pytest.raises(ValueError, match="1 CPU-time samples for 2 calls"):
        timing.Timing.from_samples("x", 1, [0.1, 0.2], [0.1])


def _fake_cpu_counters(monkeypatch, machine_busy, own):
    """psutil's system-wide and own CPU seconds, advanced by the test: (machine busy seconds, own seconds)."""
    monkeypatch.setattr(timing.psutil, "cpu_times", lambda: _Times(machine_busy[0]))
    monkeypatch.setattr(timing.psutil, "Process", lambda: SimpleNamespace(cpu_times=lambda: SimpleNamespace(user=own[0], system=0.0)))
    monkeypatch.setattr(timing.psutil, "cpu_count", lambda: 2)


class _Times(tuple):
    """A psutil.cpu_times() result: busy seconds in `user`, no idle time."""

    def __new__(cls, busy):
        return super().__new__(cls, (busy, 0.0))

    idle = 0.0


def test_the_load_meter_counts_other_programs_only(monkeypatch):
    machine_busy, own, clock = [100.0], [10.0], [0.0]
    _fake_cpu_counters(monkeypatch, machine_busy, own)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    meter = timing.LoadMeter()
    clock[0], machine_busy[0], own[0] = 2.0, 103.0, 11.0  # 2 s on 2 CPUs: 3 CPU-seconds busy, 1 of them ours
    load = meter.stop()
    assert load.others_share == pytest.approx(0.5) and load.cpus == 2 and load.seconds == pytest.approx(2.0) and load.busy
    assert "other programs used 50% of the 2 CPUs during the 2.0 s" in str(load)
    meter.start()
    clock[0], own[0], machine_busy[0] = 4.0, 13.0, 105.1  # only our own work, and a little more
    assert meter.stop().others_share == pytest.approx(0.025) and not meter.stop().busy


def test_with_process_tree_the_meters_own_work_includes_its_descendants(monkeypatch):
    machine_busy, clock = [100.0], [0.0]
    monkeypatch.setattr(timing.psutil, "cpu_times", lambda: _Times(machine_busy[0]))
    monkeypatch.setattr(timing.psutil, "cpu_count", lambda: 2)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    mine, service = [10.0], [0.0]  # the service is a child process (running), its CPU seconds

    def times(user, children=0.0):
        return SimpleNamespace(user=user, system=0.0, children_user=children, children_system=0.0)

    child = SimpleNamespace(cpu_times=lambda: times(service[0]))
    me = SimpleNamespace(cpu_times=lambda: times(mine[0]), children=lambda recursive: [child])
    monkeypatch.setattr(timing.psutil, "Process", lambda: me)
    tree, alone = timing.LoadMeter(process_tree=True), timing.LoadMeter()
    clock[0], machine_busy[0], mine[0], service[0] = 1.0, 102.0, 10.5, 1.5  # all the machine's work was ours and our child's
    assert tree.stop().others_share == pytest.approx(0.0)
    assert alone.stop().others_share == pytest.approx(0.75)  # without the tree, the child counts as another program


def test_the_load_meter_sees_another_process_use_a_cpu():
    meter = timing.LoadMeter()
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\nprint(time.process_time())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    load = meter.stop()
    child_cpu = float(child.stdout)  # another program's CPU seconds: a lower bound of what the meter must count
    assert load.others_share * load.cpus * load.seconds >= 0.8 * child_cpu


def test_a_wall_clock_verdict_on_a_busy_machine_says_so_and_a_cpu_verdict_does_not():
    clean = timing.Timing.from_samples("base", 1, [0.004], [0.004])
    faster = timing.Timing.from_samples("new", 1, [0.002], [0.002])
    busy = timing.Load(others_share=0.6, load_average=4.0, cpus=2, seconds=3.0)
    quiet = timing.Load(others_share=0.01, load_average=0.9, cpus=2, seconds=3.0)
    assert timing.BenchTable([clean, faster], "base", "wall", busy).verdict("new") == (
        "machine busy (60% of the CPUs used by other programs): ratio not reliable"
    )
    assert timing.BenchTable([clean, faster], "base", "wall", quiet).verdict("new") == "2.00x faster"
    assert timing.BenchTable([clean, faster], "base", "cpu", busy).verdict("new") == "2.00x faster"
    assert timing.BenchTable([faster, clean], "new", "cpu", busy).verdict("base") == "2.00x slower"
    assert timing.BenchTable([clean, faster], "base", "cpu", busy).verdict("new", noise=0.6) == "as fast (within ±60%)"
    conditions = timing.BenchTable([clean, faster], "base", "cpu", busy).conditions()
    assert conditions.startswith("other programs used 60% of the 2 CPUs") and "wall/CPU of the 'base' calls up to 1.00" in conditions
    # over several batch sizes the worst wall/CPU is the one that tells the load (a short call stays clean)
    waited = timing.Timing.from_samples("base", 64, [0.012], [0.004])
    assert "up to 3.00 (at batch 64)" in timing.BenchTable([clean, waited], "base", "cpu", busy).conditions()


def test_compare_candidates_records_cpu_time_and_the_load():
    table = timing.compare_candidates({"a": lambda: None, "b": lambda: time.sleep(0.005)}, baseline="a", warmup=0, repeat=3, clock="wall")
    assert table.clock == "wall" and table.load is not None and 0 <= table.load.others_share <= 1
    assert table.get("b").median_ms >= 5 and table.get("b").cpu_median_ms < table.get("b").median_ms
    with pytest.raises(ValueError, match="clock must be"):
        timing.compare_candidates({"a": lambda: None}, baseline="a", clock="both")


def test_merge_refuses_tables_on_different_clocks_and_merges_their_loads():
    base = [timing.Timing.from_samples("a", 1, [0.001], [0.001])]
    calm, busy = timing.Load(0.05, 1.0, 2, 3.0), timing.Load(0.45, 2.5, 2, 1.0)
    merged = timing.merge([timing.BenchTable(base, "a", "cpu", calm), timing.BenchTable(base, "a", "cpu", busy)])
    assert merged.load.seconds == 4.0 and merged.load.others_share == pytest.approx(0.15) and merged.load.load_average == 2.5
    with pytest.raises(ValueError, match="at least one Load"):
        timing.merge_loads([])
    with pytest.raises(ValueError, match="different clocks"):
        timing.merge([timing.BenchTable(base, "a", "cpu"), timing.BenchTable(base, "a", "wall")])
