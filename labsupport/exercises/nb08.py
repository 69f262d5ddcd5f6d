"""Exercises of notebook 08 (an ONNX model behind an HTTP service)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import json
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from labsupport.course.data import load_digits
from labsupport.exercises import Exercise, Incorrect


def _check_payload(body) -> str:
    from onnx_service.model import InputContract
    from onnx_service.validation import RequestError, parse_json, to_batch

    if isinstance(body, (str, bytes)):
        raise Incorrect(
            "that is the body already encoded as JSON text; the task asks for the Python dict that "
            "httpx's json= argument encodes (json.loads would give it back)"
        )
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


BEATS_DURING_RUN = 3  # event-loop heartbeats that must happen while the model computes
LONGEST_RUN = 5.0  # seconds the stand-in model waits for them: only an answer that blocks the loop waits that long
LONGEST_STALL = 0.05  # seconds: a longer gap between heartbeats during infer means the caller blocked the loop
LONGEST_CHECK = 30.0  # seconds one attempt may take: a blocking answer takes LONGEST_RUN, a deadlocked one forever
STALL_ATTEMPTS = 3  # a blocking call stalls every attempt; a busy machine's scheduler rarely stalls all three
OUTPUT_NAME = "rows"


class _Heartbeat:
    """A coroutine that ticks as often as the event loop lets it; other threads can wait for a number of ticks."""

    def __init__(self) -> None:
        self.count = 0
        self.times: list[float] = []
        self._ticked = threading.Condition()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(0.001)
            with self._ticked:
                self.count += 1
                self.times.append(time.perf_counter())
                self._ticked.notify_all()

    def wait_for(self, count: int, timeout: float) -> None:
        with self._ticked:
            self._ticked.wait_for(lambda: self.count >= count, timeout)

    def longest_stall(self, start: float, end: float) -> float:
        """The longest time between ``start`` and ``end`` during which the loop did not tick."""
        marks = [start, *(t for t in self.times if start <= t <= end), end]
        return max(later - earlier for earlier, later in itertools.pairwise(marks))


class _SlowSession:
    """Stands in for an InferenceSession whose run() lasts until the event loop has ticked a few times.

    The verdict is an order of events, not a duration: a run() called on the event loop's own thread
    blocks the loop (it is caught at once, even if a later call runs in a thread), and a run() in a
    worker thread ends as soon as the heartbeat has ticked ``BEATS_DURING_RUN`` times, which it cannot
    do if something else blocks the loop. Its one output holds each example's values in order, so a
    reordered or transposed feed gives other numbers.
    """

    def __init__(self, heartbeat: _Heartbeat) -> None:
        self.heartbeat = heartbeat
        self.beats_during_run: int | None = None
        self.ran_on_the_loop = False

    def run(self, output_names, feeds):
        if output_names is not None and list(output_names) != [OUTPUT_NAME]:
            raise Incorrect(f"session.run was asked for outputs {output_names!r}; this model has one output, {OUTPUT_NAME!r} (None: all)")
        try:
            asyncio.get_running_loop()
            self.ran_on_the_loop = True  # called on the loop's thread: nothing else can run until it returns
            self.beats_during_run = 0
        except RuntimeError:  # a worker thread: the loop is free unless the caller blocks it
            first = self.heartbeat.count
            self.heartbeat.wait_for(first + BEATS_DURING_RUN, LONGEST_RUN)
            self.beats_during_run = self.heartbeat.count - first
        image = feeds["image"]
        if isinstance(image, np.ndarray) and image.dtype != np.float32:  # what ONNX Runtime raises (InvalidArgument)
            raise Incorrect(
                f"session.run got a {image.dtype} array for the float32 input 'image' (ONNX Runtime refuses it: "
                f"InvalidArgument, expected tensor(float)); pass the feeds unchanged"
            )
        image = np.asarray(image)
        return [image.reshape(len(image), -1)]


class _SleepWatch:
    """Replaces time.sleep while infer runs and records a call made on the event loop's thread (a sleep there blocks the loop).

    The verdict does not depend on how long the sleep lasts or how busy the machine is: any time.sleep on the
    loop stops every other request for its duration, however short.
    """

    def __init__(self) -> None:
        self.on_the_loop: float | None = None
        self._real = time.sleep

    def sleep(self, seconds: float) -> None:
        try:
            asyncio.get_running_loop()
            self.on_the_loop = seconds
        except RuntimeError:  # a worker thread may sleep: the loop keeps running
            pass
        self._real(seconds)

    def __enter__(self) -> _SleepWatch:
        time.sleep = self.sleep
        return self

    def __exit__(self, *exc_info: object) -> None:
        time.sleep = self._real


def _run_with_heartbeat(infer, feeds) -> tuple[object, _SlowSession, float]:
    """(what infer returned, the stand-in session it ran, the longest stall of the event loop during infer)."""
    heartbeat = _Heartbeat()
    session = _SlowSession(heartbeat)

    async def scenario():
        stop = asyncio.Event()
        beat = asyncio.create_task(heartbeat.run(stop))
        await asyncio.sleep(0.005)  # the heartbeat is ticking before infer starts
        start = time.perf_counter()
        try:
            with _SleepWatch() as watch:
                outputs = await infer(session, feeds)
            if watch.on_the_loop is not None:
                raise Incorrect(
                    f"time.sleep({watch.on_the_loop:g}) ran on the event loop: it blocks every other request for that long, "
                    "however short (await asyncio.sleep(...) waits without blocking)"
                )
            return outputs, heartbeat.longest_stall(start, time.perf_counter())
        finally:
            stop.set()
            await beat

    outputs, stall = _run_coroutine(scenario)
    return outputs, session, stall


def _run_coroutine(make_coroutine):
    """asyncio.run(make_coroutine()) in a thread of its own: a Jupyter kernel's cell already runs in an event loop,
    where asyncio.run() raises, and an answer that waits on its own loop for a result must not hang the kernel."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = asyncio.run(make_coroutine())
        except BaseException as error:  # re-raised in the caller's thread
            outcome["error"] = error

    real_sleep = time.sleep
    thread = threading.Thread(target=run, name="nb08-q2-check", daemon=True)
    thread.start()
    thread.join(LONGEST_CHECK)
    if thread.is_alive():
        time.sleep = real_sleep  # the scenario's _SleepWatch never got to restore it
        raise Incorrect(
            f"infer had not returned after {LONGEST_CHECK:g} s: it waits on the event loop's thread for a result that only "
            "that loop can deliver (a busy-wait, or .result() of a future, inside async def?); await it instead "
            "(restart the kernel to stop the stuck check)"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _is_async_callable(infer) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one (exercises wrap functions: unwrap them)."""
    return inspect.iscoroutinefunction(inspect.unwrap(infer)) or inspect.iscoroutinefunction(type(infer).__call__)


def _check_nonblocking(infer) -> str:
    if not callable(infer) or not _is_async_callable(infer):
        raise Incorrect("expected an `async def infer(session, feeds)` function (or an object whose __call__ is `async def`)")
    feeds = {"image": np.arange(2 * 64, dtype=np.float32).reshape(2, 1, 8, 8)}  # distinct values: any reordering shows
    outputs, session, stall = _run_with_heartbeat(infer, feeds)
    expected = feeds["image"].reshape(2, 64)  # the stand-in's output for the feeds, unchanged
    if not isinstance(outputs, (list, tuple)) or len(outputs) != 1 or np.shape(outputs[0]) != expected.shape:
        raise Incorrect("infer must return what session.run(None, feeds) returns: a list with one array of 2 rows here")
    if not np.array_equal(np.asarray(outputs[0], dtype=np.float64), expected):
        raise Incorrect("infer must run session.run(None, feeds) on the feeds it was given, unchanged (same rows, same order)")
    if session.ran_on_the_loop or not session.beats_during_run or session.beats_during_run < BEATS_DURING_RUN:
        raise Incorrect("the event loop was blocked: no other coroutine ran while session.run computed")
    for _ in range(STALL_ATTEMPTS - 1):  # a stall from a busy machine does not repeat; one from the code does
        if stall <= LONGEST_STALL:
            break
        stall = min(stall, _run_with_heartbeat(infer, feeds)[2])
    if stall > LONGEST_STALL:
        raise Incorrect(f"the event loop was blocked for {stall:.2f} s during infer (time.sleep or another blocking call on the loop?)")
    return "the event loop kept running while the model computed"


_SAMPLE = """# TYPE onnx_service_requests_total counter
onnx_service_requests_total{method="GET",path="/ready",status="200"} %(ready)d
onnx_service_requests_total{method="GET",path="/metrics",status="200"} 4
onnx_service_requests_total{method="POST",path="/predict",status="200"} %(ok)d
onnx_service_requests_total{method="POST",path="/predict",status="400"} %(bad_json)d
onnx_service_requests_total{method="POST",path="/predict",status="408"} %(slow)d
onnx_service_requests_total{method="POST",path="/predict",status="413"} %(big)d
onnx_service_requests_total{method="POST",path="/predict",status="415"} %(media)d
onnx_service_requests_total{method="POST",path="/predict",status="422"} %(bad)d
onnx_service_requests_total{method="POST",path="/predict",status="499"} %(gone)d
onnx_service_requests_total{method="POST",path="/predict",status="500"} %(server)d
onnx_service_requests_total{method="POST",path="/predict",status="503"} %(busy)d
onnx_service_requests_total{method="GET",path="other",status="404"} 9
onnx_service_requests_total{method="POST",path="other",status="404"} 3
onnx_service_requests_total{method="POST",path="/health",status="405"} 2
# TYPE onnx_service_request_duration_seconds histogram
onnx_service_request_duration_seconds_bucket{path="/predict",le="0.005"} 70
onnx_service_request_duration_seconds_bucket{path="/predict",le="+Inf"} 93
onnx_service_request_duration_seconds_sum{path="/predict"} 0.41
onnx_service_request_duration_seconds_count{path="/predict"} 93
# TYPE onnx_service_batch_size histogram
onnx_service_batch_size_count 77
"""
_STATUSES = {"ok": 200, "bad_json": 400, "slow": 408, "big": 413, "media": 415, "bad": 422, "gone": 499, "server": 500, "busy": 503}
# (ready, then /predict requests per status of _STATUSES); 3/7 is not exact at 2 decimals; 400, 408, 415, 499 and 503
# are errors too: every status the service answers, so no hard-coded list of error statuses passes
_RATE_CASES = [
    ((3, 90, 0, 0, 2, 0, 6, 0, 2, 0), 0.1),
    ((1, 50, 0, 0, 0, 0, 0, 0, 0, 0), 0.0),
    ((2, 10, 0, 0, 5, 0, 10, 0, 15, 0), 0.75),
    ((0, 0, 0, 0, 0, 0, 4, 0, 0, 0), 1.0),
    ((1, 4, 1, 0, 0, 0, 1, 0, 1, 0), 3 / 7),
    ((0, 6, 2, 0, 0, 0, 0, 2, 0, 0), 0.4),
    ((1, 5, 1, 1, 0, 1, 0, 1, 0, 1), 0.5),
]


def _check_error_rate(error_rate) -> str:
    if not callable(error_rate):
        raise Incorrect("expected a function metrics_text -> fraction of /predict requests with a 4xx or 5xx status")
    for counts, truth in _RATE_CASES:
        values = dict(zip(["ready", *_STATUSES], counts, strict=True))
        got = error_rate(_SAMPLE % values)
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise Incorrect(f"error_rate must return a number, got {type(got).__name__}") from None
        if not np.isclose(got, truth, rtol=0, atol=1e-9):
            requests = ", ".join(f"{values[key]}x{status}" for key, status in _STATUSES.items() if values[key])
            raise Incorrect(
                f"for /predict with {requests} the error rate is {truth:.6g}, yours gave {got:.6g} (count only "
                f'onnx_service_requests_total samples with path="/predict": the latency histogram has path labels too; '
                f"errors are every status >= 400, and the rate is not rounded)"
            )
    if float(error_rate("# no samples yet\n")) != 0.0:
        raise Incorrect("with no /predict requests yet the error rate should be 0.0 (not a division by zero)")
    return "your function reads the counters the way a Prometheus alert would"


_TABLES = {"wine": "load_wine", "iris": "load_iris"}  # a classifier per data set: 13 and 4 features


@functools.cache
def _tabular_model(name: str) -> tuple[str, np.ndarray]:
    """A scikit-learn classifier of ``name``'s bundled data, converted with skl2onnx: its path and 6 of its rows."""
    import sklearn.datasets
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    features, labels = getattr(sklearn.datasets, _TABLES[name])(return_X_y=True)
    features = features.astype(np.float32)
    pipeline = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(features, labels)
    model = to_onnx(pipeline, features[:1], options={"zipmap": False}, target_opset={"": 18, "ai.onnx.ml": 3})
    path = Path(tempfile.mkdtemp(prefix="nb08_q4_")) / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path), features[::30][:6]


