"""ONNX Runtime's graph optimizer, made visible: levels, saved optimized models, op-count diffs.

Introduced in notebook 07. ``optimize_to_file`` runs ORT's optimizer at one level and saves what
it produced (offline optimization); ``op_counts`` / ``op_diff`` show what changed; ``level_table``
does both for every level; ``level_latency`` times every level the way notebook 05 teaches (threads
pinned, spinning stated, one session at a time); ``creation_time`` measures the cost of optimizing at load.
Sessions come from ``labsupport.onnxutil.sessions`` (``open_session(model, optimization=level)``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from labsupport.onnxutil import graph
from labsupport.onnxutil.graph import ModelLike
from labsupport.onnxutil.sessions import OPTIMIZATION_LEVELS, model_source, open_session, session_options
from labsupport.onnxutil.timing import BenchTable, LoadMeter, Timing, measure

# The level names, in the order ORT applies them; each includes the ones before it.
LEVELS = tuple(OPTIMIZATION_LEVELS)


def optimize_to_file(model: ModelLike, level: str, path: Path, *, ort_format: bool = False) -> Path:
    """Optimize ``model`` with ORT at ``level`` and save the result (offline optimization); returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    open_session(model, optimization=level, optimized_path=path, ort_format=ort_format)
    if not path.is_file():
        raise RuntimeError(f"ONNX Runtime did not write the optimized model to {path.name}")
    return path


def op_counts(model: ModelLike) -> Counter[str]:
    """Node count per op type; ops outside the default ONNX domain are prefixed (``com.microsoft:FusedConv``)."""
    proto = graph.load_model(model)
    return Counter(f"{node.domain}:{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type for node in proto.graph.node)


def op_diff(before: ModelLike, after: ModelLike) -> list[dict[str, object]]:
    """Rows ``{op, before, after, change}`` for every op type whose count differs, removed ops first."""
    old, new = op_counts(before), op_counts(after)
    rows = [
        {"op": op, "before": old[op], "after": new[op], "change": new[op] - old[op]}
        for op in sorted(old.keys() | new.keys())
        if old[op] != new[op]
    ]
    return sorted(rows, key=lambda row: (row["change"], row["op"]))


def level_table(model: ModelLike, folder: Path, stem: str) -> list[dict[str, object]]:
    """Optimize ``model`` at every level into ``folder/<stem>_<level>.onnx``; rows of node count and ops."""
    rows = []
    for level in LEVELS:
        saved = optimize_to_file(model, level, Path(folder) / f"{stem}_{level}.onnx")
        counts = op_counts(saved)
        rows.append(
            {
                "level": level,
                "nodes": sum(counts.values()),
                "ops": ", ".join(f"{op} x{count}" for op, count in sorted(counts.items())),
            }
        )
    return rows


def creation_time(model: ModelLike, level: str, *, repeat: int = 5, threads: int = 0) -> Timing:
    """How long creating a session at ``level`` takes (optimizing at load is part of it), as a Timing."""
    source = model_source(model)
    options = session_options(optimization=level, threads=threads)
    return measure(lambda: open_session(source, options=options), name=f"create@{level}", warmup=0, repeat=repeat)


@dataclass(frozen=True)
class SessionTimings:
    """Per-run timings ratioed on the wall clock (``latency``) and on CPU time (``cpu_time``): each candidate's round with
    the lowest median on that clock (each Timing holds both clocks of its round: ``median_ms`` and ``cpu_median_ms``)."""

    latency: BenchTable
    cpu_time: BenchTable


def _time_one(
    session: ort.InferenceSession, feeds: dict[str, np.ndarray], *, name: str, batch_size: int, warmup: int, repeat: int
) -> Timing:
    return measure(lambda: session.run(None, feeds), name=name, batch_size=batch_size, warmup=warmup, repeat=repeat)


def _keep_faster(best: dict[str, Timing], timing: Timing, clock: str) -> None:
    if timing.name not in best or timing.statistic(clock) < best[timing.name].statistic(clock):
        best[timing.name] = timing


def time_sessions(
    factories: Mapping[str, Callable[[], ort.InferenceSession]],
    feeds: dict[str, np.ndarray],
    *,
    baseline: str,
    batch_size: int = 1,
    warmup: int = 3,
    repeat: int = 5,
    rounds: int = 10,
) -> SessionTimings:
    """Time each session one at a time: build it, warm it up, time ``run(feeds)``, release it, then the next.

    Only one session (and its thread pool) exists at a time, so none competes with another for the
    cores. Each run is timed on the wall clock and by its CPU time (``timing.measure``, as in notebook 05),
    which is the whole cost of a run when the session has one intra-op thread, and which other programs on a
    busy machine cannot inflate. The sweep is done ``rounds`` times and each candidate keeps its round with the
    lowest median, per clock; both tables record the load the sweep saw.
    """
    if baseline not in factories:
        raise KeyError(f"baseline {baseline!r} is not among the candidates {list(factories)}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    best_latency: dict[str, Timing] = {}
    best_cpu: dict[str, Timing] = {}
    meter = LoadMeter()
    for _ in range(rounds):
        for name, factory in factories.items():
            # the session lives only inside this call: released (with its threads) before the next one is built
            timed = _time_one(factory(), feeds, name=name, batch_size=batch_size, warmup=warmup, repeat=repeat)
            _keep_faster(best_latency, timed, "wall")
            _keep_faster(best_cpu, timed, "cpu")
    load = meter.stop()
    return SessionTimings(
        BenchTable(list(best_latency.values()), baseline, "wall", load), BenchTable(list(best_cpu.values()), baseline, "cpu", load)
    )


def level_latency(
    model: ModelLike,
    feeds: dict[str, np.ndarray],
    *,
    threads: int = 1,
    spinning: bool = False,
    batch_size: int = 1,
    warmup: int = 3,
    repeat: int = 5,
    rounds: int = 10,
) -> SessionTimings:
    """Latency and CPU time per run of ``model`` at every level, threads pinned, one session at a time (notebook 07).

    Ratios are against ``disable``. ``threads`` must be set explicitly (>= 1): ORT's default pool
    size differs from machine to machine; with one thread, the CPU time is the whole cost of a run.
    ``spinning`` is ORT's ``session.intra_op.allow_spinning``.
    """
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be pinned to a whole number >= 1, got {threads!r}")
    source = model_source(model)
    factories = {
        level: (lambda level=level: open_session(source, optimization=level, threads=threads, spinning=spinning)) for level in LEVELS
    }
    return time_sessions(factories, feeds, baseline="disable", batch_size=batch_size, warmup=warmup, repeat=repeat, rounds=rounds)


def run_all_levels(model: ModelLike, feeds: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    """The outputs of ``model`` on ``feeds`` under every optimization level (for parity checks)."""
    source = model_source(model)
    return {level: open_session(source, optimization=level).run(None, feeds) for level in LEVELS}
