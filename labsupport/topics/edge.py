"""The course model outside Python: the browser, Node.js and the mobile ``.ort`` format.

Introduced in notebook 09. The deployable code lives in ``deploy/web`` (a static page running
onnxruntime-web on WebAssembly, served by the ``onnx_web_demo`` package there) and ``deploy/node``
(``classify.js`` with onnxruntime-node); these helpers let the notebook and the tests drive that
code for real and compare it with ONNX Runtime in Python:

* ``write_images_json`` writes test images in the JSON shape both programs read;
* ``run_node_classifier`` runs ``deploy/node/classify.js`` as a subprocess and parses its JSON;
* ``node_event_loop`` runs ``deploy/node/event_loop.js``: a heartbeat timer while the model runs on
  Node's main thread or in a worker thread;
* ``web_demo`` builds ``onnx_web_demo.WebDemoServer`` for a model with the test images of the
  page's picker (``web_demo_files`` makes what ``make web`` serves); ``page_address`` is the link a
  learner's browser opens, through jupyter-server-proxy on a hub;
* ``node_missing``, ``web_missing`` and ``browser_missing`` say why a route cannot run here (Binder has
  no npm packages and no Chromium), so that the notebook prints the reason and skips that cell;
* ``browser_classify`` drives Debian's Chromium headless with Playwright through that page;
* ``convert_to_ort`` calls ``python -m onnxruntime.tools.convert_onnx_models_to_ort``;
* ``mobile_usability`` runs ONNX Runtime's mobile usability checker
  (``python -m onnxruntime.tools.check_onnx_model_mobile_usability``) and returns its numbers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from labsupport.course.addresses import browser_address
from labsupport.course.compare import softmax
from labsupport.course.paths import artifact, relative, repo_root
from labsupport.onnxutil.sessions import open_session
from onnx_web_demo import PAGE_DIR, WebDemoServer, runtime_dir

ORT_WEB_VERSION = "1.30.0"
ORT_NODE_VERSION = "1.30.0"
PIXELS = 64  # one 8x8 digit, flattened row by row
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


def node_dir() -> Path:
    """``deploy/node``: ``classify.js``, its ``package.json`` and (after ``npm ci``) ``node_modules``."""
    return repo_root() / "deploy" / "node"


# --------------------------------------------------------------------------- inputs and reference


def _as_images(images: Any) -> np.ndarray:
    array = np.asarray(images, dtype=np.float32)
    if array.ndim == 4 and array.shape[1:] == (1, 8, 8):
        array = array.reshape(len(array), PIXELS)
    if array.ndim != 2 or array.shape[1] != PIXELS or len(array) == 0:
        raise ValueError(f"images must have shape (N, 1, 8, 8) or (N, 64) with N >= 1, got {np.shape(images)}")
    if not np.all(np.isfinite(array)):
        raise ValueError("images contain NaN or infinity; pixels must be finite numbers in [0, 1]")
    return array


def images_payload(images: Any, labels: Sequence[int] | None = None) -> dict[str, Any]:
    """The JSON document that ``classify.js`` and the web page read: ``{"images": [[64 floats], ...], "labels": [...]}``."""
    flat = _as_images(images)
    payload: dict[str, Any] = {"images": [[float(v) for v in row] for row in flat]}
    if labels is not None:
        labels = [int(label) for label in labels]
        if len(labels) != len(flat):
            raise ValueError(f"got {len(labels)} labels for {len(flat)} images")
        payload["labels"] = labels
    return payload


def write_images_json(images: Any, path: str | os.PathLike[str], labels: Sequence[int] | None = None) -> Path:
    """Write (N, 1, 8, 8) or (N, 64) images (and optional labels) as the JSON file ``classify.js`` reads; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(images_payload(images, labels)), encoding="utf-8")
    return path


def python_reference(model_path: str | os.PathLike[str], images: Any) -> dict[str, np.ndarray]:
    """Logits, probabilities and predictions of ONNX Runtime in Python on the CPU: the reference for every other runtime."""
    session = open_session(model_path)
    flat = _as_images(images)
    logits = session.run(None, {session.get_inputs()[0].name: flat.reshape(-1, 1, 8, 8)})[0]
    probabilities = softmax(logits)
    return {"logits": logits, "probabilities": probabilities, "predictions": probabilities.argmax(axis=1)}


