"""Dynamic batching in deploy/service (notebook 08): the batcher in-process, then the real service on 127.0.0.1.

No test asserts a speed or a duration: `python -m labsupport.bench service` prints the ratios, and
"refuses at once" is checked as an order of events (refused while the queued requests still wait).
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time

import httpx
import numpy as np
import onnxruntime as ort
import pytest
from anyio import CapacityLimiter

from labsupport.course.compare import softmax
from labsupport.course.data import load_digits
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics import loadgen, serving
from onnx_service import batching, config, metrics

QUEUE_DEPTH = ("onnx_service_batcher_queue_depth", ())


# ---------------------------------------------------------------- the batcher alone (no HTTP)


def _doubling(calls: list[int]):
    def run(rows: np.ndarray) -> list[np.ndarray]:
        calls.append(len(rows))
        return [rows * 2, rows.sum(axis=1)]

    return run


def _batcher(run, **overrides) -> batching.Batcher:
    options = dict(max_size=8, max_wait=0.02, queue_limit=100, limiter=CapacityLimiter(1))
    return batching.Batcher(run, **{**options, **overrides})


def test_each_caller_gets_exactly_its_rows_from_merged_batches():
    calls: list[int] = []
    observed: list[tuple[int, int]] = []
    batcher = _batcher(_doubling(calls), observe=lambda examples, seconds, waits: observed.append((examples, len(waits))))
    sizes = [1, 3, 2, 1, 4, 1, 2, 5, 1, 1]
    inputs = [np.full((n, 2), i, dtype=np.float32) + np.arange(n, dtype=np.float32)[:, None] for i, n in enumerate(sizes)]

    async def scenario():
        return await asyncio.gather(*(batcher.submit(x) for x in inputs))

    results = asyncio.run(scenario())
    for x, (doubled, sums) in zip(inputs, results, strict=True):
        np.testing.assert_array_equal(doubled, x * 2)
        np.testing.assert_array_equal(sums, x.sum(axis=1))
    assert sum(calls) == sum(sizes) and max(calls) <= 8 and len(calls) < len(sizes)  # merged, never above max_size
    assert [examples for examples, _ in observed] == calls and sum(n for _, n in observed) == len(sizes)


def test_a_request_queued_while_the_batcher_closes_is_still_answered():
    batcher = _batcher(_doubling([]), limiter=CapacityLimiter(2))

    async def scenario():
        await batcher.submit(np.ones((1, 2)))
        closing = asyncio.create_task(batcher.close())  # a routing switch stops a batcher another router still uses
        late = asyncio.create_task(batcher.submit(np.full((1, 2), 3.0)))  # queued in the same loop iteration
        await closing
        answer = await asyncio.wait_for(late, 2)
        await batcher.close()
        return answer, batcher._collector.done()

    (doubled, _), stopped = asyncio.run(scenario())
    np.testing.assert_array_equal(doubled, np.full((1, 2), 6.0))
    assert stopped  # closed for good once nothing waits


def test_a_request_larger_than_max_size_runs_alone():
    calls: list[int] = []
    batcher = _batcher(_doubling(calls), max_size=4)

    async def scenario():
        return await asyncio.gather(batcher.submit(np.ones((6, 2))), batcher.submit(np.ones((1, 2))))

    big, small = asyncio.run(scenario())
    assert big[0].shape == (6, 2) and small[0].shape == (1, 2) and calls == [6, 1]


def test_a_full_queue_refuses_at_once_and_the_queued_requests_still_finish():
    calls: list[int] = []
    running, release = threading.Event(), threading.Event()

    def held_run(rows):  # the first batch holds the only inference slot until the test releases it
        running.set()
        release.wait(30)
        return _doubling(calls)(rows)

    batcher = _batcher(held_run, max_wait=0.0, max_size=100, queue_limit=2)

    async def scenario():
        first = asyncio.ensure_future(batcher.submit(np.ones((1, 2))))
        await asyncio.to_thread(running.wait, 30)  # the first request is in the model: the next ones must queue
        queued = [asyncio.ensure_future(batcher.submit(np.ones((1, 2)))) for _ in range(2)]
        await asyncio.sleep(0)
        assert batcher.queued == 2
        with pytest.raises(batching.QueueFull, match="2 requests queued") as refused:
            await batcher.submit(np.ones((1, 2)))
        assert refused.value.retry_after == 1 and not any(future.done() for future in [first, *queued])  # refused before any answer
        release.set()
        return await asyncio.gather(first, *queued)

    assert len(asyncio.run(scenario())) == 3 and calls == [1, 2]


def test_a_failed_merged_run_gives_each_caller_its_own_outcome_and_the_batcher_recovers():
    calls: list[list[float]] = []

    def run(rows):  # refuses a row holding a negative value, as a model refuses an out-of-range token id
        calls.append(rows[:, 0].tolist())
        if (rows < 0).any():
            raise RuntimeError("value out of range")
        return [rows * 2]

    batcher = _batcher(run, max_wait=0.0, limiter=CapacityLimiter(1))

    async def scenario():
        await batcher.submit(np.ones((1, 2)))  # the collector runs: the next three queue together behind the slot
        inputs = [np.full((1, 2), 1.0), np.full((2, 2), -1.0), np.full((1, 2), 3.0)]
        outcomes = await asyncio.gather(*(batcher.submit(x) for x in inputs), return_exceptions=True)
        return outcomes, await batcher.submit(np.full((1, 2), 4.0))

    (good, bad, other), after = asyncio.run(scenario())
    np.testing.assert_array_equal(good[0], np.full((1, 2), 2.0))
    np.testing.assert_array_equal(other[0], np.full((1, 2), 6.0))
    assert isinstance(bad, RuntimeError) and after[0].shape == (1, 2)
    assert calls[1:] == [[1.0, -1.0, -1.0, 3.0], [1.0], [-1.0, -1.0], [3.0], [4.0]]  # merged, failed, each alone


def test_a_cancelled_caller_is_skipped():
    calls: list[int] = []
    batcher = _batcher(_doubling(calls), max_wait=0.05)

    async def scenario():
        gone = asyncio.ensure_future(batcher.submit(np.ones((3, 2))))
        kept = asyncio.ensure_future(batcher.submit(np.ones((1, 2))))
        await asyncio.sleep(0)
        gone.cancel()
        return await kept

    assert asyncio.run(scenario())[0].shape == (1, 2) and calls == [1]


def test_batching_settings_are_validated():
    settings = config.Settings.from_env({"ONNX_SERVICE_BATCHING": "1", "ONNX_SERVICE_BATCH_MAX_WAIT_MS": "2.5"})
    assert settings.batching and settings.batch_max_wait_ms == 2.5 and settings.batch_queue_limit == 256
    with pytest.raises(config.ConfigError, match=r"BATCH_MAX_WAIT_MS=5000\.0: expected milliseconds from 0 to 1000"):
        config.Settings.from_env({"ONNX_SERVICE_BATCH_MAX_WAIT_MS": "5000"})
    with pytest.raises(config.ConfigError, match="BATCH_MAX_WAIT_MS='soon': expected a number"):
        config.Settings.from_env({"ONNX_SERVICE_BATCH_MAX_WAIT_MS": "soon"})
    with pytest.raises(config.ConfigError, match="HANDLER='naive': expected threadpool when ONNX_SERVICE_BATCHING=1"):
        config.Settings.from_env({"ONNX_SERVICE_BATCHING": "1", "ONNX_SERVICE_HANDLER": "naive"})


def test_batcher_metrics_render():
    m = metrics.Metrics(max_batch=64, batch_max_size=16)
    m.queue_depth = lambda: 3
    m.observe_batch(12, 0.004, [0.0004, 0.003])
    samples = loadgen.parse_metrics(m.render())
    assert samples[("onnx_service_batcher_batch_size_bucket", (("le", "8"),))] == 0
    assert samples[("onnx_service_batcher_batch_size_bucket", (("le", "16"),))] == 1
    assert samples[("onnx_service_batcher_queue_wait_seconds_count", ())] == 2
    assert samples[("onnx_service_batcher_queue_wait_seconds_bucket", (("le", "0.0005"),))] == 1
    assert samples[QUEUE_DEPTH] == 3
    assert "onnx_service_batcher" not in metrics.Metrics(max_batch=64).render()


# ---------------------------------------------------------------- the real service


@pytest.fixture(scope="module")
def model_and_images():
    model = ensure_digits_cnn()
    images = load_digits().test.images
    return model, images, ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])


@pytest.mark.slow
def test_concurrent_mixed_batches_each_match_an_in_process_run_of_their_own_input(model_and_images):
    model, images, session = model_and_images
    sizes = [1, 5, 2, 8, 1, 3, 16, 1, 4, 7, 1, 2]
    chunks, start = [], 0
    for size in sizes * 3:
        chunks.append(images[start : start + size])
        start += size
    expected = [softmax(session.run(None, {"image": chunk})[0]) for chunk in chunks]
    with serving.start(model, batching=True, batch_max_size=32, batch_max_wait_ms=20) as service:
        results: list = [None] * len(chunks)

        def client_thread(first: int) -> None:
            with httpx.Client(base_url=service.url, timeout=30.0) as client:
                for _ in range(10):
                    for i in range(first, len(chunks), 12):
                        response = client.post("/predict", json=serving.payload(chunks[i]))
                        results[i] = (response.status_code, response.json())

        threads = [threading.Thread(target=client_thread, args=(first,)) for first in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        samples = loadgen.parse_metrics(httpx.get(service.url + "/metrics").text)
    assert service.process.returncode == 0
    for i, (status, body) in enumerate(results):
        assert status == 200, body
        assert body["batch_size"] == len(chunks[i])
        assert body["predictions"] == expected[i].argmax(axis=1).tolist()
        np.testing.assert_allclose(body["probabilities"], expected[i], atol=1e-5)
    requests = 10 * len(chunks)
    runs = samples[("onnx_service_batcher_batch_size_count", ())]
    assert samples[("onnx_service_batcher_queue_wait_seconds_count", ())] == requests
    assert samples[("onnx_service_batcher_batch_size_sum", ())] == samples[("onnx_service_batch_size_sum", ())] == 10 * sum(sizes) * 3
    assert runs < requests, "12 concurrent clients and a 20 ms wait never merged two requests"


@pytest.mark.slow
def test_a_lone_request_to_an_idle_batcher_runs_at_once():
    calls: list[int] = []
    batcher = _batcher(_doubling(calls), max_wait=5.0)

    async def scenario():
        start = time.perf_counter()
        await batcher.submit(np.ones((1, 2)))
        return time.perf_counter() - start

    assert asyncio.run(scenario()) < 2.5 and calls == [1], "an idle batcher waited for company"


def test_service_bench_ratios_and_target_from_fake_results(tmp_path):
    from labsupport.bench import service as service_bench

    def result(concurrency, throughput, p99):
        return loadgen.LoadResult(concurrency, 100, 100, 0, 0, 1.0, throughput, p99 / 2, p99, {200: 100})

    comparison = service_bench.BatchingComparison(
        (1, 32),
        {
            service_bench.PER_REQUEST: [result(1, 100, 10), result(32, 50, 800)],
            service_bench.BATCHING: [result(1, 98, 10.8), result(32, 120, 400)],
        },
        {},
        {"requests": 200, "runs": 80, "examples_run": 200, "examples_requested": 200, "mean_queue_wait_ms": 1.0},
    )
    assert comparison.throughput_ratio(32) == 2.4 and comparison.p99_ratio(32) == 0.5 and comparison.loaded_target_met()
    assert comparison.p50_ratio(1) == pytest.approx(1.08) and comparison.lone_target_met() and comparison.target_met()
    assert comparison.merged and comparison.every_example_once and comparison.failures == 0
    assert "concurrency 32: batching serves 2.40x" in comparison.ratio_lines()[1]
    saved = __import__("json").loads(comparison.to_json(tmp_path / "b.json").read_text())
    assert saved["target"]["met"] is True and saved["ratios"]["1"]["throughput"] == 0.98
    slow_alone = service_bench.BatchingComparison(
        (1, 32),
        {**comparison.results, service_bench.BATCHING: [result(1, 70, 14), result(32, 120, 400)]},
        {},
        comparison.batcher,
    )
    assert slow_alone.loaded_target_met() and not slow_alone.lone_target_met() and not slow_alone.target_met()
    assert "(1.40x)" in slow_alone.ratio_lines()[0]
    rounds = [result(4, 100, 10), result(4, 50, 30), result(4, 100, 20)]  # 100 requests in 1.0 s each
    combined = service_bench.combine(rounds)
    assert combined.requests == 300 and combined.seconds == 3.0 and combined.statuses == {200: 300}
    assert combined.throughput == pytest.approx(250 / 3) and combined.p50_ms == 10 and combined.p99_ms == 20
    assert service_bench.requests_for(1) == 100 and service_bench.requests_for(32) == 320 and service_bench.requests_for(1, 0.1) == 20


def test_combined_rounds_take_the_p99_of_all_latencies_pooled_not_a_median_of_round_maxima():
    from dataclasses import replace

    from labsupport.bench import service as service_bench

    quick = [0.010] * 9
    rounds = [
        loadgen.LoadResult(1, 10, 10, 0, 0, 1.0, 10.0, 10.0, 10.0, {200: 10}, latencies_s=tuple([*quick, slowest]))
        for slowest in (0.010, 0.500, 0.600)
    ]
    combined = service_bench.combine(rounds)
    assert combined.p99_ms == pytest.approx(571.0)  # two slow requests in 30: the pooled p99 sees them
    assert statistics.median(r.p99_ms for r in rounds) == 10.0  # what a median of the rounds' p99 would have shown
    assert len(combined.latencies_s) == 30
    without = service_bench.combine([replace(r, latencies_s=()) for r in rounds])
    assert without.p99_ms == 10.0  # no recorded latencies: the median of the rounds' p99


def test_the_shadow_cost_line_gives_the_ratio_with_its_a_a_noise():
    from labsupport.bench import service as service_bench

    cost = service_bench.ShadowCost(
        {"plain": [10.0, 12.0, 11.0], "plain again": [11.0, 11.0, 12.0], "shadowed": [14.0, 13.0, 15.0]}, {"agree": 50.0, "skipped": 25.0}
    )
    assert cost.ratio("shadowed") == pytest.approx(14 / 11) and cost.ratio("plain again") == pytest.approx(1.0)
    (line,) = cost.lines()
    assert "with a shadow version 1.27x" in line and "A/A noise: a second plain service 1.00x" in line and "agree 50, skipped 25" in line
