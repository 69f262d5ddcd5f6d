"""A bounded load test of the real service on 127.0.0.1: zero errors, every prediction correct (notebook 08)."""

from __future__ import annotations

import onnxruntime as ort
import pytest

from labsupport.course.data import load_digits
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics import loadgen, serving

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bodies_and_expected():
    model = ensure_digits_cnn()
    images = load_digits().test.images
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    sizes = [1, 2, 4, 8, 1, 16, 1, 3]  # a mix of single examples and small batches
    bodies, expected, start = [], [], 0
    for size in sizes * 4:
        chunk = images[start : start + size]
        bodies.append(serving.payload(chunk))
        expected.append(session.run(None, {"image": chunk})[0].argmax(axis=1).tolist())
        start += size
    return model, bodies, expected


def test_2000_requests_at_concurrency_16_without_errors(bodies_and_expected):
    model, bodies, expected = bodies_and_expected
    with serving.start(model) as service:
        result = loadgen.load_test(service.url, bodies, concurrency=16, requests=2000, expected=expected, timeout=120)
        assert service.running
    print(f"\nload test: {result.requests} requests, {result.throughput:.0f} req/s, p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms")
    assert result.requests == 2000, "the load test hit its time bound"
    assert result.errors == 0, result.first_error
    assert result.wrong == 0, result.first_error
    assert result.statuses == {200: 2000}
    assert service.process.returncode == 0


def test_two_workers_serve_correctly_and_stop_cleanly(bodies_and_expected):
    model, bodies, expected = bodies_and_expected
    with serving.start(model, workers=2) as service:
        result = loadgen.load_test(service.url, bodies, concurrency=4, requests=200, expected=expected, timeout=60)
    assert (result.requests, result.errors, result.wrong) == (200, 0, 0), result.first_error
    assert service.process.returncode == 0
    assert service.log_text().count("Started server process") == 2


def test_naive_handler_is_still_correct(bodies_and_expected):
    model, bodies, expected = bodies_and_expected
    with serving.start(model, handler="naive") as service:
        result = loadgen.load_test(service.url, bodies, concurrency=4, requests=100, expected=expected, timeout=60)
        assert serve_ready_handler(service) == "naive"
    assert (result.requests, result.errors, result.wrong) == (100, 0, 0), result.first_error


def serve_ready_handler(service) -> str:
    import httpx

    return httpx.get(service.url + "/ready").json()["handler"]