# --------------------------------------------------------------------------- Node.js


def node_executable() -> str | None:
    """Path of ``node`` on PATH, or None."""
    return shutil.which("node")


def node_missing(node: str | None = None) -> str | None:
    """Why ``deploy/node``'s programs cannot run here (no ``node``, or no onnxruntime-node in ``node_modules``), or None (09).

    Binder has Node.js (repo2docker's base environment) but not the npm packages.
    """
    if (node or node_executable()) is None:
        return "node not found on PATH: install Node.js 18 or newer to run the programs in deploy/node"
    if not (node_dir() / "node_modules" / "onnxruntime-node").is_dir():
        return (
            "onnxruntime-node is not installed in deploy/node/node_modules: run `make js-deps` "
            "(or `cd deploy/node && ONNXRUNTIME_NODE_INSTALL=skip npm ci`)"
        )
    return None


def _node_ready(node: str | None) -> str:
    """``node`` (or the one on PATH) once node and the npm packages are there; FileNotFoundError naming the fix."""
    missing = node_missing(node)
    if missing is not None:
        raise FileNotFoundError(missing)
    return node or str(node_executable())


def _run_node_script(script: str, arguments: list[str], node: str, timeout: float) -> dict[str, Any]:
    """Run ``node deploy/node/<script> ARGUMENTS`` and parse the one JSON object it prints."""
    done = subprocess.run([node, script, *arguments], cwd=node_dir(), capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{script} exited with status {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
    return json.loads(done.stdout)


def _existing_files(**paths: str | os.PathLike[str]) -> None:
    for what, value in paths.items():
        if not Path(value).is_file():
            raise FileNotFoundError(f"{what} {relative(value)} does not exist")


def run_node_classifier(
    images_json: str | os.PathLike[str],
    model_path: str | os.PathLike[str],
    node: str | None = None,
    timeout: float = 120,
) -> dict[str, Any]:
    """Run ``node deploy/node/classify.js --model M --input J`` and return its JSON (predictions, probabilities, logits).

    Raises FileNotFoundError when node or the npm packages are missing, RuntimeError with the
    program's own error message when it exits non-zero.
    """
    node = _node_ready(node)
    _existing_files(images_json=images_json, model_path=model_path)
    arguments = ["--model", str(Path(model_path).resolve()), "--input", str(Path(images_json).resolve())]
    return _run_node_script("classify.js", arguments, node, timeout)


@dataclass(frozen=True)
class EventLoopTrace:
    """What ``deploy/node/event_loop.js`` saw: each run's ``(start, end)`` and every heartbeat, in ms."""

    mode: str
    runs: list[tuple[float, float]]
    heartbeats: list[float]

    @property
    def run_ms(self) -> list[float]:
        return [end - start for start, end in self.runs]

    @property
    def longest_gap_ms(self) -> list[float]:
        """Per run: the longest stretch without a heartbeat while the run was in flight."""
        beats = np.asarray(self.heartbeats)
        gaps = []
        for start, end in self.runs:
            inside = beats[(beats > start) & (beats < end)]
            gaps.append(float(np.diff(np.concatenate([[start], inside, [end]])).max()))
        return gaps


def node_event_loop(
    model_path: str | os.PathLike[str], mode: str, runs: int = 4, batch: int = 64, node: str | None = None, timeout: float = 120
) -> EventLoopTrace:
    """Run the model ``runs`` times with a 1 ms heartbeat timer, on Node's main thread (mode "main") or in a worker.

    Runs ``node deploy/node/event_loop.js``; the same errors as ``run_node_classifier``.
    """
    if mode not in ("main", "worker"):
        raise ValueError(f"mode must be 'main' (session.run on the event loop's thread) or 'worker', got {mode!r}")
    node = _node_ready(node)
    _existing_files(model_path=model_path)
    arguments = ["--model", str(Path(model_path).resolve()), "--mode", mode, "--runs", str(runs), "--batch", str(batch)]
    traced = _run_node_script("event_loop.js", arguments, node, timeout)
    return EventLoopTrace(traced["mode"], [tuple(run) for run in traced["runs"]], traced["heartbeats"])


# --------------------------------------------------------------------------- the web page


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
    flat = _as_images(images)
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


# --------------------------------------------------------------------------- mobile (.ort)


@dataclass
class OrtConversion:
    """The files ``convert_onnx_models_to_ort`` produced for one model, with their sizes in bytes."""

    onnx_path: Path
    ort_path: Path
    config_path: Path
    optimization_style: str
    warnings: tuple[str, ...] = ()  # the converter's own "WARNING:" lines (Runtime style: how to replay)

    @property
    def onnx_bytes(self) -> int:
        return self.onnx_path.stat().st_size

    @property
    def ort_bytes(self) -> int:
        return self.ort_path.stat().st_size


def is_ort_format(path: str | os.PathLike[str]) -> bool:
    """True when the file is an ORT-format (flatbuffer) model: bytes 4-7 spell ``ORTM``."""
    with open(path, "rb") as handle:
        return handle.read(8)[4:8] == b"ORTM"


def convert_to_ort(
    onnx_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    optimization_style: str = "Fixed",
    target_platform: str = "arm",
    timeout: float = 300,
    save_optimized_onnx: bool = False,
) -> OrtConversion:
    """Convert one .onnx file with ``python -m onnxruntime.tools.convert_onnx_models_to_ort`` (notebook 09).

    ``optimization_style`` is "Fixed" (optimizations baked in as ``com.microsoft`` operators for the CPU
    provider) or "Runtime" (ONNX operators kept for NNAPI/CoreML/XNNPACK, which decide at load time which
    nodes they take; the optimizations are recorded and replayed only when the session sets
    ``session.enable_saved_runtime_optimizations`` to "1"). Returns the .ort model, the converter's warnings
    and the ``required_operators`` config that a reduced-size build takes (``--include_ops_by_config``).
    ``target_platform`` "arm" (phones; the default) or "amd64" picks the platform-specific optimizations.
    ``save_optimized_onnx`` also writes the same optimized graph as ``<name>.optimized.onnx`` (the converter's
    ``--save_optimized_onnx_model``: what the .ort file holds, viewable in Netron).
    Give each conversion its own ``output_dir`` so its files are easy to tell apart. For "Runtime" the
    converter also converts the model once more without runtime optimizations (in a temporary folder)
    and the config covers the operators of both, since the saved optimizations may not be applied.
    """
    source = Path(onnx_path)
    if source.suffix != ".onnx" or not source.is_file():
        raise FileNotFoundError(f"expected an existing .onnx file, got {relative(source)}")
    if optimization_style not in ("Fixed", "Runtime"):
        raise ValueError(f"optimization_style must be 'Fixed' or 'Runtime', got {optimization_style!r}")
    if target_platform not in ("arm", "amd64"):
        raise ValueError(f"target_platform must be 'arm' (phones) or 'amd64', got {target_platform!r}")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "onnxruntime.tools.convert_onnx_models_to_ort",
        str(source),
        "--output_dir",
        str(out),
        "--optimization_style",
        optimization_style,
        "--target_platform",
        target_platform,
        *(["--save_optimized_onnx_model"] if save_optimized_onnx else []),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    infix = ".with_runtime_opt" if optimization_style == "Runtime" else ""
    ort_path = out / f"{source.stem}{infix}.ort"
    config_path = out / f"{source.stem}.required_operators{infix}.config"
    if done.returncode != 0 or not ort_path.is_file():
        raise RuntimeError(f"convert_onnx_models_to_ort failed (status {done.returncode}): {done.stderr.strip()[-2000:]}")
    warnings = tuple(line for line in done.stdout.splitlines() if line.startswith("WARNING:"))
    return OrtConversion(source, ort_path, config_path, optimization_style, warnings)


def ort_value_records(path: str | os.PathLike[str]) -> tuple[int, int]:
    """How many value records (name, type and shape) an ORT-format file's main graph stores, and how many of them
    name values that no node, graph input or graph output uses any more (those of nodes the optimizer removed) (09)."""
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs.InferenceSession import InferenceSession

    graph = InferenceSession.GetRootAs(Path(path).read_bytes(), 0).Model().Graph()
    used = {graph.Inputs(i) for i in range(graph.InputsLength())} | {graph.Outputs(i) for i in range(graph.OutputsLength())}
    for node in (graph.Nodes(i) for i in range(graph.NodesLength())):
        used |= {node.Inputs(i) for i in range(node.InputsLength())} | {node.Outputs(i) for i in range(node.OutputsLength())}
    names = [graph.NodeArgs(i).Name() for i in range(graph.NodeArgsLength())]
    return len(names), sum(name not in used for name in names)


def operator_config_text(path: str | os.PathLike[str]) -> str:
    """The ``required_operators`` config with the absolute model paths in its comments shortened to file names."""
    lines = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("# - "):
            line = "# - " + Path(line[4:]).name
        lines.append(line)
    return "\n".join(lines)


# --------------------------------------------------------------------------- the mobile usability checker

USABILITY_PROVIDERS = ("NNAPI", "CoreML NeuralNetwork", "CoreML MLProgram")
_SECTION = re.compile(r"Checking (NNAPI|CoreML NeuralNetwork|CoreML MLProgram)$")
_PARTITIONS = re.compile(r"(\d+) partitions with a total of (\d+)/(\d+) nodes can be handled by the (.+) EP\.")
_VERDICT = re.compile(r"Model should perform well with (.+?) (as is|if modified to have fixed input shapes): (YES|NO)")


@dataclass(frozen=True)
class Usability:
    """One provider's lines of the usability checker: nodes it can take as the model is, and with fixed shapes."""

    provider: str
    nodes: int
    total: int
    partitions: int
    works_as_is: bool
    fixed_nodes: int | None = None  # None: the checker had no dynamic shape to fix
    works_if_fixed: bool | None = None


def parse_usability_report(lines: Sequence[str]) -> list[Usability]:
    """The checker's log lines (``INFO:`` prefixes allowed) as one ``Usability`` per provider it checked."""
    found: dict[str, dict[str, Any]] = {}
    provider, fixed = None, False
    for line in (line.removeprefix("INFO:").strip() for line in lines):
        if section := _SECTION.fullmatch(line):
            provider, fixed = section.group(1), False
            found[provider] = {"provider": provider}
        elif line.startswith("Partition information if the model was updated to make the shapes fixed"):
            fixed = True
        elif provider and (partitions := _PARTITIONS.fullmatch(line)):
            if fixed:
                found[provider]["fixed_nodes"] = int(partitions.group(2))
            else:
                found[provider].update(partitions=int(partitions.group(1)), nodes=int(partitions.group(2)), total=int(partitions.group(3)))
        elif provider and (verdict := _VERDICT.fullmatch(line)):
            found[provider]["works_as_is" if verdict.group(2) == "as is" else "works_if_fixed"] = verdict.group(3) == "YES"
    missing = [name for name in USABILITY_PROVIDERS if name not in found or "nodes" not in found[name] or "works_as_is" not in found[name]]
    if missing:
        raise ValueError(f"the usability checker's report has no complete section for {missing}; is its output format new?")
    return [Usability(**found[name]) for name in USABILITY_PROVIDERS]


def mobile_usability(model_path: str | os.PathLike[str], timeout: float = 300) -> list[Usability]:
    """How many nodes NNAPI and CoreML could take, by ONNX Runtime's mobile usability checker (notebook 09).

    Runs ``python -m onnxruntime.tools.check_onnx_model_mobile_usability MODEL`` in a fresh process (the
    checker optimizes the model with ONNX Runtime first, so it must not inherit this process's session
    settings) and parses its log.
    """
    path = Path(model_path)
    if not path.is_file():
        raise FileNotFoundError(f"model file {relative(path)} does not exist")
    command = [sys.executable, "-m", "onnxruntime.tools.check_onnx_model_mobile_usability", str(path.resolve())]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"check_onnx_model_mobile_usability failed (status {done.returncode}): {done.stderr.strip()[-2000:]}")
    return parse_usability_report(done.stderr.splitlines())  # the checker logs to stderr
