"""Serve the notebook-09 browser demo on http://127.0.0.1:8000 (``make web``; PORT=8123 to change the port).

The page (index.html, app.js, style.css), onnxruntime-web's files from node_modules (under /ort/)
and the course model (artifacts/digits_cnn.onnx, made by labsupport if missing) are served from
this computer only: the demo works offline. Stop it with Ctrl-C.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

try:
    import labsupport  # noqa: F401
except ImportError:  # run with a Python that does not have labsupport installed: use the checkout's copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from labsupport.edge import DEFAULT_WEB_PORT, WebDemoServer  # noqa: E402


def main() -> int:
    text = os.environ.get("PORT", str(DEFAULT_WEB_PORT))
    try:
        port = int(text)
    except ValueError:
        print(f"PORT must be a port number such as 8000, got {text!r}", file=sys.stderr)
        return 2
    from labsupport.models import ensure_digits_cnn

    model = ensure_digits_cnn()
    try:
        server = WebDemoServer(model, host="127.0.0.1", port=port, verbose=bool(os.environ.get("VERBOSE"))).start()
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"error: cannot listen on 127.0.0.1:{port} ({error.strerror}); try PORT=8123 make web", file=sys.stderr)
        return 1
    print(f"ONNX Lab web demo: open {server.url} in your browser (Ctrl-C stops the server)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("\nstopped")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
