import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from labsupport.course import kernels
from labsupport.models.contract import IR_VERSION, OPSET


@pytest.fixture
def restore_session_init(monkeypatch):
    """Each test may install a variant; the original InferenceSession.__init__ comes back afterwards."""
    monkeypatch.setattr(ort.InferenceSession, "__init__", ort.InferenceSession.__init__)


def _relu_model() -> bytes:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION).SerializeToString()


def _open(options=None) -> ort.InferenceSession:
    return ort.InferenceSession(_relu_model(), options, providers=["CPUExecutionProvider"])


def test_reference_variant_reaches_every_session(restore_session_init):
    kernels.install("reference")
    options = _open().get_session_options()
    assert options.get_session_config_entry("session.x64quantprecision") == "1"
    assert options.get_session_config_entry("session.disable_quant_qdq") == "1"
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert np.array_equal(_open().run(None, {"x": np.array([-1, 2], np.float32)})[0], [0, 2])


def test_explicit_levels_are_kept(restore_session_init):
    kernels.install("no-layout")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert _open(options).get_session_options().graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def test_installing_twice_wraps_once(restore_session_init):
    kernels.install("u8u8")
    kernels.install("qdq-float")
    options = _open().get_session_options()
    assert options.get_session_config_entry("session.disable_quant_qdq") == "1"
    with pytest.raises(RuntimeError):  # the u8u8 entry of the first install is gone: no double wrapping
        options.get_session_config_entry("session.x64quantprecision")


def test_unknown_variant_names_the_known_ones(monkeypatch):
    monkeypatch.setenv(kernels.ENV_VARIABLE, "fast")
    with pytest.raises(ValueError, match=r"ONNX_LAB_KERNELS='fast' is not a kernel variant; expected one of \['no-layout'"):
        kernels.install_from_environment()


def test_no_variant_without_the_variable(monkeypatch):
    monkeypatch.delenv(kernels.ENV_VARIABLE, raising=False)
    assert kernels.install_from_environment() is None
    assert not hasattr(ort.InferenceSession.__init__, "__wrapped__")
