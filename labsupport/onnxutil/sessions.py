"""ONNX Runtime sessions: provider priority lists, what a session really got, session options.

The one place where the course opens an ONNX Runtime session. ``open_session`` is the everyday
call (a CPU session, knobs by name); ``session_options`` spells the knobs. Introduced in notebook
05: ``open_with_choice`` builds a session from a provider priority list and returns a
``ProviderChoice`` that says what was requested, what this machine offers and what the session
really uses, so a silent fallback to the CPU is visible; ``assert_providers`` turns that into a
check that fails loudly; ``run_concurrently`` serves many requests from one shared session.
``check_saved_model`` reloads a saved file and compares its outputs with the framework's (03, 04).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from labsupport.course.compare import ArrayLike, ParityReport, compare
from labsupport.course.display import format_bytes
from labsupport.course.paths import relative
from labsupport.onnxutil.graph import ModelLike

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
GPU_PROVIDERS = (TENSORRT, CUDA, "ROCMExecutionProvider", "MIGraphXExecutionProvider", "DmlExecutionProvider")
DISABLE_CPU_FALLBACK = "session.disable_cpu_ep_fallback"
ALLOW_SPINNING = "session.intra_op.allow_spinning"
# Why a requested provider is missing from a session (a plugin EP is listed only once it offers a device,
# and a session takes a plugin only through add_provider_for_devices or a selection policy, not by name).
NOT_OFFERED = "not in this build, or a plugin with no device here"
NOT_STARTED = "a GPU build whose libraries are missing, or a plugin asked for by name instead of by device"

# Providers the course talks about: which hardware each targets and which package brings it.
PROVIDERS: dict[str, tuple[str, str]] = {
    CPU: ("any CPU (x86-64, ARM64)", "onnxruntime (every build)"),
    CUDA: ("NVIDIA GPU", "onnxruntime-gpu (plus CUDA and cuDNN libraries)"),
    TENSORRT: ("NVIDIA GPU, TensorRT-compiled", "onnxruntime-gpu (plus the TensorRT libraries)"),
    "CoreMLExecutionProvider": ("Apple GPU / Neural Engine", "onnxruntime (macOS and iOS builds)"),
    "DmlExecutionProvider": ("any DirectX 12 GPU on Windows", "onnxruntime-directml"),
    "OpenVINOExecutionProvider": ("Intel CPU / iGPU / NPU", "onnxruntime-openvino"),
    "ROCMExecutionProvider": ("AMD GPU", "onnxruntime-rocm (AMD's builds; newer ones use MIGraphX)"),
    "NnapiExecutionProvider": ("Android NPU / DSP / GPU", "onnxruntime-android (Maven package)"),
    "AzureExecutionProvider": ("a remote Azure endpoint, via extension ops", "onnxruntime (PyPI builds)"),
}

ProviderSpec = str | tuple[str, dict[str, Any]]


class ProviderMismatch(AssertionError):
    """A session does not run on the providers it was expected to (typically: a silent CPU fallback)."""


def available_providers() -> list[str]:
    """The providers compiled into this onnxruntime build (plus plugins offering a device), in ORT's priority order.

    It does not check that the machine can start them: ``onnxruntime-gpu`` lists CUDA without a GPU (notebook 05).
    """
    return list(ort.get_available_providers())


def gpu_providers_available() -> list[str]:
    """The GPU providers among ``available_providers()`` (empty in a CPU-only build; listed does not mean startable)."""
    return [name for name in available_providers() if name in GPU_PROVIDERS]


def provider_table() -> list[dict[str, object]]:
    """One row per provider of ``PROVIDERS``: hardware, the package that brings it, built in / available here."""
    built = set(ort.get_all_providers())
    here = set(available_providers())
    return [
        {
            "provider": name,
            "hardware": hardware,
            "package": package,
            "known to this ORT": name in built,
            "available here": name in here,
        }
        for name, (hardware, package) in PROVIDERS.items()
    ]


def _provider_name(spec: ProviderSpec) -> str:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str) and isinstance(spec[1], dict):
        return spec[0]
    raise TypeError(f"a provider is a name or a (name, options dict) pair, got {spec!r}")


@dataclass(frozen=True)
class ProviderChoice:
    """What a session was asked for (``requested``), what ORT offers here and what it really uses."""

    requested: tuple[str, ...]
    available: tuple[str, ...]
    used: tuple[str, ...]
    warnings: tuple[str, ...] = ()

    @property
    def primary(self) -> str:
        """The provider that gets first pick of the nodes (the session's first provider)."""
        return self.used[0]

    @property
    def unavailable(self) -> tuple[str, ...]:
        """Requested providers that this machine or build does not offer (they were skipped)."""
        return tuple(name for name in self.requested if name not in self.available)

    @property
    def fell_back(self) -> bool:
        """True when the first requested provider is not the one the session runs on."""
        return bool(self.requested) and self.requested[0] != self.primary

    def __str__(self) -> str:
        lines = [
            f"requested : {' > '.join(self.requested)}",
            f"used      : {', '.join(self.used)}",
        ]
        if self.unavailable:
            lines.append(f"skipped   : {', '.join(self.unavailable)} (not offered here: {NOT_OFFERED})")
        if self.fell_back:
            lines.append(f"FELL BACK : asked for {self.requested[0]} first, runs on {self.primary}")
        return "\n".join(lines)

    __repr__ = __str__


def model_source(model: ModelLike) -> str | bytes:
    """What ``InferenceSession`` takes for ``model`` (a path to .onnx/.ort, bytes or a ModelProto), with a clear error."""
    if isinstance(model, bytes):
        return model
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"no ONNX model at {path} (expected a .onnx or .ort file, the model's bytes or a ModelProto)")
        return str(path)
    raise TypeError(f"expected a path to an .onnx file, model bytes or an onnx.ModelProto, got {type(model).__name__}")


