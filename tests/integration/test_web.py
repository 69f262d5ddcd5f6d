"""deploy/web: the onnx_web_demo server (in-process and as ``python -m onnx_web_demo``) and the page in a real Chromium.

The browser test drives Debian's Chromium (never Playwright's own download) through the page and
asserts that onnxruntime-web in the browser matches ONNX Runtime in Python on test images.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import onnx_web_demo
from labsupport.course.addresses import HUB_PREFIX_VARIABLE
from labsupport.course.compare import compare
from labsupport.course.data import load_digits
from labsupport.course.paths import artifact
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics import edge, web
from onnx_web_demo.__main__ import SERVING

# WebAssembly and the CPU provider run the same float32 graph with different kernels: probabilities
# must agree to 1e-5 absolute, logits to 1e-4 absolute + 1e-4 relative, predictions exactly.
PROBABILITY_ATOL = 1e-5
LOGIT_ATOL, LOGIT_RTOL = 1e-4, 1e-4
BROWSER_IMAGES = 12
STARTUP_TIMEOUT = 60.0


@pytest.fixture
def web_runtime(prerequisite):
    """onnxruntime-web installed by npm (`make js-deps`): fail in CI, skip elsewhere."""
    installed = (web.web_dir() / "node_modules" / "onnxruntime-web" / "dist" / "ort.wasm.min.mjs").is_file()
    prerequisite(installed, "onnxruntime-web is not installed in deploy/web/node_modules: run `make js-deps`")


@pytest.fixture(scope="module")
def model():
    return ensure_digits_cnn()


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def _first_line(process: subprocess.Popen, timeout: float) -> str:
    """The first line the process prints on stdout, or what came of it when ``timeout`` seconds pass first."""
    deadline, received = time.monotonic() + timeout, b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while b"\n" not in received and (left := deadline - time.monotonic()) > 0:
            if selector.select(left):
                chunk = os.read(process.stdout.fileno(), 4096)
                if not chunk:  # the process closed its stdout (it exited)
                    break
                received += chunk
    return received.decode(errors="replace").split("\n")[0]


def _demo_command(model, images, *options: str) -> list[str]:
    return [sys.executable, "-m", "onnx_web_demo", "--model", str(model), "--images", str(images), *options]


def test_package_json_pins_onnxruntime_web_and_lockfile_matches():
    package = json.loads((web.web_dir() / "package.json").read_text())
    lock = json.loads((web.web_dir() / "package-lock.json").read_text())
    assert package["dependencies"] == {"onnxruntime-web": web.ORT_WEB_VERSION}
    assert lock["packages"]["node_modules/onnxruntime-web"]["version"] == web.ORT_WEB_VERSION


def test_server_serves_page_runtime_model_and_test_images(model, web_runtime):
    with web.web_demo(model) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.port > 0
        status, kind, body = _get(server.url)
        assert status == 200 and kind.startswith("text/html") and b'src="app.js"' in body
        status, kind, body = _get(server.url + "app.js")
        assert status == 200 and "javascript" in kind and b"./ort/ort.wasm.min.mjs" in body
        status, kind, body = _get(server.url + "ort/ort-wasm-simd-threaded.wasm")
        assert status == 200 and kind == "application/wasm" and body[:4] == b"\0asm"
        status, kind, body = _get(server.url + "ort/ort.wasm.min.mjs")
        assert status == 200 and "javascript" in kind
        status, _, body = _get(server.url + onnx_web_demo.MODEL_ROUTE.lstrip("/"))
        assert status == 200 and body == model.read_bytes()
        status, kind, body = _get(server.url + "test-images.json")
        payload = json.loads(body)
        test = load_digits().test
        assert status == 200 and len(payload["images"]) == server.test_images
        np.testing.assert_allclose(payload["images"][3], test.images[3].reshape(-1), atol=1e-7)
        assert payload["labels"] == test.labels[: server.test_images].tolist()


@pytest.mark.parametrize("path", ["ort/../package.json", "ort/%2e%2e/package.json", "package.json", "pyproject.toml", "ort/", "nothing"])
def test_server_refuses_everything_else(model, path, web_runtime):
    with web.web_demo(model) as server:
        status, _, body = _get(server.url + path)
    assert status == 404 and b"not found" in body


def test_server_checks_its_arguments(tmp_path, model, web_runtime):
    images = web.page_images()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        onnx_web_demo.WebDemoServer(tmp_path / "missing.onnx", images)
    with pytest.raises(ValueError, match="port must be"):
        onnx_web_demo.WebDemoServer(model, images, port=70000)
    (tmp_path / "bad.json").write_text('{"images": [[0.5]], "labels": []}')
    with pytest.raises(ValueError, match="one per image"):
        onnx_web_demo.WebDemoServer(model, tmp_path / "bad.json")
    with pytest.raises(ValueError, match="cannot read the test images"):
        onnx_web_demo.WebDemoServer(model, tmp_path / "missing.json")
    server = onnx_web_demo.WebDemoServer(model, images)
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.url


@pytest.mark.slow
@pytest.mark.parametrize("error", [ConnectionResetError, BrokenPipeError])
def test_a_download_the_browser_aborts_prints_nothing(error, capsys):
    # a browser that closes the connection mid-download must not put a ConnectionResetError traceback into the kernel
    with onnx_web_demo.server._Server(("127.0.0.1", 0), onnx_web_demo.server._Handler) as httpd:
        try:
            raise error
        except error:
            httpd.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""


def test_other_errors_of_a_request_still_print_their_traceback(capsys):
    with onnx_web_demo.server._Server(("127.0.0.1", 0), onnx_web_demo.server._Handler) as httpd:
        try:
            raise ValueError("a bug in the handler")
        except ValueError:
            httpd.handle_error(None, ("127.0.0.1", 1))
    assert "ValueError: a bug in the handler" in capsys.readouterr().err


def test_the_address_printed_on_a_hub_serves_the_page_through_jupyter_server_proxy(model, web_runtime, jupyterlab, monkeypatch):
    # a learner's server on the class hub runs under /user/NAME/ (JUPYTERHUB_SERVICE_PREFIX); jupyter-server-proxy
    # forwards /user/NAME/proxy/PORT/... to 127.0.0.1:PORT, and the page's relative URLs stay under that prefix
    lab = jupyterlab("--ServerApp.base_url=/user/alice/")
    monkeypatch.setenv(HUB_PREFIX_VARIABLE, "/user/alice/")
    monkeypatch.delenv("JUPYTERHUB_HOST", raising=False)
    with web.web_demo(model) as server:
        address = web.page_address(server)
        assert address == f"/user/alice/proxy/{server.port}/"
        for path in ["", "app.js", "ort/ort.wasm.min.mjs", "ort/ort-wasm-simd-threaded.wasm", "model/digits_cnn.onnx", "test-images.json"]:
            proxied, direct = _get(lab.url(address.removeprefix("/user/alice") + path)), _get(server.url + path)
            assert proxied[0] == 200 and proxied == direct, (path, proxied[:2])


@pytest.mark.browser
@pytest.mark.slow
def test_the_page_classifies_in_chromium_at_the_address_printed_on_a_hub(model, web_runtime, jupyterlab, monkeypatch, require_tool):
    from playwright.sync_api import sync_playwright

    require_tool(web.CHROMIUM, "the browser test drives Debian's Chromium (apt-get install chromium)")
    lab = jupyterlab("--ServerApp.base_url=/user/alice/")
    monkeypatch.setenv(HUB_PREFIX_VARIABLE, "/user/alice/")
    monkeypatch.delenv("JUPYTERHUB_HOST", raising=False)
    images = load_digits().test.images[:4]
    with web.web_demo(model) as server, sync_playwright() as playwright:
        browser = web.launch_chromium(playwright)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.goto(lab.url(web.page_address(server).removeprefix("/user/alice")))  # the token logs the browser in
            page.wait_for_function("window.onnxLab !== undefined", timeout=60_000)
            page.evaluate("async () => { await window.onnxLab.ready; }")
            result = page.evaluate("async (images) => window.onnxLab.classify(images)", images.reshape(4, 64).tolist())
        finally:
            browser.close()
    assert errors == []
    np.testing.assert_array_equal(result["predictions"], edge.python_reference(model, images)["predictions"])


def test_the_command_binds_port_0_and_prints_the_url(web_runtime):
    model, images = web.web_demo_files()
    process = subprocess.Popen(_demo_command(model, images, "--port", "0"), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = _first_line(process, STARTUP_TIMEOUT)
        assert line.startswith(SERVING + "http://127.0.0.1:"), f"no address within {STARTUP_TIMEOUT:.0f} s: {line!r}"
        url = line[len(SERVING) :].split()[0]
        status, _, body = _get(url)
        assert status == 200 and b"onnxruntime-web" in body
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_the_command_rejects_bad_arguments_with_a_clear_message(model, tmp_path):
    images = web.page_images()
    bad_port = subprocess.run(_demo_command(model, images, "--port", "eighty"), capture_output=True, text=True, timeout=120)
    assert bad_port.returncode == 2 and "the port must be a number such as 8000" in bad_port.stderr
    no_model = subprocess.run(_demo_command(tmp_path / "none.onnx", images), capture_output=True, text=True, timeout=120)
    assert no_model.returncode == 1 and "none.onnx does not exist" in no_model.stderr


def test_images_payload():
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


def test_browser_classify_refuses_a_missing_browser(model):
    with pytest.raises(FileNotFoundError, match="Chromium not found"):
        web.browser_classify(model, load_digits().test.images[:1], executable="/nonexistent/chromium")


@pytest.mark.browser
@pytest.mark.slow
def test_browser_matches_onnxruntime_in_python(model, web_runtime, require_tool):
    require_tool(web.CHROMIUM, "the browser test drives Debian's Chromium (apt-get install chromium)")
    test = load_digits().test
    images = test.images[:BROWSER_IMAGES]
    screenshot = artifact("web_demo.png")
    screenshot.unlink(missing_ok=True)
    shown = 3

    result = web.browser_classify(model, images, shown_index=shown, screenshot=screenshot)
    reference = edge.python_reference(model, images)

    assert result.runtime == f"onnxruntime-web {web.ORT_WEB_VERSION}" and result.backend == "wasm"
    assert result.console_errors == []
    assert result.probabilities.shape == (BROWSER_IMAGES, 10)
    compare(reference["probabilities"], result.probabilities, atol=PROBABILITY_ATOL, rtol=0, name="browser probabilities")
    compare(reference["logits"], result.logits, atol=LOGIT_ATOL, rtol=LOGIT_RTOL, name="browser logits")
    np.testing.assert_array_equal(result.predictions, reference["predictions"])
    # what the page shows after picking test image 3 in its list is Python's answer for that image
    assert result.shown_prediction == int(edge.python_reference(model, test.images[shown : shown + 1])["predictions"][0])
    # the mouse-drawn digit: 64 ink values in [0, 1], classified by the page as Python classifies them
    assert result.drawing_pixels.shape == (64,) and result.drawing_pixels.min() >= 0 and result.drawing_pixels.max() <= 1
    assert result.drawing_pixels.sum() > 3  # the stroke really left ink
    assert result.drawing_prediction == int(edge.python_reference(model, result.drawing_pixels[None])["predictions"][0])
    assert screenshot.is_file() and screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_npm_packages_say_how_to_install_them(tmp_path, model):
    with pytest.raises(FileNotFoundError, match="make js-deps"):
        onnx_web_demo.runtime_dir(tmp_path)
    with pytest.raises(FileNotFoundError, match="make js-deps"):
        onnx_web_demo.WebDemoServer(model, web.page_images(), page_dir=tmp_path)
