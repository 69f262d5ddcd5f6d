"""Exercises of notebook 08 (an ONNX model behind an HTTP service)."""

from __future__ import annotations

import asyncio
import inspect
import json
import time

import numpy as np

from labsupport.data import load_digits
from labsupport.exercises import Exercise, Incorrect


def _check_payload(body) -> str:
    from labsupport.serve import service_package

    service_package()
    from deploy.service.onnx_service.model import InputContract
    from deploy.service.onnx_service.validation import RequestError, parse_json, to_batch

    try:
        text = json.dumps(body)
    except TypeError as error:
        raise Incorrect(f"the body must be JSON-serializable (plain lists and numbers, e.g. array.tolist()): {error}") from None
    contract = InputContract("image", np.dtype(np.float32), (1, 8, 8), 64)
    try:
        batch, single = to_batch(parse_json(text.encode()), contract)
    except RequestError as error:
        raise Incorrect(f"the service would answer {error.status}: {error.message}") from None
    if single or len(batch) != 5:
        raise Incorrect(f"expected a batch of 5 examples, the body holds {'one example' if single else len(batch)}")
    if not np.allclose(batch, load_digits().test.images[:5]):
        raise Incorrect("the batch is well formed but does not hold the first 5 test images (load_digits().test.images[:5])")
    return "the service accepts it as a batch of 5 images of shape [1, 8, 8]"


class _SlowSession:
    """Stands in for an InferenceSession whose run() takes 0.3 s (like a big model)."""

    def run(self, output_names, feeds):
        time.sleep(0.3)
        return [np.asarray(feeds["image"]).sum(axis=(1, 2, 3))]


def _check_nonblocking(infer) -> str:
    if not callable(infer) or not inspect.iscoroutinefunction(inspect.unwrap(infer)):  # unwrap: exercises wrap functions
        raise Incorrect("expected an `async def infer(session, feeds)` function")
    feeds = {"image": np.ones((2, 1, 8, 8), dtype=np.float32)}

    async def scenario():
        ticks = 0

        async def heartbeat():
            nonlocal ticks
            end = time.perf_counter() + 0.25
            while time.perf_counter() < end:
                await asyncio.sleep(0.01)
                ticks += 1

        beat = asyncio.create_task(heartbeat())
        await asyncio.sleep(0)  # let the heartbeat start
        outputs = await infer(_SlowSession(), feeds)
        await beat
        return outputs, ticks

    outputs, ticks = asyncio.run(scenario())
    if not isinstance(outputs, (list, tuple)) or len(outputs) != 1 or not np.allclose(outputs[0], [64.0, 64.0]):
        raise Incorrect("infer must return what session.run(None, feeds) returns (a list with one array here)")
    if ticks < 8:
        raise Incorrect(f"the event loop was blocked: a 10 ms heartbeat ran only {ticks} times during a 0.3 s inference")
    return f"the event loop kept running ({ticks} heartbeats) while the model computed"


_SAMPLE = """# TYPE onnx_service_requests_total counter
onnx_service_requests_total{method="GET",path="/ready",status="200"} %d
onnx_service_requests_total{method="GET",path="/metrics",status="200"} 4
onnx_service_requests_total{method="POST",path="/predict",status="200"} %d
onnx_service_requests_total{method="POST",path="/predict",status="413"} %d
onnx_service_requests_total{method="POST",path="/predict",status="422"} %d
onnx_service_requests_total{method="POST",path="/predict",status="500"} %d
onnx_service_requests_total{method="GET",path="other",status="404"} 9
# TYPE onnx_service_batch_size histogram
onnx_service_batch_size_count 77
"""


def _check_error_rate(error_rate) -> str:
    if not callable(error_rate):
        raise Incorrect("expected a function metrics_text -> fraction of /predict requests with a 4xx or 5xx status")
    cases = [((3, 90, 2, 6, 2), 0.1), ((1, 50, 0, 0, 0), 0.0), ((2, 10, 5, 10, 15), 0.75), ((0, 0, 0, 4, 0), 1.0)]
    for counts, truth in cases:
        got = error_rate(_SAMPLE % counts)
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise Incorrect(f"error_rate must return a number, got {type(got).__name__}") from None
        if not np.isclose(got, truth, atol=1e-9):
            ok, big, bad, server = counts[1:]
            raise Incorrect(
                f"for /predict with {ok}x200, {big}x413, {bad}x422, {server}x500 the error rate is {truth:.2f}, "
                f"yours gave {got:.2f} (count only path=\"/predict\"; errors are every status >= 400)"
            )
    if float(error_rate("# no samples yet\n")) != 0.0:
        raise Incorrect("with no /predict requests yet the error rate should be 0.0 (not a division by zero)")
    return "your function reads the counters the way a Prometheus alert would"


q1 = Exercise(
    1,
    "a request body for a batch",
    _check_payload,
    hint="The body is a dict with one field, \"inputs\", holding nested lists: images[:5] has shape (5, 1, 8, 8); .tolist() turns it into lists.",
    solution_code="""
        from labsupport.data import load_digits

        answer = {"inputs": load_digits().test.images[:5].tolist()}
    """,
)

q2 = Exercise(
    2,
    "inference that does not block the event loop",
    _check_nonblocking,
    hint="Inside `async def`, hand the blocking call to a thread and await it: `await asyncio.to_thread(session.run, None, feeds)` (FastAPI's run_in_threadpool does the same).",
    solution_code="""
        import asyncio

        async def answer(session, feeds):
            return await asyncio.to_thread(session.run, None, feeds)
    """,
)

q3 = Exercise(
    3,
    "an error rate from /metrics",
    _check_error_rate,
    hint="labsupport.serve.parse_metrics(text) gives {(name, labels): value}; keep onnx_service_requests_total samples whose labels have path /predict, and divide those with status >= 400 by all of them.",
    solution_code="""
        from labsupport.serve import parse_metrics

        def answer(metrics_text):
            total = errors = 0.0
            for (name, labels), value in parse_metrics(metrics_text).items():
                labels = dict(labels)
                if name == "onnx_service_requests_total" and labels.get("path") == "/predict":
                    total += value
                    if int(labels["status"]) >= 400:
                        errors += value
            return errors / total if total else 0.0
    """,
)

EXERCISES = [q1, q2, q3]
