"""The service's HTTP edge (onnx_service.edge): body limit from the model, parsing off the event loop, body deadline,
concurrency limit, framing and content coding refused, one error shape for every 4xx, HEAD on the probes, /docs
behind a path prefix. In-process (httpx.ASGITransport) except where the HTTP server itself must answer: there
a real service is started and spoken to over a raw socket.

Nothing here depends on speed: a request held mid-body waits on an event the test sets, and a slow parse is a
parse that waits on an event until /health was answered.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import socket
import threading
from urllib.parse import urlsplit

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics import loadgen, serving
from onnx_service import edge, text, validation
from onnx_service.app import create_app
from onnx_service.config import ConfigError, Settings

GOOD = np.zeros((1, 8, 8)).tolist()
JSON = {"content-type": "application/json"}
WAIT = 10  # seconds: only ever reached when the behaviour under test is missing
PREFIX = "/user/ana/proxy/8080"  # where the class hub's proxy serves port 8080 of user ana


def _app(**settings: object):
    app = create_app(Settings(model=str(ensure_digits_cnn()), **settings))
    app.state.service.warm = True
    return app


def _client(app, root_path: str = "") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, root_path=root_path)
    return httpx.AsyncClient(transport=transport, base_url="http://service")


def _call(app, method: str, url: str, root_path: str = "", **kwargs) -> httpx.Response:
    async def one() -> httpx.Response:
        async with _client(app, root_path) as client:
            return await client.request(method, url, **kwargs)

    return asyncio.run(one())


def _assert_error_shape(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, (response.status_code, response.text[:300])
    body = response.json()
    assert set(body) == {"error", "detail"} and body["error"] == code, body
    return body


# ---------------------------------------------------------------- body limit


def test_the_default_body_limit_is_derived_from_the_contract_and_shown_in_ready():
    app = _app()
    ready = _call(app, "GET", "/ready").json()
    expected = 64 * 64 * edge.BYTES_PER_VALUE + edge.ENVELOPE_BYTES  # max_batch 64 examples of [1, 8, 8]
    assert ready["max_body_bytes"] == expected < 1_048_576
    longest = np.full((64, 1, 8, 8), -1.2345678901234567e-300).tolist()  # float64 reprs of 24 characters
    pretty = json.dumps({"inputs": longest}, indent=2).encode()  # the largest valid request a client plausibly writes
    assert len(pretty) < expected
    assert _call(app, "POST", "/predict", content=pretty, headers=JSON).status_code == 200
    too_big = b'{"inputs": [' + b"0," * (expected // 2) + b"0]}"
    _assert_error_shape(_call(app, "POST", "/predict", content=too_big, headers=JSON), 413, "body_too_large")


def test_an_explicit_body_limit_wins_and_a_free_shape_falls_back_to_1_mib():
    assert _call(_app(max_body_bytes=4096), "GET", "/ready").json()["max_body_bytes"] == 4096
    contract = _app().state.service.contract
    free = dataclasses.replace(contract, example_shape=(1, None, None))
    assert edge.body_limit(free) == edge.FREE_SHAPE_BODY_BYTES


def test_the_derived_body_limit_is_capped_at_16_mib_and_an_explicit_one_may_exceed_it():
    contract = _app().state.service.contract
    imagenet = dataclasses.replace(contract, example_shape=(3, 224, 224))  # max_batch 64: 462 MB derived without the cap
    assert edge.body_limit(imagenet) == edge.DERIVED_BODY_BYTES_CAP == 16 * 1024 * 1024
    explicit = Settings(max_body_bytes=64 * 1024 * 1024)
    assert edge.with_body_limit(explicit, imagenet).max_body_bytes == 64 * 1024 * 1024


# ---------------------------------------------------------------- parsing off the event loop


def test_a_body_slow_to_parse_never_stalls_health(monkeypatch):
    """The parse of /predict's body waits until /health was answered: only a parse off the event loop can see that."""
    app = _app()
    parsing, health_answered, waits = threading.Event(), threading.Event(), []
    parse_int = validation._parse_int

    def slow_parse_int(token: str) -> int | float:  # json.loads calls it for every integer literal
        parsing.set()
        waits.append(health_answered.wait(WAIT))
        return parse_int(token)

    monkeypatch.setattr(validation, "_parse_int", slow_parse_int)

    async def scenario() -> tuple[int, int]:
        async with _client(app) as client:
            body = b'{"inputs": 7}' + b" " * edge.INLINE_PARSE_BYTES  # large enough to be parsed off the loop
            predict = asyncio.create_task(client.post("/predict", content=body, headers=JSON))
            assert await asyncio.to_thread(parsing.wait, WAIT)
            health = await client.get("/health")
            health_answered.set()
            return health.status_code, (await predict).status_code

    assert asyncio.run(scenario()) == (200, 422)
    assert waits == [True], "the parse ran on the event loop: /health could not be answered while it lasted"


