"""The course model on phones: ORT-format (``.ort``) files and ONNX Runtime's mobile usability checker (notebook 09).

* ``convert_to_ort`` calls ``python -m onnxruntime.tools.convert_onnx_models_to_ort``;
* ``mobile_usability`` runs ONNX Runtime's mobile usability checker
  (``python -m onnxruntime.tools.check_onnx_model_mobile_usability``) and returns its numbers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labsupport.course.paths import relative


@dataclass
class OrtConversion:
    """The files ``convert_onnx_models_to_ort`` produced for one model, with their sizes in bytes."""

    onnx_path: Path
    ort_path: Path
    config_path: Path
    optimization_style: str
    warnings: tuple[str, ...] = ()  # the converter's own "WARNING:" lines (Runtime style: how to replay)

    @property
    def onnx_bytes(self) -> int:
        return self.onnx_path.stat().st_size

    @property
    def ort_bytes(self) -> int:
        return self.ort_path.stat().st_size


def is_ort_format(path: str | os.PathLike[str]) -> bool:
    """True when the file is an ORT-format (flatbuffer) model: bytes 4-7 spell ``ORTM``."""
    with open(path, "rb") as handle:
        return handle.read(8)[4:8] == b"ORTM"


def convert_to_ort(
    onnx_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    optimization_style: str = "Fixed",
    target_platform: str = "arm",
    timeout: float = 300,
    save_optimized_onnx: bool = False,
) -> OrtConversion:
    """Convert one .onnx file with ``python -m onnxruntime.tools.convert_onnx_models_to_ort`` (notebook 09).

    ``optimization_style`` is "Fixed" (optimizations baked in as ``com.microsoft`` operators for the CPU
    provider) or "Runtime" (ONNX operators kept for NNAPI/CoreML/XNNPACK, which decide at load time which
    nodes they take; the optimizations are recorded and replayed only when the session sets
    ``session.enable_saved_runtime_optimizations`` to "1"). Returns the .ort model, the converter's warnings
    and the ``required_operators`` config that a reduced-size build takes (``--include_ops_by_config``).
    ``target_platform`` "arm" (phones; the default) or "amd64" picks the platform-specific optimizations.
    ``save_optimized_onnx`` also writes the same optimized graph as ``<name>.optimized.onnx`` (the converter's
    ``--save_optimized_onnx_model``: what the .ort file holds, viewable in Netron).
    Give each conversion its own ``output_dir`` so its files are easy to tell apart. For "Runtime" the
    converter also converts the model once more without runtime optimizations (in a temporary folder)
    and the config covers the operators of both, since the saved optimizations may not be applied.
    """
    source = Path(onnx_path)
    if source.suffix != ".onnx" or not source.is_file():
        raise FileNotFoundError(f"expected an existing .onnx file, got {relative(source)}")
    if optimization_style not in ("Fixed", "Runtime"):
        raise ValueError(f"optimization_style must be 'Fixed' or 'Runtime', got {optimization_style!r}")
    if target_platform not in ("arm", "amd64"):
        raise ValueError(f"target_platform must be 'arm' (phones) or 'amd64', got {target_platform!r}")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "onnxruntime.tools.convert_onnx_models_to_ort",
        str(source),
        "--output_dir",
        str(out),
        "--optimization_style",
        optimization_style,
        "--target_platform",
        target_platform,
        *(["--save_optimized_onnx_model"] if save_optimized_onnx else []),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    infix = ".with_runtime_opt" if optimization_style == "Runtime" else ""
    ort_path = out / f"{source.stem}{infix}.ort"
    config_path = out / f"{source.stem}.required_operators{infix}.config"
    if done.returncode != 0 or not ort_path.is_file():
        raise RuntimeError(f"convert_onnx_models_to_ort failed (status {done.returncode}): {done.stderr.strip()[-2000:]}")
    warnings = tuple(line for line in done.stdout.splitlines() if line.startswith("WARNING:"))
    return OrtConversion(source, ort_path, config_path, optimization_style, warnings)


def ort_value_records(path: str | os.PathLike[str]) -> tuple[int, int]:
    """How many value records (name, type and shape) an ORT-format file's main graph stores, and how many of them
    name values that no node, graph input or graph output uses any more (those of nodes the optimizer removed) (09)."""
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs.InferenceSession import InferenceSession

    graph = InferenceSession.GetRootAs(Path(path).read_bytes(), 0).Model().Graph()
    used = {graph.Inputs(i) for i in range(graph.InputsLength())} | {graph.Outputs(i) for i in range(graph.OutputsLength())}
    for node in (graph.Nodes(i) for i in range(graph.NodesLength())):
        used |= {node.Inputs(i) for i in range(node.InputsLength())} | {node.Outputs(i) for i in range(node.OutputsLength())}
    names = [graph.NodeArgs(i).Name() for i in range(graph.NodeArgsLength())]
    return len(names), sum(name not in used for name in names)


def operator_config_text(path: str | os.PathLike[str]) -> str:
    """The ``required_operators`` config with the absolute model paths in its comments shortened to file names."""
    lines = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("# - "):
            line = "# - " + Path(line[4:]).name
        lines.append(line)
    return "\n".join(lines)


# --------------------------------------------------------------------------- the mobile usability checker

USABILITY_PROVIDERS = ("NNAPI", "CoreML NeuralNetwork", "CoreML MLProgram")
_SECTION = re.compile(r"Checking (NNAPI|CoreML NeuralNetwork|CoreML MLProgram)$")
_PARTITIONS = re.compile(r"(\d+) partitions with a total of (\d+)/(\d+) nodes can be handled by the (.+) EP\.")
_VERDICT = re.compile(r"Model should perform well with (.+?) (as is|if modified to have fixed input shapes): (YES|NO)")


@dataclass(frozen=True)
class Usability:
    """One provider's lines of the usability checker: nodes it can take as the model is, and with fixed shapes."""

    provider: str
    nodes: int
    total: int
    partitions: int
    works_as_is: bool
    fixed_nodes: int | None = None  # None: the checker had no dynamic shape to fix
    works_if_fixed: bool | None = None


