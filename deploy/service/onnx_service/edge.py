"""The HTTP edge: what every request meets before a route sees it, and the answers that keep one error shape.

``EdgeGuard`` (pure ASGI middleware) refuses framing that a front end could read differently (Content-Length
with Transfer-Encoding: RFC 9112 section 6.1), content codings it does not decode (415), and requests beyond
``concurrency_limit`` (503 + Retry-After); it reads the whole body under the body limit and a deadline (413,
408) before the route runs, and answers HEAD as GET without a body. Refusals close the connection: the rest
of an unread body must not be taken for the next request. ``body_limit`` derives the default body limit from
the model's contract; ``parse_request`` parses and validates a large body in a worker thread; the handlers give
404, 405 and FastAPI's own refusals the ``{"error", "detail"}`` shape of every other 4xx.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import PurePath
from typing import Any

import anyio
import anyio.to_thread
import numpy as np
from anyio.lowlevel import RunVar
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import validation
from .config import Settings
from .model import InputContract
from .text import EXCERPT_CHARS, excerpt
from .validation import RequestError

PROBES = {"/health", "/ready", "/metrics"}  # never refused for load: an orchestrator must see the process answer
BYTES_PER_VALUE = 48  # 24-character float64 reprs pretty-printed (indent=2) take 39 per value for [n, 1, 8, 8]: margin
ENVELOPE_BYTES = 16_384  # the object around the values, and a routing document for PUT /admin/routing
FREE_SHAPE_BODY_BYTES = 1_048_576  # a model with free non-batch dimensions: no largest request to derive a limit from
DERIVED_BODY_BYTES_CAP = 16_777_216  # 16 MiB: 64 x [3, 224, 224] would derive 462 MB per request; an explicit MAX_BODY_BYTES may exceed it
RETRY_AFTER_SECONDS = 1
INLINE_PARSE_BYTES = 4096  # parsed on the event loop: 0.2-0.4 ms even for junk, while a hop to a thread costs about 0.08 ms
_PARSE_LANE: RunVar[anyio.CapacityLimiter] = RunVar("onnx_service_parse_lane")  # one per event loop
ParsedBatch = tuple[np.ndarray, bool]  # validation.to_batch's answer: the batch, and whether one example was sent
ERROR_CODES = {404: "not_found", 405: "method_not_allowed", 422: "invalid_request"}


def body_limit(contract: InputContract) -> int:
    """The largest body a valid request can need (``max_batch`` examples, every value written long), with margin, at most DERIVED_BODY_BYTES_CAP."""
    if None in contract.example_shape:
        return FREE_SHAPE_BODY_BYTES
    values = contract.max_batch * int(np.prod(contract.example_shape, dtype=np.int64))
    return min(values * BYTES_PER_VALUE + ENVELOPE_BYTES, DERIVED_BODY_BYTES_CAP)


def with_body_limit(settings: Settings, contract: InputContract) -> Settings:
    """``settings`` with ``max_body_bytes`` derived from ``contract`` when it is 0 (the default)."""
    if settings.max_body_bytes:
        return settings
    return dataclasses.replace(settings, max_body_bytes=body_limit(contract))


def _parse_and_validate(body: bytes, contract: InputContract) -> ParsedBatch:
    return validation.to_batch(validation.parse_json(body), contract)


def _parse_lane() -> anyio.CapacityLimiter:
    try:
        return _PARSE_LANE.get()
    except LookupError:
        lane = anyio.CapacityLimiter(1)
        _PARSE_LANE.set(lane)
        return lane


async def parse_request(
    body: bytes, contract: InputContract, off_loop: Callable[[Coroutine[Any, Any, ParsedBatch]], Awaitable[ParsedBatch]]
) -> ParsedBatch:
    """``to_batch(parse_json(body))``: a body up to INLINE_PARSE_BYTES at once on the loop; a larger one in a worker thread, one
    at a time, awaited through ``off_loop`` (the caller's disconnect watch): the loop waits for one GIL hold, not a whole parse.

    One lane: under the GIL more parsing threads add no throughput, and each one competes with the event
    loop's thread for the GIL. Measured on a loaded 2-core machine, 8 junk bodies of 208 KiB stalled the
    loop at most 283-566 ms parsed on it, 47-672 ms with 40 threads, 32-64 ms with one.
    """
    if len(body) <= INLINE_PARSE_BYTES:
        return _parse_and_validate(body, contract)
    return await off_loop(anyio.to_thread.run_sync(_parse_and_validate, body, contract, limiter=_parse_lane()))


def _json_bytes(code: str, detail: str) -> bytes:
    return json.dumps({"error": code, "detail": detail}, separators=(",", ":")).encode()


async def _refuse(send: Any, status: int, code: str, detail: str, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = _json_bytes(code, detail)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close"), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _header_values(scope: dict, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope["headers"] if key.lower() == name]


def _framing_or_coding_refusal(scope: dict) -> tuple[int, str, str, tuple] | None:
    """(status, code, detail, extra headers) for a request whose body cannot be read safely, else None."""
    if _header_values(scope, b"content-length") and _header_values(scope, b"transfer-encoding"):
        return 400, "ambiguous_framing", "the request has both Content-Length and Transfer-Encoding (RFC 9112 section 6.1): send one", ()
    codings = [c.strip().lower() for value in _header_values(scope, b"content-encoding") for c in value.split(",") if c.strip()]
    unsupported = [c for c in codings if c != "identity"]
    if unsupported:
        detail = f"Content-Encoding {excerpt(', '.join(unsupported))} is not decoded here: send the JSON body uncompressed"
        return 415, "unsupported_content_encoding", detail, ((b"accept-encoding", b"identity"),)
    return None


def route_path(scope: dict) -> str:
    """The path the routes see: without the root path that uvicorn puts in front of it (``--root-path``)."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root + "/") else path


def _replay(body: bytes, receive: Any) -> Any:
    """A receive that gives ``body`` once, then waits on the client's own channel (for its disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> dict:
        return pending.pop() if pending else await receive()

    return replayed


def _without_body(send: Any) -> Any:
    async def send_headers_only(message: dict) -> None:
        await send({**message, "body": b""} if message["type"] == "http.response.body" else message)

    return send_headers_only


class EdgeGuard:
    """Pure ASGI middleware: framing, content coding, concurrency, body size and deadline, HEAD (module docstring)."""

    def __init__(self, app: Any, settings: Settings):
        self.app, self.settings = app, settings
        self.in_flight = 0

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = _framing_or_coding_refusal(scope)
        if refusal is not None:
            await _refuse(send, *refusal)
            return
        if scope["method"] == "HEAD":  # RFC 9110 section 9.3.2: the headers of GET, no content
            scope, send = {**scope, "method": "GET"}, _without_body(send)
        if route_path(scope) in PROBES:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.settings.concurrency_limit:
            detail = f"{self.in_flight} requests are being served, the limit of this process; retry after {RETRY_AFTER_SECONDS} s"
            await _refuse(send, 503, "overloaded", detail, ((b"retry-after", str(RETRY_AFTER_SECONDS).encode()),))
            return
        self.in_flight += 1
        try:
            await self._serve(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _serve(self, scope: dict, receive: Any, send: Any) -> None:
        try:
            body = await self._read_body(scope, receive)
        except RequestError as error:
            await _refuse(send, error.status, error.code, error.message)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read_body(self, scope: dict, receive: Any) -> bytes:
        """The whole body within ``max_body_bytes`` and ``body_timeout_seconds``: 413, 408, or 499 when the client left."""
        deadline = self.settings.body_timeout_seconds
        try:
            with anyio.fail_after(deadline):
                return await validation.read_body(Request(scope, receive), self.settings.max_body_bytes)
        except TimeoutError:
            raise RequestError(408, "body_timeout", f"the body did not arrive within {deadline:g} s; send it at once") from None


async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    code = ERROR_CODES.get(error.status_code, "http_error")
    return JSONResponse({"error": code, "detail": str(error.detail)}, status_code=error.status_code, headers=error.headers)


async def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    detail = "; ".join(f"{'.'.join(map(str, item.get('loc', ())))}: {item.get('msg', '')}" for item in error.errors())
    return JSONResponse({"error": "invalid_request", "detail": detail[:300]}, status_code=422)


def install_error_handlers(app: FastAPI) -> None:
    """404, 405 and FastAPI's request validation answered as ``{"error", "detail"}`` like every other 4xx."""
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)


def _client_paths(document: Any) -> list[str]:
    versions = document.get("versions") if isinstance(document, dict) else None
    sources = [s.get("path") if isinstance(s, dict) else s for s in versions.values()] if isinstance(versions, dict) else []
    return [source for source in sources if isinstance(source, str)]


def bounded_echo(message: str, document: Any) -> str:
    """``message`` with every path of the routing ``document`` longer than EXCERPT_CHARS (whole, normalised, or its file name) cut to an excerpt.

    The model loader and ONNX Runtime quote a version's file name and path in their errors, unbounded.
    """
    texts = {text for path in _client_paths(document) for text in (path, str(PurePath(path)), PurePath(path).name)}
    for text in sorted((t for t in texts if len(t) > EXCERPT_CHARS), key=len, reverse=True):
        message = message.replace(text, excerpt(text, tail=True))
    return message


def malformed_request_response(message: str) -> bytes:
    """The raw HTTP/1.1 400 that answers bytes which are not an HTTP request, in the service's error shape."""
    body = _json_bytes("malformed_request", message)
    head = f"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    return head.encode("ascii") + body
