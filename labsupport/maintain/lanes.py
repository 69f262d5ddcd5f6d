"""Other CPUs on this one: run a command with the kernels PyTorch, TensorFlow, MKL, OpenBLAS and NumPy pick elsewhere.

These libraries choose vectorised kernels by instruction set when they load, so a model trained on an
Intel CPU with AVX-512 ends with weights that differ in the sixth digit from one trained on an AMD CPU
with AVX2, and any digit printed from them can flip at a rounding boundary. ONNX Runtime's own kernels
are varied by ``labsupport.course.kernels``; a lane varies the others with each library's documented switch:

- ``ATEN_CPU_CAPABILITY``: PyTorch's own vectorised kernels (``default`` = no SIMD, ``avx2``);
- ``ONEDNN_MAX_CPU_ISA``: the highest instruction set oneDNN uses (convolutions in PyTorch and TensorFlow);
- ``TF_ENABLE_ONEDNN_OPTS=0``: TensorFlow's Eigen kernels instead of oneDNN's;
- ``MKL_CBWR=COMPATIBLE``: MKL's most conservative code branch (PyTorch's matrix products);
- ``OPENBLAS_CORETYPE``: OpenBLAS's kernels (NumPy and SciPy, hence scikit-learn);
- ``NPY_DISABLE_CPU_FEATURES``: NumPy's own dispatched loops.

Each lane starts from an empty artifacts folder ($ONNX_LAB_ARTIFACTS), so every course model is trained
again with the lane's kernels. ``make test`` runs notebooks 02, 06 and 09 in the ``generic`` lane;
``make portability`` runs every notebook in each lane this CPU can host::

    python -m labsupport.maintain.lanes --list
    python -m labsupport.maintain.lanes generic -- python -m pytest notebooks/02_from_pytorch.ipynb
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

from labsupport.course.paths import ARTIFACTS_ENV_VAR

X86 = platform.machine().lower() in {"x86_64", "amd64"}


@dataclass(frozen=True)
class Lane:
    """Environment variables that make the frameworks pick the kernels of another CPU, and how to verify them."""

    name: str
    description: str
    torch_capability: str  # what torch.backends.cpu.get_cpu_capability() must report in the lane
    x86_variables: dict[str, str] = field(default_factory=dict)
    any_cpu_variables: dict[str, str] = field(default_factory=dict)
    numpy_features_off: tuple[str, ...] = ()

    def environment(self) -> dict[str, str]:
        """The variables this lane sets on this machine (the x86-only ones only on x86)."""
        variables = dict(self.any_cpu_variables)
        if X86:
            variables |= self.x86_variables
        disabled = [feature for feature in self.numpy_features_off if feature in __cpu_dispatch__ and __cpu_features__.get(feature)]
        if disabled:
            variables["NPY_DISABLE_CPU_FEATURES"] = ",".join(disabled)
        return variables


LANES = {
    lane.name: lane
    for lane in (
        Lane(
            "generic",
            "no SIMD in PyTorch, SSE4.1 in oneDNN, TensorFlow without oneDNN, MKL's compatible branch, OpenBLAS for Nehalem",
            "DEFAULT",
            x86_variables={"ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_CBWR": "COMPATIBLE", "OPENBLAS_CORETYPE": "Nehalem"},
            any_cpu_variables={"ATEN_CPU_CAPABILITY": "default", "TF_ENABLE_ONEDNN_OPTS": "0"},
            numpy_features_off=("X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"),
        ),
        Lane(
            "avx2",
            "what a CPU with AVX2 and no AVX-512 runs (hosted only by a CPU with AVX-512)",
            "AVX2",
            x86_variables={"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell"},
            numpy_features_off=("X86_V4", "AVX512_ICL", "AVX512_SPR"),
        ),
    )
}


def lanes_for_this_cpu() -> list[Lane]:
    """The lanes whose kernels differ from this CPU's own choice (``avx2`` only where the CPU has AVX-512)."""
    return [lane for lane in LANES.values() if lane.name != "avx2" or (X86 and __cpu_features__.get("AVX512F", False))]


def lane(name: str) -> Lane:
    """The lane called ``name``; a clear error lists those this CPU can host."""
    hosted = {candidate.name: candidate for candidate in lanes_for_this_cpu()}
    if name not in hosted:
        raise ValueError(f"lane {name!r} is not one this CPU can host; expected one of {sorted(hosted)}")
    return hosted[name]


_PROBE = """
import torch
from numpy._core._multiarray_umath import __cpu_features__
print(torch.backends.cpu.get_cpu_capability())
print(",".join(sorted(name for name, on in __cpu_features__.items() if on)))
"""


def verify(chosen: Lane, environment: dict[str, str]) -> None:
    """Fail unless PyTorch and NumPy, started with ``environment``, really run the lane's kernels (a lane that changes nothing proves nothing)."""
    probe = subprocess.run([sys.executable, "-c", _PROBE], env=environment, capture_output=True, text=True, check=True)
    capability, numpy_features = probe.stdout.split()
    if capability != chosen.torch_capability:
        raise RuntimeError(f"lane {chosen.name}: PyTorch reports CPU capability {capability!r}, expected {chosen.torch_capability!r}")
    still_on = set(environment.get("NPY_DISABLE_CPU_FEATURES", "").split(",")) & set(numpy_features.split(","))
    if still_on - {""}:
        raise RuntimeError(f"lane {chosen.name}: NumPy still uses {sorted(still_on)}")


def run_in_lane(name: str, command: list[str]) -> int:
    """Run ``command`` in lane ``name`` with a fresh, empty artifacts folder; returns its exit status."""
    if not command:
        raise ValueError("no command to run: python -m labsupport.maintain.lanes LANE -- COMMAND ...")
    chosen = lane(name)
    with tempfile.TemporaryDirectory(prefix=f"onnx-lab-{chosen.name}-") as artifacts:
        environment = {**os.environ, **chosen.environment(), ARTIFACTS_ENV_VAR: artifacts}
        verify(chosen, environment)
        settings = " ".join(f"{key}={value}" for key, value in sorted(chosen.environment().items()))
        print(f">>> lane {chosen.name} ({chosen.description}); empty artifacts folder; {settings}", flush=True)
        return subprocess.run(command, env=environment, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    """``--list`` prints the lanes this CPU can host; ``LANE -- COMMAND ...`` runs the command in one."""
    parser = argparse.ArgumentParser(prog="python -m labsupport.maintain.lanes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the names of the lanes this CPU can host, one per line")
    parser.add_argument("lane", nargs="?", help="the lane to run the command in")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(candidate.name for candidate in lanes_for_this_cpu()))
        return 0
    if args.lane is None:
        parser.error("name a lane (or --list)")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        return run_in_lane(args.lane, command)
    except (ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
