"""The service under clients that misbehave, in both modes (batching and threadpool), with a stand-in model.

The stand-in replaces ONNX Runtime's session: it refuses token ids beyond its vocabulary (a value no schema
check can catch, as ORT's Gather does) and holds every run until the test releases it. Every test is an
order of events the test controls (hold, queue, release), never a race against the CPU: they hold on a
loaded machine.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

from labsupport.topics import serving
from onnx_service.app import create_app
from onnx_service.config import Settings
from onnx_service.model import LoadedModel, TensorSpec

VOCABULARY = 100  # token ids 0-99; an id of 100 or more is refused by the model, not by validation
BAD_ID = 5000
CLASSES = 10
MODES = {"threadpool": {}, "batching": {"batching": True, "batch_max_size": 64, "batch_max_wait_ms": 20}}


class StandInSession:
    """Stands in for an InferenceSession over token ids [n, 4]: class = first id mod 10, InvalidArgument for an id out of range.

    While ``held`` every run waits until ``release()``; ``started`` counts the runs that began and ``runs`` the
    first ids of every successful run, in order.
    """

    def __init__(self) -> None:
        self.released = threading.Event()
        self.released.set()
        self.started = 0
        self.runs: list[list[int]] = []
        self._changed = threading.Condition()

    def hold(self) -> None:
        self.released.clear()

    def release(self) -> None:
        self.released.set()

    def wait_until_started(self, runs: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self.started >= runs, 30), f"{runs} run(s) never started"

    def run(self, output_names, feeds):
        tokens = feeds["tokens"]
        with self._changed:
            self.started += 1
            self._changed.notify_all()
        self.released.wait(30)
        if (tokens >= VOCABULARY).any():
            raise InvalidArgument(f"indices element out of data bounds, idx={int(tokens.max())} must be within [-100, 99]")
        with self._changed:
            self.runs.append(tokens[:, 0].tolist())
        logits = np.zeros((len(tokens), CLASSES), dtype=np.float32)
        logits[np.arange(len(tokens)), tokens[:, 0] % CLASSES] = 5.0
        return [logits]

    def get_providers(self) -> list[str]:
        return ["CPUExecutionProvider"]


def standin_model(session: StandInSession) -> LoadedModel:
    """A LoadedModel (token ids [batch, 4] -> logits [batch, 10]) whose session is the stand-in."""
    return LoadedModel(
        path=Path("standin.onnx"),
        name="standin",
        sha256="0" * 64,
        opset=17,
        producer="test",
        input=TensorSpec("tokens", "tensor(int64)", ("batch", 4)),
        outputs=[TensorSpec("logits", "tensor(float)", ("batch", CLASSES))],
        session=session,
        score_output="logits",
        label_output=None,
    )


def standin_app(session: StandInSession, mode: str, **settings):
    """The real app on the stand-in model, with one inference slot: a held run keeps every other request waiting."""
    app = create_app(Settings(**MODES[mode], **settings), model=standin_model(session))
    app.state.service.inference_slots.total_tokens = 1
    return app


def tokens(first: int) -> dict:
    return {"inputs": [[first, 1, 2, 3]]}


async def until(condition: Callable[[], bool], what: str) -> None:
    """Yield to the event loop until ``condition`` holds (a state the test waits for, not a duration)."""
    for _ in range(30_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never happened: {what}")


def client_for(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://service", timeout=30.0)


@pytest.mark.parametrize("mode", MODES)
def test_a_request_the_model_refuses_fails_alone_in_both_modes(mode):
    session = StandInSession()
    app = standin_app(session, mode)
    service = app.state.service

    async def scenario():
        async with client_for(app) as client:
            session.hold()
            first = asyncio.create_task(client.post("/predict", json=tokens(1)))  # holds the one slot
            await asyncio.to_thread(session.wait_until_started, 1)
            others = [asyncio.create_task(client.post("/predict", json=tokens(i))) for i in (5, BAD_ID, 3)]
            await until(lambda: service.queued() == 3, "three requests queued behind the held run")  # one merged batch
            session.release()
            return await asyncio.gather(first, *others)

    answers = asyncio.run(scenario())
    assert [answer.status_code for answer in answers] == [200, 200, 422, 200], [answer.text for answer in answers]
    assert [answers[i].json()["predictions"] for i in (0, 1, 3)] == [[1], [5], [3]]
    assert answers[2].json()["error"] == "model_refused_input" and "idx=5000" in answers[2].json()["detail"]
    assert session.runs == [[1], [5], [3]]  # batching: the merged run [5, 5000, 3] failed, each request then ran alone


def _leaving_client(app, body: dict, leave: asyncio.Event) -> asyncio.Task:
    """A POST /predict straight to the ASGI app whose client disconnects once ``leave`` is set; the task gives the status sent."""
    data = json.dumps(body).encode()
    messages = [{"type": "http.request", "body": data, "more_body": False}]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/predict",
        "raw_path": b"/predict",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("service", 80),
    }
    sent: list[dict] = []

    async def receive() -> dict:
        if messages:
            return messages.pop()
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    async def call() -> int:
        await app(scope, receive, send)
        return next(message["status"] for message in sent if message["type"] == "http.response.start")

    return asyncio.create_task(call())


@pytest.mark.parametrize("mode", MODES)
def test_a_request_whose_client_left_is_dropped_before_it_runs_and_counted_499(mode):
    session = StandInSession()
    app = standin_app(session, mode)
    service = app.state.service

    async def scenario():
        async with client_for(app) as client:
            session.hold()
            first = asyncio.create_task(client.post("/predict", json=tokens(1)))
            await asyncio.to_thread(session.wait_until_started, 1)
            leave = asyncio.Event()
            leaving = [_leaving_client(app, tokens(i), leave) for i in (7, 8)]
            await until(lambda: service.queued() == 2, "two requests queued behind the held run")
            leave.set()  # both clients disconnect while their requests wait
            statuses = await asyncio.gather(*leaving)
            queued_after = service.queued()
            session.release()
            answered = await first
            return statuses, queued_after, answered, serving.parse_metrics((await client.get("/metrics")).text)

    statuses, queued_after, answered, samples = asyncio.run(scenario())
    assert statuses == [499, 499] and queued_after == 0  # they left the queue at once
    assert answered.status_code == 200 and session.runs == [[1]] and session.started == 1  # theirs never ran
    assert samples[("onnx_service_requests_total", (("method", "POST"), ("path", "/predict"), ("status", "499")))] == 2
