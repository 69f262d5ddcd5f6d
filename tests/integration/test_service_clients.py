"""The service under clients that misbehave, in both modes (batching and threadpool), with a stand-in model.

The stand-in replaces ONNX Runtime's session: it refuses token ids beyond its vocabulary (a value no schema
check can catch, as ORT's Gather does) and holds every run until the test releases it. Every test is an
order of events the test controls (hold, queue, release), never a race against the CPU: they hold on a
loaded machine.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn
from fastapi.testclient import TestClient
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

from labsupport.topics import loadgen
from onnx_service import edge, routing
from onnx_service.app import create_app
from onnx_service.batching import Batcher
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
    # batching: the merged run [5, 5000, 3] failed, each request then ran alone; which queued request gets the freed slot
    # first is the scheduler's choice in threadpool mode, so the runs are compared in any order after the held one
    assert session.runs[0] == [1] and sorted(session.runs[1:]) == [[3], [5]], session.runs


def _leaving_client(app, body: dict | bytes, leave: asyncio.Event) -> asyncio.Task:
    """A POST /predict straight to the ASGI app whose client disconnects once ``leave`` is set; the task gives the status sent."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
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
            return statuses, queued_after, answered, loadgen.parse_metrics((await client.get("/metrics")).text)

    statuses, queued_after, answered, samples = asyncio.run(scenario())
    assert statuses == [499, 499] and queued_after == 0  # they left the queue at once
    assert answered.status_code == 200 and session.runs == [[1]] and session.started == 1  # theirs never ran
    assert samples[("onnx_service_requests_total", (("method", "POST"), ("path", "/predict"), ("status", "499")))] == 2


def _count_of_499(samples: dict) -> float:
    return samples.get(("onnx_service_requests_total", (("method", "POST"), ("path", "/predict"), ("status", "499"))), 0)


@pytest.mark.parametrize("mode", MODES)
def test_a_request_whose_client_is_already_gone_never_runs_even_on_an_idle_batcher(mode):
    session = StandInSession()
    app = standin_app(session, mode)

    async def scenario():
        gone = asyncio.Event()
        gone.set()  # the client sent its whole request and closed the connection at once
        status = await _leaving_client(app, tokens(7), gone)
        async with client_for(app) as client:
            return status, loadgen.parse_metrics((await client.get("/metrics")).text)

    status, samples = asyncio.run(scenario())
    assert status == 499 and session.started == 0  # nothing queued or running: the batcher was idle, and still never ran it
    assert _count_of_499(samples) == 1


def test_a_request_whose_client_leaves_as_it_is_queued_on_an_idle_batcher_never_runs(monkeypatch):
    session = StandInSession()
    app = standin_app(session, "batching")
    leave = asyncio.Event()
    real_submit = Batcher.submit

    async def submit_as_the_client_leaves(batcher, rows):
        leave.set()  # the client's disconnect arrives as its request joins the idle batcher's queue
        return await real_submit(batcher, rows)

    async def scenario():
        async with client_for(app) as client:
            first = await client.post("/predict", json=tokens(1))  # starts the batcher's collector: it now waits, idle
            monkeypatch.setattr(Batcher, "submit", submit_as_the_client_leaves)
            status = await _leaving_client(app, tokens(7), leave)
            return first.status_code, status, loadgen.parse_metrics((await client.get("/metrics")).text)

    first, status, samples = asyncio.run(scenario())
    assert first == 200 and status == 499 and session.runs == [[1]]  # the left request's batch was never run
    assert _count_of_499(samples) == 1


