"""Compiled custom operators (notebook 10): find ONNX Runtime's C/C++ headers and build a custom-op library.

The onnxruntime wheel ships no headers; ``python -m labsupport.maintain.ort_headers`` puts them in
``build/ort-headers/include`` (``make lab`` and ``make test`` run it once). Notebook 10 shows the raw ``g++`` call first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from labsupport.course.paths import repo_root

HEADER = "onnxruntime_lite_custom_op.h"
INCLUDE_ENV_VAR = "ORT_INCLUDE_DIR"
FETCH_COMMAND = "python -m labsupport.maintain.ort_headers"


def headers_dir() -> Path:
    """Where ``labsupport.maintain.ort_headers`` puts the headers: ``build/ort-headers/include``."""
    return repo_root() / "build" / "ort-headers" / "include"


def find_ort_headers() -> Path | None:
    """The first folder holding ``onnxruntime_lite_custom_op.h``: $ORT_INCLUDE_DIR, build/ort-headers, the system's."""
    override = os.environ.get(INCLUDE_ENV_VAR)
    candidates = [Path(override)] if override else []
    candidates += [headers_dir(), *(Path(prefix) / "include" / "onnxruntime" for prefix in ("/usr", "/usr/local", "/opt/homebrew"))]
    return next((folder for folder in candidates if (folder / HEADER).is_file()), None)


def compile_command(source: Path, library: Path, include_dir: Path) -> list[str]:
    """The ``g++`` command line that builds ``source`` into the shared library ``library``."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (g++ or c++) on PATH: install one (apt-get install g++, xcode-select --install)")
    return [compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-I", str(include_dir), str(source), "-o", str(library)]


def build_custom_op_library(source: Path, library: Path) -> Path:
    """Compile a custom-op source file into a shared library for ``SessionOptions.register_custom_ops_library``."""
    include_dir = find_ort_headers()
    if include_dir is None:
        raise FileNotFoundError(f"ONNX Runtime's headers ({HEADER}) not found: run `{FETCH_COMMAND}` or set ${INCLUDE_ENV_VAR}")
    built = subprocess.run(compile_command(Path(source), Path(library), include_dir), capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"compiling {Path(source).name} failed:\n{built.stderr.strip()}")
    return Path(library)
