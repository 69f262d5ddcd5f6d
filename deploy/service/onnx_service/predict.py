"""POST /predict (the route is built per app: its documented body follows the model): validate the body against the model's signature, pick a version, infer, answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

from . import routing
from .batching import QueueFull
from .edge import parse_request
from .service import Service, ServiceDep
from .validation import CLIENT_CLOSED, FIELD, RequestError, check_content_type, read_body

T = TypeVar("T")

RESPONSES = {
    400: {"description": "not JSON, or both Content-Length and Transfer-Encoding"},
    408: {"description": "the body did not arrive in time"},
    413: {"description": "body too large"},
    415: {"description": "not application/json, or a Content-Encoding other than identity"},
    422: {"description": "wrong shape, type, values or batch size, or outputs that overflow"},
    503: {"description": "overloaded (too many requests wait for a slot): retry after the Retry-After header's seconds"},
}


async def predict(request: Request, service: ServiceDep) -> Response:
    try:
        check_content_type(request.headers.get("content-type"))
        body = await read_body(request, service.settings.max_body_bytes)
        async with ClientWatch(request) as client:  # from here on a client that disconnects gets 499 and its work is dropped
            batch, _single = await parse_request(body, service.contract, client.unless_it_leaves)
            routing_now = service.routing  # this request finishes on the routing it started with
            alias, version = routing_now.pick(routing.key_from_header(request.headers.get(routing.KEY_HEADER)))
            outputs = await client.unless_it_leaves(service.infer(version, batch))
    except RequestError as error:
        return JSONResponse(error.body(), status_code=error.status)
    except ClientLeft:
        return client_left()
    except QueueFull as full:
        headers = {"Retry-After": str(full.retry_after)}
        return JSONResponse({"error": "overloaded", "detail": str(full)}, status_code=503, headers=headers)
    except (InvalidArgument, Fail, RuntimeException) as error:  # raised by the inference only: version and batch are set
        if not refused_by_the_model(error, version):
            raise  # the model failed on a shape it must take: a server fault (500, logged)
        detail = f"the model refused inputs of shape {list(batch.shape)}: {str(error)[:300]}"
        return JSONResponse({"error": "model_refused_input", "detail": detail}, status_code=422)
    rows = sorted({len(output) for output in outputs})
    if rows != [len(batch)]:  # e.g. a Reshape [-1, 64] of a 16x16 image: 4 rows for 1 example
        detail = f"the model answered {rows} rows for the {len(batch)} example(s) of shape {list(batch.shape)}: it does not take this shape"
        return JSONResponse({"error": "model_refused_input", "detail": detail}, status_code=422)
    result = {"model": version.model.name, "version": version.name, "alias": alias, "batch_size": len(batch)}
    result.update(version.model.postprocess(outputs))
    try:  # strict JSON: finite inputs can still overflow the model's outputs (e.g. 1e38 pixels give inf logits, NaN probabilities)
        text = json.dumps(result, separators=(",", ":"), allow_nan=False)
    except ValueError:
        detail = "these inputs make the model's outputs overflow (not finite); send values in the range the model was trained on"
        return JSONResponse({"error": "non_finite_output", "detail": detail}, status_code=422)
    service.metrics.observe_version(version.name, alias)
    shadow = routing_now.versions.get(routing_now.shadow) if routing_now.shadow else None
    if shadow is not None and shadow is not version and alias == routing.CHAMPION:  # the shadow is compared with the champion only
        service.start_shadow(shadow, batch, result["predictions"])
    return Response(text, media_type="application/json", headers={"X-Model-Version": version.name})


class ClientLeft(Exception):
    """The client closed the connection while its request waited for or ran its parse or inference."""


def client_left() -> Response:
    """The 499 of a request whose client left: nobody reads it, the metrics count it (its work was dropped unless it had started)."""
    detail = "the client closed the connection before the answer"
    return JSONResponse({"error": "client_closed_request", "detail": detail}, status_code=CLIENT_CLOSED)


async def _disconnect(request: Request) -> None:
    """Returns once the client has closed the connection (the body was read already: nothing else can arrive)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _handler_cancelled() -> bool:
    """Whether this request's own task was cancelled (a shutdown), not only the work it awaited."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class ClientWatch:
    """One listener per request for its client's disconnect, from the end of the body to the answer.

    uvicorn does not cancel a request's task when its client goes away (it only marks the connection
    closed), so the service listens for ``http.disconnect`` itself, in one task per request. Entering
    gives that task one turn of the event loop first: a disconnect already received is taken at once
    (ClientLeft), so a client gone before its body is parsed or run has neither done. ``unless_it_leaves``
    then runs work (a parse in the parse lane, an inference) as a task that the listener cancels in its own
    turn, as soon as the disconnect arrives: a request still waiting in the batcher's queue, for an inference
    slot or for the parse lane never runs; one already running finishes in its thread.
    """

    _gone: asyncio.Task[None]

    def __init__(self, request: Request):
        self._request = request
        self._work: asyncio.Future[Any] | None = None  # the work running now, cancelled by the listener

    async def _listen(self) -> None:
        await _disconnect(self._request)
        if self._work is not None:
            self._work.cancel()  # at once: the batcher skips a cancelled request it has queued or batched but not run

    async def __aenter__(self) -> ClientWatch:
        self._gone = asyncio.ensure_future(self._listen())
        await asyncio.sleep(0)  # the listener's first receive(): a disconnect already received returns without waiting
        if self._gone.done():
            raise ClientLeft
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._gone.cancel()

    async def unless_it_leaves(self, work: Coroutine[Any, Any, T]) -> T:
        """``work``'s result, or ClientLeft when the client disconnects first; ``work`` is then cancelled (never started if already gone)."""
        if self._gone.done():
            work.close()  # never started: no "coroutine was never awaited" warning
            raise ClientLeft
        self._work = task = asyncio.ensure_future(work)
        task.add_done_callback(lambda done: done.cancelled() or done.exception())  # a dropped task's error is not "never retrieved"
        try:
            return await task  # cancelling this handler cancels the task too
        except asyncio.CancelledError:
            if self._gone.done() and not _handler_cancelled():
                raise ClientLeft from None  # the listener cancelled the work
            raise
        finally:
            self._work = None


