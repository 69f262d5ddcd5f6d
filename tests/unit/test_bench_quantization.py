"""labsupport.bench.quantization (notebook 06, section 8): measuring variants, the report's ratios and words, the targets.

Running the whole suite (``python -m labsupport.bench quantization``) is tested in
tests/integration/test_bench_quantization.py.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from labsupport.bench import quantization as quantization_bench
from labsupport.bench.quantization import NOISE_FLOOR, VariantReport, VariantResult, check_targets, measure_variants
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics.quantization import AA_NAME, build_variants


@pytest.fixture(scope="module")
def cnn_variants(tmp_path_factory):
    """FP32 / INT8 dynamic / INT8 static / FP16 / A/A of the course CNN (fast: the CNN is tiny)."""
    return build_variants(ensure_digits_cnn(), tmp_path_factory.mktemp("variants"), int4=False)


def test_measure_variants_sizes_and_accuracies(cnn_variants):
    report = measure_variants(cnn_variants, model="cnn", timings=False)
    fp32 = report.get("FP32")
    assert fp32.size_kb == pytest.approx(cnn_variants["FP32"].stat().st_size / 1024)
    assert report.size_ratio("FP32") == 1.0 and report.size_ratio(AA_NAME) == 1.0
    assert report.size_ratio("INT8 static") < 0.6 and report.size_ratio("FP16") < 0.7
    assert report.accuracy_delta("FP32") == 0.0  # deltas of trained models: tests/integration/test_quantization_accuracy.py
    frame = report.to_frame(timings=False)
    assert list(frame.index) == list(cnn_variants) and "CPU ms @ batch 1" not in frame.columns
    assert "accuracy %" not in report.to_frame(timings=False, accuracy=False).columns


def test_measure_variants_times_each_batch_size(cnn_variants):
    report = measure_variants(cnn_variants, model="cnn", batch_sizes=(1, 8), repeat=2, warmup=1)
    for result in report.results:
        assert set(result.cpu_ms) == set(result.latency_ms) == {1, 8}
    assert report.latency_ratio("FP32", 8) == pytest.approx(1.0) == report.latency_ratio("FP32", 8, clock="wall")
    rows = report.rows()
    assert {"CPU ms @ batch 1", "CPU ratio @ 8", "wall ms @ batch 8"} <= set(rows[0])
    assert report.load is not None and report.conditions().startswith("other programs used")
    assert "wall/CPU of the FP32 calls:" in report.conditions()
    payload = report.to_dict()
    json.dumps(payload)
    assert payload["baseline"] == "FP32" and len(payload["results"]) == 5 and 0 <= payload["load"]["others_share"] <= 1
    with pytest.raises(KeyError, match="batch 64"):
        report.latency_ratio("FP32", 64)
    ax = report.plot(batch_size=8)
    assert ax.get_title() == "cnn"


def test_measure_variants_errors(cnn_variants, tmp_path):
    with pytest.raises(KeyError, match="baseline"):
        measure_variants(cnn_variants, baseline="FP64", timings=False)
    with pytest.raises(ValueError, match="batch_sizes"):
        measure_variants(cnn_variants, batch_sizes=(0,))
    with pytest.raises(ValueError, match="exceeds the 540 test images"):
        measure_variants(cnn_variants, batch_sizes=(541,), repeat=1, warmup=0)
    with pytest.raises(FileNotFoundError, match=r"missing\.onnx"):
        measure_variants({"FP32": tmp_path / "missing.onnx"}, timings=False)
    report = measure_variants(cnn_variants, timings=False)
    with pytest.raises(KeyError, match="no variant"):
        report.get("INT3")


def _report(aa_ms: float, int8_ms: float) -> VariantReport:
    return VariantReport(
        "m",
        "FP32",
        [
            VariantResult("FP32", 100.0, 0.9, {64: 10.0}),
            VariantResult(AA_NAME, 100.0, 0.9, {64: aa_ms}),
            VariantResult("INT8", 25.0, 0.9, {64: int8_ms}),
        ],
    )


def test_timing_noise_and_speed_text(monkeypatch):
    assert _report(10.5, 5.0).timing_noise(64) == pytest.approx(0.10)  # the floor
    assert _report(8.5, 5.0).timing_noise(64) == pytest.approx(0.15)  # a noisier A/A run widens it
    assert _report(10.0, 2.5).speed_text("INT8", 64) == "0.25x the FP32 CPU time at batch 64: 4.00x faster than FP32"
    assert _report(10.0, 30.0).speed_text("INT8", 64).endswith(": 3.00x slower than FP32")
    assert "as fast as (within ±" in _report(8.5, 11.2).speed_text("INT8", 64)
    assert _report(25.0, 5.0).speed_text("INT8", 64) == (
        "0.50x the FP32 CPU time at batch 64: no verdict, the A/A control differed by 150%"
    )
    # an INT8 speed-up beyond what INT8 dot products allow over FP32 is called a measuring error, never printed as a result
    monkeypatch.setattr(quantization_bench, "cpu_features", lambda: SimpleNamespace(features=["avx2", "avx512_vnni"]))
    assert (
        _report(10.0, 0.5)
        .speed_text("INT8", 64)
        .endswith("20.00x faster than FP32 (beyond the ~4x that INT8 dot products can gain over FP32 on this CPU: a measuring error)")
    )
    assert "measuring error" not in _report(10.0, 2.6).speed_text("INT8", 64)
    # a CPU with INT8 matrix instructions (AMX, Arm i8mm) can go beyond 4x: no ceiling is claimed there
    monkeypatch.setattr(quantization_bench, "cpu_features", lambda: SimpleNamespace(features=["avx512_vnni", "amx_int8"]))
    assert _report(10.0, 0.5).speed_text("INT8", 64).endswith("20.00x faster than FP32")
    without_aa = VariantReport("m", "FP32", [VariantResult("FP32", 1.0, 0.9, {1: 1.0})])
    assert without_aa.timing_noise(1) == NOISE_FLOOR


def _two_int8(model: str, size: float, latency: float, acc: float) -> VariantReport:
    return VariantReport(
        model,
        "FP32",
        [
            VariantResult("FP32", 100.0, 0.98, {64: 10.0}),
            VariantResult("INT8 dynamic", size, acc, {64: latency}),
            VariantResult("INT8 static", size, acc, {64: latency}),
        ],
    )


def test_check_targets_reports_met_and_missed():
    good = check_targets(_two_int8("mlp", 25.0, 3.0, 0.975), _two_int8("cnn", 40.0, 9.0, 0.975))
    assert all(t.met for t in good) and len(good) == 7
    bad = check_targets(_two_int8("mlp", 30.0, 6.0, 0.95), _two_int8("cnn", 40.0, 9.0, 0.95))
    assert not any(t.met for t in bad)
    assert "MISSED" in str(bad[0]) and "target <= 0.27" in str(bad[0])
    assert [t.timing for t in bad[:3]] == [False, True, False]
    # accuracy targets: a signed change, higher is better, printed at the tables' precision
    assert str(bad[2]).endswith("INT8 dynamic accuracy change (points) = -3.0 (target >= -1)")
    assert str(good[2]).startswith("MET ") and "= -0.5 (target >= -1)" in str(good[2])
    # verdicts print the value only where it is the same on every CPU and run (size ratios)
    assert good[0].verdict == str(good[0])
    assert good[1].verdict == "MET   mlp: INT8 dynamic CPU-time ratio @ batch 64 <= 0.5"
    assert bad[2].verdict == "MISSED  mlp: INT8 dynamic accuracy change (points) >= -1"


def test_check_targets_without_timings_or_cnn():
    untimed = VariantReport(
        "mlp", "FP32", [VariantResult(n, 100.0 if n == "FP32" else 25.0, 0.98) for n in ("FP32", "INT8 dynamic", "INT8 static")]
    )
    targets = check_targets(untimed)
    assert len(targets) == 4 and not any(t.timing for t in targets) and all(t.met for t in targets)


def test_accuracy_delta_is_the_difference_of_the_printed_accuracies():
    # 536/540 = 99.26 % and 537/540 = 99.44 %: printed 99.3 and 99.4, so the change is +0.1 (not the exact +0.19)
    report = VariantReport(
        "cnn",
        "FP32",
        [VariantResult("FP32", 47.0, 536 / 540), VariantResult("INT8 static", 21.0, 537 / 540), VariantResult("worse", 21.0, 530 / 540)],
    )
    assert report.accuracy_delta("INT8 static") == 0.1
    assert report.accuracy_delta("FP32") == 0.0
    assert report.accuracy_delta("worse") == -1.2  # 98.1 - 99.3
    rows = {row["variant"]: row for row in report.rows(timings=False)}
    assert (rows["FP32"]["accuracy %"], rows["INT8 static"]["accuracy %"]) == (99.3, 99.4)
    assert rows["INT8 static"]["Δ acc (points)"] == "+0.1" and rows["worse"]["Δ acc (points)"] == "-1.2"
    with pytest.raises(KeyError, match="no variant"):
        report.accuracy_delta("missing")


def test_ratios_come_from_cpu_time_unless_the_wall_clock_is_asked_for():
    # the INT8 file waited for the CPU (a busy machine): 40 ms on the wall clock for 3 ms of CPU time
    report = VariantReport(
        "m", "FP32", [VariantResult("FP32", 100.0, 0.9, {64: 10.0}, {64: 10.5}), VariantResult("INT8", 25.0, 0.9, {64: 3.0}, {64: 40.0})]
    )
    assert report.latency_ratio("INT8", 64) == pytest.approx(0.3)
    assert report.latency_ratio("INT8", 64, clock="wall") == pytest.approx(40.0 / 10.5)
    assert report.speed_text("INT8", 64).endswith("3.33x faster than FP32")
    with pytest.raises(ValueError, match="clock must be"):
        report.latency_ratio("INT8", 64, clock="median")
