"""Fixtures shared by tests/unit and tests/integration (the nbval settings for notebooks are in the root conftest.py).

A missing prerequisite (a program, an npm package, a browser) fails a test in CI, where `.ci/run`
must have installed it, and skips it elsewhere with the reason: use the ``prerequisite`` and
``require_tool`` fixtures instead of writing that rule again.

Test files are named after what they test. A file that tests one module is ``test_<module>.py``, with the
subpackage in front where the module's name alone could mean another (``test_bench_quantization.py`` for
labsupport/bench/quantization.py beside ``test_quantization.py`` for topics/quantization.py) or says little
(``test_exercises_nb05.py``, ``test_exercises_checks.py``); onnx_service's modules take ``service``
(``test_service_validation.py``). tests/unit holds what runs in seconds without ports,
training or artifacts/ (tests/unit/conftest.py enforces it), tests/integration the rest; one name in both
folders means one module tested both ways. A file that checks a rule across modules is named after the rule
(``test_layers.py``, ``test_all_exercises.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from labsupport.course.paths import repo_root

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
JUPYTER_TOKEN = "onnx-lab-test"


@dataclass(frozen=True)
class LabServer:
    """A running JupyterLab: ``url("/api/status")`` is that endpoint with the test token."""

    base: str

    def url(self, path: str) -> str:
        """``base + path`` with the token as a query parameter."""
        return f"{self.base}{path}{'&' if '?' in path else '?'}token={JUPYTER_TOKEN}"


def _missing(message: str) -> None:
    if IN_CI:
        pytest.fail(message + " (CI must install it: see .ci/run)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def prerequisite() -> Callable[[bool, str], None]:
    """``prerequisite(present, message)``: fail in CI, skip elsewhere, when ``present`` is false."""

    def check(present: bool, message: str) -> None:
        if not present:
            _missing(message)

    return check


@pytest.fixture(scope="session")
def require_tool() -> Callable[[str, str], str]:
    """``require_tool(executable, why)``: the program's path; a missing one fails in CI and skips elsewhere."""

    def find(executable: str, why: str) -> str:
        path = shutil.which(executable) or (executable if os.path.isfile(executable) else None)
        if path is None:
            _missing(f"{executable} not found: {why}")
        return str(path)

    return find


@pytest.fixture
def jupyterlab(tmp_path) -> Iterator[Callable[..., LabServer]]:
    """``jupyterlab(*args, env=None)`` starts JupyterLab on 127.0.0.1 and returns a ``LabServer``.

    The server binds a port of the OS's choosing (``--port=0``) and reports it in its server-info
    file; the fixture waits (at most 60 s) until ``/api/status`` answers, and stops the server after the test.
    """
    servers: list[subprocess.Popen[bytes]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> LabServer:
        runtime = tmp_path / f"runtime-{len(servers)}"
        command = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            "--port=0",
            "--allow-root",
            f"--IdentityProvider.token={JUPYTER_TOKEN}",
            f"--ServerApp.root_dir={repo_root()}",
            *args,
        ]
        environment = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), **(env or {})}
        log = tmp_path / f"jupyterlab-{len(servers)}.log"
        with log.open("wb") as stderr:  # a file, not a pipe: a chatty server can never block on a full pipe
            server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=environment)
        servers.append(server)
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, f"JupyterLab exited: {log.read_text(errors='replace')[-2000:]}"
            assert time.monotonic() < deadline, "JupyterLab did not start within 60 s"
            info = sorted(runtime.glob("jpserver-*.json"))
            if info:
                server_url = LabServer(json.loads(info[0].read_text(encoding="utf-8"))["url"].rstrip("/"))
                try:
                    with urllib.request.urlopen(server_url.url("/api/status"), timeout=10):
                        return server_url
                except OSError:
                    pass
            time.sleep(0.5)

    yield start
    for server in servers:
        server.terminate()
        server.wait(timeout=30)


class InProcessClients(contextlib.ExitStack):
    """``clients(app)``: FastAPI's TestClient on ``app``, its lifespan started; ``clients.close()`` stops them all.

    The one client of in-process service tests (no socket): an exception inside the app is answered as the bare 500
    a real client gets (``raise_server_exceptions=False``), not raised into the test. ``lifespan=False`` gives a client
    of an app that was never started (no warm-up ran). A test calls ``close()`` to assert on what shutdown logs.
    """

    def __call__(self, app: Any, *, lifespan: bool = True) -> Any:
        from fastapi.testclient import TestClient

        client = TestClient(app, raise_server_exceptions=False)
        if lifespan:
            return self.enter_context(client)
        self.callback(client.close)
        return client

    @staticmethod
    def after_warm_up(client: Any, timeout: float = 30) -> Any:
        """``client``'s /ready once the warm-up has ended: the lifespan starts it as a task that it does not await."""
        deadline = time.monotonic() + timeout
        while "warming up" in (response := client.get("/ready")).json().get("reason", ""):
            assert time.monotonic() < deadline, f"the warm-up did not end within {timeout} s"
            time.sleep(0.01)
        return response


@pytest.fixture
def in_process() -> Iterator[InProcessClients]:
    """``in_process(app)``: an ``InProcessClients`` for one test, closed after it."""
    with InProcessClients() as clients:
        yield clients


@pytest.fixture(scope="module")
def in_process_shared() -> Iterator[InProcessClients]:
    """``in_process_shared(app)``: the same clients, shared by a module's tests and closed after its last one."""
    with InProcessClients() as clients:
        yield clients
