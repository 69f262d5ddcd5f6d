"""labsupport.onnxutil.plugins on any CPU: registration, the reason when OpenVINO offers no device, placement tables."""

from types import SimpleNamespace

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from labsupport.onnxutil import plugins
from labsupport.onnxutil.sessions import CPU, ProviderMismatch


def _relu_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="only_relu")],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_registering_twice_is_harmless_and_the_status_explains_a_missing_device():
    first, second = plugins.register_openvino(), plugins.register_openvino()
    assert first.registered == second.registered and len(first.devices) == len(second.devices)
    if not first.usable:
        assert first.reason and "no device here" in str(first)


def test_the_reason_names_the_vendor_ort_reports(monkeypatch):
    monkeypatch.setattr(plugins, "cpu_vendor", lambda: ("AMD", 0x1022))
    assert "AMD (0x1022)" in plugins.why_no_device() and "0x8086" in plugins.why_no_device()
    monkeypatch.setattr(plugins, "cpu_vendor", lambda: ("Intel", 0x8086))
    assert "version" in plugins.why_no_device()


def test_a_missing_package_is_reported_not_raised(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_plugin(name, *args, **kwargs):
        if name == "onnxruntime_ep_openvino":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_plugin)
    status = plugins.register_openvino()
    assert not status.registered and not status.usable and "pip install" in status.reason


def test_no_devices_is_a_clear_error():
    with pytest.raises(ValueError, match="OrtEpDevice"):
        plugins.session_on_devices(_relu_model(), [])


def test_device_table_lists_the_cpu_provider():
    table = plugins.device_table()
    assert CPU in set(table["provider"]) and table["vendor id"].str.startswith("0x").all()


def test_a_policy_session_records_the_assignment_and_the_check_catches_a_fallback():
    session = plugins.session_by_policy(_relu_model(), ort.OrtExecutionProviderDevicePolicy.PREFER_CPU)
    placed = plugins.assignment(session)
    assert list(placed["node"]) == ["only_relu"] and set(placed["provider"]) <= {CPU, plugins.OPENVINO}
    ran_on = placed["provider"].iloc[0]
    assert plugins.assert_runs_on(session, ran_on) is not None
    with pytest.raises(ProviderMismatch, match="gave every node to"):
        plugins.assert_runs_on(session, "CUDAExecutionProvider")


def test_device_name_falls_back_to_vendor_and_type():
    device = SimpleNamespace(ep_metadata={}, device=SimpleNamespace(vendor="AMD", type=SimpleNamespace(name="CPU")))
    assert plugins.device_name(device) == "AMD CPU"


def _ov_device(kind: str):
    return SimpleNamespace(ep_name=plugins.OPENVINO, ep_metadata={"ov_device": kind}, device=SimpleNamespace(vendor="Intel"))


def test_only_openvinos_cpu_device_is_kept(monkeypatch):
    monkeypatch.setattr(plugins, "ep_devices", lambda provider: [_ov_device("GPU"), _ov_device("CPU"), _ov_device("NPU")])
    status = plugins.register_openvino()
    assert status.registered and [plugins.openvino_device_kind(device) for device in status.devices] == ["CPU"]


def test_without_a_cpu_device_the_reason_names_the_devices_offered(monkeypatch):
    monkeypatch.setattr(plugins, "ep_devices", lambda provider: [_ov_device("NPU"), _ov_device("GPU")])
    status = plugins.register_openvino()
    assert not status.usable and status.reason == "OpenVINO offers GPU, NPU but not its CPU device, the only one the course opens"
