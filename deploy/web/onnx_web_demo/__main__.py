"""``python -m onnx_web_demo --model M --images J [--port 8000]``: serve the browser demo until Ctrl-C (``make web``).

The first line on stdout is ``onnx_web_demo: serving http://127.0.0.1:PORT/``; with ``--port 0`` the
server takes any free port and that line says which.
"""

from __future__ import annotations

import argparse
import sys
import threading

from .server import DEFAULT_PORT, WebDemoServer

SERVING = "onnx_web_demo: serving "  # the first line's prefix, followed by the URL


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the port must be a number such as {DEFAULT_PORT} (0: any free port), got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"the port must be in 0..65535, got {port}")
    return port


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m onnx_web_demo", description="Serve the ONNX Lab browser demo (notebook 09) on 127.0.0.1."
    )
    parser.add_argument("--model", default="artifacts/digits_cnn.onnx", help="the .onnx file the page runs")
    parser.add_argument(
        "--images", default="artifacts/edge/page_images.json", help='test images for the picker: {"images": [...], "labels": [...]}'
    )
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0: any free port)")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Serve until Ctrl-C or SIGTERM; 1 when the files are missing or the port is taken, 2 for bad arguments."""
    args = _parser().parse_args(argv)
    try:
        server = WebDemoServer(args.model, args.images, port=args.port, verbose=args.verbose).start()
    except (FileNotFoundError, ValueError) as error:
        print(f"onnx_web_demo: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"onnx_web_demo: cannot listen on 127.0.0.1:{args.port} ({error.strerror}); try --port 0", file=sys.stderr)
        return 1
    print(f"{SERVING}{server.url} (open it in your browser; Ctrl-C stops the server)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        print("\nstopped")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
