"""The service's limits: slots across workers, readiness (503 before warm-up, after a failed warm-up and while
draining after SIGTERM), the supervisor's memory and the process's exit.

Shadow runs, the bounded wait and overload are tested on a stand-in model held by events in
test_service_clients.py; what a shadow run that does run costs (CPU and memory bandwidth beside the live
run) is measured by ``make bench`` (``labsupport.bench.service.measure_shadow_cost``), not in a timed test.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from labsupport.course.data import load_digits
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics import loadgen, serving
from onnx_service.app import create_app
from onnx_service.config import Settings
from onnx_service.service import slots_per_worker

RUN_SECONDS = 0.2


@pytest.fixture(scope="module")
def images():
    return load_digits().test.images


def test_slots_across_workers_never_exceed_the_usable_cpus():
    for cpus in (1, 2, 3, 4, 16):
        for workers in (1, 2, 4):
            for threads in (1, 2):
                per_worker = slots_per_worker(cpus, threads, workers)
                assert per_worker >= 1
                assert per_worker * workers * threads <= max(cpus, workers * threads)  # at least one slot each
    assert slots_per_worker(2, 1, 1) == 2 and slots_per_worker(2, 1, 2) == 1 and slots_per_worker(16, 2, 4) == 2


def test_ready_shows_the_slots_of_every_worker(in_process):
    for workers in (1, 2):
        ready = in_process(create_app(Settings(model=str(ensure_digits_cnn()), workers=workers))).get("/ready").json()
        usable = ready["cpus"]["usable"]
        assert ready["workers"] == workers and ready["inference_slots"] == slots_per_worker(usable, 1, workers)
        assert ready["inference_slots_total"] == ready["inference_slots"] * workers <= max(usable, workers)


def test_a_failed_warm_up_says_why_in_ready_and_in_the_log(caplog, in_process):
    app = create_app(Settings(model=str(ensure_digits_cnn())))

    def broken(batch):
        raise RuntimeError("the model cannot run")

    for version in app.state.service.routing.versions.values():
        version.model.run = broken
    response = in_process.after_warm_up(in_process(app))
    assert response.status_code == 503 and "warm-up failed: RuntimeError" in response.json()["reason"], response.json()
    assert "the model cannot run" in response.json()["reason"]
    assert any("warm-up of version" in record.getMessage() for record in caplog.records)


def test_ready_is_503_before_warm_up(in_process):
    app = create_app(Settings(model=str(ensure_digits_cnn())))
    response = in_process(app, lifespan=False).get("/ready")  # no lifespan: no warm-up ran
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


@pytest.mark.slow
def test_a_client_that_leaves_mid_body_is_counted_as_499_not_as_a_server_error():
    service = serving.start(ensure_digits_cnn())
    try:
        url = httpx.URL(service.url)
        head = b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        with socket.create_connection((url.host, url.port)) as connection:
            connection.sendall(head + b'{"inputs":')  # 10 of the 1000 bytes announced, then the client goes away
        deadline = time.monotonic() + 10
        counted: dict[str, float] = {}
        while "499" not in counted and time.monotonic() < deadline:
            samples = loadgen.parse_metrics(httpx.get(f"{service.url}/metrics").text)
            counted = {
                dict(labels)["status"]: value
                for (name, labels), value in samples.items()
                if name == "onnx_service_requests_total" and dict(labels)["path"] == "/predict"
            }
            time.sleep(0.05)
    finally:
        service.stop()
    assert counted == {"499": 1}, counted
    assert "Traceback" not in service.log_text() and "unexpected error" not in service.log_text()


def _mean_classifier(path: Path, batch: int | str, side: int | str) -> Path:
    """A tiny classifier image [batch, 1, side, side] -> 3x3 Conv -> mean -> [batch, 1] scores (int: fixed, str: free dim)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((1, 1, 3, 3), dtype=np.float32), "weight")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["image", "weight"], ["conv"]),
            helper.make_node("ReduceMean", ["conv"], ["scores"], axes=[2, 3], keepdims=0),
        ],
        "mean",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 1, side, side])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batch, 1])],
        [weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def test_batching_is_refused_at_start_for_a_fixed_batch_or_a_free_image_size(tmp_path):
    from onnx_service.model import ModelError

    for name, batch, side in (("fixed.onnx", 1, 8), ("free_side.onnx", "n", "side")):
        model = _mean_classifier(tmp_path / name, batch, side)
        with pytest.raises(ModelError, match=r"batching merges requests.*start without batching"):
            create_app(Settings(model=str(model), batching=True))


def test_a_model_with_free_image_sizes_answers_422_for_a_size_it_refuses_and_still_becomes_ready(tmp_path, caplog, in_process):
    model = _mean_classifier(tmp_path / "free_side.onnx", "n", "side")  # a 3x3 Conv needs images of at least 3x3
    with caplog.at_level("WARNING", logger="onnx_service"):
        client = in_process(create_app(Settings(model=str(model))))
        refused = client.post("/predict", json={"inputs": [[[0.0]]]})
        answered = client.post("/predict", json={"inputs": [[[0.0] * 8] * 8]})
        deadline = time.monotonic() + 10
        while "warming up" in client.get("/ready").json().get("reason", "") and time.monotonic() < deadline:
            time.sleep(0.02)
        ready = client.get("/ready")
    assert refused.status_code == 422 and refused.json()["error"] == "model_refused_input", refused.text[:300]
    assert "shape [1, 1, 1, 1]" in refused.json()["detail"]
    assert answered.status_code == 200
    # the warm-up's guess (1x1) fails, but each request chooses the size: the service serves, with a warning that says why
    assert ready.status_code == 200, ready.json()
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert any("warm-up of version free_side skipped: its free dimensions (side, side)" in message for message in warnings), warnings


def test_more_workers_than_cpus_is_logged_as_oversubscription(caplog):
    with caplog.at_level("WARNING", logger="onnx_service"):
        create_app(Settings(model=str(ensure_digits_cnn()), workers=64))
    assert any("exceed the" in record.getMessage() and "oversubscribed" in record.getMessage() for record in caplog.records)


def test_the_supervisor_of_several_workers_keeps_no_copy_of_the_model(monkeypatch):
    import gc
    import weakref

    from onnx_service import __main__ as entry

    loaded: list[weakref.ref] = []
    real_load = entry.load_served_model

    def load_and_watch(*args, **kwargs):
        model = real_load(*args, **kwargs)
        loaded.append(weakref.ref(model))
        return model

    held: dict[str, bool] = {}

    def serve_nothing(settings, app, listener):  # where uvicorn's supervisor would start the workers
        gc.collect()
        held["model"] = loaded[0]() is not None
        listener.close()
        return 0

    monkeypatch.setattr(entry, "load_served_model", load_and_watch)
    monkeypatch.setattr(entry, "_serve", serve_nothing)
    monkeypatch.setattr(entry, "_die_with_parent", lambda: None)
    monkeypatch.setattr(entry.signal, "signal", lambda *args: None)  # main() installs a SIGTERM handler
    assert entry.main(["--model", str(ensure_digits_cnn()), "--workers", "2", "--port", "0"]) == 0
    assert held == {"model": False}, "the supervisor process still holds the model it checked"


@pytest.mark.slow
def test_sigint_during_a_drain_ends_the_process_without_waiting_for_the_drain():
    service = serving.start(ensure_digits_cnn(), drain_seconds=120)
    with httpx.Client(base_url=service.url, timeout=10.0) as client:
        service.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while client.get("/ready").status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.get("/ready").status_code == 503  # draining: the 120 s timer runs
    service.process.send_signal(signal.SIGINT)
    try:
        service.process.wait(60)  # far less than the drain: the timer does not keep the process alive
    except subprocess.TimeoutExpired:
        service.process.kill()
        raise AssertionError("the process waited for the drain timer after SIGINT") from None
