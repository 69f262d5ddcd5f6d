"""Start the course's inference service (the ``onnx_service`` package of ``deploy/service``) as a real process.

Introduced in notebook 08. ``start(model)`` runs ``python -m onnx_service`` on loopback port 0: the
service binds a free port itself and prints ``onnx_service: listening on http://127.0.0.1:PORT``,
which ``start`` reads from its log (with a deadline), then it waits for ``/ready``. The returned
``Service`` is a context manager whose ``stop()`` shuts it down with SIGTERM (graceful) and
returns the exit status. ``payload`` is the JSON body of /predict; the load generator that sends
many of them is ``labsupport.topics.loadgen``. Everything stays on 127.0.0.1.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from onnx_service import LISTENING, PARENT_PID

SERVICE_MODULE = "onnx_service"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


_RUNNING: weakref.WeakSet[subprocess.Popen] = weakref.WeakSet()
_LOGS: list[Path] = []


def _stop_leftovers() -> None:
    """At interpreter exit (kernel shutdown, end of pytest), stop services never stopped and delete their logs."""
    for process in list(_RUNNING):
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
    for log in _LOGS:
        log.unlink(missing_ok=True)


atexit.register(_stop_leftovers)


def _pin(process: subprocess.Popen, cpus: set[int] | None) -> None:
    """Pin the started service to ``cpus`` from this process (no code runs in the child between fork and exec).

    The service creates its threads later, at model load, and they inherit the mask.
    """
    if cpus:
        try:
            os.sched_setaffinity(process.pid, cpus)
        except OSError:
            process.kill()
            raise


class ServiceError(RuntimeError):
    """The service did not start (its log tail is in the message) or did not stop in time."""


def service_env(model: str | Path, port: int = 0, **settings: object) -> dict[str, str]:
    """The environment for the service process: ``ONNX_SERVICE_*`` from ``model``, ``port`` (0: any free one) and settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ONNX_SERVICE_")}
    env.update({"ONNX_SERVICE_MODEL": str(Path(model).resolve()), "ONNX_SERVICE_PORT": str(port), "ONNX_SERVICE_HOST": "127.0.0.1"})
    for key, value in settings.items():
        if value is not None:
            env["ONNX_SERVICE_" + key.upper()] = str(int(value) if isinstance(value, bool) else value)
    env["PYTHONUNBUFFERED"] = "1"
    env[PARENT_PID] = str(os.getpid())  # the service exits when this process dies (a crashed or killed kernel)
    return env


@dataclass
class Service:
    """A running service process: ``url``, ``port``, ``log_text()``, ``stop()``; use it in a ``with`` block."""

    process: subprocess.Popen
    url: str
    port: int
    log_path: Path

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        """Everything the service printed so far (uvicorn and service log lines)."""
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM (uvicorn finishes in-flight requests and exits), SIGKILL after ``timeout``; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return int(self.process.returncode)


def require_loopback(url: str) -> None:
    """Refuse any URL whose host is not this machine (the course only calls its own services)."""
    host = urlparse(url).hostname
    if host not in LOOPBACK:
        raise ValueError(f"the course only calls services on this machine (127.0.0.1); got host {host!r}")


def _bound_port(log_text: str) -> int | None:
    """The port the service bound, from its ``onnx_service: listening on http://127.0.0.1:PORT`` line."""
    match = re.search(re.escape(LISTENING) + r"http://127\.0\.0\.1:(\d+)", log_text)
    return int(match.group(1)) if match else None


def _launch(env: dict[str, str], cpus: set[int] | None, launcher: Sequence[str] = ()) -> tuple[subprocess.Popen, Path]:
    """Start ``python -m onnx_service`` with ``env``, its output going to a fresh log file; returns the process and the log."""
    handle, log_name = tempfile.mkstemp(prefix="onnx-service-", suffix=".log")
    log_path = Path(log_name)
    _LOGS.append(log_path)
    with os.fdopen(handle, "wb") as log:
        process = subprocess.Popen(
            [*launcher, sys.executable, "-m", SERVICE_MODULE],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the notebook does not reach it; stop() does
        )
    _RUNNING.add(process)
    _pin(process, cpus)
    return process, log_path


def _wait_until_ready(service: Service, timeout: float) -> bool:
    """Read the port from the service's log, then poll GET /ready until 200; False after ``timeout`` seconds."""
    import httpx

    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if service.process.poll() is not None:
                raise ServiceError(
                    f"the service exited with status {service.process.returncode} before it was ready:\n{service.log_text()[-2000:]}"
                )
            port = service.port or _bound_port(service.log_text())
            if port:
                service.port, service.url = port, f"http://127.0.0.1:{port}"
                try:
                    if client.get(service.url + "/ready").status_code == 200:
                        return True
                except httpx.TransportError:
                    pass
            time.sleep(0.05)
    return False


def start(
    model: str | Path,
    *,
    workers: int = 1,
    handler: str = "threadpool",
    ready_timeout: float = 90.0,
    cpus: set[int] | None = None,
    launcher: Sequence[str] = (),
    **settings: object,
) -> Service:
    """Start ``python -m onnx_service`` for ``model`` on 127.0.0.1, port 0, and wait until GET /ready answers 200.

    The service binds a free port itself; ``Service.port`` is the one it reports. ``settings`` are
    service settings in lower case (``threads``, ``max_batch``, ``batching``, ``model_sha256``...);
    ``cpus`` pins the process to those CPUs (Linux affinity, like ``taskset``); ``launcher`` goes before the
    Python command (e.g. ``["qemu-x86_64", "-cpu", "Haswell-v4"]``: another CPU). Raises ServiceError
    with the service's own message if it exits or never gets ready.
    """
    if workers < 1 or workers > 8:
        raise ValueError(f"workers must be between 1 and 8 on a laptop, got {workers}")
    if cpus is not None and not hasattr(os, "sched_setaffinity"):
        raise ValueError("cpus= needs CPU affinity masks, which only Linux has")
    process, log_path = _launch(service_env(model, 0, workers=workers, handler=handler, **settings), cpus, launcher)
    service = Service(process, "", 0, log_path)
    if _wait_until_ready(service, ready_timeout):
        return service
    service.stop()
    raise ServiceError(f"the service was not ready after {ready_timeout:.0f} s:\n{service.log_text()[-2000:]}")


def run_to_exit(model: str | Path, timeout: float = 60.0, **settings: object) -> subprocess.CompletedProcess:
    """Run the service command expecting it to exit on its own (a start-up failure); returns rc and output text.

    Raises ServiceError if it is still running after ``timeout`` seconds (it then gets stopped).
    """
    env = service_env(model, int(settings.pop("port", 0)), **settings)
    try:
        return subprocess.run([sys.executable, "-m", SERVICE_MODULE], env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ServiceError(f"the service kept running for {timeout:.0f} s instead of failing at start-up") from None


def payload(images: np.ndarray) -> dict[str, Any]:
    """The JSON body /predict takes for a batch of images (or one image): ``{"inputs": nested lists}``."""
    return {"inputs": np.asarray(images).tolist()}
