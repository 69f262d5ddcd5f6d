"""Where view_in_netron sends the browser: loopback for `make lab`, the hub's proxy path on JupyterHub and Binder."""

from __future__ import annotations

import importlib.util

import pytest

from labsupport.course.addresses import HUB_PREFIX_VARIABLE
from labsupport.onnxutil import draw


@pytest.fixture
def on_a_hub(monkeypatch):
    monkeypatch.setenv(HUB_PREFIX_VARIABLE, "/user/alice/")
    monkeypatch.delenv("JUPYTERHUB_HOST", raising=False)


def test_a_local_lab_gets_loopback(monkeypatch):
    monkeypatch.delenv(HUB_PREFIX_VARIABLE, raising=False)
    assert draw._address_for_the_browser(41234) == "http://127.0.0.1:41234"


def test_a_hub_gets_the_path_through_its_proxy(on_a_hub, monkeypatch):
    assert draw._address_for_the_browser(41234) == "/user/alice/proxy/41234/"
    monkeypatch.setenv("JUPYTERHUB_HOST", "https://hub.example.edu")
    assert draw._address_for_the_browser(41234) == "https://hub.example.edu/user/alice/proxy/41234/"


def test_a_hub_without_the_proxy_extension_is_told_what_to_do_before_anything_is_served(on_a_hub, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "jupyter_server_proxy" else real(name, *rest))
    with pytest.raises(RuntimeError, match=r"jupyter-server-proxy.*netron\.app"):
        draw.view_in_netron("does-not-matter.onnx")  # refused before the file is even read


@pytest.mark.parametrize(
    ("url", "port"), [("http://127.0.0.1:5000", 5000), ("/user/alice/proxy/41234/", 41234), ("https://h.edu/user/a/proxy/7/", 7)]
)
def test_stop_netron_reads_the_port_of_either_address(url, port):
    assert draw._port_of(url) == port


def test_an_address_without_a_port_is_refused():
    with pytest.raises(ValueError, match="not a Netron address"):
        draw._port_of("http://127.0.0.1/")
