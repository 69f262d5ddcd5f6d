"""Plugin execution providers (ORT 1.22+): register OpenVINO's library, list its devices, open sessions on them, see placement."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import onnxruntime as ort
import pandas as pd

from labsupport.onnxutil.sessions import CPU, ProviderMismatch

OPENVINO = "OpenVINOExecutionProvider"
OPENVINO_PACKAGE = "onnxruntime-ep-openvino"
INTEL = 0x8086
RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"
# OpenVINO's CPU plugin runs in bf16 where the CPU has AVX-512 BF16 or AMX unless told otherwise; the hint
# configures OpenVINO's CPU device only, the one device the course opens (see register_openvino)
F32_HINT = {"load_config": json.dumps({"CPU": {"INFERENCE_PRECISION_HINT": "f32"}})}
OPENVINO_CPU = "CPU"  # ep_metadata["ov_device"] of OpenVINO's CPU device (others: "GPU", "NPU")


@dataclass(frozen=True)
class PluginStatus:
    """Whether a plugin EP is registered and which devices it offers here; ``reason`` says why there are none."""

    provider: str
    registered: bool
    devices: tuple = field(default=(), repr=False)
    reason: str = ""

    @property
    def usable(self) -> bool:
        return bool(self.devices)

    def __str__(self) -> str:
        if self.usable:
            names = ", ".join(device_name(device) for device in self.devices)
            return f"{self.provider}: registered, {len(self.devices)} device(s): {names}"
        state = "registered" if self.registered else "not registered"
        return f"{self.provider}: {state}, no device here: {self.reason}"


def register_openvino() -> PluginStatus:
    """Register the OpenVINO plugin library with ORT (once per process) and report its CPU device, if it offers one.

    Only the CPU device is kept (``ep_metadata["ov_device"] == "CPU"``): an Intel iGPU or NPU would run in its own
    default precision, which ``F32_HINT`` does not set, and the lessons compare OpenVINO with the CPU provider.
    """
    try:
        import onnxruntime_ep_openvino
    except ImportError:
        reason = f"{OPENVINO_PACKAGE} is not installed (wheels for Linux and Windows x86-64 only); pip install -r requirements.txt"
        return PluginStatus(OPENVINO, registered=False, reason=reason)
    try:
        ort.register_execution_provider_library(OPENVINO, onnxruntime_ep_openvino.get_library_path())
    except Exception as error:  # ORT refuses a second registration under one name: that one is in place
        if "already registered" not in str(error):
            raise
    devices = tuple(device for device in ep_devices(OPENVINO) if openvino_device_kind(device) == OPENVINO_CPU)
    return PluginStatus(OPENVINO, registered=True, devices=devices, reason="" if devices else why_no_device())


def openvino_device_kind(device: ort.OrtEpDevice) -> str:
    """OpenVINO's own name for the device of an EP-device pair ("CPU", "GPU", "NPU"), from its ``ov_device`` metadata."""
    return dict(device.ep_metadata).get("ov_device", "")


def ep_devices(provider: str) -> list[ort.OrtEpDevice]:
    """The (EP, device) pairs ORT offers for ``provider`` (exact name: OpenVINO's ``.AUTO`` variant is another entry)."""
    return [device for device in ort.get_ep_devices() if device.ep_name == provider]


def device_name(device: ort.OrtEpDevice) -> str:
    metadata = dict(device.ep_metadata)
    return metadata.get("FULL_DEVICE_NAME") or f"{device.device.vendor} {device.device.type.name}"


def cpu_vendor() -> tuple[str, int]:
    """The CPU's vendor name and PCI vendor id as ORT reports them (0x8086 Intel, 0x1022 AMD)."""
    cpu = next(device.device for device in ort.get_ep_devices() if device.ep_name == CPU)
    return cpu.vendor, cpu.vendor_id


def why_no_device() -> str:
    others = sorted({openvino_device_kind(device) for device in ep_devices(OPENVINO)})
    if others:
        return f"OpenVINO offers {', '.join(others)} but not its CPU device, the only one the course opens"
    vendor, vendor_id = cpu_vendor()
    if vendor_id == INTEL:
        return "ORT reports an Intel CPU, yet OpenVINO offered no device: check the plugin's version against onnxruntime's"
    return (
        f"the plugin offers Intel devices only (vendor id 0x{INTEL:04x}) and ORT reports this CPU as {vendor} "
        f"(0x{vendor_id:04x}); run this part on an Intel CPU, or keep the CPU provider"
    )


def device_table() -> pd.DataFrame:
    """One row per (EP, device) pair ORT offers: provider, device type, vendor and id, the device's own name."""
    rows = [
        {
            "provider": device.ep_name,
            "device": device.device.type.name,
            "vendor": device.device.vendor,
            "vendor id": f"0x{device.device.vendor_id:04x}",
            "name": dict(device.ep_metadata).get("FULL_DEVICE_NAME", ""),
        }
        for device in ort.get_ep_devices()
    ]
    return pd.DataFrame(rows, columns=["provider", "device", "vendor", "vendor id", "name"])


def _recording(options: ort.SessionOptions | None) -> ort.SessionOptions:
    options = options or ort.SessionOptions()
    options.add_session_config_entry(RECORD_ASSIGNMENT, "1")
    return options


def session_on_devices(
    model: str | Path | bytes,
    devices: list[ort.OrtEpDevice],
    provider_options: dict[str, str] | None = None,
    options: ort.SessionOptions | None = None,
) -> ort.InferenceSession:
    """A session on explicit EP devices (``add_provider_for_devices``), recording which EP got each node.

    ``options``, when given, is changed in place (devices and the recording entry added): pass a fresh one per session.
    """
    if not devices:
        raise ValueError("expected one or more OrtEpDevice (from ort.get_ep_devices()); got none: see register_openvino().reason")
    options = _recording(options)
    options.add_provider_for_devices(list(devices), dict(provider_options or {}))
    return ort.InferenceSession(_model_source(model), sess_options=options)


def session_by_policy(
    model: str | Path | bytes, policy: ort.OrtExecutionProviderDevicePolicy, options: ort.SessionOptions | None = None
) -> ort.InferenceSession:
    """A session whose providers ORT picks from the registered devices by ``policy`` (PREFER_CPU, PREFER_GPU, ...).

    ``options``, when given, is changed in place (policy and the recording entry added): pass a fresh one per session.
    """
    options = _recording(options)
    options.set_provider_selection_policy(policy)
    return ort.InferenceSession(_model_source(model), sess_options=options)


def _model_source(model: str | Path | bytes) -> str | bytes:
    return model if isinstance(model, bytes) else str(model)


def assignment(session: ort.InferenceSession) -> pd.DataFrame:
    """Which provider got each node (provider, node, op type), from ``get_provider_graph_assignment_info()``."""
    rows = [
        {"provider": subgraph.ep_name, "node": node.name, "op type": node.op_type}
        for subgraph in session.get_provider_graph_assignment_info()
        for node in subgraph.get_nodes()
    ]
    return pd.DataFrame(rows, columns=["provider", "node", "op type"])


def assert_runs_on(session: ort.InferenceSession, provider: str) -> pd.DataFrame:
    """Raise ProviderMismatch unless ``provider`` really got nodes of ``session``; return the assignment table."""
    placed = assignment(session)
    if not (placed["provider"] == provider).any():
        raise ProviderMismatch(
            f"expected nodes on {provider}, but the session lists {session.get_providers()} "
            f"and gave every node to {sorted(set(placed['provider']))}"
        )
    return placed
