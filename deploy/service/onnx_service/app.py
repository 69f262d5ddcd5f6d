"""The FastAPI application: routers per concern (probes, predict, admin) wired to one Service.

The routes are those of the routers and the OpenAPI docs; /metrics labels requests with the paths of ``app.routes``.
/docs is Swagger UI from the files of the swagger-ui-bundle-v2 package, served under /docs/assets: it works offline
(FastAPI's own /docs page loads Swagger UI from a CDN and stays blank without internet).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import signal
import threading
import time
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.routing import Mount, Route
from swagger_ui_bundle import swagger_ui_path

from . import __version__, admin, edge, predict, probes, routing
from .config import ConfigError, Settings
from .cpus import cpu_budget
from .metrics import Metrics
from .model import LoadedModel, load_served_model
from .service import Service

log = logging.getLogger("onnx_service")
METHODS = {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"}  # any other method is counted as "other"
DOCS_ASSETS = "/docs/assets"
_INTERNAL_ERROR = b'{"error":"internal","detail":"internal server error; the incident was logged"}'


class MetricsAndErrors:
    """Pure ASGI middleware: counts and times every request, and turns any unexpected exception into a bare 500.

    ``paths`` are the path labels it uses (the app's routes); any other path is counted as "other".
    """

    def __init__(self, app: Any, metrics: Metrics, paths: frozenset[str]):
        self.app, self.metrics, self.paths = app, metrics, paths

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
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(_INTERNAL_ERROR)).encode())]
                await send({"type": "http.response.start", "status": 500, "headers": headers})
                await send({"type": "http.response.body", "body": _INTERNAL_ERROR})
        finally:
            # labels from a fixed set: a client inventing methods or paths must not add metric series without bound
            path, method = edge.route_path(scope), scope.get("method", "")  # without ROOT_PATH, which uvicorn puts in front
            self.metrics.request_finished(
                method if method in METHODS else "other",
                path if path in self.paths else "other",
                status["code"],
                time.perf_counter() - start,
            )


def _read_routing(path: str) -> Any:
    """The routing document in a JSON file (ONNX_SERVICE_ROUTING); ConfigError when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except (OSError, ValueError) as error:
        raise ConfigError(f"ONNX_SERVICE_ROUTING={path!r}: cannot read a JSON routing document ({error})") from None


def _drain_on_sigterm(service: Service) -> None:
    """Wrap the server's SIGTERM handler: /ready turns 503 at once, shutdown starts ``drain_seconds`` later.

    Called at start-up, after uvicorn installed its handlers; in every worker process. Only the main
    thread can set signal handlers (a test client runs the app elsewhere: nothing to wrap there).
    """
    if threading.current_thread() is not threading.main_thread():
        return
    shut_down = signal.getsignal(signal.SIGTERM)
    if not callable(shut_down):
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        if service.draining:  # a second SIGTERM: no more waiting
            shut_down(signum, frame)
            return
        service.draining = True  # load balancers see /ready 503 and stop sending; requests still get answers
        delay = service.settings.drain_seconds
        log.info("SIGTERM: draining for %g s, then shutting down", delay)
        if delay > 0:
            timer = threading.Timer(delay, shut_down, (signum, frame))
            timer.daemon = True  # a SIGINT during the drain ends the process at once: the timer must not keep it alive
            timer.start()
        else:
            shut_down(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)


async def _admin_refusal(request: Request, refusal: admin.AdminRefusal) -> JSONResponse:
    return JSONResponse({"error": refusal.code, "detail": refusal.detail}, status_code=refusal.status_code)


def _serve_docs_offline(app: FastAPI) -> None:
    """/docs: Swagger UI with its JavaScript and CSS served by this app from the installed package, not from a CDN."""
    app.mount(DOCS_ASSETS, StaticFiles(directory=swagger_ui_path), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:  # request.app, not a closure: FastAPI caches endpoints, the app must not stay alive
        root = request.scope.get("root_path", "").rstrip("/")  # behind a path-prefix proxy (the class hub) the page loads through it
        return get_swagger_ui_html(
            openapi_url=root + request.app.openapi_url,
            title=f"{request.app.title} - API docs",
            swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_ASSETS}/favicon-32x32.png",
        )


def create_app(settings: Settings | None = None, model: LoadedModel | None = None) -> FastAPI:
    """The application for ``settings`` (default: from the environment); loads the model unless one is given."""
    settings = settings or Settings.from_env()
    settings.validate()  # also settings built in code (from_env validates its own)
    model = model or load_served_model(settings.model, settings.model_sha256, settings.threads, settings.model_name, settings.provider)
    settings = edge.with_body_limit(settings, model.contract(settings.max_batch))
    service = Service(settings, model, cpu_budget())
    if settings.routing:
        service.routing = routing.build(
            _read_routing(settings.routing), service.routing, service.contract, service.load_version, service.make_batcher
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        warm_up = asyncio.get_running_loop().create_task(service.warm_up())  # /ready answers 503 until it is done
        _drain_on_sigterm(service)
        yield
        warm_up.cancel()

    contract = service.contract
    description = (
        f"Serves the ONNX model **{model.name}** (opset {model.opset}). POST `/predict` with "
        f'`{{"inputs": ...}}`: one example of shape {contract.shape_text()} or a batch of shape '
        f"{contract.shape_text(batch=True)} (at most {contract.max_batch} examples, {settings.max_body_bytes} bytes)."
    )
    app = FastAPI(
        title="ONNX Lab inference service",
        version=__version__,
        description=description,
        lifespan=lifespan,
        docs_url=None,  # replaced by _serve_docs_offline
        redoc_url=None,  # ReDoc has no offline bundle here
        redirect_slashes=False,  # Starlette's redirect of /predict/ names the Host header's site
    )
    app.state.service = service
    routers = [probes.router, predict.build_router(service), admin.router]
    for router in routers:
        app.include_router(router)
    _serve_docs_offline(app)
    app.add_exception_handler(admin.AdminRefusal, _admin_refusal)
    edge.install_error_handlers(app)
    app.add_middleware(edge.EdgeGuard, settings=settings)  # inside MetricsAndErrors: its refusals are counted
    app.add_middleware(MetricsAndErrors, metrics=service.metrics, paths=_route_paths(app, routers))
    return app


def _route_paths(app: FastAPI, routers: list[APIRouter]) -> frozenset[str]:
    """Every path the app answers: the routers' routes and the app's own (docs, OpenAPI schema, assets)."""
    own = (route for route in app.routes if isinstance(route, (Route, Mount)))  # (an included router is listed as one entry)
    return frozenset(route.path for route in [*own, *(route for router in routers for route in router.routes)])


def freeze_start_up_objects() -> None:
    """Take every object alive now (modules, the model, the app) out of the garbage collector's full collections (``gc.freeze``).

    A full collection otherwise traverses all of them (about 64,000 objects, 110-150 ms with the event loop stopped,
    measured on a loaded 2-core machine), and under load the requests' short-lived objects trigger one every few thousand
    requests. Called once per serving process after start-up; not by ``create_app``, so that tests building many apps
    in one process still collect them.
    """
    gc.collect()
    gc.freeze()


def app_from_env() -> FastAPI:
    """Factory used by each uvicorn worker process (settings come from ONNX_SERVICE_* variables)."""
    app = create_app(Settings.from_env())
    freeze_start_up_objects()
    return app
