"""Start the service: ``python -m onnx_service`` (installed by ``make``; the container runs the same command).

Settings come from ``ONNX_SERVICE_*`` environment variables (see config.py / README.md); the
command-line flags override them. The model is verified before the server starts: a missing,
corrupted or wrong-checksum model prints the reason and exits with status 2. The service binds
its port itself (``ONNX_SERVICE_PORT=0``: any free port) and then prints one line on stdout,
``onnx_service: listening on http://HOST:PORT``: the address to call (connections made from then
on wait in the listen backlog until uvicorn accepts them).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import signal
import socket
import sys

from . import LISTENING, PARENT_PID
from .app import create_app, freeze_start_up_objects
from .config import HANDLERS, PROVIDERS, ConfigError, Settings
from .cpus import cpu_budget
from .model import LoadedModel, ModelError, load_served_model
from .routing import RoutingError

EXIT_BAD_CONFIG = 2


def _exit_cleanly(signum: int, frame: object) -> None:
    sys.exit(0)


def _die_with_parent() -> None:
    """Linux: ask for SIGTERM when the process named in ONNX_SERVICE_PARENT_PID dies; exit now if it is gone."""
    parent = os.environ.get(PARENT_PID, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != int(parent):  # it died before the request above took effect
        sys.exit(0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnx_service", description="Serve an ONNX classifier over HTTP (ONNX Lab, notebook 08).")
    parser.add_argument("--model", help="path of the .onnx file (ONNX_SERVICE_MODEL)")
    parser.add_argument("--model-sha256", help="expected sha256 of the model file (ONNX_SERVICE_MODEL_SHA256)")
    parser.add_argument("--host", help="address to bind (ONNX_SERVICE_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (ONNX_SERVICE_PORT, default 8080)")
    parser.add_argument("--workers", type=int, help="uvicorn worker processes (ONNX_SERVICE_WORKERS, default 1)")
    parser.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads per worker (ONNX_SERVICE_THREADS, default 1)")
    parser.add_argument("--provider", choices=PROVIDERS, help="cpu (default) or openvino (ONNX_SERVICE_PROVIDER)")
    parser.add_argument("--max-batch", type=int, help="most examples per request (ONNX_SERVICE_MAX_BATCH, default 64)")
    parser.add_argument("--max-body-bytes", type=int, help="largest request body (ONNX_SERVICE_MAX_BODY_BYTES, default 0: from the model)")
    parser.add_argument(
        "--body-timeout-seconds", type=float, help="deadline for a whole body, s (ONNX_SERVICE_BODY_TIMEOUT_SECONDS, default 10)"
    )
    parser.add_argument(
        "--concurrency-limit", type=int, help="requests served at once per worker (ONNX_SERVICE_CONCURRENCY_LIMIT, default 512)"
    )
    parser.add_argument("--root-path", help="path prefix of a proxy in front, e.g. /user/ana/proxy/8080 (ONNX_SERVICE_ROOT_PATH)")
    parser.add_argument("--handler", choices=HANDLERS, help="threadpool (default) or naive (blocks the event loop; for the notebook)")
    parser.add_argument(
        "--batching", action="store_true", default=None, help="dynamic batching of concurrent requests (ONNX_SERVICE_BATCHING, default off)"
    )
    parser.add_argument("--batch-max-size", type=int, help="most examples in one merged batch (ONNX_SERVICE_BATCH_MAX_SIZE, default 32)")
    parser.add_argument(
        "--batch-max-wait-ms", type=float, help="longest wait for more requests, ms (ONNX_SERVICE_BATCH_MAX_WAIT_MS, default 2)"
    )
    parser.add_argument(
        "--batch-queue-limit", type=int, help="most queued requests before 503 (ONNX_SERVICE_BATCH_QUEUE_LIMIT, default 256)"
    )
    parser.add_argument("--drain-seconds", type=float, help="after SIGTERM, /ready 503 this long before shutdown (default 0)")
    parser.add_argument("--routing", help="JSON routing document: versions, aliases, split, shadow (ONNX_SERVICE_ROUTING)")
    parser.add_argument("--log-level", help="uvicorn log level (ONNX_SERVICE_LOG_LEVEL, default info)")
    return parser


def _log_ready(settings: Settings, model: LoadedModel) -> None:
    batching = "off"
    if settings.batching:
        batching = f"max {settings.batch_max_size} examples, wait {settings.batch_max_wait_ms:g} ms, queue {settings.batch_queue_limit}"
    logging.getLogger("onnx_service").info(
        "model %s ready: opset %d, input %s %s %s, sha256 %s; handler=%s, workers=%d, threads=%d, max_batch=%d; CPUs: %s; batching: %s",
        *(model.name, model.opset, model.input.name, model.input.type, list(model.input.shape), model.sha256[:12]),
        *(settings.handler, settings.workers, settings.threads, settings.max_batch, cpu_budget().describe(), batching),
    )


def _cannot_start(reason: object) -> int:
    print(f"onnx_service: cannot start: {reason}", file=sys.stderr, flush=True)
    return EXIT_BAD_CONFIG


def main(argv: list[str] | None = None) -> int:
    """Parse settings, verify the model, bind the port and print it, run uvicorn until SIGINT/SIGTERM; returns the exit status."""
    _die_with_parent()
    args = _parser().parse_args(argv)
    overrides = {key: value for key, value in vars(args).items() if value is not None}
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")
    try:
        settings = Settings.from_env(**overrides)
        model = load_served_model(settings.model, settings.model_sha256, settings.threads, settings.model_name, settings.provider)
        app = create_app(settings, model)  # loads and checks the routing document's versions too
    except (ConfigError, ModelError, RoutingError) as error:
        return _cannot_start(error)
    _log_ready(settings, model)
    model = None  # the app holds the versions it serves: a routing switch away from this one releases its session
    if settings.workers > 1:  # checked; each worker process loads its own copy: the supervisor keeps none (no idle session)
        app = None
        gc.collect()
    try:
        listener = _listen(settings.host, settings.port)
    except OSError as error:
        return _cannot_start(f"cannot listen on {settings.host}:{settings.port} ({error.strerror})")
    print(LISTENING + _url(listener), flush=True)
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal; exit with status 0 for it
    signal.signal(signal.SIGTERM, _exit_cleanly)
    return _serve(settings, app, listener)


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port``; port 0 lets the operating system pick a free one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(2048)
    except OSError:
        listener.close()
        raise
    listener.set_inheritable(True)  # the worker processes serve the same socket
    return listener


def _url(listener: socket.socket) -> str:
    host, port = listener.getsockname()[:2]
    return f"http://[{host}]:{port}" if listener.family == socket.AF_INET6 else f"http://{host}:{port}"


def _serve(settings: Settings, app: object | None, listener: socket.socket) -> int:
    """Run uvicorn on the bound socket until SIGINT/SIGTERM: in this process, or in ``settings.workers`` worker processes."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    common = dict(
        log_level=settings.log_level.lower(),
        access_log=settings.access_log,
        timeout_graceful_shutdown=5,
        server_header=False,
        http=f"{__package__}.protocol:NoDelayHTTPProtocol",
        lifespan="on",  # warm-up runs at start-up; /ready answers 503 until it is done
        root_path=settings.root_path,
    )
    if settings.workers == 1:
        server = uvicorn.Server(uvicorn.Config(app, **common))
        freeze_start_up_objects()
        server.run(sockets=[listener])
        return 0 if server.started else 1
    os.environ.update(settings.to_env())  # the worker processes rebuild the settings from these
    config = uvicorn.Config(f"{__package__}.app:app_from_env", factory=True, workers=settings.workers, **common)
    Multiprocess(config, sockets=[listener]).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
