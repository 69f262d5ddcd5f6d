"""Latency and CPU-time measurement with warm-up and repeats, ratio tables, the load they were measured under, and plots.

Introduced in notebook 05 (and used in 06, 07, 08, 10, 11, 12 and ``labsupport.bench``). Every timed call records two
clocks: the wall clock (``time.perf_counter``: the latency a caller waits for) and the CPU time of this process
(``time.process_time``: what the call cost). With one intra-op thread per framework the CPU time is the cost of a call
even on a busy machine: other programs can delay the call, which inflates its wall-clock time, but they add little to the
CPU time it used (an interruption costs some refilling of the caches; on a CPU with hyperthreads, a busy sibling thread
slows the core itself, which the A/A row shows). (The calling thread's CPU time, ``time.thread_time``, would be the same for ONNX Runtime and
PyTorch, but TensorFlow runs a ``tf.function`` on worker threads of its own: at batch 64 the calling thread used 0.36 ms of
a 1.52 ms call, the process 1.52 ms.) So a comparison of single-threaded candidates takes its ratios from CPU time
(``clock="cpu"``, the default); a comparison whose question is latency with several threads or concurrent requests
takes them from the wall clock (``clock="wall"``), and there the table's ``load`` says whether other programs used the
CPUs meanwhile, in which case ``verdict`` says "machine busy" instead of a speed verdict.

Timing numbers vary from run to run, so notebook cells that print them carry ``# NBVAL_IGNORE_OUTPUT``; tests check the
helpers' behaviour, never a speed. It imports nothing of labsupport.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import psutil

CLOCKS = ("cpu", "wall")
# Other programs' share of the machine's CPU time above which a wall-clock comparison is not trusted
BUSY_SHARE = 0.15
# A CPU-time comparison is still sound when the machine is busy, but its calls' wall/CPU above this says so
BUSY_WALL_PER_CPU = 1.2


def cpu_clock() -> float:
    """CPU seconds this process has used (all its threads): the clock that other programs cannot inflate."""
    return time.process_time()


@dataclass(frozen=True)
class Timing:
    """Statistics of one candidate at one batch size: wall-clock latency (ms), its throughput (items per second,
    from the median latency) and the CPU time of the same calls (ms)."""

    name: str
    batch_size: int
    runs: int
    min_ms: float
    median_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    throughput: float
    cpu_min_ms: float = float("nan")
    cpu_median_ms: float = float("nan")

    @classmethod
    def from_samples(cls, name: str, batch_size: int, seconds: Sequence[float], cpu_seconds: Sequence[float] | None = None) -> Timing:
        """Statistics of raw per-call durations in seconds (wall clock), and of their CPU time when given."""
        if len(seconds) == 0:
            raise ValueError(f"{name}: no timing samples")
        if cpu_seconds is not None and len(cpu_seconds) != len(seconds):
            raise ValueError(f"{name}: {len(cpu_seconds)} CPU-time samples for {len(seconds)} calls")
        ms = np.asarray(seconds, dtype=np.float64) * 1e3
        cpu_ms = np.asarray(cpu_seconds, dtype=np.float64) * 1e3 if cpu_seconds is not None else np.array([np.nan])
        median = float(np.median(ms))
        return cls(
            name=name,
            batch_size=batch_size,
            runs=len(ms),
            min_ms=float(ms.min()),
            median_ms=median,
            p90_ms=float(np.percentile(ms, 90)),
            p99_ms=float(np.percentile(ms, 99)),
            mean_ms=float(ms.mean()),
            throughput=batch_size / (median / 1e3) if median > 0 else float("inf"),
            cpu_min_ms=float(cpu_ms.min()),
            cpu_median_ms=float(np.median(cpu_ms)),
        )

    @property
    def wall_per_cpu(self) -> float:
        """Median wall-clock time / median CPU time: about 1 for a single-threaded call on a quiet machine, above 1 when
        the call waited (for the CPU, under load), below 1 when several threads worked on it."""
        return self.median_ms / self.cpu_median_ms if self.cpu_median_ms > 0 else float("nan")

    def statistic(self, clock: str = "cpu", statistic: str = "median") -> float:
        """The ``"median"`` or ``"min"`` milliseconds of the ``"cpu"`` or ``"wall"`` clock."""
        _check_clock(clock)
        if statistic not in ("median", "min"):
            raise ValueError(f"statistic must be 'median' or 'min', got {statistic!r}")
        value = getattr(self, f"{'cpu_' if clock == 'cpu' else ''}{statistic}_ms")
        if np.isnan(value):
            raise ValueError(f"{self.name}: no CPU time was recorded; use clock='wall'")
        return value


def _check_clock(clock: str) -> None:
    if clock not in CLOCKS:
        raise ValueError(f"clock must be 'cpu' (the cost of a single-threaded call) or 'wall' (latency), got {clock!r}")


@dataclass(frozen=True)
class Load:
    """What the rest of the machine did while a table was measured."""

    others_share: float  # share of all CPUs' time used by other programs during the measurement (0..1)
    load_average: float  # 1-minute load average at the end
    cpus: int  # logical CPUs the machine has (what the share is of)
    seconds: float  # how long the measurement took

    @property
    def busy(self) -> bool:
        """True when other programs used more than ``BUSY_SHARE`` of the CPUs: wall-clock ratios are not reliable."""
        return self.others_share > BUSY_SHARE

    def __str__(self) -> str:
        return (
            f"other programs used {self.others_share:.0%} of the {self.cpus} CPUs during the {self.seconds:.1f} s of measuring "
            f"(1-minute load average {self.load_average:.2f})"
        )


class LoadMeter:
    """Measures other programs' share of the CPUs between ``start()`` (or construction) and ``stop()``; with
    ``process_tree=True`` this process's descendants (services it started, for example) count as its own."""

    def __init__(self, process_tree: bool = False) -> None:
        self._me, self._process_tree = psutil.Process(), process_tree
        self.start()

    @staticmethod
    def _busy_seconds() -> float:
        times = psutil.cpu_times()
        return sum(times) - times.idle - getattr(times, "iowait", 0.0) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)

    def _own_seconds(self) -> float:
        own = self._me.cpu_times()
        if not self._process_tree:
            return own.user + own.system
        total = own.user + own.system + own.children_user + own.children_system  # children_*: descendants that ended
        for child in self._me.children(recursive=True):
            try:
                times = child.cpu_times()
            except psutil.NoSuchProcess:  # ended meanwhile
                continue
            total += times.user + times.system
        return total

    def start(self) -> None:
        """Start (again) from now."""
        self._wall, self._busy, self._own = time.perf_counter(), self._busy_seconds(), self._own_seconds()

    def stop(self) -> Load:
        """The Load since ``start()``."""
        seconds = max(time.perf_counter() - self._wall, 1e-9)
        others = (self._busy_seconds() - self._busy) - (self._own_seconds() - self._own)
        cpus = psutil.cpu_count() or 1
        return Load(min(max(others / (seconds * cpus), 0.0), 1.0), os.getloadavg()[0], cpus, seconds)


