"""ONNX Runtime's graph optimizer, made visible: levels, saved optimized models, op-count diffs.

Introduced in notebook 07. ``optimize_to_file`` runs ORT's optimizer at one level and saves what
it produced (offline optimization); ``op_counts`` / ``op_diff`` show what changed; ``level_table``
does both for every level; ``level_latency`` times every level the way notebook 05 teaches (threads
pinned, spinning stated, one session at a time); ``creation_time`` measures the cost of optimizing at load.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from labsupport.bench import BenchTable, Timing, measure
from labsupport.graph import ModelLike, load_model
from labsupport.runtime import ALLOW_SPINNING

# The levels in the order ORT applies them; each includes the ones before it.
LEVELS: dict[str, ort.GraphOptimizationLevel] = {
    "disable_all": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "layout": ort.GraphOptimizationLevel.ORT_ENABLE_LAYOUT,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
QUIET = 3  # ORT log severity: errors only


def _level(level: str) -> ort.GraphOptimizationLevel:
    if level not in LEVELS:
        raise ValueError(f"unknown optimization level {level!r}; expected one of {', '.join(LEVELS)}")
    return LEVELS[level]


def _model_source(model: ModelLike) -> str | bytes:
    """What InferenceSession accepts: a ModelProto's bytes, or a path (checked first for a clear error)."""
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    if str(model).endswith(".ort"):  # ORT format: a FlatBuffer that onnx cannot read
        if not Path(model).is_file():
            raise FileNotFoundError(f"no ORT-format model at {model}: the file does not exist")
    else:
        load_model(model)
    return str(model)


def session_options(
    level: str, *, optimized_path: Path | None = None, ort_format: bool = False, threads: int = 0, spinning: bool = True
) -> ort.SessionOptions:
    """SessionOptions at ``level`` with ``threads`` intra-op threads (0 = ORT's default) and idle-thread ``spinning``
    (ORT's default: on), optionally saving the optimized model (ONNX, or ORT format) to ``optimized_path``."""
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise ValueError(f"threads must be a whole number >= 0 (0 = ORT's default), got {threads!r}")
    options = ort.SessionOptions()
    options.graph_optimization_level = _level(level)
    options.log_severity_level = QUIET
    options.intra_op_num_threads = threads
    if not spinning:
        options.add_session_config_entry(ALLOW_SPINNING, "0")
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
        if ort_format:
            options.add_session_config_entry("session.save_model_format", "ORT")
    return options


def make_session(model: ModelLike, level: str = "all", *, threads: int = 0, spinning: bool = True) -> ort.InferenceSession:
    """A CPU InferenceSession of ``model`` with the graph optimizer at ``level``."""
    options = session_options(level, threads=threads, spinning=spinning)
    return ort.InferenceSession(_model_source(model), options, providers=["CPUExecutionProvider"])


def optimize_to_file(model: ModelLike, level: str, path: Path, *, ort_format: bool = False) -> Path:
    """Optimize ``model`` with ORT at ``level`` and save the result (offline optimization); returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ort.InferenceSession(_model_source(model), session_options(level, optimized_path=path, ort_format=ort_format), providers=["CPUExecutionProvider"])
    if not path.is_file():
        raise RuntimeError(f"ONNX Runtime did not write the optimized model to {path.name}")
    return path


def op_counts(model: ModelLike) -> Counter[str]:
    """Node count per op type; ops outside the default ONNX domain are prefixed (``com.microsoft:FusedConv``)."""
    proto = load_model(model)
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
        rows.append({
            "level": level,
            "nodes": sum(counts.values()),
            "ops": ", ".join(f"{op} x{count}" for op, count in sorted(counts.items())),
        })
    return rows


def creation_time(model: ModelLike, level: str, *, repeat: int = 5, threads: int = 0) -> Timing:
    """How long creating a session at ``level`` takes (optimizing at load is part of it), as a Timing."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    source = _model_source(model)
    options = session_options(level, threads=threads)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        samples.append(time.perf_counter() - start)
    return Timing.from_samples(f"create@{level}", 1, samples)


@dataclass(frozen=True)
class SessionTimings:
    """Per-run wall-clock ``latency`` and CPU time of the calling thread (``cpu_time``), each candidate's best round."""

    latency: BenchTable
    cpu_time: BenchTable