def open_session(
    model: ModelLike,
    *,
    providers: Sequence[ProviderSpec] = (CPU,),
    options: ort.SessionOptions | None = None,
    **knobs: Any,
) -> ort.InferenceSession:
    """An InferenceSession of ``model`` on ``providers`` (default: the CPU), with ``session_options(**knobs)``.

    The course's one way to open a session: ``open_session(path, threads=1)``,
    ``open_session(model, optimization="basic")``, ``open_session(path, config={...})``. Pass
    ``options`` instead of knobs to reuse prepared SessionOptions. Introduced in notebook 05.
    """
    if options is not None and knobs:
        raise TypeError(f"give either options or session knobs, not both (got options and {sorted(knobs)})")
    chosen = options if options is not None else session_options(**knobs)
    return ort.InferenceSession(model_source(model), sess_options=chosen, providers=list(providers))


def open_with_choice(
    model: ModelLike,
    providers: Sequence[ProviderSpec] = (CPU,),
    *,
    options: ort.SessionOptions | None = None,
) -> tuple[ort.InferenceSession, ProviderChoice]:
    """An InferenceSession over ``providers`` (priority order; ``(name, options)`` pairs allowed) and its ProviderChoice.

    ORT skips unavailable providers with only a UserWarning; the warning text is kept in the
    ProviderChoice instead of being printed. Introduced in notebook 05.
    """
    if isinstance(providers, (str, bytes)) or not providers:
        raise ValueError(f"providers must be a non-empty list of provider names in priority order, got {providers!r}")
    names = tuple(_provider_name(spec) for spec in providers)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = open_session(model, providers=providers, options=options)
    choice = ProviderChoice(
        requested=names,
        available=tuple(available_providers()),
        used=tuple(session.get_providers()),
        warnings=tuple(str(w.message) for w in caught),
    )
    return session, choice


def assert_providers(session: ort.InferenceSession, expected: str | Sequence[str]) -> list[str]:
    """Check that ``session`` runs on ``expected`` (a name or names, the first one primary); returns its providers.

    Raises ProviderMismatch naming what was expected, what the session got and what is available,
    which is how a notebook or a service catches ORT's silent fallback to the CPU (notebook 05).
    """
    if not isinstance(session, ort.InferenceSession):
        raise TypeError(f"assert_providers() needs an onnxruntime.InferenceSession, got {type(session).__name__}")
    wanted = [expected] if isinstance(expected, str) else list(expected)
    if not wanted or not all(isinstance(name, str) for name in wanted):
        raise ValueError(f"expected must be a provider name or a non-empty list of names, got {expected!r}")
    got = list(session.get_providers())
    missing = [name for name in wanted if name not in got]
    if missing or got[0] != wanted[0]:
        absent = [name for name in wanted if name not in available_providers()]
        why = f"; not offered here ({NOT_OFFERED}): {', '.join(absent)}" if absent else ""
        unstarted = [name for name in missing if name not in absent]
        why += f"; listed by get_available_providers() but not started ({NOT_STARTED}): {', '.join(unstarted)}" if unstarted else ""
        raise ProviderMismatch(
            f"expected the session to run on {', '.join(wanted)} (first: {wanted[0]}), but it uses {', '.join(got)}{why}"
        )
    return got


