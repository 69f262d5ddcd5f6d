"""labsupport.maintain.lanes: the kernels of another CPU on this one, from an empty artifacts folder."""

from __future__ import annotations

import sys

import pytest

from labsupport.maintain import lanes


def test_the_generic_lane_exists_on_every_cpu_and_avx2_only_above_it(monkeypatch):
    assert "generic" in [lane.name for lane in lanes.lanes_for_this_cpu()]
    monkeypatch.setattr(lanes, "__cpu_features__", {"AVX512F": False})
    assert [lane.name for lane in lanes.lanes_for_this_cpu()] == ["generic"]
    with pytest.raises(ValueError, match="not one this CPU can host"):
        lanes.lane("avx2")
    monkeypatch.setattr(lanes, "__cpu_features__", {"AVX512F": True})
    assert [lane.name for lane in lanes.lanes_for_this_cpu()] == (["generic", "avx2"] if lanes.X86 else ["generic"])


def test_a_lane_sets_only_what_applies_to_this_machine(monkeypatch):
    monkeypatch.setattr(lanes, "X86", False)
    assert lanes.LANES["generic"].environment().keys() >= {"ATEN_CPU_CAPABILITY", "TF_ENABLE_ONEDNN_OPTS"}
    assert "OPENBLAS_CORETYPE" not in lanes.LANES["generic"].environment()
    monkeypatch.setattr(lanes, "X86", True)
    monkeypatch.setattr(lanes, "__cpu_dispatch__", ["X86_V3", "X86_V4"])
    monkeypatch.setattr(lanes, "__cpu_features__", {"X86_V3": True, "X86_V4": False})
    generic = lanes.LANES["generic"].environment()
    assert generic["ONEDNN_MAX_CPU_ISA"] == "SSE41" and generic["NPY_DISABLE_CPU_FEATURES"] == "X86_V3"  # only what NumPy can turn off here


@pytest.mark.parametrize(("argv", "message"), [(["bogus", "--", "true"], "not one this CPU can host"), (["generic"], "no command to run")])
def test_bad_lanes_and_missing_commands_are_refused(argv, message, capsys):
    assert lanes.main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_command_runs_with_the_lane_and_a_fresh_artifacts_folder(tmp_path, capfd):
    script = "import os; print(os.environ['ATEN_CPU_CAPABILITY'], os.listdir(os.environ['ONNX_LAB_ARTIFACTS']))"
    assert lanes.main(["generic", "--", sys.executable, "-c", script]) == 0
    assert "default []" in capfd.readouterr().out


def test_a_lane_that_does_not_take_effect_is_an_error(monkeypatch):
    monkeypatch.setitem(lanes.LANES, "generic", lanes.Lane("generic", "claims DEFAULT but sets nothing", "DEFAULT"))
    with pytest.raises(RuntimeError, match="PyTorch reports CPU capability"):
        lanes.run_in_lane("generic", ["true"])
