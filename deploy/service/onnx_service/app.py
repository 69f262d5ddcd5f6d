"""The FastAPI application: /predict, /health, /ready, /metrics and the OpenAPI docs (/docs, /openapi.json)."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from typing import Any

import anyio.to_thread
from anyio import CapacityLimiter
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from . import __version__, routing
from .batching import Batcher, QueueFull
from .config import ConfigError, Settings
from .cpus import cpu_budget
from .metrics import CONTENT_TYPE, Metrics
from .model import LoadedModel, ModelError, load_served_model
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
                await send(
                    {
                        "type": "http.response.start",
                        "status": 500,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(_INTERNAL_ERROR)).encode())],
                    }
                )
                await send({"type": "http.response.body", "body": _INTERNAL_ERROR})
        finally:
            path = scope.get("path", "")
            self.metrics.request_finished(
                scope.get("method", ""), path if path in KNOWN_PATHS else "other", status["code"], time.perf_counter() - start
            )


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
                    "properties": {
                        FIELD: {
                            "description": f"one example {contract.shape_text()} or a batch {contract.shape_text(batch=True)}",
                            "anyOf": [schema, batch],
                        }
                    },
                }
            }
        },
    }


def _read_routing(path: str) -> Any:
    """The routing document in a JSON file (ONNX_SERVICE_ROUTING); ConfigError when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except (OSError, ValueError) as error:
        raise ConfigError(f"ONNX_SERVICE_ROUTING={path!r}: cannot read a JSON routing document ({error})") from None