def _bad_bodies(width: int) -> dict[str, dict]:
    """Requests a /predict for rows of ``width`` numbers must refuse with a 4xx, by what is wrong with them."""
    row = [0.5] * width
    as_json = {"content-type": "application/json"}
    return {
        f"rows of {width - 1} numbers (one feature missing)": {"json": {"inputs": [row[:-1]] * 2}},
        f"rows of {width + 1} numbers": {"json": {"inputs": [[*row, 0.5]]}},
        "one row not wrapped in a batch": {"json": {"inputs": row}},
        "an empty batch": {"json": {"inputs": []}},
        "text instead of numbers": {"json": {"inputs": [["x"] * width]}},
        "rows of different lengths": {"json": {"inputs": [row, row[:-1]]}},
        "a NaN": {"content": json.dumps({"inputs": [row]}).replace("0.5", "NaN", 1), "headers": as_json},
        "no inputs field": {"json": {"rows": [row]}},
        "a body that is not JSON": {"content": "inputs=1,2", "headers": as_json},
    }


class _SessionCounter:
    """Counts the onnxruntime.InferenceSession objects made while it is active."""

    def __enter__(self):
        import onnxruntime

        self.opened = 0
        self._module, self._original = onnxruntime, onnxruntime.InferenceSession
        counter = self

        class Counted(self._original):
            def __init__(self, *args, **kwargs):
                counter.opened += 1
                super().__init__(*args, **kwargs)

        onnxruntime.InferenceSession = Counted
        return self

    def __exit__(self, *exc_info) -> None:
        self._module.InferenceSession = self._original


