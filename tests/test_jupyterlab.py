"""Smoke test: JupyterLab starts from the installed environment and serves the course."""

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "onnx-lab-smoke-test"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode("utf-8", "replace")


def test_jupyterlab_serves_the_lab_and_the_notebooks(tmp_path):
    port = _free_port()
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={ROOT}", "--ServerApp.open_browser=False", "--allow-root",
    ]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={
        **__import__("os").environ, "JUPYTER_RUNTIME_DIR": str(tmp_path), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
    })
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, _ = _get(f"{base}/api/status?token={TOKEN}")
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "JupyterLab did not start within 60 s"
                time.sleep(0.5)
        status, page = _get(f"{base}/lab?token={TOKEN}")
        assert status == 200 and "JupyterLab" in page
        status, listing = _get(f"{base}/api/contents/notebooks?token={TOKEN}")
        assert status == 200 and '"00_start_here.ipynb"' in listing
    finally:
        server.terminate()
        server.wait(timeout=30)
