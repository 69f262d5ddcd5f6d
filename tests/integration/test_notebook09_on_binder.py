"""Notebook 09 as Binder runs it: Node.js is there (repo2docker's base environment has Node.js 20) but no npm
packages under deploy/, and no Chromium. Every cell runs; the page, browser and Node.js cells print why they skip.

The kernel gets ``ONNX_LAB_CHROMIUM`` pointing nowhere and a first cell that points ``nodejs.node_dir`` and
``web.web_dir`` at folders without ``node_modules`` (Binder's checkout of deploy/), then the notebook runs unchanged.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest

from labsupport.course.paths import repo_root

NOTEBOOK = repo_root() / "notebooks" / "09_deploy_edge.ipynb"
BINDER_CHECKOUT = """
from pathlib import Path
from labsupport.topics import nodejs, web

nodejs.node_dir = lambda: Path({folder!r}) / "node"  # a copy of deploy/node without node_modules
web.web_dir = lambda: Path({folder!r}) / "web"  # a copy of deploy/web without node_modules
"""


def _checkout_without_npm_packages(folder: Path) -> None:
    """deploy/web and deploy/node as Binder has them: the repository's files, no node_modules."""
    for name in ("web", "node"):
        source = repo_root() / "deploy" / name
        shutil.copytree(source, folder / name, ignore=shutil.ignore_patterns("node_modules", "onnx_web_demo"))


def _printed(notebook) -> str:
    return "".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs)


@pytest.mark.slow
def test_notebook_09_runs_without_npm_packages_and_chromium_and_says_why(tmp_path):
    from nbclient import NotebookClient

    _checkout_without_npm_packages(tmp_path)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(BINDER_CHECKOUT.format(folder=str(tmp_path))))
    # its own working folder: the recipe writes ../artifacts/nb09, which make test's notebooks half writes at the same time
    (tmp_path / "notebooks").mkdir()
    client = NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path / "notebooks")}})
    client.execute(env={**os.environ, "ONNX_LAB_CHROMIUM": str(tmp_path / "no-chromium")})  # raises on any cell's error

    printed = _printed(notebook)
    assert "skipped: onnxruntime-web is not installed in deploy/web/node_modules: run `make js-deps`" in printed
    assert "skipped, with the browser cells below: onnxruntime-web is not installed" in printed and "Chromium not found" in printed
    assert "skipped, with the Node.js cells below: onnxruntime-node is not installed in deploy/node/node_modules" in printed
    assert "in the browser:" not in printed and "runtime: " not in printed  # nothing ran that needs them
    assert "digits_cnn.ort predicts the class of digits_cnn.onnx" in printed  # the .ort sections ran
    routes = next(cell for cell in notebook.cells if cell.source.startswith("routes = ["))
    shown = "".join(str(output.get("data", {}).get("text/plain", "")) for output in routes.outputs)
    assert "not here: no browser" in shown and "not here: no Node.js" in shown
