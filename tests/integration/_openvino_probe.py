"""Run under ``qemu-x86_64 -cpu Haswell-v4`` by test_openvino_plugin.py: ORT then reports an Intel CPU and
OpenVINO offers its CPU device. Prints one JSON object: the plugin facts, and the stdout of notebook 05's
OpenVINO cells executed here (the test compares them with the committed outputs)."""

import contextlib
import io
import json
import shutil
import sys
import time
import warnings
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pandas

from labsupport.bench import runtime as runtime_bench
from labsupport.course.data import load_digits
from labsupport.course.display import expect_error
from labsupport.course.paths import artifact
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.onnxutil import plugins, sessions, timing

OPENVINO_CELLS = sys.argv[1].split(",")


def _batch_one_bench() -> SimpleNamespace:
    """runtime_bench with provider_table at batch 1 and 2 timed calls: emulation is far too slow for the notebook's sweep."""
    names = {name: getattr(runtime_bench, name) for name in ("CPU_EP", "CPU_EP_AGAIN", "OPENVINO_EP")}
    return SimpleNamespace(provider_table=lambda *args, **kwargs: runtime_bench.provider_table((1,), repeat=2), **names)


def main() -> None:
    ort.set_default_logger_severity(3)
    model_path = ensure_digits_cnn()
    namespace = {
        "ort": ort,
        "json": json,
        "shutil": shutil,
        "onnx": onnx,
        "np": np,
        "plugins": plugins,
        "sessions": sessions,
        "expect_error": expect_error,
        "display": print,
        "time": time,
        "warnings": warnings,
        "timing": timing,
        "artifact": artifact,
        "pandas": pandas,
        "runtime_bench": _batch_one_bench(),
        "model_path": model_path,
        "session": ort.InferenceSession(model_path, providers=["CPUExecutionProvider"]),
        "batch64": {"image": load_digits().test.images[:64]},
    }
    with open(sys.argv[2], encoding="utf-8") as file:
        notebook = json.load(file)
    sources = {cell["id"]: "".join(cell["source"]) for cell in notebook["cells"]}
    outputs = {}
    for cell_id in OPENVINO_CELLS:
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            exec(compile(sources[cell_id], f"<cell {cell_id}>", "exec"), namespace)
        outputs[cell_id] = captured.getvalue()
    status = namespace["openvino"]
    placed = namespace["placed"]
    facts = {
        "cpu_vendor_id": plugins.cpu_vendor()[1],
        "usable": status.usable,
        "providers_by_policy": namespace["by_policy"].get_providers(),
        "listed": "OpenVINOExecutionProvider" in ort.get_available_providers(),
        "providers_by_name": namespace["by_name"].get_providers(),
        "warnings_by_name": [str(w.message) for w in namespace["by_name_warnings"]],
        "scaler_provider": placed.set_index("node").loc["scaler", "provider"],
        "openvino_nodes": int((placed["provider"] == plugins.OPENVINO).sum()),
        "precision_gaps": namespace["precision_gaps"],
        "context_ops": namespace["context_ops"],
        "device_kinds": [plugins.openvino_device_kind(device) for device in status.devices],
        "cache_dir_option_files": sorted(path.name for path in namespace["ignored_cache"].iterdir()),
        "openvino_cache_files": sorted(path.suffix for path in namespace["openvino_cache"].iterdir()),
        "cache_load_seconds": {label: s for label, s in namespace["load_seconds"].items() if label.startswith("OpenVINO cache")},
        "openvino_bench_models": [row["model"] for row in namespace["provider_rows"] if row["candidate"] == runtime_bench.OPENVINO_EP],
    }
    print(json.dumps({"facts": facts, "outputs": outputs}))


if __name__ == "__main__":
    main()
