"""labsupport.onnxutil.draw with the real tools: Graphviz renders the pictures, Netron serves a model on 127.0.0.1."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from labsupport.exercises.nb01 import broken_model
from labsupport.models.graph_mlp import mlp
from labsupport.onnxutil.draw import draw, stop_netron, view_in_netron


@pytest.fixture
def dot(require_tool) -> str:
    return require_tool("dot", "draw() lays graphs out with Graphviz (apt-get install graphviz)")


def test_a_drawing_shows_as_svg_with_a_stable_text_form(dot):
    picture = draw(mlp([6, 4, 3], name="small"))
    bundle = picture._repr_mimebundle_()
    assert bundle["text/plain"] == "<GraphDrawing 'small: 6 nodes': 6 of 6 nodes drawn>"  # what nbval compares
    svg = bundle["image/svg+xml"]
    assert svg.startswith("<?xml") and "<svg" in svg and svg.rstrip().endswith("</svg>")
    for text in ("MatMul", "Softmax", "fc0.weight 6\N{MULTIPLICATION SIGN}4", "[batch,4]", "probs"):
        assert text in svg
    assert picture.svg is svg  # Graphviz ran once


def test_save_writes_svg_png_and_pdf(dot, tmp_path: Path):
    picture = draw(broken_model(), title="broken")
    assert picture.save(tmp_path / "out" / "broken.svg").read_text(encoding="utf-8") == picture.svg
    assert picture.save(tmp_path / "broken.png").read_bytes().startswith(b"\x89PNG")
    assert picture.save(tmp_path / "broken.pdf").read_bytes().startswith(b"%PDF")


def test_rendering_without_dot_says_how_to_install_it(dot, monkeypatch):
    picture = draw(broken_model())
    monkeypatch.setenv("PATH", "")
    with pytest.raises(RuntimeError, match="Graphviz's `dot` program is not installed"):
        _ = picture.svg


def test_netron_serves_a_model_offline_on_localhost(tmp_path: Path):
    url = view_in_netron(mlp([6, 4, 3], name="netron_check"))
    try:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=10) as page:
            assert '<meta name="file" content="/data/netron_check.onnx">' in page.read().decode("utf-8")
        with urllib.request.urlopen(f"{url}/data/netron_check.onnx", timeout=10) as data:
            assert data.read() == mlp([6, 4, 3], name="netron_check").SerializeToString()
    finally:
        stop_netron(url)
    with pytest.raises(FileNotFoundError, match=r"missing\.onnx"):
        view_in_netron(tmp_path / "missing.onnx")
