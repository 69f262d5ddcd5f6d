"""deploy/custom_op/softcap_op.cc (notebook 10, section 7) compiles against ONNX Runtime's headers and runs in ORT.

The headers come from ``python -m labsupport.maintain.ort_headers`` (``make test`` fetches them): fail in CI, skip elsewhere.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

from labsupport.course.paths import repo_root
from labsupport.topics import custom_ops

SOURCE = repo_root() / "deploy" / "custom_op" / "softcap_op.cc"


@pytest.fixture(scope="module")
def library(tmp_path_factory, require_tool, prerequisite):
    require_tool("g++", "the custom-op library is C++ (install g++)")
    prerequisite(custom_ops.find_ort_headers() is not None, f"ONNX Runtime's headers are missing: run `{custom_ops.FETCH_COMMAND}`")
    return custom_ops.build_custom_op_library(SOURCE, tmp_path_factory.mktemp("lib") / "libsoftcap.so")


def _softcap_model(**attributes):
    node = helper.make_node("SoftCap", ["x"], ["y"], domain="course.custom", **attributes)
    graph = helper.make_graph(
        [node],
        "softcap",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("course.custom", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


# ONNX Runtime keeps a registered library's domain for the rest of the process, and every model the process saves
# afterwards imports it (a quantized model built later in the same pytest process grew a `course.custom` opset): the
# library is registered in a child interpreter only.
_CHILD = (
    "import json, sys\n"
    "import numpy as np, onnxruntime as ort\n"
    "x, answers = np.load(sys.argv[2]), []\n"
    "for model in sys.argv[3:]:  # one session per model, all in this one process\n"
    "    options = ort.SessionOptions()\n"
    "    options.register_custom_ops_library(sys.argv[1])\n"
    "    try:\n"
    "        session = ort.InferenceSession(model, options, providers=['CPUExecutionProvider'])\n"
    "    except Exception as error:\n"
    "        answers.append({'error': str(error)})\n"
    "        continue\n"
    "    answers.append({'y': session.run(None, {'x': x})[0].tolist()})\n"
    "print(json.dumps(answers))\n"
)


def _run_in_a_child(library, models: list[bytes], x: np.ndarray, folder) -> list[dict]:
    """Each model's output on ``x`` (or its session's error), from sessions that register ``library`` in one child process."""
    np.save(folder / "x.npy", x)
    paths = []
    for index, model in enumerate(models):
        paths.append(folder / f"model_{index}.onnx")
        paths[-1].write_bytes(model)
    command = [sys.executable, "-c", _CHILD, str(library), str(folder / "x.npy"), *map(str, paths)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


X = np.array([[-1e3, -2.0, 0.0], [0.5, 7.0, 40.0]], np.float32)


def test_library_computes_softcap_in_two_sessions_of_one_process(library, tmp_path):
    caps = (5.0, 2.0)  # a second registration in the same process, with another attribute value
    answers = _run_in_a_child(library, [_softcap_model(cap=cap) for cap in caps], X, tmp_path)
    for cap, answer in zip(caps, answers, strict=True):
        np.testing.assert_allclose(np.array(answer["y"], np.float32), cap * np.tanh(X / cap), rtol=1e-6, atol=1e-6)


def test_missing_attribute_is_an_error_at_session_creation(library, tmp_path):
    (answer,) = _run_in_a_child(library, [_softcap_model()], X, tmp_path)
    assert "cap" in answer.get("error", ""), answer


def test_missing_headers_name_the_fetch_command(monkeypatch, tmp_path):
    monkeypatch.setattr(custom_ops, "find_ort_headers", lambda: None)
    with pytest.raises(FileNotFoundError, match=r"labsupport\.maintain\.ort_headers"):
        custom_ops.build_custom_op_library(SOURCE, tmp_path / "lib.so")


def test_compile_error_is_reported_with_the_compiler_message(library, tmp_path):
    broken = tmp_path / "broken.cc"
    broken.write_text("int main( {\n")
    with pytest.raises(RuntimeError, match=r"compiling broken\.cc failed"):
        custom_ops.build_custom_op_library(broken, tmp_path / "broken.so")


def test_library_built_with_newer_headers_fails_registration_with_an_error_not_a_crash(library, tmp_path):
    # Ort::InitApi(NULL) would segfault: the library must turn GetApi's NULL into a status (run in a child process)
    headers = tmp_path / "include"
    shutil.copytree(custom_ops.find_ort_headers(), headers)
    c_api = headers / "onnxruntime_c_api.h"
    newer = custom_ops.runtime_api_version() + 1
    c_api.write_text(re.sub(r"(?m)^#define ORT_API_VERSION \d+$", f"#define ORT_API_VERSION {newer}", c_api.read_text()))
    built = tmp_path / "libnewer.so"
    subprocess.run(custom_ops.compile_command(SOURCE, built, headers), check=True, capture_output=True)
    register = f"import onnxruntime as ort; ort.SessionOptions().register_custom_ops_library({str(built)!r})"
    done = subprocess.run([sys.executable, "-c", register], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, f"exit code {done.returncode}: {done.stderr[-500:]}"
    assert f"C API version {newer}, newer than this runtime" in done.stderr