# ---------------------------------------------------------------- body deadline and concurrency limit


async def _held_body(reading: asyncio.Event, release: asyncio.Event):
    """A /predict body sent in two parts; the second only once ``release`` is set."""
    yield b'{"inputs": '
    reading.set()  # the server asked for more: the first part is in
    await release.wait()
    yield json.dumps(GOOD).encode() + b"}"


def test_a_body_that_does_not_arrive_in_time_gets_408():
    app = _app(body_timeout_seconds=0.3)

    async def scenario() -> httpx.Response:
        reading, never = asyncio.Event(), asyncio.Event()
        async with _client(app) as client:
            return await asyncio.wait_for(client.post("/predict", content=_held_body(reading, never), headers=JSON), WAIT)

    response = asyncio.run(scenario())
    body = _assert_error_shape(response, 408, "body_timeout")
    assert "0.3 s" in body["detail"] and response.headers["connection"] == "close"


def test_beyond_the_concurrency_limit_a_request_gets_503_with_retry_after_and_probes_still_answer():
    app = _app(concurrency_limit=1)

    async def scenario() -> tuple[httpx.Response, int, int, int]:
        reading, release = asyncio.Event(), asyncio.Event()
        async with _client(app) as client:
            held = asyncio.create_task(client.post("/predict", content=_held_body(reading, release), headers=JSON))
            await asyncio.wait_for(reading.wait(), WAIT)
            refused = await client.post("/predict", json={"inputs": GOOD})
            health, ready = (await client.get("/health")).status_code, (await client.get("/ready")).status_code
            release.set()
            return refused, health, ready, (await held).status_code

    refused, health, ready, held = asyncio.run(scenario())
    _assert_error_shape(refused, 503, "overloaded")
    assert refused.headers["retry-after"] == "1"
    assert (health, ready, held) == (200, 200, 200)


# ---------------------------------------------------------------- error shape, methods, redirects, codings


def test_404_405_and_a_trailing_slash_answer_in_the_error_shape_without_a_redirect():
    app = _app()
    _assert_error_shape(_call(app, "GET", "/nothing-here"), 404, "not_found")
    wrong_method = _call(app, "GET", "/predict")
    _assert_error_shape(wrong_method, 405, "method_not_allowed")
    assert wrong_method.headers["allow"] == "POST"
    slash = _call(app, "POST", "/predict/", json={"inputs": GOOD}, headers={"host": "evil.example"})
    _assert_error_shape(slash, 404, "not_found")
    assert "location" not in slash.headers


def test_head_on_the_probes_answers_like_get_without_a_body():
    app = _app()
    for path in ("/health", "/ready"):
        got, head = _call(app, "GET", path), _call(app, "HEAD", path)
        assert head.status_code == got.status_code == 200 and head.content == b""
        assert head.headers["content-type"] == got.headers["content-type"] == "application/json"
        assert head.headers["content-length"] == got.headers["content-length"]


@pytest.mark.parametrize("coding", ["gzip", "br", "identity, gzip"])
def test_a_content_coding_the_service_does_not_decode_gets_415(coding):
    response = _call(_app(), "POST", "/predict", json={"inputs": GOOD}, headers={"content-encoding": coding})
    _assert_error_shape(response, 415, "unsupported_content_encoding")
    assert response.headers["accept-encoding"] == "identity"


def test_identity_coding_is_accepted():
    assert _call(_app(), "POST", "/predict", json={"inputs": GOOD}, headers={"content-encoding": "identity"}).status_code == 200


# ---------------------------------------------------------------- /docs behind a path-prefix proxy


def test_docs_loads_its_files_and_the_schema_through_the_root_path():
    app = _app()
    page = _call(app, "GET", "/docs", root_path=PREFIX).text
    urls = re.findall(r"(?:href|src)=\"([^\"]+)\"|url: '([^']+)'", page)
    files = ("favicon-32x32.png", "swagger-ui.css", "swagger-ui-bundle.js")
    expected = [f"{PREFIX}/docs/assets/{name}" for name in files] + [f"{PREFIX}/openapi.json"]
    assert sorted(u for pair in urls for u in pair if u) == sorted(expected)
    assert _call(app, "GET", f"{PREFIX}/docs/assets/swagger-ui.css", root_path=PREFIX).status_code == 200


# ---------------------------------------------------------------- admin token


def test_a_non_ascii_admin_token_is_refused_at_start_without_echoing_it():
    with pytest.raises(ConfigError, match="ONNX_SERVICE_ADMIN_TOKEN: expected visible ASCII") as refused:
        Settings.from_env({"ONNX_SERVICE_ADMIN_TOKEN": "pässwörd"})
    assert "pässwörd" not in str(refused.value)
    assert Settings.from_env({"ONNX_SERVICE_ADMIN_TOKEN": "s3cr3t-~token"}).admin_token == "s3cr3t-~token"


