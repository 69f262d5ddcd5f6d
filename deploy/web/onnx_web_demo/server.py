"""``WebDemoServer``: the page, onnxruntime-web, the model and the test images over HTTP on 127.0.0.1 (notebook 09)."""

from __future__ import annotations

import json
import os
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# the package lives in deploy/web/onnx_web_demo and is installed editable: the page is one folder up
PAGE_DIR = Path(__file__).resolve().parent.parent
PAGE_FILES = ("index.html", "app.js", "style.css")
DEFAULT_PORT = 8000
MODEL_ROUTE = "/model/digits_cnn.onnx"
IMAGES_ROUTE = "/test-images.json"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".wasm": "application/wasm",
    ".json": "application/json",
    ".map": "application/json",
    ".onnx": "application/octet-stream",
    ".png": "image/png",
}


def runtime_dir(page_dir: Path = PAGE_DIR) -> Path:
    """The onnxruntime-web files (``ort.wasm.min.mjs``, ``*.wasm``) that npm installed; FileNotFoundError says how to get them."""
    dist = page_dir / "node_modules" / "onnxruntime-web" / "dist"
    if not (dist / "ort.wasm.min.mjs").is_file():
        raise FileNotFoundError(
            f"onnxruntime-web is not installed in {page_dir / 'node_modules'}: run `make js-deps` (or `cd deploy/web && npm ci`)"
        )
    return dist


def _read_images(path: Path) -> bytes:
    """The test-images JSON the page's picker lists: ``{"images": [[64 numbers], ...], "labels": [...]}``, checked."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read the test images {path}: {error}") from None
    images = document.get("images") if isinstance(document, dict) else None
    labels = document.get("labels") if isinstance(document, dict) else None
    if not isinstance(images, list) or not images or not isinstance(labels, list) or len(labels) != len(images):
        raise ValueError(f'{path} must hold {{"images": [[64 numbers], ...], "labels": [one per image]}} with at least one image')
    return json.dumps(document).encode()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, message_format: str, *args: Any) -> None:
        if self.server.owner.verbose:
            super().log_message(message_format, *args)

    def _send(self, status: int, body: bytes, content_type: str, head: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _route(self, head: bool) -> None:
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        found = self.server.owner.resolve(path)
        if found is None:
            message = f"not found: {path} (this server serves the page, /ort/<runtime file>, {MODEL_ROUTE}, {IMAGES_ROUTE})"
            self._send(HTTPStatus.NOT_FOUND, message.encode(), "text/plain; charset=utf-8", head)
            return
        self._send(HTTPStatus.OK, *found, head)

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: WebDemoServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore a browser that went away mid-download (an aborted page load); print any other error's traceback."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class WebDemoServer:
    """Serve the browser demo on 127.0.0.1: the page, onnxruntime-web under ``/ort/``, the model and the test images.

    Use as a context manager (``with WebDemoServer(model, images) as server: server.url``). The
    server binds ``port`` itself; ``port=0`` (the default) takes any free port, and ``server.port``
    tells which. ``images`` is the JSON file of the page's test-image picker. Notebook 09.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        images: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        verbose: bool = False,
        page_dir: Path = PAGE_DIR,
    ) -> None:
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise FileNotFoundError(f"model {self.model_path} does not exist (the course makes it: make web, or notebook 02)")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be a whole number in 0..65535 (0 = any free port), got {port!r}")
        self.page_dir, self.runtime_dir = page_dir, runtime_dir(page_dir)
        self.images_json = _read_images(Path(images))
        self.test_images = len(json.loads(self.images_json)["images"])
        self.host, self.requested_port, self.verbose = host, port, verbose
        self._httpd: _Server | None = None

    def resolve(self, path: str) -> tuple[bytes, str] | None:
        """The body and content type for a URL path, or None (404). Only known files are served."""
        name = "index.html" if path == "/" else path.lstrip("/")
        if path == IMAGES_ROUTE:
            return self.images_json, CONTENT_TYPES[".json"]
        if name in PAGE_FILES:
            file = self.page_dir / name
        elif path == MODEL_ROUTE:
            file = self.model_path
        elif name.startswith("ort/") and "/" not in name[4:] and name[4:] not in ("", ".", ".."):
            file = self.runtime_dir / name[4:]
        else:
            return None
        if not file.is_file():
            return None
        return file.read_bytes(), CONTENT_TYPES.get(file.suffix, "application/octet-stream")

    @property
    def port(self) -> int:
        """The port the server bound (the one it got when asked for 0)."""
        if self._httpd is None:
            raise RuntimeError("the server is not running: use `with WebDemoServer(...) as server:` or call start()")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The page's address, e.g. ``http://127.0.0.1:8000/``."""
        return f"http://{self.host}:{self.port}/"

    def start(self) -> WebDemoServer:
        """Bind the port and serve in a background thread."""
        self._httpd = _Server((self.host, self.requested_port), _Handler)
        self._httpd.owner = self
        threading.Thread(target=self._httpd.serve_forever, name="web-demo", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> WebDemoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
