"""deploy/web and labsupport.edge's web helpers: the static server, serve.py, and the page in a real Chromium.

The browser test drives Debian's Chromium (never Playwright's own download) through the page and
asserts that onnxruntime-web in the browser matches ONNX Runtime in Python on test images.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

from conftest import IN_CI, require_tool
from labsupport import edge
from labsupport.compare import compare
from labsupport.data import load_digits
from labsupport.models import ensure_digits_cnn
from labsupport.paths import artifact, repo_root

# WebAssembly and the CPU provider run the same float32 graph with different kernels: probabilities
# must agree to 1e-5 absolute, logits to 1e-4 absolute + 1e-4 relative, predictions exactly.
PROBABILITY_ATOL = 1e-5
LOGIT_ATOL, LOGIT_RTOL = 1e-4, 1e-4
BROWSER_IMAGES = 12


def require_web_runtime() -> None:
    """onnxruntime-web must be installed by npm (`make js-deps`): fail in CI, skip elsewhere."""
    try:
        edge.web_runtime_dir()
    except FileNotFoundError as error:
        if IN_CI:
            pytest.fail(f"{error} (CI runs `make test`, which installs it)")
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def model():
    return ensure_digits_cnn()


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def test_package_json_pins_onnxruntime_web_and_lockfile_matches():
    package = json.loads((edge.web_dir() / "package.json").read_text())
    lock = json.loads((edge.web_dir() / "package-lock.json").read_text())
    assert package["dependencies"] == {"onnxruntime-web": edge.ORT_WEB_VERSION}
    assert lock["packages"]["node_modules/onnxruntime-web"]["version"] == edge.ORT_WEB_VERSION


def test_server_serves_page_runtime_model_and_test_images(model):
    require_web_runtime()
    with edge.WebDemoServer(model) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.port > 0
        status, kind, body = _get(server.url)
        assert status == 200 and kind.startswith("text/html") and b'src="app.js"' in body
        status, kind, body = _get(server.url + "app.js")
        assert status == 200 and "javascript" in kind and b"./ort/ort.wasm.min.mjs" in body
        status, kind, body = _get(server.url + "ort/ort-wasm-simd-threaded.wasm")
        assert status == 200 and kind == "application/wasm" and body[:4] == b"\0asm"
        status, kind, body = _get(server.url + "ort/ort.wasm.min.mjs")
        assert status == 200 and "javascript" in kind
        status, _, body = _get(server.url + edge.MODEL_ROUTE.lstrip("/"))
        assert status == 200 and body == model.read_bytes()
        status, kind, body = _get(server.url + "test-images.json")
        payload = json.loads(body)
        test = load_digits().test
        assert status == 200 and len(payload["images"]) == server.test_images
        np.testing.assert_allclose(payload["images"][3], test.images[3].reshape(-1), atol=1e-7)
        assert payload["labels"] == test.labels[: server.test_images].tolist()


@pytest.mark.parametrize("path", ["ort/../package.json", "ort/%2e%2e/package.json", "package.json", "serve.py", "ort/", "nothing"])
def test_server_refuses_everything_else(model, path):
    require_web_runtime()
    with edge.WebDemoServer(model) as server:
        status, _, body = _get(server.url + path)
    assert status == 404 and b"not found" in body


def test_server_checks_its_arguments(tmp_path, model):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        edge.WebDemoServer(tmp_path / "missing.onnx")
    require_web_runtime()
    with pytest.raises(ValueError, match="port must be"):
        edge.WebDemoServer(model, port=70000)
    server = edge.WebDemoServer(model)
    with pytest.raises(RuntimeError, match="not running"):
        server.url


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_serve_py_prints_the_url_and_honours_port(model):
    require_web_runtime()
    port = _free_port()
    env = {**os.environ, "PORT": str(port)}
    process = subprocess.Popen(
        [sys.executable, str(edge.web_dir() / "serve.py")], cwd=repo_root(), env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = process.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in line, line + process.stderr.read() if process.poll() is not None else line
        status, _, body = _get(f"http://127.0.0.1:{port}/")
        assert status == 200 and b"onnxruntime-web" in body
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_serve_py_rejects_a_bad_port():
    done = subprocess.run(
        [sys.executable, str(edge.web_dir() / "serve.py")], cwd=repo_root(),
        env={**os.environ, "PORT": "eighty"}, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2 and "PORT must be a port number" in done.stderr


def test_images_payload_and_softmax():
    images = load_digits().test.images[:3]
    payload = edge.images_payload(images, [1, 2, 3])
    assert len(payload["images"]) == 3 and len(payload["images"][0]) == 64 and payload["labels"] == [1, 2, 3]
    with pytest.raises(ValueError, match=r"\(N, 1, 8, 8\) or \(N, 64\)"):
        edge.images_payload(np.zeros((2, 8, 8)))
    with pytest.raises(ValueError, match="N >= 1"):
        edge.images_payload(np.zeros((0, 64)))
    with pytest.raises(ValueError, match="finite"):
        edge.images_payload(np.full((1, 64), np.nan))
    with pytest.raises(ValueError, match="2 labels for 3 images"):
        edge.images_payload(images, [1, 2])
    probabilities = edge.softmax([[0.0, np.log(3.0)], [1000.0, 1000.0]])
    np.testing.assert_allclose(probabilities, [[0.25, 0.75], [0.5, 0.5]])
    with pytest.raises(ValueError, match="2-D"):
        edge.softmax([1.0, 2.0])


def test_browser_classify_refuses_a_missing_browser(model):
    with pytest.raises(FileNotFoundError, match="Chromium not found"):
        edge.browser_classify(model, load_digits().test.images[:1], executable="/nonexistent/chromium")


@pytest.mark.browser
@pytest.mark.slow
def test_browser_matches_onnxruntime_in_python(model):
    require_tool(edge.CHROMIUM, "the browser test drives Debian's Chromium (apt-get install chromium)")
    require_web_runtime()
    test = load_digits().test
    images = test.images[:BROWSER_IMAGES]
    screenshot = artifact("web_demo.png")
    screenshot.unlink(missing_ok=True)
    shown = 3

    result = edge.browser_classify(model, images, shown_index=shown, screenshot=screenshot)
    reference = edge.python_reference(model, images)

    assert result.runtime == f"onnxruntime-web {edge.ORT_WEB_VERSION}" and result.backend == "wasm"
    assert result.console_errors == []
    assert result.probabilities.shape == (BROWSER_IMAGES, 10)
    compare(reference["probabilities"], result.probabilities, atol=PROBABILITY_ATOL, rtol=0, name="browser probabilities")
    compare(reference["logits"], result.logits, atol=LOGIT_ATOL, rtol=LOGIT_RTOL, name="browser logits")
    np.testing.assert_array_equal(result.predictions, reference["predictions"])
    # what the page shows after picking test image 3 in its list is Python's answer for that image
    assert result.shown_prediction == int(edge.python_reference(model, test.images[shown : shown + 1])["predictions"][0])
    # the mouse-drawn digit: 64 ink values in [0, 1], classified by the page as Python classifies them
    assert result.drawing_pixels.shape == (64,) and 0 <= result.drawing_pixels.min() and result.drawing_pixels.max() <= 1
    assert result.drawing_pixels.sum() > 3  # the stroke really left ink
    assert result.drawing_prediction == int(edge.python_reference(model, result.drawing_pixels[None])["predictions"][0])
    assert screenshot.is_file() and screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_npm_packages_say_how_to_install_them(monkeypatch, tmp_path, model):
    monkeypatch.setattr(edge, "web_dir", lambda: tmp_path)
    with pytest.raises(FileNotFoundError, match="make js-deps"):
        edge.web_runtime_dir()
    with pytest.raises(FileNotFoundError, match="make js-deps"):
        edge.WebDemoServer(model)
