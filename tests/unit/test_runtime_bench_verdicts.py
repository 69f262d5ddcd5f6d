"""labsupport.bench.runtime's words for a framework sweep (notebook 05, section 7), on injected CPU times."""

import pytest

from labsupport.bench import runtime as runtime_bench
from labsupport.onnxutil import timing

QUIET = timing.Load(others_share=0.02, load_average=1.0, cpus=2, seconds=5.0)
BUSY = timing.Load(others_share=0.7, load_average=6.0, cpus=2, seconds=5.0)


def _sweep(cpu_ms: dict[str, dict[int, float]], load: timing.Load) -> timing.BenchTable:
    timings = [
        timing.Timing.from_samples(name, size, [ms / 1e3], [ms / 1e3]) for name, by_size in cpu_ms.items() for size, ms in by_size.items()
    ]
    return timing.BenchTable(timings, runtime_bench.PYTORCH, "cpu", load)


def test_a_framework_verdict_from_cpu_time_within_the_noise():
    sweep = _sweep({"pytorch": {1: 0.1, 256: 8.0}, "onnxruntime": {1: 0.02, 256: 1.6}, "tensorflow": {1: 0.4, 256: 5.6}}, QUIET)
    assert runtime_bench.framework_verdict(sweep, "onnxruntime", 256, 0.1) == "5.00x faster than"
    assert runtime_bench.framework_verdict(sweep, "tensorflow", 1, 0.1) == "4.00x slower than"
    assert runtime_bench.framework_verdict(sweep, "tensorflow", 256, 0.5) == "as fast as (within ±50%)"


def test_no_verdict_where_the_samples_were_disturbed_or_tensorflow_ran_on_a_busy_machine():
    disturbed = _sweep({"pytorch": {1: 0.1, 256: 8.0}, "onnxruntime": {1: 2.0, 256: 1.6}}, QUIET)  # batch 1 dearer than 256
    assert runtime_bench.framework_verdict(disturbed, "onnxruntime", 256, 0.1).startswith("not rankable (a time per call fell")
    busy = _sweep({"pytorch": {1: 0.1, 256: 8.0}, "onnxruntime": {1: 0.02, 256: 1.6}, "tensorflow": {1: 0.4, 256: 5.6}}, BUSY)
    assert runtime_bench.framework_verdict(busy, "tensorflow", 1, 0.1).startswith("not rankable (machine busy")
    assert runtime_bench.framework_verdict(busy, "onnxruntime", 1, 0.1) == "5.00x faster than"  # the calling thread's work


def test_sweep_noise_is_the_twins_largest_deviation_with_a_floor():
    twin = runtime_bench.PYTORCH + runtime_bench.AGAIN
    sweep = _sweep({"pytorch": {1: 0.1, 4: 0.2}, twin: {1: 0.1, 4: 0.26}}, QUIET)
    assert runtime_bench.sweep_noise(sweep) == pytest.approx(0.3)
    assert runtime_bench.sweep_noise(_sweep({"pytorch": {1: 0.1}, twin: {1: 0.101}}, QUIET)) == runtime_bench.NOISE_FLOOR


def test_no_verdict_when_the_twin_is_more_than_twice_apart():
    """A quiet run measured eager PyTorch's batch-1 twin 2.27x apart (0.092 vs 0.208 ms): a verdict, not a ValueError."""
    twin = runtime_bench.PYTORCH + runtime_bench.AGAIN
    sweep = _sweep({"pytorch": {1: 0.092, 256: 5.1}, twin: {1: 0.208, 256: 5.6}, "onnxruntime": {1: 0.02, 256: 1.6}}, QUIET)
    noise = runtime_bench.sweep_noise(sweep)
    assert noise > 1
    assert runtime_bench.framework_verdict(sweep, "onnxruntime", 1, noise).startswith("not rankable (eager PyTorch's A/A twin")