def _serve_and_probe(make_app, name: str) -> None:
    import onnxruntime
    from fastapi.testclient import TestClient

    path, rows = _tabular_model(name)
    expected = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"X": rows})[0].tolist()
    with _SessionCounter() as sessions:
        app = make_app(path)
        if not callable(app):
            raise Incorrect(f"make_app(model_path) must return the FastAPI app (FastAPI()), got {type(app).__name__}")
        with TestClient(app, raise_server_exceptions=False) as client:
            responses = [client.post("/predict", json={"inputs": rows[i : i + 2].tolist()}) for i in range(0, len(rows), 2)]
            for response in responses:
                if response.status_code >= 500:
                    raise Incorrect(
                        f"the {name} model ({len(rows[0])} features): a valid batch of 2 rows crashed the app ({response.status_code}); "
                        "check what session.run gets: the model's input is tensor(float), so a float32 array (np.float32) of shape [n, k]"
                    )
                if response.status_code != 200:
                    raise Incorrect(
                        f"the {name} model ({len(rows[0])} features): a valid batch of 2 rows got {response.status_code} "
                        f"{response.text[:120]!r}; read the number of features from the model's input, do not hard-code it"
                    )
            try:
                got = [label for response in responses for label in response.json()["predictions"]]
            except (KeyError, TypeError, ValueError):
                raise Incorrect('the answer to a valid batch must be JSON {"predictions": [one class per row]}') from None
            if got != expected:
                raise Incorrect(
                    f"the {name} model: predictions {got} differ from session.run's labels {expected} "
                    "(the first output, 'label', holds the classes; keep the rows in order)"
                )
            for case, request in _bad_bodies(len(rows[0])).items():
                status = client.post("/predict", **request).status_code
                if status >= 500:
                    raise Incorrect(f"the {name} model: {case} crashed the app (status {status}); refuse it with a 4xx")
                if not 400 <= status < 500:
                    raise Incorrect(f"the {name} model: {case} was answered {status}; a request the model cannot take must get a 4xx")
    if sessions.opened > 1:
        raise Incorrect(f"{sessions.opened} InferenceSessions were opened for one app; open one when the app is made, not per request")


