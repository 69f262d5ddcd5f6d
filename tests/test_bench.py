import json
import time

import matplotlib
import pytest

from labsupport import bench

matplotlib.use("Agg")


def test_measure_counts_calls_and_orders_percentiles():
    calls = []
    timing = bench.measure(lambda: calls.append(1), name="noop", batch_size=4, warmup=2, repeat=7)
    assert len(calls) == 9 and timing.runs == 7 and timing.batch_size == 4
    assert 0 <= timing.median_ms <= timing.p90_ms <= timing.p99_ms
    assert timing.throughput > 0


def test_slow_candidate_has_higher_ratio():
    table = bench.compare_candidates(
        {"fast": lambda: None, "slow": lambda: time.sleep(0.002)}, baseline="fast", warmup=1, repeat=5
    )
    assert table.ratio("fast") == pytest.approx(1.0)
    assert table.ratio("slow") > 5
    rows = table.rows()
    assert [row["candidate"] for row in rows] == ["fast", "slow"]
    assert rows[1]["speed-up vs fast"] < 0.2
    assert "slow" in str(table)


def test_candidates_are_interleaved():
    order = []
    bench.compare_candidates({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, baseline="a", warmup=0, repeat=3)
    assert order == ["a", "b"] * 3


def test_merge_json_and_plot(tmp_path):
    tables = [
        bench.compare_candidates({"x": lambda: None, "y": lambda: None}, baseline="x", batch_size=size, warmup=0, repeat=3)
        for size in (1, 8)
    ]
    merged = bench.merge(tables)
    assert merged.get("y", 8).batch_size == 8
    assert merged.ratio("y", 8) > 0
    payload = json.loads(merged.to_json(tmp_path / "bench.json", machine="test").read_text())
    assert payload["baseline"] == "x" and payload["machine"] == "test" and len(payload["timings"]) == 4
    figure = bench.plot(merged)
    assert len(figure.axes) == 2 and len(figure.axes[0].get_lines()) >= 2


def test_errors_name_what_was_expected():
    with pytest.raises(ValueError, match="repeat >= 1"):
        bench.measure(lambda: None, repeat=0)
    with pytest.raises(TypeError, match="callable"):
        bench.measure(42)
    with pytest.raises(KeyError, match="baseline 'z'"):
        bench.compare_candidates({"a": lambda: None}, baseline="z")
    table = bench.compare_candidates({"a": lambda: None}, baseline="a", warmup=0, repeat=1)
    with pytest.raises(KeyError, match="no timing for 'b'"):
        table.get("b")
    with pytest.raises(ValueError, match="different baselines"):
        bench.merge([table, bench.BenchTable(table.timings, "other")])
    with pytest.raises(ValueError, match="no timing samples"):
        bench.Timing.from_samples("x", 1, [])


def test_command_line_rejects_unknown_suite(capsys):
    assert bench.main(["nonsense"]) == 2
    assert "choose one of" in capsys.readouterr().err