_EXECUTION_MODES = {"sequential": ort.ExecutionMode.ORT_SEQUENTIAL, "parallel": ort.ExecutionMode.ORT_PARALLEL}
# ORT's graph optimizer levels in the order it applies them; each includes the ones before it (notebook 07).
OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "layout": ort.GraphOptimizationLevel.ORT_ENABLE_LAYOUT,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def session_options(
    *,
    threads: int = 0,
    inter_op_threads: int = 0,
    execution_mode: str = "sequential",
    optimization: str = "all",
    mem_pattern: bool = True,
    cpu_arena: bool = True,
    disable_cpu_fallback: bool = False,
    spinning: bool = True,
    log_severity: int = 3,
    config: Mapping[str, str] | None = None,
    optimized_path: str | os.PathLike[str] | None = None,
    ort_format: bool = False,
) -> ort.SessionOptions:
    """SessionOptions with named knobs (0 threads = ORT's default: one per physical core). Notebook 05.

    ``threads``: intra-op threads; ``execution_mode``: "sequential" or "parallel"; ``optimization``: one of
    ``OPTIMIZATION_LEVELS``, "disable" ... "all" (notebook 07 looks at what each does); ``spinning=False``
    stops idle worker threads from busy-waiting for the next run; ``log_severity`` 3 = errors only;
    ``config``: session config entries such as ``{"session.x64quantprecision": "1"}`` (notebook 06);
    ``optimized_path``: where ORT saves the optimized graph (ORT format with ``ort_format``, notebooks 07, 09).
    """
    for label, value in (("threads", threads), ("inter_op_threads", inter_op_threads)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{label} must be a whole number >= 0 (0 = ORT's default), got {value!r}")
    if execution_mode not in _EXECUTION_MODES:
        raise ValueError(f"execution_mode must be one of {sorted(_EXECUTION_MODES)}, got {execution_mode!r}")
    if optimization not in OPTIMIZATION_LEVELS:
        raise ValueError(f"optimization must be one of {', '.join(OPTIMIZATION_LEVELS)}; got {optimization!r}")
    if log_severity not in range(5):
        raise ValueError(f"log_severity must be 0 (verbose) .. 4 (fatal), got {log_severity!r}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = inter_op_threads
    options.execution_mode = _EXECUTION_MODES[execution_mode]
    options.graph_optimization_level = OPTIMIZATION_LEVELS[optimization]
    options.enable_mem_pattern = mem_pattern
    options.enable_cpu_mem_arena = cpu_arena
    options.log_severity_level = log_severity
    entries = dict(config or {})
    if disable_cpu_fallback:
        entries[DISABLE_CPU_FALLBACK] = "1"
    if not spinning:
        entries[ALLOW_SPINNING] = "0"
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
        if ort_format:
            entries["session.save_model_format"] = "ORT"
    for key, value in entries.items():
        options.add_session_config_entry(key, value)
    return options


def _shape_text(shape: object) -> str:
    if not isinstance(shape, (list, tuple)):
        return str(shape)
    return "(" + ", ".join(str(dim) if dim is not None else "?" for dim in shape) + ")"


def describe_io(session: ort.InferenceSession) -> list[dict[str, object]]:
    """Rows (kind, name, shape with symbolic dims as names, element type) for a session's inputs and outputs."""
    if not isinstance(session, ort.InferenceSession):
        raise TypeError(f"describe_io() needs an onnxruntime.InferenceSession, got {type(session).__name__}")
    rows: list[dict[str, object]] = []
    for kind, args in (("input", session.get_inputs()), ("output", session.get_outputs())):
        for arg in args:
            rows.append({"kind": kind, "name": arg.name, "shape": _shape_text(arg.shape), "type": arg.type})
    return rows


def run_concurrently(
    session: ort.InferenceSession,
    requests: Sequence[Mapping[str, np.ndarray]],
    *,
    threads: int,
    output_names: Sequence[str] | None = None,
) -> list[list[np.ndarray]]:
    """Run ``session`` once per feed dict in ``requests`` from ``threads`` Python threads at once; results in order.

    ``InferenceSession.run`` is thread-safe and releases the GIL while it computes, so one shared
    session serves concurrent requests with one copy of the weights (notebook 05; the service of
    notebook 08 works this way).
    """
    if not isinstance(session, ort.InferenceSession):
        raise TypeError(f"run_concurrently() needs an onnxruntime.InferenceSession, got {type(session).__name__}")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a whole number >= 1, got {threads!r}")
    names = None if output_names is None else list(output_names)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(lambda feeds: session.run(names, dict(feeds)), requests))


# run in a fresh interpreter: the threads a default CPU session adds to its process (psutil: Linux, macOS, Windows)
_POOL_PROBE = """
import os, sys
if len(sys.argv) > 2:  # pin before ORT starts (here, not in a preexec_fn of a parent that already runs threads)
    os.sched_setaffinity(0, {int(cpu) for cpu in sys.argv[2].split(",")})
import onnxruntime, psutil
before = psutil.Process().num_threads()
session = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
print(psutil.Process().num_threads() - before)
"""


def default_pool_threads(model: str | os.PathLike[str], *, env: Mapping[str, str] | None = None, cpus: set[int] | None = None) -> int:
    """Threads that a session with default SessionOptions starts, counted in a fresh Python process.

    ``env`` adds environment variables (``ORT_INTRA_OP_NUM_THREADS``); ``cpus`` pins that process to those CPUs
    before it imports ORT (``os.sched_setaffinity``, Linux only).
    """
    import subprocess
    import sys

    if cpus is not None and not hasattr(os, "sched_setaffinity"):
        raise ValueError("pinning a process to CPUs needs os.sched_setaffinity (Linux); pass cpus=None here")
    pinned = [] if cpus is None else [",".join(map(str, sorted(cpus)))]
    result = subprocess.run(
        [sys.executable, "-c", _POOL_PROBE, str(model), *pinned],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the thread-count probe failed: {result.stderr.strip()[-500:]}")
    return int(result.stdout.split()[-1])


@dataclass(frozen=True)
class SavedModelCheck:
    """What ``check_saved_model`` found: the file, its size, its inputs and outputs, one parity report per output."""

    path: Path
    size: int
    io: tuple[dict[str, object], ...]
    reports: tuple[ParityReport, ...]

    def __str__(self) -> str:
        name_width, shape_width = (max(len(str(row[key])) for row in self.io) for key in ("name", "shape"))
        lines = [f"{relative(self.path)}: {format_bytes(self.size)}"]
        lines += [f"  {row['kind']:<6} {row['name']!s:<{name_width}}  {row['shape']!s:<{shape_width}}  {row['type']}" for row in self.io]
        return "\n".join([*lines, *map(str, self.reports)])

    __repr__ = __str__


def check_saved_model(
    path: str | os.PathLike[str],
    feeds: Mapping[str, np.ndarray],
    expected: Mapping[str, ArrayLike],
    *,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> SavedModelCheck:
    """Reload a saved .onnx file in ONNX Runtime, run ``feeds`` and compare each output named in ``expected``.

    The last step of a conversion notebook (03, 04): the file that later notebooks load is checked
    against the framework's own outputs. Raises ``ParityError`` when an output differs.
    """
    session = open_session(path)
    names = [output.name for output in session.get_outputs()]
    unknown = sorted(set(expected) - set(names))
    if unknown or not expected:
        raise ValueError(f"expected must map some of the model's outputs {names} to arrays; got {sorted(expected)}")
    results = dict(zip(names, session.run(names, dict(feeds)), strict=True))
    reports = tuple(compare(value, results[name], atol=atol, rtol=rtol, name=name) for name, value in expected.items())
    return SavedModelCheck(Path(path), Path(path).stat().st_size, tuple(describe_io(session)), reports)