def _check_plain_service(make_app) -> str:
    if not callable(make_app):
        raise Incorrect("expected a function make_app(model_path) that returns a FastAPI app")
    for name in _TABLES:
        _serve_and_probe(make_app, name)
    return "your app serves both classifiers, matches session.run and refuses every bad body with a 4xx"


q1 = Exercise(
    1,
    "a request body for a batch",
    _check_payload,
    hint=(
        'The body is a dict with one field, "inputs", holding nested lists: images[:5] has shape (5, 1, 8, 8); '
        ".tolist() turns it into lists."
    ),
    solution_code="""
        from labsupport.course.data import load_digits

        answer = {"inputs": load_digits().test.images[:5].tolist()}
    """,
)

q2 = Exercise(
    2,
    "inference that does not block the event loop",
    _check_nonblocking,
    hint=(
        "Inside `async def`, hand the blocking call to a thread and await it: "
        "`await asyncio.to_thread(session.run, None, feeds)` (FastAPI's run_in_threadpool does the same)."
    ),
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
    hint=(
        "labsupport.topics.loadgen.parse_metrics(text) gives {(name, labels): value}; keep onnx_service_requests_total "
        "samples whose labels have path /predict, and divide those with status >= 400 by all of them."
    ),
    solution_code="""
        from labsupport.topics.loadgen import parse_metrics

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

q4 = Exercise(
    4,
    "serve a model the notebook has not shown",
    _check_plain_service,
    hint=(
        "Follow the recipe, with rows instead of images: open the session in make_app, read the number of features "
        "from session.get_inputs()[0].shape[1], declare `inputs: list[list[float]]` with pydantic, then refuse (422) "
        "an empty batch, rows of another length (np.asarray raises ValueError on ragged rows) and non-finite values."
    ),
    solution_code="""
        import numpy as np
        import onnxruntime as ort
        from fastapi import FastAPI, HTTPException
        from pydantic import BaseModel


        class Rows(BaseModel):
            inputs: list[list[float]]


        def answer(model_path):
            session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
            feed = session.get_inputs()[0]
            width = feed.shape[1]  # features per row, from the model
            app = FastAPI()

            @app.post("/predict")
            def predict(body: Rows):
                try:
                    batch = np.asarray(body.inputs, dtype=np.float32)
                except ValueError:
                    raise HTTPException(422, "rows of different lengths") from None
                if batch.ndim != 2 or len(batch) == 0 or batch.shape[1] != width or not np.isfinite(batch).all():
                    raise HTTPException(422, f"expected a batch [n, {width}] of finite numbers, got {list(batch.shape)}")
                labels = session.run(None, {feed.name: batch})[0]
                return {"predictions": labels.tolist()}

            return app
    """,
)

EXERCISES = [q1, q2, q3, q4]
