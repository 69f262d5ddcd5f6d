"""The service's limits: slots across workers, shadow runs that never delay live requests, the bounded wait
of the default mode, and readiness (503 before warm-up and while draining after SIGTERM).

The timing tests replace the model's run by a sleep (no CPU used), so what they measure is queuing, not
the machine's speed: a live request that queued behind a 0.2 s shadow run would take about 0.4 s.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from labsupport.course.data import load_digits
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.models.heavy_classifier import write_heavy_classifier
from labsupport.topics import serving
from onnx_service.app import create_app
from onnx_service.config import Settings
from onnx_service.service import slots_per_worker

RUN_SECONDS = 0.2


@pytest.fixture(scope="module")
def images():
    return load_digits().test.images


@pytest.fixture(scope="module")
def routing_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shadow")
    other = write_heavy_classifier(folder / "other.onnx", hidden=64, layers=2)
    document = {"versions": {"1": str(ensure_digits_cnn()), "2": str(other)}, "aliases": {"champion": "1"}, "shadow": "2"}
    path = folder / "routing.json"
    path.write_text(json.dumps(document))
    return path


def _slow_app(settings: Settings, slots: int):
    """The app with every version's run replaced by a RUN_SECONDS sleep and exactly ``slots`` inference slots."""
    app = create_app(settings)
    service = app.state.service
    service.inference_slots.total_tokens = slots
    for version in service.router.versions.values():
        real = version.model.run

        def slow(batch, real=real):
            time.sleep(RUN_SECONDS)
            return real(batch)

        version.model.run = slow
    service.warm = True
    return app


async def _latencies(app, body: dict, schedule: list[float]) -> list[tuple[int, float]]:
    """Send one request at each time of ``schedule`` (seconds); (status, seconds) of each answer.

    Returns once background (shadow) runs had time to finish: the loop ends with this coroutine.
    """
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://service") as client:

        async def one(delay: float) -> tuple[int, float]:
            await asyncio.sleep(delay)
            start = time.perf_counter()
            response = await client.post("/predict", json=body)
            return response.status_code, time.perf_counter() - start

        answers = await asyncio.gather(*(one(delay) for delay in schedule))
        await asyncio.sleep(2 * RUN_SECONDS)
        return answers


def _shadow_counts(app) -> dict[str, float]:
    samples = serving.parse_metrics(app.state.service.metrics.render())
    return {dict(labels)["outcome"]: value for (name, labels), value in samples.items() if name == "onnx_service_shadow_examples_total"}


def test_slots_across_workers_never_exceed_the_usable_cpus():
    for cpus in (1, 2, 3, 4, 16):
        for workers in (1, 2, 4):
            for threads in (1, 2):
                per_worker = slots_per_worker(cpus, threads, workers)
                assert per_worker >= 1
                assert per_worker * workers * threads <= max(cpus, workers * threads)  # at least one slot each
    assert slots_per_worker(2, 1, 1) == 2 and slots_per_worker(2, 1, 2) == 1 and slots_per_worker(16, 2, 4) == 2


def test_ready_shows_the_slots_of_every_worker():
    from fastapi.testclient import TestClient

    for workers in (1, 2):
        with TestClient(create_app(Settings(model=str(ensure_digits_cnn()), workers=workers))) as client:
            ready = client.get("/ready").json()
        usable = ready["cpus"]["usable"]
        assert ready["workers"] == workers and ready["inference_slots"] == slots_per_worker(usable, 1, workers)
        assert ready["inference_slots_total"] == ready["inference_slots"] * workers <= max(usable, workers)


@pytest.mark.slow
def test_shadow_runs_never_delay_live_requests(routing_file, images):
    body = serving.payload(images[:1])
    schedule = [0.0, 0.0, 0.25, 0.25]
    plain = _slow_app(Settings(model=str(ensure_digits_cnn())), slots=2)
    without = asyncio.run(_latencies(plain, body, schedule))
    shadowed = _slow_app(Settings(model=str(ensure_digits_cnn()), routing=str(routing_file)), slots=2)
    with_shadow = asyncio.run(_latencies(shadowed, body, schedule))
    assert [status for status, _ in without + with_shadow] == [200] * 8
    slowest_without = max(seconds for _, seconds in without)
    slowest_with = max(seconds for _, seconds in with_shadow)
    # queued behind a shadow run, a live request would take two runs (0.4 s); measured without shadow: one run
    assert slowest_with < slowest_without + RUN_SECONDS / 2, (without, with_shadow)
    counts = _shadow_counts(shadowed)
    assert counts.get("skipped", 0) >= 1, counts  # the two requests at t=0 found live work that would wait
    assert sum(counts.values()) == len(schedule), counts  # every request was either compared or counted as skipped


@pytest.mark.slow
def test_the_default_mode_refuses_with_503_when_too_many_wait(images):
    app = _slow_app(Settings(model=str(ensure_digits_cnn()), batch_queue_limit=1), slots=1)
    answers = asyncio.run(_latencies(app, serving.payload(images[:1]), [0.0, 0.05, 0.1]))
    statuses = [status for status, _ in answers]
    assert statuses == [200, 200, 503], answers  # one runs, one waits, the third is refused at once
    assert answers[2][1] < RUN_SECONDS / 2, "a refusal must not wait"


def test_ready_is_503_before_warm_up():
    app = create_app(Settings(model=str(ensure_digits_cnn())))  # no lifespan: no warm-up ran
    from fastapi.testclient import TestClient

    response = TestClient(app).get("/ready")
    assert response.status_code == 503 and response.json()["ready"] is False
    assert "warming up" in response.json()["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_ready_turns_503_while_draining_after_sigterm_and_requests_are_still_served(images, workers):
    service = serving.start(ensure_digits_cnn(), workers=workers, drain_seconds=3)
    with httpx.Client(base_url=service.url, timeout=10.0) as client:  # one keep-alive connection
        assert client.get("/ready").status_code == 200
        service.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 2
        while client.get("/ready").status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        draining = client.get("/ready")
        predicted = client.post("/predict", json=serving.payload(images[:2]))
    assert draining.status_code == 503 and "draining" in draining.json()["reason"]
    assert predicted.status_code == 200 and len(predicted.json()["predictions"]) == 2
    assert service.process.wait(15) == 0, service.log_text()[-2000:]
    if workers == 1:  # the worker processes of uvicorn's supervisor log uvicorn's lines only
        assert "draining for 3 s" in service.log_text()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state  # a zombie has exited; only its exit status waits to be collected


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is a Linux feature")
def test_the_service_exits_when_the_process_that_started_it_dies():
    starter = f"""
import os
from labsupport.topics import serving
service = serving.start({str(ensure_digits_cnn())!r})
print(service.process.pid, flush=True)
os._exit(0)  # a crash: no atexit clean-up, no stop()
"""
    started = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, timeout=120)
    pid = int(started.stdout.split()[-1])
    deadline = time.monotonic() + 20
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the service outlived the process that started it"
