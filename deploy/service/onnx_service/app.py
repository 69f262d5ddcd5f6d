"""The FastAPI application: /predict, /health, /ready, /metrics and the OpenAPI docs (/docs, /openapi.json)."""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

import anyio.to_thread
from anyio import CapacityLimiter
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from . import __version__
from .config import Settings
from .metrics import CONTENT_TYPE, Metrics
from .model import LoadedModel, load_model
from .validation import FIELD, RequestError, check_content_type, parse_json, to_batch

log = logging.getLogger("onnx_service")
KNOWN_PATHS = {"/predict", "/health", "/ready", "/metrics", "/docs", "/openapi.json", "/docs/oauth2-redirect", "/redoc"}
_INTERNAL_ERROR = b'{"error":"internal","detail":"internal server error; the incident was logged"}'


class MetricsAndErrors:
    """Pure ASGI middleware: counts and times every request, and turns any unexpected exception into a bare 500."""

    def __init__(self, app: Any, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500, "started": False}

        async def send_and_record(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
            await send(message)

        self.metrics.request_started()
        try:
            await self.app(scope, receive, send_and_record)
        except Exception:
            log.exception("unexpected error while answering %s %s", scope.get("method"), scope.get("path"))
            status["code"] = 500
            if not status["started"]:
                await send({"type": "http.response.start", "status": 500, "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(_INTERNAL_ERROR)).encode())]})
                await send({"type": "http.response.body", "body": _INTERNAL_ERROR})
        finally:
            path = scope.get("path", "")
            self.metrics.request_finished(scope.get("method", ""), path if path in KNOWN_PATHS else "other", status["code"], time.perf_counter() - start)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise RequestError(400, "bad_content_length", f"Content-Length {declared!r} is not a number") from None
        if size > limit:
            raise RequestError(413, "body_too_large", f"the body has {size} bytes; the maximum is {limit} bytes (send smaller batches)")
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise RequestError(413, "body_too_large", f"the body exceeds the maximum of {limit} bytes (send smaller batches)")
        chunks.append(chunk)
    return b"".join(chunks)


def _request_schema(model: LoadedModel, settings: Settings) -> dict[str, Any]:
    contract = model.contract(settings.max_batch)
    leaf: dict[str, Any] = {"type": "integer" if contract.dtype.kind in "iu" else "number"}
    schema = leaf
    for dim in reversed(contract.example_shape):
        schema = {"type": "array", "items": schema, **({"minItems": dim, "maxItems": dim} if dim else {})}
    batch = {"type": "array", "items": schema, "minItems": 1, "maxItems": contract.max_batch}
    return {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": [FIELD],
                    "properties": {FIELD: {"description": f"one example {contract.shape_text()} or a batch {contract.shape_text(batch=True)}", "anyOf": [schema, batch]}},
                }
            }
        },
    }


def create_app(settings: Settings | None = None, model: LoadedModel | None = None) -> FastAPI:
    """The application for ``settings`` (default: from the environment); loads the model unless one is given."""
    settings = settings or Settings.from_env()
    model = model or load_model(settings.model, settings.model_sha256, settings.threads, settings.model_name)
    contract = model.contract(settings.max_batch)
    metrics = Metrics(contract.max_batch, {"name": model.name, "opset": str(model.opset), "sha256": model.sha256})
    naive = settings.handler == "naive"
    # at most one inference per core at a time: more threads would only fight over the cores (and the GIL)
    inference_slots = CapacityLimiter(max(1, (os.cpu_count() or 1) // settings.threads))
    description = (
        f"Serves the ONNX model **{model.name}** (opset {model.opset}). POST `/predict` with "
        f'`{{"{FIELD}": ...}}`: one example of shape {contract.shape_text()} or a batch of shape '
        f"{contract.shape_text(batch=True)} (at most {contract.max_batch} examples, {settings.max_body_bytes} bytes)."
    )
    app = FastAPI(title="ONNX Lab inference service", version=__version__, description=description)
    app.state.model, app.state.settings, app.state.metrics = model, settings, metrics

    def timed_run(batch: Any) -> tuple[list[Any], float]:
        start = time.perf_counter()
        outputs = model.run(batch)
        return outputs, time.perf_counter() - start

    @app.get("/health", summary="Liveness: the process answers")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready", summary="Readiness: the model is loaded (name, opset, signature, sha256)")
    async def ready() -> dict[str, Any]:
        return {"ready": True, "model": model.describe(), "max_batch": contract.max_batch, "max_body_bytes": settings.max_body_bytes, "handler": settings.handler}

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.post(
        "/predict",
        summary="Classify one example or a batch",
        openapi_extra={"requestBody": _request_schema(model, settings)},
        responses={400: {"description": "not JSON"}, 413: {"description": "body too large"}, 415: {"description": "not application/json"}, 422: {"description": "wrong shape, type, values or batch size"}},
    )
    async def predict(request: Request) -> Response:
        try:
            check_content_type(request.headers.get("content-type"))
            body = await _read_body(request, settings.max_body_bytes)
            batch, _single = to_batch(parse_json(body), contract)
        except RequestError as error:
            return JSONResponse(error.body(), status_code=error.status)
        if naive:
            outputs, seconds = timed_run(batch)  # blocks the event loop: every other request waits (notebook 08 measures it)
        else:
            outputs, seconds = await anyio.to_thread.run_sync(timed_run, batch, limiter=inference_slots)  # the loop keeps serving
        metrics.observe_inference(len(batch), seconds)
        result = {"model": model.name, "batch_size": int(len(batch)), **model.postprocess(outputs)}
        return Response(json.dumps(result, separators=(",", ":")), media_type="application/json")

    app.add_middleware(MetricsAndErrors, metrics=metrics)
    return app


def app_from_env() -> FastAPI:
    """Factory used by each uvicorn worker process (settings come from ONNX_SERVICE_* variables)."""
    return create_app(Settings.from_env())
