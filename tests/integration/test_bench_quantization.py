"""The quantization benchmark suite (python -m labsupport.bench quantization), run small and fast."""

from __future__ import annotations

import json

import pytest

from labsupport.bench import quantization as quantization_bench
from labsupport.bench.__main__ import SUITES
from labsupport.bench.__main__ import main as bench_main
from labsupport.models import wide_mlp
from labsupport.topics.quantization import AA_NAME


@pytest.fixture()
def small_mlp(tmp_path, monkeypatch):
    """Replace the 17 MB MLP by a narrow one so that the suite runs in seconds."""
    path = wide_mlp.export_wide_mlp(wide_mlp.train_wide_mlp(epochs=2, width=256), tmp_path / "mlp.onnx")
    monkeypatch.setattr(quantization_bench, "ensure_digits_mlp", lambda: path)

    def tmp_artifact(name):  # keep the real artifacts/bench_quantization.json untouched: write under tmp_path
        target = tmp_path / "artifacts" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    monkeypatch.setattr(quantization_bench, "artifact", tmp_artifact)
    return tmp_path / "artifacts"


def test_suite_is_registered():
    assert SUITES["quantization"] == "labsupport.bench.quantization"


def test_suite_prints_ratios_checks_targets_and_writes_json(small_mlp, capsys):
    status = bench_main(["quantization", "--repeat", "2"])
    out = capsys.readouterr().out
    assert "=== benchmark suite: quantization" in out
    for needle in (
        "CPU architecture",
        "size/FP32",
        "CPU/FP32 b64",
        "wall/FP32 b64",
        "measured under: other programs used",
        "INT8 dynamic",
        "INT8 static",
        "INT4 weights",
        "Targets:",
        "timing noise (A/A",
        "1 test image = 0.185 points",
        "No INT4 row for the CNN",
        "wrote bench_quantization.json",
    ):
        assert needle in out, needle
    payload = json.loads((small_mlp / "bench_quantization.json").read_text())
    mlp, cnn = payload["models"]
    assert mlp["model"].startswith("wide MLP") and cnn["model"] == "digits CNN"
    ratios = payload["ratios"][mlp["model"]]
    assert set(ratios) == {"INT8 dynamic", "INT8 static", "INT4 weights", "FP16", AA_NAME}
    assert "INT4 weights" not in payload["ratios"][cnn["model"]]  # the CNN has no MatMul: INT4 would be FP32 again
    assert ratios[AA_NAME]["size"] == 1.0 and ratios[AA_NAME]["accuracy_delta_points"] == 0.0
    assert 0.2 < ratios["INT8 dynamic"]["size"] < 0.4  # int8 weights: about a quarter of fp32
    assert ratios["INT4 weights"]["size"] < ratios["INT8 dynamic"]["size"]
    targets = payload["targets"]
    assert len(targets) == 7 and all({"model", "what", "value", "limit", "met"} <= set(t) for t in targets)
    size_and_accuracy_met = all(t["met"] for t in targets if "CPU-time" not in t["what"])
    assert status == (0 if size_and_accuracy_met else 1)
    assert out.count("MET") + out.count("MISSED") == 7


def test_suite_rejects_unknown_options():
    with pytest.raises(SystemExit):
        quantization_bench.main(["--repeats", "2"])