def refused_by_the_model(error: Exception, version: routing.Version) -> bool:
    """Whether an ONNX Runtime error is the request's shape being refused, not a fault of the service.

    ORT checks shapes against the model's signature (InvalidArgument); with free non-batch dimensions
    the request chooses sizes the model's operators may not take (a Reshape or a Conv fails, as Fail or
    RuntimeException): both are the input's fault (422). Any other failure of a fixed-shape model is a 500.
    """
    return isinstance(error, InvalidArgument) or bool(version.model.free_dimensions())


def request_schema(service: Service) -> dict[str, Any]:
    """The OpenAPI request body of /predict for the served model: one example or a batch, with their shapes."""
    contract = service.contract
    leaf: dict[str, Any] = {"type": "integer" if contract.dtype.kind in "iu" else "number"}
    schema = leaf
    for dim in reversed(contract.example_shape):
        schema = {"type": "array", "items": schema, **({"minItems": dim, "maxItems": dim} if dim else {})}
    batch = {"type": "array", "items": schema, "minItems": 1, "maxItems": contract.max_batch}
    description = f"one example {contract.shape_text()} or a batch {contract.shape_text(batch=True)}"
    body = {"type": "object", "required": [FIELD], "properties": {FIELD: {"description": description, "anyOf": [schema, batch]}}}
    return {"required": True, "content": {"application/json": {"schema": body}}}


def build_router(service: Service) -> APIRouter:
    """The /predict route, its OpenAPI request body derived from the model that ``service`` serves."""
    router = APIRouter()
    router.add_api_route(
        "/predict",
        predict,
        methods=["POST"],
        summary="Classify one example or a batch",
        responses=RESPONSES,
        openapi_extra={"requestBody": request_schema(service)},
    )
    return router
