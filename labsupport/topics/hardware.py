"""Which INT8-relevant instruction sets this CPU has, and what that means for ONNX Runtime's integer kernels.

Introduced in notebook 06 (section 6: why INT8 results depend on the CPU), also printed by
``python -m labsupport.bench quantization``. ``cpu_features()`` reads Linux's /proc/cpuinfo or
macOS's sysctl; ``parse_cpuinfo`` is the pure part, testable with any CPU's text.
"""

from __future__ import annotations

import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

X86_FEATURES = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")
ARM_FEATURES = ("asimd", "asimddp", "i8mm", "bf16", "sve", "fphp")
ARM_NAMES = ("aarch64", "arm64")
VNNI_FEATURES = ("avx512_vnni", "avx_vnni", "amx_int8")  # x86: u8 x s8 products added straight into int32
DOT_PRODUCT_FEATURES = (*VNNI_FEATURES, "asimddp", "i8mm")
MACOS_ARM_KEYS = {
    "asimddp": "hw.optional.arm.FEAT_DotProd",
    "i8mm": "hw.optional.arm.FEAT_I8MM",
    "bf16": "hw.optional.arm.FEAT_BF16",
    "fphp": "hw.optional.arm.FEAT_FP16",
}


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU's architecture and which INT8-relevant instruction sets it reports (notebook 06)."""

    arch: str
    source: str
    features: dict[str, bool]

    def _has_any(self, names: tuple[str, ...]) -> bool:
        return any(self.features.get(name, False) for name in names)

    @property
    def int8_dot_product(self) -> bool:
        """True when the CPU has a fast INT8 dot-product instruction (VNNI, AMX, Arm dotprod/i8mm)."""
        return self._has_any(DOT_PRODUCT_FEATURES)

    @property
    def is_arm(self) -> bool:
        """True on 64-bit Arm (Apple silicon included)."""
        return self.arch.lower() in ARM_NAMES

    @property
    def u8s8_saturates(self) -> bool:
        """True on x86 with AVX2 but no VNNI: ORT's U8xS8 kernels add product pairs into int16 with saturation (VPMADDUBSW)."""
        return not self.is_arm and self.features.get("avx2", False) and not self._has_any(VNNI_FEATURES)

    def __str__(self) -> str:
        found = [name for name, present in self.features.items() if present]
        lines = [f"CPU architecture: {self.arch} (read from {self.source})", f"INT8-relevant features: {', '.join(found) or 'none found'}"]
        if self.int8_dot_product:
            lines.append("This CPU has INT8 dot-product instructions: INT8 MatMul/Conv kernels can beat FP32 clearly.")
        else:
            lines.append("No INT8 dot-product instructions found: INT8 mainly saves memory here; speed-ups are small or absent.")
        if self.u8s8_saturates:
            lines.append("x86 without VNNI: ORT's U8xS8 kernels add pairs of products into int16 with saturation (AVX2 VPMADDUBSW).")
        elif self.is_arm or self.int8_dot_product:
            lines.append("ORT's INT8 kernels accumulate exactly in int32 here (VNNI or Arm integer instructions): no saturation.")
        return "\n".join(lines)


def parse_cpuinfo(text: str, arch: str | None = None) -> CpuFeatures:
    """INT8-relevant features from the text of /proc/cpuinfo (x86 ``flags`` or Arm ``Features`` lines); notebook 06."""
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    arch = arch or platform.machine() or "unknown"
    is_arm = arch.lower() in ARM_NAMES or ("asimd" in flags and "sse" not in flags)
    names = ARM_FEATURES if is_arm else X86_FEATURES
    return CpuFeatures(arch, "/proc/cpuinfo", {name: name in flags for name in names})


def _sysctl(name: str) -> str:
    try:
        return subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _macos_features(arch: str) -> CpuFeatures:
    if arch == "arm64":
        return CpuFeatures(arch, "sysctl", {name: _sysctl(key) == "1" for name, key in MACOS_ARM_KEYS.items()})
    flags = (_sysctl("machdep.cpu.features") + " " + _sysctl("machdep.cpu.leaf7_features")).lower().replace(".", "_").split()
    return CpuFeatures(arch, "sysctl", {name: name in flags for name in X86_FEATURES})


def cpu_features() -> CpuFeatures:
    """Which INT8-relevant instruction sets this CPU has (Linux /proc/cpuinfo, macOS sysctl, else unknown); notebook 06."""
    arch = platform.machine() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        return parse_cpuinfo(cpuinfo.read_text(encoding="utf-8", errors="replace"), arch)
    if platform.system() == "Darwin":
        return _macos_features(arch)
    return CpuFeatures(arch, f"nothing readable on {platform.system() or 'this OS'}", {})