def parse_usability_report(lines: Sequence[str]) -> list[Usability]:
    """The checker's log lines (``INFO:`` prefixes allowed) as one ``Usability`` per provider it checked."""
    found: dict[str, dict[str, Any]] = {}
    provider, fixed = None, False
    for line in (line.removeprefix("INFO:").strip() for line in lines):
        if section := _SECTION.fullmatch(line):
            provider, fixed = section.group(1), False
            found[provider] = {"provider": provider}
        elif line.startswith("Partition information if the model was updated to make the shapes fixed"):
            fixed = True
        elif provider and (partitions := _PARTITIONS.fullmatch(line)):
            if fixed:
                found[provider]["fixed_nodes"] = int(partitions.group(2))
            else:
                found[provider].update(partitions=int(partitions.group(1)), nodes=int(partitions.group(2)), total=int(partitions.group(3)))
        elif provider and (verdict := _VERDICT.fullmatch(line)):
            found[provider]["works_as_is" if verdict.group(2) == "as is" else "works_if_fixed"] = verdict.group(3) == "YES"
    missing = [name for name in USABILITY_PROVIDERS if name not in found or "nodes" not in found[name] or "works_as_is" not in found[name]]
    if missing:
        raise ValueError(f"the usability checker's report has no complete section for {missing}; is its output format new?")
    return [Usability(**found[name]) for name in USABILITY_PROVIDERS]


def mobile_usability(model_path: str | os.PathLike[str], timeout: float = 300) -> list[Usability]:
    """How many nodes NNAPI and CoreML could take, by ONNX Runtime's mobile usability checker (notebook 09).

    Runs ``python -m onnxruntime.tools.check_onnx_model_mobile_usability MODEL`` in a fresh process (the
    checker optimizes the model with ONNX Runtime first, so it must not inherit this process's session
    settings) and parses its log.
    """
    path = Path(model_path)
    if not path.is_file():
        raise FileNotFoundError(f"model file {relative(path)} does not exist")
    command = [sys.executable, "-m", "onnxruntime.tools.check_onnx_model_mobile_usability", str(path.resolve())]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"check_onnx_model_mobile_usability failed (status {done.returncode}): {done.stderr.strip()[-2000:]}")
    return parse_usability_report(done.stderr.splitlines())  # the checker logs to stderr
