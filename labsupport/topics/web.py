"""The course model in the browser: the ``deploy/web`` page (onnxruntime-web on WebAssembly) and headless Chromium.

The page is served by the ``onnx_web_demo`` package of ``deploy/web``; these helpers let the notebook
and the tests drive it for real:

* ``web_demo`` builds ``onnx_web_demo.WebDemoServer`` for a model with the test images of the
  page's picker (``web_demo_files`` makes what ``make web`` serves); ``page_address`` is the link a
  learner's browser opens, through jupyter-server-proxy on a hub;
* ``launch_chromium`` starts Debian's Chromium headless with the course's flags: the one launcher of
  notebook 09, the service tests and the docs test;
* ``browser_classify`` drives that Chromium with Playwright through the page;
* ``web_missing`` and ``browser_missing`` say why the page cannot be served or driven here (Binder
  has no npm packages and no Chromium). Introduced in notebook 09.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from labsupport.course.addresses import browser_address
from labsupport.course.paths import artifact
from labsupport.topics.edge import as_flat_images, write_images_json
from onnx_web_demo import PAGE_DIR, WebDemoServer, runtime_dir

ORT_WEB_VERSION = "1.30.0"
PAGE_IMAGES = "edge/page_images.json"  # the test images of the page's picker, under artifacts/
PAGE_IMAGE_COUNT = 24
# Debian's Chromium (Playwright's own browser download is never used); $ONNX_LAB_CHROMIUM points elsewhere
CHROMIUM = os.environ.get("ONNX_LAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def web_dir() -> Path:
    """``deploy/web``: the static page, its ``package.json``, the ``onnx_web_demo`` server and (after ``npm ci``) ``node_modules``."""
    return PAGE_DIR


def page_images(count: int = PAGE_IMAGE_COUNT) -> Path:
    """Write the first ``count`` test images and labels as ``artifacts/edge/page_images.json``: the page's picker list."""
    from labsupport.course.data import load_digits

    test = load_digits().test
    return write_images_json(test.images[:count], artifact(PAGE_IMAGES), labels=test.labels[:count])


def web_demo_files() -> tuple[Path, Path]:
    """The course model and the page's test images, made when missing: what ``make web`` serves (notebook 09)."""
    from labsupport.models.digits_cnn import ensure_digits_cnn

    return ensure_digits_cnn(), page_images()


def web_demo(model_path: str | os.PathLike[str], port: int = 0) -> WebDemoServer:
    """An ``onnx_web_demo.WebDemoServer`` for ``model_path`` on 127.0.0.1 (port 0: any free one) with the test images (09)."""
    return WebDemoServer(model_path, page_images(), port=port)


def web_missing() -> str | None:
    """Why the page cannot be served here (onnxruntime-web not installed in ``deploy/web/node_modules``), or None (09)."""
    try:
        runtime_dir(web_dir())
    except FileNotFoundError:
        return "onnxruntime-web is not installed in deploy/web/node_modules: run `make js-deps` (or `cd deploy/web && npm ci`)"
    return None


def page_address(server: WebDemoServer) -> str:
    """The address of a running demo page for the learner's browser: loopback for ``make lab``, the hub's proxy path on
    JupyterHub or Binder (jupyter-server-proxy; the page's URLs are relative, so it works under that prefix) (09)."""
    address = browser_address(server.port)
    if address is None:
        raise RuntimeError(
            "this kernel runs on a JupyterHub or Binder server, whose 127.0.0.1 is not your computer, and "
            "jupyter-server-proxy, which forwards the page through the hub, is not installed here "
            "(pip install jupyter-server-proxy, then restart your server)"
        )
    return address.rstrip("/") + "/"


@dataclass
class BrowserResult:
    """What the page computed in Chromium: per-image logits/probabilities/predictions, the runtime, the UI's answers.

    ``shown_prediction`` is what the page displayed for test image ``shown_index`` picked in its
    list; ``drawing_pixels`` (64 values) and ``drawing_prediction`` come from a stroke drawn with the mouse.
    """

    logits: np.ndarray
    probabilities: np.ndarray
    predictions: np.ndarray
    runtime: str
    backend: str
    shown_index: int
    shown_prediction: int
    drawing_pixels: np.ndarray
    drawing_prediction: int
    screenshot: Path | None = None
    console_errors: list[str] = field(default_factory=list)


def _open_page(browser: Any, url: str, timeout_ms: float, errors: list[str]) -> Any:
    """A new tab on the demo page, with console errors collected in ``errors``, once the model is loaded."""
    page = browser.new_page(viewport={"width": 1100, "height": 720})
    page.set_default_timeout(timeout_ms)
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    page.wait_for_function("window.onnxLab !== undefined")
    page.evaluate("async () => { await window.onnxLab.ready; }")
    return page