def test_a_body_whose_client_left_while_it_waited_for_the_parse_lane_is_never_parsed(monkeypatch):
    session = StandInSession()
    app = standin_app(session, "threadpool")
    parsed, parsing, release_parse = [], threading.Event(), threading.Event()
    real_parse = edge._parse_and_validate

    def held_parse(body: bytes, contract):
        parsed.append(len(body))
        parsing.set()
        release_parse.wait(30)
        return real_parse(body, contract)

    monkeypatch.setattr(edge, "_parse_and_validate", held_parse)
    padded = json.dumps(tokens(1)).encode() + b" " * edge.INLINE_PARSE_BYTES  # large enough for the parse lane

    async def scenario():
        async with client_for(app) as client:
            first = asyncio.create_task(client.post("/predict", content=padded, headers={"content-type": "application/json"}))
            await asyncio.to_thread(parsing.wait, 30)  # the first body holds the one parse lane
            leave = asyncio.Event()
            leaving = _leaving_client(app, padded, leave)
            await until(lambda: edge._parse_lane().statistics().tasks_waiting == 1, "the second body waiting for the lane")
            leave.set()
            status = await leaving  # answered while the first parse still holds the lane
            release_parse.set()
            answered = await first
            return status, answered, loadgen.parse_metrics((await client.get("/metrics")).text)

    status, answered, samples = asyncio.run(scenario())
    assert status == 499 and answered.status_code == 200
    assert len(parsed) == 1 and _count_of_499(samples) == 1  # the abandoned body was never parsed


@pytest.mark.parametrize("mode", MODES)
def test_a_request_resolves_its_dependencies_on_the_event_loop_without_a_thread_hop(mode, monkeypatch):
    import fastapi.dependencies.utils as fastapi_dependencies

    hops = []
    real_hop = fastapi_dependencies.run_in_threadpool

    async def counted_hop(function, *args, **kwargs):
        hops.append(getattr(function, "__name__", repr(function)))
        return await real_hop(function, *args, **kwargs)

    monkeypatch.setattr(fastapi_dependencies, "run_in_threadpool", counted_hop)  # FastAPI's hop for a plain def dependency
    app = standin_app(StandInSession(), mode)

    async def scenario():
        async with client_for(app) as client:
            return [(await client.post("/predict", json=tokens(3))).status_code, (await client.get("/ready")).status_code]

    statuses = asyncio.run(scenario())
    assert statuses[0] == 200 and hops == []  # get_service is async: no worker thread per request just to read app.state


@pytest.mark.parametrize("mode", MODES)
def test_a_full_queue_answers_503_with_retry_after_at_once_and_the_queued_requests_finish(mode):
    session = StandInSession()
    app = standin_app(session, mode, batch_queue_limit=2)
    service = app.state.service

    async def scenario():
        async with client_for(app) as client:
            session.hold()
            first = asyncio.create_task(client.post("/predict", json=tokens(1)))
            await asyncio.to_thread(session.wait_until_started, 1)
            queued = [asyncio.create_task(client.post("/predict", json=tokens(i))) for i in (2, 3)]
            await until(lambda: service.queued() == 2, "the queue full")
            refused = await client.post("/predict", json=tokens(4))  # answered while every other request is still held
            answered_before_the_refusal = [task.done() for task in (first, *queued)]
            session.release()
            answers = await asyncio.gather(first, *queued)
            return refused, answered_before_the_refusal, answers, await client.post("/predict", json=tokens(5))

    refused, answered_before_the_refusal, answers, after = asyncio.run(scenario())
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"] == "overloaded" and "2 requests queued" in refused.json()["detail"]
    assert answered_before_the_refusal == [False, False, False], "a full queue must refuse at once, not wait for room"
    assert [answer.status_code for answer in answers] == [200, 200, 200] and after.status_code == 200