def _keep_faster(best: dict[str, Timing], timing: Timing) -> None:
    if timing.name not in best or timing.median_ms < best[timing.name].median_ms:
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
    cores. Each run is timed on the wall clock (``bench.measure``, as in notebook 05) and by the CPU
    time of the calling thread, which is the whole cost of a run when the session has one intra-op
    thread, and which other programs on a busy machine cannot inflate. The sweep is done ``rounds``
    times and each candidate keeps its round with the lowest median, per measure.
    """
    if baseline not in factories:
        raise KeyError(f"baseline {baseline!r} is not among the candidates {list(factories)}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    best_latency: dict[str, Timing] = {}
    best_cpu: dict[str, Timing] = {}
    for _ in range(rounds):
        for name, factory in factories.items():
            session = factory()
            cpu_seconds: list[float] = []

            def run() -> None:
                start = time.thread_time()
                session.run(None, feeds)
                cpu_seconds.append(time.thread_time() - start)

            _keep_faster(best_latency, measure(run, name=name, batch_size=batch_size, warmup=warmup, repeat=repeat))
            _keep_faster(best_cpu, Timing.from_samples(name, batch_size, cpu_seconds[warmup:]))
            del session, run  # release the session (and its threads) before the next one is built
    return SessionTimings(BenchTable(list(best_latency.values()), baseline), BenchTable(list(best_cpu.values()), baseline))


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

    Ratios are against ``disable_all``. ``threads`` must be set explicitly (>= 1): ORT's default pool
    size differs from machine to machine; with one thread, the CPU time is the whole cost of a run.
    ``spinning`` is ORT's ``session.intra_op.allow_spinning``.
    """
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be pinned to a whole number >= 1, got {threads!r}")
    factories = {level: (lambda level=level: make_session(model, level, threads=threads, spinning=spinning)) for level in LEVELS}
    return time_sessions(factories, feeds, baseline="disable_all", batch_size=batch_size,
                         warmup=warmup, repeat=repeat, rounds=rounds)


def run_all_levels(model: ModelLike, feeds: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    """The outputs of ``model`` on ``feeds`` under every optimization level (for parity checks)."""
    return {level: make_session(model, level).run(None, feeds) for level in LEVELS}


def conv_bn_relu_model(blocks: int = 4, channels: int = 16, size: int = 32, seed: int = 0) -> onnx.ModelProto:
    """A hand-built image model of ``blocks`` Conv-BatchNorm-Relu blocks and a MatMul+Add head (notebook 07).

    It is what a naive exporter produces (BatchNorm kept, activations separate, MatMul+Add instead
    of Gemm), so every fusion ORT knows for it has something to do. Input ``x``: (N, 3, size, size).
    """
    if blocks < 1 or channels < 1 or size < 1:
        raise ValueError(f"blocks, channels and size must be >= 1; got {blocks}, {channels}, {size}")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, weights = [], []

    def weight(name: str, values: np.ndarray) -> str:
        weights.append(numpy_helper.from_array(values.astype(np.float32), name))
        return name

    previous, in_channels = "x", 3
    for i in range(blocks):
        conv = [previous, weight(f"conv{i}.w", rng.normal(0, 0.3, (channels, in_channels, 3, 3))), weight(f"conv{i}.b", rng.normal(0, 0.1, channels))]
        norm = [weight(f"bn{i}.{part}", values) for part, values in (
            ("scale", rng.uniform(0.5, 1.5, channels)), ("bias", rng.normal(0, 0.1, channels)),
            ("mean", rng.normal(0, 0.1, channels)), ("var", rng.uniform(0.5, 1.5, channels)))]
        nodes += [
            helper.make_node("Conv", conv, [f"conv{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", [f"conv{i}", *norm], [f"bn{i}"], name=f"bn{i}"),
            helper.make_node("Relu", [f"bn{i}"], [f"relu{i}"], name=f"relu{i}"),
        ]
        previous, in_channels = f"relu{i}", channels
    nodes += [
        helper.make_node("GlobalAveragePool", [previous], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["features"], name="flatten"),
        helper.make_node("MatMul", ["features", weight("head.w", rng.normal(0, 0.3, (channels, 10)))], ["scores"], name="head_matmul"),
        helper.make_node("Add", ["scores", weight("head.b", np.zeros(10))], ["logits"], name="head_add"),
    ]
    graph = helper.make_graph(
        nodes, "conv_bn_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10, producer_name="labsupport.optimize")
    onnx.checker.check_model(model, full_check=True)
    return model