def _draw_seven(page: Any) -> tuple[int, list[float]]:
    """A learner drawing a "7" with the mouse; the page classifies the drawing on release: (its answer, the 64 pixels)."""
    box = page.locator("#pad").bounding_box()
    stroke = [(0.2, 0.15), (0.8, 0.15), (0.45, 0.9)]
    page.mouse.move(box["x"] + stroke[0][0] * box["width"], box["y"] + stroke[0][1] * box["height"])
    page.mouse.down()
    for fx, fy in stroke[1:]:
        page.mouse.move(box["x"] + fx * box["width"], box["y"] + fy * box["height"], steps=12)
    page.mouse.up()
    page.wait_for_function("document.querySelector('#prediction').dataset.index === 'drawing'")
    return int(page.get_attribute("#prediction", "data-class")), page.evaluate("() => window.onnxLab.padPixels()")


def _pick_test_image(page: Any, index: int) -> int:
    """The learner's path through the UI: pick test image ``index`` in the list and read the page's answer."""
    page.select_option("#picker", str(index))
    page.wait_for_function(f"document.querySelector('#prediction').dataset.index === '{index}'")
    return int(page.get_attribute("#prediction", "data-class"))


def launch_chromium(playwright: Any, executable: str = CHROMIUM) -> Any:
    """Chromium (Debian's, or ``ONNX_LAB_CHROMIUM``) headless with the course's flags, never a browser Playwright downloads."""
    return playwright.chromium.launch(executable_path=executable, args=list(CHROMIUM_ARGS), headless=True)


def _drive_browser(
    url: str, flat: np.ndarray, shown_index: int, screenshot: Path | None, executable: str, timeout_ms: float
) -> BrowserResult:
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright, executable)
        try:
            page = _open_page(browser, url, timeout_ms, errors)
            info = page.evaluate("() => window.onnxLab.info()")
            result = page.evaluate("async (images) => window.onnxLab.classify(images)", flat.tolist())
            drawing_prediction, drawing_pixels = _draw_seven(page)
            shown = _pick_test_image(page, shown_index)
            if screenshot is not None:
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return BrowserResult(
        logits=np.asarray(result["logits"], dtype=np.float32),
        probabilities=np.asarray(result["probabilities"], dtype=np.float64),
        predictions=np.asarray(result["predictions"], dtype=np.int64),
        runtime=f"onnxruntime-web {info['version']}",
        backend=str(info["backend"]),
        shown_index=shown_index,
        shown_prediction=shown,
        drawing_pixels=np.asarray(drawing_pixels, dtype=np.float32),
        drawing_prediction=drawing_prediction,
        screenshot=screenshot,
        console_errors=errors,
    )


def chromium_available(executable: str = CHROMIUM) -> bool:
    """True when ``executable`` (Debian's Chromium, or ``$ONNX_LAB_CHROMIUM``) is a file that can be run (notebook 09)."""
    return Path(executable).is_file() and os.access(executable, os.X_OK)


def _chromium_missing(executable: str) -> str | None:
    if chromium_available(executable):
        return None
    return (
        f"Chromium not found at {executable}: install Debian's package (`apt-get install chromium`) "
        "or set $ONNX_LAB_CHROMIUM to a Chromium or Chrome executable"
    )


def browser_missing(executable: str = CHROMIUM) -> str | None:
    """Why the page cannot be driven in a browser here (no onnxruntime-web, no Chromium at ``executable``, or both), or None (09)."""
    reasons = [reason for reason in (web_missing(), _chromium_missing(executable)) if reason is not None]
    return "; ".join(reasons) or None


def browser_classify(
    model_path: str | os.PathLike[str],
    images: Any,
    shown_index: int = 0,
    screenshot: str | os.PathLike[str] | None = None,
    executable: str = CHROMIUM,
    timeout: float = 120,
) -> BrowserResult:
    """Serve the page, open it in headless Chromium, classify ``images`` there and pick test image ``shown_index`` in the UI.

    Optionally saves a screenshot (PNG). Runs Playwright in a worker thread, so it also works
    inside Jupyter (whose event loop blocks Playwright's sync API in the main thread).
    Introduced in notebook 09.
    """
    flat = as_flat_images(images)
    missing = browser_missing(executable)
    if missing is not None:
        raise FileNotFoundError(missing)
    shot = Path(screenshot) if screenshot is not None else None
    with web_demo(model_path) as server:
        if not 0 <= shown_index < server.test_images:
            raise ValueError(f"shown_index must be in 0..{server.test_images - 1} (the page lists that many test images)")
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["result"] = _drive_browser(server.url, flat, shown_index, shot, executable, timeout * 1000)
            except BaseException as error:  # re-raised in the caller's thread
                outcome["error"] = error

        worker = threading.Thread(target=work, name="playwright", daemon=True)
        worker.start()
        worker.join(timeout * 3)
        if worker.is_alive():
            raise TimeoutError(f"the browser did not finish within {timeout * 3:.0f} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
