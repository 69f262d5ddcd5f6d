"""A second ONNX Runtime kernel path on one machine, to prove that committed outputs do not depend on the CPU.

ONNX Runtime picks CPU kernels by instruction set: an AVX2 CPU multiplies U8xS8 with VPMADDUBSW
(which saturates), a CPU with VNNI does not; float convolutions run in the NCHWc layout or not.
So a notebook output that prints such a number passes on one CPU and fails on another.

With ``ONNX_LAB_KERNELS=<variant>`` in the environment, ``import labsupport`` makes every
``onnxruntime.InferenceSession`` open with that variant's options. ``make portability`` executes
the CPU-sensitive notebooks under each variant with nbval, and ``make test`` under ``reference``,
so a compared output that depends on the kernels fails on any machine (notebook 06 teaches why).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import onnxruntime as ort

ENV_VARIABLE = "ONNX_LAB_KERNELS"

U8U8 = {"session.x64quantprecision": "1"}  # U8U8 integer GEMM: exact, as on VNNI CPUs (x86 only)
QDQ_AS_FLOAT = {"session.disable_quant_qdq": "1"}  # QDQ nodes run as DequantizeLinear -> float op -> QuantizeLinear


@dataclass(frozen=True)
class KernelVariant:
    """Session settings that route ONNX Runtime to other CPU kernels than its default choice."""

    name: str
    description: str
    config: dict[str, str]
    no_layout_transform: bool = False

    def apply(self, options: ort.SessionOptions) -> ort.SessionOptions:
        """Add this variant's settings to ``options`` (a default ORT_ENABLE_ALL level drops to EXTENDED)."""
        for key, value in self.config.items():
            options.add_session_config_entry(key, value)
        if self.no_layout_transform and options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        return options


VARIANTS = {
    variant.name: variant
    for variant in (
        KernelVariant("u8u8", "integer products in the non-saturating U8U8 kernel (what a VNNI CPU computes)", U8U8),
        KernelVariant("qdq-float", "quantized QDQ models without fused integer kernels (float reference math)", QDQ_AS_FLOAT),
        KernelVariant("no-layout", "float convolutions without the NCHWc layout (other float kernels)", {}, no_layout_transform=True),
        KernelVariant("reference", "all three at once", {**U8U8, **QDQ_AS_FLOAT}, no_layout_transform=True),
    )
}


def variant(name: str) -> KernelVariant:
    """The kernel variant called ``name``; a clear error lists the known ones."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"{ENV_VARIABLE}={name!r} is not a kernel variant; expected one of {sorted(VARIANTS)}") from None


def install(name: str) -> KernelVariant:
    """Make every InferenceSession opened from now on in this process use the variant ``name``."""
    chosen = variant(name)
    init = getattr(ort.InferenceSession.__init__, "__wrapped__", ort.InferenceSession.__init__)

    @functools.wraps(init)
    def init_with_variant(self, path_or_bytes, sess_options=None, *args, **kwargs):
        init(self, path_or_bytes, chosen.apply(sess_options or ort.SessionOptions()), *args, **kwargs)

    ort.InferenceSession.__init__ = init_with_variant
    return chosen


def install_from_environment() -> KernelVariant | None:
    """``install`` the variant named by ``ONNX_LAB_KERNELS``, if it is set (called by ``import labsupport``)."""
    name = os.environ.get(ENV_VARIABLE, "").strip()
    return install(name) if name else None
