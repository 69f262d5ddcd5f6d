"""The OpenVINO plugin path of notebook 05, for real, on an emulated Intel CPU (qemu-user, Haswell).

OpenVINO's plugin offers devices only where ORT reports an Intel CPU, so on AMD machines the notebook
runs without a device; under ``qemu-x86_64 -cpu Haswell-v4`` ORT sees an Intel CPU and the device
appears. Both runs must print the same compared outputs. qemu-user is required in CI (.ci/run installs it).
"""

import json
import platform
import subprocess
import sys

import pytest

from labsupport.course.paths import repo_root

NOTEBOOK = repo_root() / "notebooks" / "05_runtime_and_providers.ipynb"
PROBE = repo_root() / "tests" / "integration" / "_openvino_probe.py"
OPENVINO_CELLS = [
    "5f0a6b02",
    "5f0a6b04",
    "5f0a6b06",
    "5f0a6b17",
    "5f0a6b18",
    "5f0a6b09",
    "5f0a6b0f",
    "5f0a6b0c",
    "5f0a6b15",
    "5f0a6b11",
    "5f0a6b13",
    "5f0a6b0d",
]
BATCH_ONE_ONLY = {"5f0a6b11"}  # the probe times batch 1 only under emulation: this cell's count differs by design

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        sys.platform != "linux" or platform.machine() != "x86_64", reason="qemu-user emulates x86-64 on Linux x86-64 hosts here"
    ),
]


@pytest.fixture(scope="module")
def under_haswell(require_tool):
    qemu = require_tool("qemu-x86_64", "Debian's qemu-user emulates an Intel CPU, the only kind OpenVINO's plugin offers")
    result = subprocess.run(
        [qemu, "-cpu", "Haswell-v4", sys.executable, str(PROBE), ",".join(OPENVINO_CELLS), str(NOTEBOOK)],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=repo_root(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _committed_text(cell) -> str:
    return "".join("".join(output.get("text", "")) for output in cell["outputs"] if output.get("output_type") == "stream")


def test_openvino_offers_a_device_on_an_intel_cpu_and_takes_the_cnn(under_haswell):
    facts = under_haswell["facts"]
    assert facts["cpu_vendor_id"] == 0x8086 and facts["usable"]
    assert facts["providers_by_policy"][0] == "OpenVINOExecutionProvider"
    assert facts["openvino_nodes"] >= 5, "OpenVINO should take the CNN's Conv, Relu, MaxPool, Reshape and Gemm nodes"


def test_asked_for_by_name_openvino_is_listed_yet_silently_not_started(under_haswell):
    facts = under_haswell["facts"]
    assert facts["listed"] and facts["providers_by_name"] == ["CPUExecutionProvider"]
    assert facts["warnings_by_name"] == []


def test_a_node_openvino_lacks_falls_back_to_the_cpu_provider(under_haswell):
    assert under_haswell["facts"]["scaler_provider"] == "CPUExecutionProvider"


def test_the_f32_hint_keeps_float32_parity(under_haswell):
    assert under_haswell["facts"]["precision_gaps"]["f32 hint"] < 1e-4


def test_the_epcontext_export_holds_the_compiled_model(under_haswell):
    assert under_haswell["facts"]["context_ops"] and set(under_haswell["facts"]["context_ops"]) == {"EPContext"}


def test_only_openvinos_cpu_device_is_opened(under_haswell):
    assert under_haswell["facts"]["device_kinds"] == ["CPU"]


def test_openvinos_cache_works_through_load_config_not_the_cache_dir_option(under_haswell):
    facts = under_haswell["facts"]
    assert facts["cache_dir_option_files"] == [], "plugin 1.8.1 ignores the provider option cache_dir"
    assert facts["openvino_cache_files"] == [".blob"]
    assert len(facts["cache_load_seconds"]) == 2


def test_the_raw_call_and_the_helper_both_open_openvino(under_haswell):
    assert set(under_haswell["facts"]["precision_gaps"]) == {"default precision", "f32 hint"}


def test_the_provider_bench_times_openvino_on_every_model(under_haswell):
    assert under_haswell["facts"]["openvino_bench_models"] == ["CNN FP32", "CNN INT8", "wide MLP FP32", "wide MLP INT8"]


def test_compared_cells_print_what_the_committed_notebook_shows(under_haswell):
    cells = {cell["id"]: cell for cell in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    for cell_id in OPENVINO_CELLS:
        if "NBVAL_IGNORE_OUTPUT" in "".join(cells[cell_id]["source"]) or cell_id in BATCH_ONE_ONLY:
            continue
        assert under_haswell["outputs"][cell_id] == _committed_text(cells[cell_id]), cell_id
