"""labsupport.bench.service: a missed target says "machine busy" when other programs used the CPUs meanwhile."""

from labsupport.bench import service as service_bench
from labsupport.onnxutil import timing
from labsupport.topics import loadgen


def _comparison(load):
    def result(concurrency, throughput, p99):
        return loadgen.LoadResult(concurrency, 100, 100, 0, 0, 1.0, throughput, p99 / 2, p99, {200: 100})

    results = {
        service_bench.PER_REQUEST: [result(1, 100, 10), result(32, 50, 800)],
        service_bench.BATCHING: [result(1, 70, 14), result(32, 120, 400)],  # the lone client is slower with batching
    }
    counts = {"requests": 200, "runs": 80, "examples_run": 200, "examples_requested": 200, "mean_queue_wait_ms": 1.0}
    return service_bench.BatchingComparison((1, 32), results, {}, counts, load)


def test_a_missed_target_on_a_busy_machine_is_not_a_verdict(tmp_path):
    busy = _comparison(timing.Load(others_share=0.6, load_average=5.0, cpus=2, seconds=30.0))
    assert not busy.lone_target_met() and busy.loaded_target_met()
    assert busy.target_verdict(busy.loaded_target_met()) == "met"
    assert busy.target_verdict(busy.lone_target_met()).startswith("not met, and not reliable: machine busy (other programs used 60%")
    quiet = _comparison(timing.Load(others_share=0.02, load_average=1.0, cpus=2, seconds=30.0))
    assert quiet.target_verdict(quiet.lone_target_met()).startswith("NOT met")
    assert _comparison(None).target_verdict(False).startswith("NOT met")
    saved = __import__("json").loads(busy.to_json(tmp_path / "b.json").read_text())
    assert saved["load"]["others_share"] == 0.6