def _check_counts(warmup: int, repeat: int, batch_size: int) -> None:
    if warmup < 0 or repeat < 1 or batch_size < 1:
        raise ValueError(f"need warmup >= 0, repeat >= 1, batch_size >= 1; got {warmup}, {repeat}, {batch_size}")


def _timed_calls(fn: Callable[[], object], calls: int) -> tuple[list[float], list[float]]:
    """The wall-clock and CPU seconds of each of ``calls`` back-to-back calls of ``fn``."""
    wall, cpu = [], []
    for _ in range(calls):
        start, start_cpu = time.perf_counter(), cpu_clock()
        fn()
        cpu.append(cpu_clock() - start_cpu)
        wall.append(time.perf_counter() - start)
    return wall, cpu


def _warm_up(fn: Callable[[], object], calls: int) -> None:
    for _ in range(calls):
        fn()


def measure(fn: Callable[[], object], *, name: str = "candidate", batch_size: int = 1, warmup: int = 3, repeat: int = 30) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``repeat`` times timed (wall clock and CPU time); return its Timing."""
    _check_counts(warmup, repeat, batch_size)
    if not callable(fn):
        raise TypeError(f"measure() needs a callable taking no arguments, got {type(fn).__name__}")
    _warm_up(fn, warmup)
    return Timing.from_samples(name, batch_size, *_timed_calls(fn, repeat))


class _StepTimer:
    """A session whose ``run`` also records the seconds each call took on ``clock``; everything else is the wrapped session's."""

    def __init__(self, session: object, clock: Callable[[], float]) -> None:
        self._session, self._clock = session, clock
        self.seconds: list[float] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self._session, name)

    def run(self, *args: object, **kwargs: object) -> object:
        start = self._clock()
        outputs = self._session.run(*args, **kwargs)
        self.seconds.append(self._clock() - start)
        return outputs