def _serve_in_a_thread(app) -> tuple[uvicorn.Server, threading.Thread, str]:
    """uvicorn on 127.0.0.1 (any free port) in a thread, once the service is warm; ``server.should_exit = True`` starts its
    graceful shutdown, as SIGTERM does."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, lifespan="on", log_level="warning", timeout_graceful_shutdown=60)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    for _ in range(3000):
        if server.started:
            break
        thread.join(0.01)
    assert server.started, "uvicorn did not start"
    # started is not warm: the warm-up runs in a task of its own, and a test that holds the model must not hold them
    asyncio.run(until(lambda: app.state.service.readiness() is None, "the service finished its warm-up"))
    return server, thread, f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize("mode", MODES)
def test_shutdown_with_requests_in_the_queue_loses_none(mode):
    session = StandInSession()
    app = standin_app(session, mode)
    service = app.state.service
    server, thread, url = _serve_in_a_thread(app)
    warm_up_runs = session.started
    session.hold()
    answers: list = [None] * 8

    def send(i: int) -> None:
        with httpx.Client(base_url=url, timeout=60.0) as client:
            answers[i] = client.post("/predict", json=tokens(10 + i))

    clients = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(8)]
    clients[0].start()
    session.wait_until_started(warm_up_runs + 1)  # the first request holds the slot: the other seven queue
    for client in clients[1:]:
        client.start()
    asyncio.run(until(lambda: service.queued() == 7, "seven requests queued behind the held run"))
    server.should_exit = True  # what uvicorn's SIGTERM handler does: stop accepting, finish the requests it has
    asyncio.run(until(lambda: bool(server.servers) and not any(s.is_serving() for s in server.servers), "the listener closed"))
    session.release()
    for client in clients:
        client.join(60)
    thread.join(60)
    assert not thread.is_alive()
    assert [answer.status_code for answer in answers] == [200] * 8
    assert [answer.json()["predictions"] for answer in answers] == [[(10 + i) % CLASSES] for i in range(8)]


def test_every_route_of_the_app_is_its_own_path_label_in_metrics():
    app = standin_app(StandInSession(), "threadpool")
    paths = sorted({*app.openapi()["paths"], "/docs", "/openapi.json"})  # every route in the schema, and the docs
    with TestClient(app, raise_server_exceptions=False) as client:
        for path in [*paths, "/no-such-route"]:
            client.get(path)
        samples = loadgen.parse_metrics(client.get("/metrics").text)
    labels = {dict(labels)["path"] for name, labels in samples if name == "onnx_service_requests_total"}
    assert {"/predict", "/health", "/ready", "/metrics", "/admin/routing", "/docs", "/openapi.json"} <= set(paths)
    assert labels == {*paths, "other"}, labels  # a route is never counted as "other"; an unknown path always is


def shadowed_app(champion: StandInSession, shadow: StandInSession, slots: int):
    """The stand-in app serving version "1" with version "2" (another stand-in) as its shadow, and ``slots`` inference slots."""
    app = create_app(Settings(), model=standin_model(champion))
    service = app.state.service
    service.inference_slots.total_tokens = slots
    versions = {"1": routing.Version("1", standin_model(champion)), "2": routing.Version("2", standin_model(shadow))}
    service.routing = routing.Routing(versions, {routing.CHAMPION: "1"}, shadow="2")
    return app


def shadow_counts(app) -> dict[str, float]:
    samples = loadgen.parse_metrics(app.state.service.metrics.render())
    return {dict(labels)["outcome"]: value for (name, labels), value in samples.items() if name == "onnx_service_shadow_examples_total"}


def test_a_running_shadow_leaves_a_slot_to_the_next_live_request_which_never_queues():
    champion, shadow = StandInSession(), StandInSession()
    app = shadowed_app(champion, shadow, slots=2)
    service = app.state.service

    async def scenario():
        async with client_for(app) as client:
            shadow.hold()
            first = await client.post("/predict", json=tokens(1))  # two free slots: its shadow run starts, and is held
            await asyncio.to_thread(shadow.wait_until_started, 1)
            during = await client.post("/predict", json=tokens(2))  # answered while the shadow still holds its slot
            queued_during, shadow_done_before = service.queued(), shadow.runs != []
            shadow.release()
            await until(lambda: service.inference_slots.borrowed_tokens == 0, "the shadow gave its slot back")
            return first, during, queued_during, shadow_done_before

    first, during, queued_during, shadow_done_before = asyncio.run(scenario())
    assert first.status_code == during.status_code == 200 and queued_during == 0 and not shadow_done_before
    assert shadow_counts(app) == {"agree": 1, "disagree": 0, "skipped": 1}  # the second found one free slot: it kept it for live work
    assert champion.runs == [[1], [2]] and shadow.runs == [[1]]


def test_with_one_slot_the_shadow_never_runs_and_every_example_is_counted_skipped():
    champion, shadow = StandInSession(), StandInSession()
    app = shadowed_app(champion, shadow, slots=1)

    async def scenario():
        async with client_for(app) as client:
            return [(await client.post("/predict", json=tokens(i))).status_code for i in range(5)]

    assert asyncio.run(scenario()) == [200] * 5
    assert shadow_counts(app) == {"skipped": 5} and shadow.started == 0  # so it costs the live request nothing