def _unknown_operator_model(path) -> None:
    """A model ONNX reads but ONNX Runtime refuses to load (an operator of a domain it does not know)."""
    node = helper.make_node("Mystery", ["image"], ["logits"], domain="example.mystery")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 10])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.mystery", 1)]), path)


@pytest.mark.parametrize("content", ["junk", "unknown operator"])
def test_admin_refusals_repeat_at_most_an_excerpt_of_a_long_file_name(tmp_path, content):
    name = "".join(f"{i:03d}" for i in range(66)) + ".onnx"  # 203 characters, every 61-character window unique
    path = tmp_path / name
    if content == "junk":
        path.write_bytes(b"not an onnx model")
    else:
        _unknown_operator_model(path)
    document = {"versions": {"1": str(ensure_digits_cnn()), "2": str(path)}, "aliases": {"champion": "1"}}
    response = _call(_app(admin_token="t"), "PUT", "/admin/routing", json=document, headers={"authorization": "Bearer t"})
    detail = _assert_error_shape(response, 422, "bad_routing")["detail"]
    sent = str(path)
    repeated = [sent[i : i + text.EXCERPT_CHARS + 1] for i in range(len(sent) - text.EXCERPT_CHARS)]
    assert not [window for window in repeated if window in detail], detail
    assert name[-text.EXCERPT_CHARS :] in detail  # the excerpt keeps the end of the file name


# ---------------------------------------------------------------- a real server over a raw socket


@pytest.fixture(scope="module")
def live():
    """A real service behind an imagined path-prefix proxy: uvicorn puts ROOT_PATH in front of every path."""
    service = serving.start(ensure_digits_cnn(), body_timeout_seconds=1, root_path=PREFIX)
    yield urlsplit(service.url)
    service.stop()


def test_behind_a_root_path_docs_load_through_it_and_metrics_name_the_routes(live):
    with httpx.Client(base_url=f"http://{live.netloc}", timeout=WAIT) as client:
        assert client.get("/health").status_code == 200
        page = client.get("/docs").text
        metrics = loadgen.parse_metrics(client.get("/metrics").text)
    assert f"{PREFIX}/docs/assets/swagger-ui-bundle.js" in page and f"url: '{PREFIX}/openapi.json'" in page
    health = ("onnx_service_requests_total", (("method", "GET"), ("path", "/health"), ("status", "200")))
    assert metrics[health] == 1


def _exchange(address, data: bytes) -> tuple[bytes, bool]:
    """Send ``data`` on a fresh connection; (everything the server sent, whether it closed the connection)."""
    with socket.create_connection((address.hostname, address.port), timeout=WAIT) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            return received, False
    return received, True


def _status_and_body(raw: bytes) -> tuple[str, bytes, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), head.lower(), body


def test_content_length_with_transfer_encoding_is_refused_and_the_connection_closed(live):
    body = json.dumps({"inputs": GOOD}).encode()
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    smuggled = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"  # would be answered on a kept-alive connection
    request = (
        b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + chunked + smuggled
    )
    raw, closed = _exchange(live, request)
    status, head, rest = _status_and_body(raw)
    assert status == "HTTP/1.1 400 Bad Request" and b"connection: close" in head
    assert json.loads(rest)["error"] == "ambiguous_framing"
    assert closed and raw.count(b"HTTP/1.1 ") == 1  # the smuggled request got no answer


def test_a_half_sent_body_gets_408_and_the_connection_is_closed(live):
    request = b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + b'{"inputs": ['
    raw, closed = _exchange(live, request)
    status, head, rest = _status_and_body(raw)
    assert status.startswith("HTTP/1.1 408") and b"connection: close" in head and closed
    assert json.loads(rest)["error"] == "body_timeout"


def test_bytes_that_are_not_http_get_a_400_in_the_error_shape(live):
    raw, closed = _exchange(live, b"THIS IS NOT HTTP\r\n\r\n")
    status, head, rest = _status_and_body(raw)
    assert status == "HTTP/1.1 400 Bad Request" and b"application/json" in head and closed
    assert json.loads(rest) == {"error": "malformed_request", "detail": "Invalid HTTP request received."}


def test_head_on_a_real_server_answers_the_probes_without_a_body_and_keeps_the_connection(live):
    with httpx.Client(base_url=f"http://{live.netloc}", timeout=WAIT) as client:
        heads = [client.head(path) for path in ("/health", "/ready", "/health")]
    assert [(r.status_code, r.content) for r in heads] == [(200, b"")] * 3
    assert all(int(r.headers["content-length"]) > 0 and "connection" not in r.headers for r in heads)