def create_app(settings: Settings | None = None, model: LoadedModel | None = None) -> FastAPI:
    """The application for ``settings`` (default: from the environment); loads the model unless one is given."""
    settings = settings or Settings.from_env()
    model = model or load_served_model(settings.model, settings.model_sha256, settings.threads, settings.model_name)
    contract = model.contract(settings.max_batch)
    naive = settings.handler == "naive"
    # at most one inference per usable core at a time (affinity and cgroup quota, not the host's count):
    # more threads would only fight over the cores (and the GIL)
    cpus = cpu_budget()
    inference_slots = CapacityLimiter(max(1, cpus.usable // settings.threads))
    metrics = Metrics(
        contract.max_batch,
        {"name": model.name, "opset": str(model.opset), "sha256": model.sha256},
        batch_max_size=settings.batch_max_size if settings.batching else 0,
    )

    def make_batcher(version_model: LoadedModel) -> Batcher | None:
        if not settings.batching:
            return None
        return Batcher(
            version_model.run,
            max_size=settings.batch_max_size,
            max_wait=settings.batch_max_wait_ms / 1000,
            queue_limit=settings.batch_queue_limit,
            limiter=inference_slots,
            observe=metrics.observe_batch,
        )

    def load_version(path: str) -> LoadedModel:
        return load_served_model(path, threads=settings.threads)

    state = {"router": routing.single(settings.model_name or model.name, model, make_batcher(model))}
    if settings.routing:
        state["router"] = routing.build(_read_routing(settings.routing), state["router"], load_version, make_batcher)
    metrics.queue_depth = lambda: sum(v.runner.queued for v in state["router"].versions.values() if v.runner)
    shadow_slots = anyio.Semaphore(int(inference_slots.total_tokens))
    background: set[asyncio.Task] = set()
    description = (
        f"Serves the ONNX model **{model.name}** (opset {model.opset}). POST `/predict` with "
        f'`{{"{FIELD}": ...}}`: one example of shape {contract.shape_text()} or a batch of shape '
        f"{contract.shape_text(batch=True)} (at most {contract.max_batch} examples, {settings.max_body_bytes} bytes)."
    )
    app = FastAPI(title="ONNX Lab inference service", version=__version__, description=description)
    app.state.model, app.state.settings, app.state.metrics = model, settings, metrics

    def timed_run(version_model: LoadedModel, batch: Any) -> tuple[list[Any], float]:
        start = time.perf_counter()
        outputs = version_model.run(batch)
        return outputs, time.perf_counter() - start

    async def infer(version: routing.Version, batch: Any) -> list[Any]:
        """The version's outputs for a validated batch: through its batcher, or one run in a worker thread."""
        if version.runner is not None:
            outputs = await version.runner.submit(batch)  # queued, run with other requests' rows, sliced back
            metrics.observe_request_size(len(batch))
            return outputs
        if naive:  # blocks the event loop: every other request waits (notebook 08 measures it)
            outputs, seconds = timed_run(version.model, batch)
        else:  # a worker thread computes; the loop keeps serving
            outputs, seconds = await anyio.to_thread.run_sync(timed_run, version.model, batch, limiter=inference_slots)
        metrics.observe_inference(len(batch), seconds)
        return outputs

    async def shadow_run(version: routing.Version, batch: Any, served: list[int]) -> None:
        """Run the shadow version on the same batch and count agreements; its answer is never returned."""
        try:
            outputs = await infer(version, batch)
            metrics.observe_shadow(version.name, version.model.postprocess(outputs)["predictions"], served)
        except Exception:
            log.exception("shadow version %s failed", version.name)
            metrics.observe_shadow(version.name, None, served)
        finally:
            shadow_slots.release()

    @app.get("/health", summary="Liveness: the process answers")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready", summary="Readiness: the model is loaded (name, opset, signature, sha256)")
    async def ready() -> dict[str, Any]:
        router = state["router"]
        return {
            "ready": True,
            "model": router.versions[router.aliases[routing.CHAMPION]].model.describe(),
            "max_batch": contract.max_batch,
            "max_body_bytes": settings.max_body_bytes,
            "handler": settings.handler,
            "cpus": cpus.as_dict(),
            "inference_slots": int(inference_slots.total_tokens),
            "batching": {
                "max_size": settings.batch_max_size,
                "max_wait_ms": settings.batch_max_wait_ms,
                "queue_limit": settings.batch_queue_limit,
            }
            if settings.batching
            else None,
            "aliases": dict(router.aliases),
        }

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    def admin_refusal(request: Request) -> JSONResponse | None:
        if not settings.admin_token:
            return JSONResponse(
                {"error": "admin_disabled", "detail": "the admin API is off: start the service with ONNX_SERVICE_ADMIN_TOKEN set"},
                status_code=403,
            )
        sent = request.headers.get("authorization", "")
        if not hmac.compare_digest(sent.encode(), f"Bearer {settings.admin_token}".encode()):
            return JSONResponse(
                {"error": "unauthorized", "detail": "send the header Authorization: Bearer <ONNX_SERVICE_ADMIN_TOKEN>"}, status_code=401
            )
        return None

    @app.get("/admin/routing", summary="The versions served, their aliases, the traffic split and the shadow version")
    async def get_routing(request: Request) -> Response:
        refusal = admin_refusal(request)
        return refusal or JSONResponse(state["router"].describe())

    @app.put("/admin/routing", summary="Load versions and switch aliases, split or shadow without a restart")
    async def put_routing(request: Request) -> Response:
        refusal = admin_refusal(request)
        if refusal:
            return refusal
        try:
            document = parse_json(await _read_body(request, settings.max_body_bytes))
            new = await anyio.to_thread.run_sync(routing.build, document, state["router"], load_version, make_batcher)
        except RequestError as error:
            return JSONResponse(error.body(), status_code=error.status)
        except (routing.RoutingError, ModelError) as error:
            return JSONResponse({"error": "bad_routing", "detail": str(error)}, status_code=422)
        state["router"] = new  # one assignment: requests in flight finish on the router they started with
        log.info("routing changed: aliases %s, challenger %d%%, shadow %s", dict(new.aliases), new.challenger_percent, new.shadow)
        return JSONResponse(new.describe())

    @app.post(
        "/predict",
        summary="Classify one example or a batch",
        openapi_extra={"requestBody": _request_schema(model, settings)},
        responses={
            400: {"description": "not JSON"},
            413: {"description": "body too large"},
            415: {"description": "not application/json"},
            422: {"description": "wrong shape, type, values or batch size"},
            503: {"description": "the batching queue is full: retry after the Retry-After header's seconds"},
        },
    )
    async def predict(request: Request) -> Response:
        try:
            check_content_type(request.headers.get("content-type"))
            body = await _read_body(request, settings.max_body_bytes)
            batch, _single = to_batch(parse_json(body), contract)
        except RequestError as error:
            return JSONResponse(error.body(), status_code=error.status)
        router = state["router"]
        alias, version = router.pick(request.headers.get(routing.KEY_HEADER))
        try:
            outputs = await infer(version, batch)
        except QueueFull as full:
            return JSONResponse(
                {"error": "overloaded", "detail": str(full)}, status_code=503, headers={"Retry-After": str(full.retry_after)}
            )
        result = {
            "model": version.model.name,
            "version": version.name,
            "alias": alias,
            "batch_size": len(batch),
            **version.model.postprocess(outputs),
        }
        metrics.observe_version(version.name, alias)
        shadow = router.versions.get(router.shadow) if router.shadow else None
        if shadow is not None and shadow is not version:
            if shadow_slots.value > 0:  # never queue shadow work behind real work: skip when busy
                await shadow_slots.acquire()
                task = asyncio.get_running_loop().create_task(shadow_run(shadow, batch, result["predictions"]))
                background.add(task)  # a reference until it finishes (the loop keeps only weak ones)
                task.add_done_callback(background.discard)
            else:
                metrics.observe_shadow(shadow.name, None, result["predictions"], skipped=True)
        return Response(json.dumps(result, separators=(",", ":")), media_type="application/json", headers={"X-Model-Version": version.name})

    app.add_middleware(MetricsAndErrors, metrics=metrics)
    return app


def app_from_env() -> FastAPI:
    """Factory used by each uvicorn worker process (settings come from ONNX_SERVICE_* variables)."""
    return create_app(Settings.from_env())
