"""Notebook 09 where Node.js's packages or Chromium are missing (Binder: Node.js 20 from repo2docker's base
environment, but no npm packages and no Chromium), and the page's address on a hub.

The notebook asks ``node_missing``, ``web_missing`` and ``browser_missing`` before each cell that needs them and
prints the reason instead of failing; ``page_address`` is the link it prints for the learner's browser.
"""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from labsupport.course.addresses import HUB_PREFIX_VARIABLE
from labsupport.topics import nodejs, web


@pytest.fixture
def no_node(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *rest: None)


@pytest.fixture
def no_npm_packages(monkeypatch, tmp_path):
    """deploy/web and deploy/node as Binder has them: the files, no node_modules."""
    monkeypatch.setattr(nodejs, "node_dir", lambda: tmp_path / "node")
    monkeypatch.setattr(web, "web_dir", lambda: tmp_path / "web")


@pytest.fixture
def on_a_hub(monkeypatch):
    monkeypatch.setenv(HUB_PREFIX_VARIABLE, "/user/alice/")
    monkeypatch.delenv("JUPYTERHUB_HOST", raising=False)


def test_without_node_the_node_cells_are_told_why(no_node):
    assert "node not found on PATH" in nodejs.node_missing()
    with pytest.raises(FileNotFoundError, match="node not found on PATH"):
        nodejs.run_node_classifier("images.json", "model.onnx")


def test_node_without_its_npm_package_is_not_enough(no_npm_packages):
    # Binder: node is there (repo2docker installs Node.js 20), onnxruntime-node is not
    assert "onnxruntime-node is not installed" in nodejs.node_missing(node="/usr/bin/node")
    with pytest.raises(FileNotFoundError, match="make js-deps"):
        nodejs.node_event_loop("model.onnx", "main", node="/usr/bin/node")


def test_without_onnxruntime_web_the_page_and_browser_cells_are_told_why(no_npm_packages, tmp_path):
    assert "onnxruntime-web is not installed" in web.web_missing()
    browser = tmp_path / "chromium"
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o755)
    assert "onnxruntime-web is not installed" in web.browser_missing(str(browser))
    both = web.browser_missing(str(tmp_path / "no-chromium"))
    assert "onnxruntime-web is not installed" in both and "Chromium not found" in both


def test_where_everything_is_installed_nothing_is_missing(require_tool, prerequisite):
    require_tool("node", "notebook 09's Node.js cells")
    prerequisite(web.web_missing() is None and nodejs.node_missing() is None, "run `make js-deps`")
    prerequisite(web.chromium_available(), "Chromium: apt-get install chromium")
    assert web.browser_missing() is None


class _Running:
    port = 8123


def test_a_local_lab_opens_the_page_on_loopback(monkeypatch):
    monkeypatch.delenv(HUB_PREFIX_VARIABLE, raising=False)
    assert web.page_address(_Running()) == "http://127.0.0.1:8123/"


def test_a_hub_opens_the_page_through_jupyter_server_proxy(on_a_hub, monkeypatch):
    # what the class hub gave a learner's kernel (measured): JUPYTERHUB_SERVICE_PREFIX=/user/alice/, JUPYTERHUB_HOST empty
    assert web.page_address(_Running()) == "/user/alice/proxy/8123/"
    monkeypatch.setenv("JUPYTERHUB_HOST", "https://hub.example.edu")
    assert web.page_address(_Running()) == "https://hub.example.edu/user/alice/proxy/8123/"


def test_a_hub_without_jupyter_server_proxy_says_what_to_install(on_a_hub, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "jupyter_server_proxy" else real(name, *rest))
    with pytest.raises(RuntimeError, match="pip install jupyter-server-proxy"):
        web.page_address(_Running())
