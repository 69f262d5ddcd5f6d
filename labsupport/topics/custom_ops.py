"""Compiled custom operators (notebook 10): find ONNX Runtime's C/C++ headers and build a custom-op library.

The onnxruntime wheel ships no headers; ``python -m labsupport.maintain.ort_headers`` puts them in
``build/ort-headers/include`` (``make lab``, ``make test`` and Binder's postBuild run it once). Notebook 10 shows the raw
``g++`` call first, after ``build_blocker`` has said whether this machine can build it.
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
FETCH_HINT = f"run `make ort-headers` (or `{FETCH_COMMAND}`) once"


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


def header_api_version(include_dir: Path) -> int:
    """The C API version the headers in ``include_dir`` ask a runtime for (``ORT_API_VERSION`` in onnxruntime_c_api.h)."""
    lines = (Path(include_dir) / "onnxruntime_c_api.h").read_text().splitlines()
    return int(next(line.split()[2] for line in lines if line.startswith("#define ORT_API_VERSION ")))


def runtime_api_version() -> int:
    """The newest C API version this ONNX Runtime serves: N for ONNX Runtime 1.N (it serves versions 1 to N)."""
    import onnxruntime  # here, not at the top: labsupport.maintain.ort_headers imports this module and needs no ORT

    return int(onnxruntime.__version__.split(".")[1])


def build_blocker(include_dir: Path | None) -> str | None:
    """Why this machine cannot build a custom-op library against ``include_dir`` (what to do about it), or None."""
    if include_dir is None:
        return f"ONNX Runtime's headers ({HEADER}) are missing: {FETCH_HINT}, or set ${INCLUDE_ENV_VAR}"
    if shutil.which("g++") is None:  # notebook 10's raw call names g++ (macOS: Xcode's command line tools provide it)
        return "no g++ on PATH: install it (apt-get install g++, xcode-select --install)"
    headers, runtime = header_api_version(include_dir), runtime_api_version()
    if headers > runtime:
        return (
            f"the headers in {include_dir} are of C API version {headers}, newer than this ONNX Runtime "
            f"(1.{runtime}, C API versions up to {runtime}): use headers of ONNX Runtime 1.{runtime} or older"
        )
    return None


def build_custom_op_library(source: Path, library: Path) -> Path:
    """Compile a custom-op source file into a shared library for ``SessionOptions.register_custom_ops_library``."""
    include_dir = find_ort_headers()
    blocker = build_blocker(include_dir)
    if blocker:
        raise FileNotFoundError(blocker) if include_dir is None else RuntimeError(blocker)
    built = subprocess.run(compile_command(Path(source), Path(library), include_dir), capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"compiling {Path(source).name} failed:\n{built.stderr.strip()}")
    return Path(library)
