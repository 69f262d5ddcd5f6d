"""The browser demo of ONNX Lab notebook 09, served offline: ``python -m onnx_web_demo --model M --images J``.

``WebDemoServer`` serves the page of ``deploy/web`` (``index.html``, ``app.js``, ``style.css``),
onnxruntime-web's files from ``deploy/web/node_modules`` under ``/ort/``, the model and the page's
test images on 127.0.0.1. It is its own package (``deploy/web/pyproject.toml``), installed editable by
``make``, and needs nothing but the standard library: the course's ``labsupport`` imports it, never
the other way round.
"""

from .server import DEFAULT_PORT, MODEL_ROUTE, PAGE_DIR, WebDemoServer, runtime_dir

__version__ = "1.0.0"
__all__ = ["DEFAULT_PORT", "MODEL_ROUTE", "PAGE_DIR", "WebDemoServer", "runtime_dir"]
