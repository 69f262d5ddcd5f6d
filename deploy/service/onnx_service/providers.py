"""Which ONNX Runtime execution provider serves the model: the CPU provider, or OpenVINO's plugin (ONNX_SERVICE_PROVIDER).

OpenVINO comes as a plugin library (PyPI ``onnxruntime-ep-openvino``) registered with ORT's plugin-EP API; it offers a
device only on CPUs it supports (Intel), and where it offers none the service refuses to start instead of quietly
serving on the CPU provider. Its CPU device runs in bf16 where the CPU has AVX-512 BF16 or AMX unless asked for f32,
so the service asks for f32: the answers stay those of the CPU provider to about 1e-5. Only OpenVINO's CPU device is
used (an Intel iGPU or NPU is offered too where the machine has one; the f32 hint does not cover them).
"""

from __future__ import annotations

import json
from typing import Any

PROVIDERS = ("cpu", "openvino")
OPENVINO = "OpenVINOExecutionProvider"
OPENVINO_PACKAGE = "onnxruntime-ep-openvino"
F32_HINT = {"load_config": json.dumps({"CPU": {"INFERENCE_PRECISION_HINT": "f32"}})}


class ProviderError(RuntimeError):
    """The configured provider cannot serve here; the message says why and what to do."""


def _openvino_devices(ort: Any) -> list[Any]:
    try:
        import onnxruntime_ep_openvino
    except ImportError:
        raise ProviderError(
            f"ONNX_SERVICE_PROVIDER=openvino needs the {OPENVINO_PACKAGE} package (pip install {OPENVINO_PACKAGE}; "
            "wheels for Linux and Windows x86-64 only), or ONNX_SERVICE_PROVIDER=cpu"
        ) from None
    try:
        ort.register_execution_provider_library(OPENVINO, onnxruntime_ep_openvino.get_library_path())
    except Exception as error:  # a second registration in one process is refused: the first one stands
        if "already registered" not in str(error):
            raise ProviderError(f"ONNX Runtime could not load the OpenVINO plugin: {error}") from None
    offered = [device for device in ort.get_ep_devices() if device.ep_name == OPENVINO]
    devices = [device for device in offered if dict(device.ep_metadata).get("ov_device") == "CPU"]
    if not devices:
        kinds = ", ".join(sorted({dict(device.ep_metadata).get("ov_device", "?") for device in offered})) or "none"
        raise ProviderError(
            f"the OpenVINO plugin offers no CPU device on this machine (devices offered: {kinds}; it supports Intel CPUs, and "
            f"ONNX Runtime reports CPU vendor {_cpu_vendor(ort)}): serve with ONNX_SERVICE_PROVIDER=cpu here"
        )
    return devices


def _cpu_vendor(ort: Any) -> str:
    cpus = [device.device for device in ort.get_ep_devices() if device.device.type == ort.OrtHardwareDeviceType.CPU]
    return f"0x{cpus[0].vendor_id:04x}" if cpus else "unknown"


def prepare(provider: str, options: Any) -> list[str] | None:
    """Set ``options`` up for ``provider``; returns the ``providers`` argument for InferenceSession (None: the options carry it)."""
    import onnxruntime as ort

    if provider == "cpu":
        return ["CPUExecutionProvider"]
    if provider == "openvino":
        options.add_provider_for_devices(_openvino_devices(ort), F32_HINT)
        return None
    raise ProviderError(f"unknown provider {provider!r}: expected one of {', '.join(PROVIDERS)}")


def check_started(provider: str, session: Any) -> None:
    """Raise ProviderError unless the session really runs on ``provider`` (ORT falls back to the CPU in silence)."""
    if provider == "openvino" and session.get_providers()[0] != OPENVINO:
        raise ProviderError(
            f"the session did not start OpenVINO (it runs on {session.get_providers()}): serve with ONNX_SERVICE_PROVIDER=cpu"
        )