def fastest_steps(loop: Callable[[object], object], session: object, *, repeat: int = 15, clock: str = "cpu") -> np.ndarray:
    """Seconds of each ``session.run`` call that ``loop(session)`` makes: the minimum per call index over ``repeat``
    runs, after one warm-up run (notebook 11), on the ``"cpu"`` clock (the cost of each step, for a session with one
    intra-op thread) or the ``"wall"`` clock.

    Other programs can only slow a call down. A long loop is rarely undisturbed from end to end, but each of its
    steps is in some repeat, so the sum of the per-step minima is steadier than the fastest whole run.
    """
    _check_counts(1, repeat, 1)
    _check_clock(clock)
    runs = []
    for _ in range(repeat + 1):
        timer = _StepTimer(session, cpu_clock if clock == "cpu" else time.perf_counter)
        loop(timer)
        runs.append(timer.seconds)
    counts = {len(seconds) for seconds in runs}
    if len(counts) != 1 or 0 in counts:
        raise ValueError(f"loop(session) must call session.run the same number of times (at least once) on every run, got {sorted(counts)}")
    return np.min(runs[1:], axis=0)


@dataclass
class BenchTable:
    """Timings of several candidates measured in one run, with ratios against a baseline on one ``clock``
    (``"cpu"``: cost of single-threaded calls; ``"wall"``: latency) and the ``load`` they were measured under."""

    timings: list[Timing]
    baseline: str
    clock: str = "cpu"
    load: Load | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _check_clock(self.clock)

    def _baseline_for(self, batch_size: int) -> Timing:
        for timing in self.timings:
            if timing.name == self.baseline and timing.batch_size == batch_size:
                return timing
        raise KeyError(f"no baseline {self.baseline!r} measured at batch size {batch_size}")

    def get(self, name: str, batch_size: int | None = None) -> Timing:
        """The timing of candidate ``name`` (at ``batch_size`` when several were measured)."""
        for timing in self.timings:
            if timing.name == name and batch_size in (None, timing.batch_size):
                return timing
        known = sorted({t.name for t in self.timings})
        raise KeyError(f"no timing for {name!r} at batch size {batch_size}; measured: {known}")

    def ratio(self, name: str, batch_size: int | None = None, *, statistic: str = "median", clock: str | None = None) -> float:
        """Time of ``name`` divided by the baseline's at the same batch size (<1: faster), on the table's clock unless
        ``clock`` is given: the ``"median"`` calls, or the ``"min"`` (fastest) ones, which other programs disturb least."""
        clock = clock or self.clock
        timing = self.get(name, batch_size)
        baseline = self._baseline_for(timing.batch_size)
        return timing.statistic(clock, statistic) / baseline.statistic(clock, statistic)

    @property
    def busy(self) -> bool:
        """True when this table's wall-clock ratios cannot be trusted: other programs used the CPUs while it was measured."""
        return self.load is not None and self.load.busy

    def verdict(self, name: str, batch_size: int | None = None, *, noise: float = 0.1) -> str:
        """``name`` against the baseline on the table's clock in words: "1.62x faster", "1.25x slower", "as fast (within
        ±10%)"; for a wall-clock table measured on a busy machine, "machine busy (...): ratio not reliable" instead."""
        if self.clock == "wall" and self.busy:
            return f"machine busy ({self.load.others_share:.0%} of the CPUs used by other programs): ratio not reliable"
        ratio = self.ratio(name, batch_size)
        _check_ratio(ratio, noise)
        if abs(ratio - 1) <= noise:
            return f"as fast (within ±{noise:.0%})"
        return f"{1 / ratio:.2f}x faster" if ratio < 1 else f"{ratio:.2f}x slower"

    def conditions(self, aa: str | None = None) -> str:
        """What the table was measured under: the load, and the largest wall/CPU of the ``aa`` row (default: the
        baseline) over the batch sizes measured."""
        name = aa or self.baseline
        rows = [t for t in self.timings if t.name == name and not np.isnan(t.cpu_median_ms)]
        parts = [str(self.load) if self.load is not None else "load not recorded"]
        if rows:
            worst = max(rows, key=lambda t: t.wall_per_cpu)
            at = f" (at batch {worst.batch_size})" if len(rows) > 1 else ""
            parts.append(f"wall/CPU of the {name!r} calls up to {worst.wall_per_cpu:.2f}{at}")
        return "; ".join(parts)

    def rows(self) -> list[dict[str, object]]:
        """One dict per timing: wall-clock and CPU milliseconds, and the speed-up (baseline / candidate) on the table's clock."""
        rows = []
        for t in self.timings:
            row: dict[str, object] = {
                "candidate": t.name,
                "batch": t.batch_size,
                "median ms": round(t.median_ms, 4),
                "p90 ms": round(t.p90_ms, 4),
                "CPU ms": round(t.cpu_median_ms, 4),
                "items/s": round(t.throughput, 1),
                f"speed-up vs {self.baseline} ({self.clock})": round(1 / self.ratio(t.name, t.batch_size), 2),
            }
            rows.append(row)
        return rows

    def to_frame(self):
        """The rows as a pandas DataFrame (how a notebook shows the table)."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def __str__(self) -> str:
        return self.to_frame().to_string(index=False)

    def to_json(self, path: Path, **extra: object) -> Path:
        """Write timings, ratios, the load and any ``extra`` fields as JSON; returns the path."""
        payload = {
            "baseline": self.baseline,
            "clock": self.clock,
            "load": asdict(self.load) if self.load is not None else None,
            "timings": [asdict(t) for t in self.timings],
            "rows": self.rows(),
            **extra,
        }
        path.write_text(json.dumps(payload, indent=2), encoding="utf-8")
        return path


def compare_candidates(
    candidates: Mapping[str, Callable[[], object]],
    *,
    baseline: str,
    batch_size: int = 1,
    warmup: int = 3,
    repeat: int = 30,
    blocks: int = 0,
    settle_s: float = 0.2,
    clock: str = "cpu",
) -> BenchTable:
    """Time several zero-argument callables in one run, ``repeat`` timed calls each; ratios against ``baseline`` on
    ``clock`` (``"cpu"`` for single-threaded candidates, ``"wall"`` for latency with threads); the table records the load.

    By default the calls are interleaved round by round, so slow drift hits all candidates alike.
    Candidates that disturb each other when interleaved, such as ORT sessions whose idle threads
    spin for a while after each run, are timed one at a time instead with ``blocks`` >= 1: each gets
    ``blocks`` blocks of ``repeat // blocks`` back-to-back calls (at least one), in turn, with
    ``settle_s`` seconds of quiet and its warm-up before every block (notebook 05).
    """
    _check_counts(warmup, repeat, batch_size)
    _check_clock(clock)
    if baseline not in candidates:
        raise KeyError(f"baseline {baseline!r} is not among the candidates {list(candidates)}")
    if blocks < 0 or settle_s < 0:
        raise ValueError(f"need blocks >= 0 (0: interleaved) and settle_s >= 0; got {blocks}, {settle_s}")
    meter = LoadMeter()
    if blocks:
        samples = _one_at_a_time(candidates, warmup, max(1, repeat // blocks), blocks, settle_s)
    else:
        samples = _interleaved(candidates, warmup, repeat)
    load = meter.stop()
    timings = [Timing.from_samples(name, batch_size, wall, cpu) for name, (wall, cpu) in samples.items()]
    return BenchTable(timings, baseline, clock, load)


Samples = dict[str, tuple[list[float], list[float]]]


def _interleaved(candidates: Mapping[str, Callable[[], object]], warmup: int, repeat: int) -> Samples:
    for fn in candidates.values():
        _warm_up(fn, warmup)
    samples: Samples = {name: ([], []) for name in candidates}
    for _ in range(repeat):
        for name, fn in candidates.items():
            _extend(samples[name], _timed_calls(fn, 1))
    return samples


def _one_at_a_time(candidates: Mapping[str, Callable[[], object]], warmup: int, per_block: int, blocks: int, settle_s: float) -> Samples:
    samples: Samples = {name: ([], []) for name in candidates}
    for _ in range(blocks):
        for name, fn in candidates.items():
            time.sleep(settle_s)
            _warm_up(fn, warmup)
            _extend(samples[name], _timed_calls(fn, per_block))
    return samples


def _extend(into: tuple[list[float], list[float]], calls: tuple[list[float], list[float]]) -> None:
    into[0].extend(calls[0])
    into[1].extend(calls[1])


def speed_verdict(ratio: float, noise: float = 0.1) -> str:
    """Words for a time ratio candidate / baseline: "1.62x faster than", "1.25x slower than", or
    "as fast as (within ±10%)" when the ratio is within the timing ``noise`` (notebook 05)."""
    _check_ratio(ratio, noise)
    if abs(ratio - 1) <= noise:
        return f"as fast as (within ±{noise:.0%})"
    return f"{1 / ratio:.2f}x faster than" if ratio < 1 else f"{ratio:.2f}x slower than"


def _check_ratio(ratio: float, noise: float) -> None:
    if not ratio > 0 or not 0 <= noise < 1:
        raise ValueError(f"need a time ratio > 0 and 0 <= noise < 1; got {ratio}, {noise}")


def merge_loads(loads: Sequence[Load]) -> Load:
    """One Load for measurements made one after the other: their total time, other programs' share over all of it
    (weighted by each one's time), the highest load average."""
    if not loads:
        raise ValueError("merge_loads() needs at least one Load")
    seconds = sum(load.seconds for load in loads)
    share = sum(load.others_share * load.seconds for load in loads) / seconds if seconds > 0 else 0.0
    return Load(share, max(load.load_average for load in loads), loads[0].cpus, seconds)


def merge(tables: Sequence[BenchTable]) -> BenchTable:
    """One table from several (e.g. one per batch size) that share a baseline and a clock, with their loads merged."""
    if not tables:
        raise ValueError("merge() needs at least one table")
    for what in ("baseline", "clock"):
        values = {getattr(table, what) for table in tables}
        if len(values) != 1:
            raise ValueError(f"tables have different {what}s: {sorted(values)}")
    loads = [table.load for table in tables if table.load is not None]
    return BenchTable(
        [t for table in tables for t in table.timings], tables[0].baseline, tables[0].clock, merge_loads(loads) if loads else None
    )


def plot(table: BenchTable, title: str = "Latency and throughput"):
    """Median time per call (wall clock: with the p90 as error bar) and throughput per batch size, one line per
    candidate, on the table's clock."""
    import matplotlib.pyplot as plt

    figure, (latency_ax, throughput_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for name in dict.fromkeys(t.name for t in table.timings):
        points = sorted((t for t in table.timings if t.name == name), key=lambda t: t.batch_size)
        batches = [t.batch_size for t in points]
        medians = [t.statistic(table.clock) for t in points]
        spread = [t.p90_ms - t.median_ms for t in points] if table.clock == "wall" else [0.0] * len(points)
        latency_ax.errorbar(batches, medians, yerr=[np.zeros(len(spread)), spread], marker="o", capsize=3, label=name)
        throughput_ax.plot(batches, [b / (m / 1e3) for b, m in zip(batches, medians, strict=True)], marker="o", label=name)
    what = "wall-clock latency, ms (bar: p90)" if table.clock == "wall" else "CPU time per call, ms"
    per = "items/s" if table.clock == "wall" else "items per CPU second"
    for ax, label in ((latency_ax, f"median {what}"), (throughput_ax, f"throughput, {per}")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    figure.suptitle(title)
    figure.tight_layout()
    return figure
