"""The service with ONNX_SERVICE_PROVIDER=openvino: a clear start-up error where OpenVINO cannot serve, and real
answers over HTTP on an emulated Intel CPU (qemu-user, Haswell), the only kind of CPU the plugin offers a device on."""

import platform
import sys
from types import SimpleNamespace

import httpx
import numpy as np
import pytest

from labsupport.course.data import load_digits
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.onnxutil.sessions import open_session
from labsupport.topics import serving
from onnx_service import config, model, providers


def test_a_missing_plugin_package_stops_start_up_with_the_package_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime_ep_openvino", None)  # what import finds when it is not installed
    with pytest.raises(model.ModelError, match="needs the onnxruntime-ep-openvino package"):
        model.load_served_model(ensure_digits_cnn(), provider="openvino")


def test_an_unknown_provider_is_a_configuration_error():
    with pytest.raises(config.ConfigError, match="ONNX_SERVICE_PROVIDER='cuda': expected cpu or openvino"):
        config.Settings.from_env({"ONNX_SERVICE_PROVIDER": "cuda"})


class _FakeOrt:
    """Just enough of onnxruntime for providers._openvino_devices: OpenVINO offers the given device kinds."""

    class OrtHardwareDeviceType:
        CPU = "cpu"

    def __init__(self, kinds):
        host = SimpleNamespace(type="cpu", vendor_id=0x8086)
        self.devices = [SimpleNamespace(ep_name=providers.OPENVINO, ep_metadata={"ov_device": kind}, device=host) for kind in kinds]

    def register_execution_provider_library(self, name, path):
        pass

    def get_ep_devices(self):
        return self.devices


def test_only_openvinos_cpu_device_serves_and_a_gpu_alone_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime_ep_openvino", SimpleNamespace(get_library_path=lambda: "libopenvino_ep.so"))
    chosen = providers._openvino_devices(_FakeOrt(["GPU", "CPU", "NPU"]))
    assert [dict(device.ep_metadata)["ov_device"] for device in chosen] == ["CPU"]  # the f32 hint covers the CPU device only
    with pytest.raises(providers.ProviderError, match=r"offers no CPU device .*devices offered: GPU, NPU.*0x8086"):
        providers._openvino_devices(_FakeOrt(["NPU", "GPU"]))


def test_the_cpu_provider_is_what_ready_reports_by_default():
    assert model.load_served_model(ensure_digits_cnn()).describe()["providers"] == ["CPUExecutionProvider"]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64", reason="qemu-user emulates x86-64 on Linux x86-64 here")
def test_the_service_answers_over_http_with_openvino_on_an_intel_cpu(require_tool):
    qemu = require_tool("qemu-x86_64", "Debian's qemu-user emulates an Intel CPU, the only kind OpenVINO's plugin offers")
    images = load_digits().test.images[:60]
    cnn = open_session(ensure_digits_cnn())
    expected = cnn.run(None, {cnn.get_inputs()[0].name: images})[0].argmax(axis=1)
    service = serving.start(ensure_digits_cnn(), provider="openvino", launcher=[qemu, "-cpu", "Haswell-v4"], ready_timeout=600)
    try:
        with httpx.Client(base_url=service.url, timeout=120) as client:
            assert client.get("/ready").json()["model"]["providers"][0] == "OpenVINOExecutionProvider"
            answer = client.post("/predict", json=serving.payload(images))
        assert answer.status_code == 200, answer.text
        predictions = np.array(answer.json()["predictions"])
        assert (predictions == expected).mean() >= 59 / 60  # f32 on both: logits within ~1e-5, a near tie at most may flip
    finally:
        service.stop()
