"""Latency and throughput measurement with warm-up and repeats, ratio tables and plots.

Introduced in notebook 05 (and used in 06, 07, 08, 11). Timing numbers vary from run to run, so
notebook cells that print them carry ``# NBVAL_IGNORE_OUTPUT``; tests check the helpers'
behaviour, never a speed. The headless suites of ``labsupport.bench`` use it too; it imports nothing of labsupport.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Timing:
    """Latency statistics of one candidate at one batch size (milliseconds, items per second)."""

    name: str
    batch_size: int
    runs: int
    min_ms: float
    median_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    throughput: float

    @classmethod
    def from_samples(cls, name: str, batch_size: int, seconds: Sequence[float]) -> Timing:
        """Statistics of raw per-call durations in seconds."""
        if len(seconds) == 0:
            raise ValueError(f"{name}: no timing samples")
        ms = np.asarray(seconds, dtype=np.float64) * 1e3
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
        )


def _check_counts(warmup: int, repeat: int, batch_size: int) -> None:
    if warmup < 0 or repeat < 1 or batch_size < 1:
        raise ValueError(f"need warmup >= 0, repeat >= 1, batch_size >= 1; got {warmup}, {repeat}, {batch_size}")


def _timed_calls(fn: Callable[[], object], calls: int) -> list[float]:
    """The duration in seconds of each of ``calls`` back-to-back calls of ``fn``."""
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def _warm_up(fn: Callable[[], object], calls: int) -> None:
    for _ in range(calls):
        fn()


def measure(fn: Callable[[], object], *, name: str = "candidate", batch_size: int = 1, warmup: int = 3, repeat: int = 30) -> Timing:
    """Call ``fn`` ``warmup`` times untimed, then ``repeat`` times timed; return its Timing."""
    _check_counts(warmup, repeat, batch_size)
    if not callable(fn):
        raise TypeError(f"measure() needs a callable taking no arguments, got {type(fn).__name__}")
    _warm_up(fn, warmup)
    return Timing.from_samples(name, batch_size, _timed_calls(fn, repeat))


class _StepTimer:
    """A session whose ``run`` also records how long each call took; everything else is the wrapped session's."""

    def __init__(self, session: object) -> None:
        self._session = session
        self.seconds: list[float] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self._session, name)

    def run(self, *args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        outputs = self._session.run(*args, **kwargs)
        self.seconds.append(time.perf_counter() - start)
        return outputs


def fastest_steps(loop: Callable[[object], object], session: object, *, repeat: int = 15) -> np.ndarray:
    """Seconds of each ``session.run`` call that ``loop(session)`` makes: the minimum per call index over ``repeat``
    runs, after one warm-up run (notebook 11).

    Other programs can only slow a call down. A long loop is rarely undisturbed from end to end, but each of its
    steps is in some repeat, so the sum of the per-step minima is steadier than the fastest whole run.
    """
    _check_counts(1, repeat, 1)
    runs = []
    for _ in range(repeat + 1):
        timer = _StepTimer(session)
        loop(timer)
        runs.append(timer.seconds)
    counts = {len(seconds) for seconds in runs}
    if len(counts) != 1 or 0 in counts:
        raise ValueError(f"loop(session) must call session.run the same number of times (at least once) on every run, got {sorted(counts)}")
    return np.min(runs[1:], axis=0)


@dataclass
class BenchTable:
    """Timings of several candidates measured in one run, with ratios against a baseline."""

    timings: list[Timing]
    baseline: str

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

    def ratio(self, name: str, batch_size: int | None = None, *, statistic: str = "median") -> float:
        """Latency of ``name`` divided by the baseline's at the same batch size (<1: faster): the ``"median"`` calls, or
        the ``"min"`` (fastest) ones, which other programs on the machine disturb least."""
        if statistic not in ("median", "min"):
            raise ValueError(f"statistic must be 'median' or 'min', got {statistic!r}")
        timing = self.get(name, batch_size)
        baseline = self._baseline_for(timing.batch_size)
        return getattr(timing, f"{statistic}_ms") / getattr(baseline, f"{statistic}_ms")

    def rows(self) -> list[dict[str, object]]:
        """One dict per timing, with ``vs <baseline>`` speed-up (baseline / candidate)."""
        return [
            {
                "candidate": t.name,
                "batch": t.batch_size,
                "median ms": round(t.median_ms, 4),
                "p90 ms": round(t.p90_ms, 4),
                "p99 ms": round(t.p99_ms, 4),
                "items/s": round(t.throughput, 1),
                f"speed-up vs {self.baseline}": round(1 / self.ratio(t.name, t.batch_size), 2),
            }
            for t in self.timings
        ]

    def to_frame(self):
        """The rows as a pandas DataFrame (how a notebook shows the table)."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def __str__(self) -> str:
        return self.to_frame().to_string(index=False)

    def to_json(self, path: Path, **extra: object) -> Path:
        """Write timings, ratios and any ``extra`` fields as JSON; returns the path."""
        payload = {"baseline": self.baseline, "timings": [asdict(t) for t in self.timings], "rows": self.rows(), **extra}
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
) -> BenchTable:
    """Time several zero-argument callables in one run, ``repeat`` timed calls each; ratios against ``baseline``.

    By default the calls are interleaved round by round, so slow drift hits all candidates alike.
    Candidates that disturb each other when interleaved, such as ORT sessions whose idle threads
    spin for a while after each run, are timed one at a time instead with ``blocks`` >= 1: each gets
    ``blocks`` blocks of ``repeat // blocks`` back-to-back calls (at least one), in turn, with
    ``settle_s`` seconds of quiet and its warm-up before every block (notebook 05).
    """
    _check_counts(warmup, repeat, batch_size)
    if baseline not in candidates:
        raise KeyError(f"baseline {baseline!r} is not among the candidates {list(candidates)}")
    if blocks < 0 or settle_s < 0:
        raise ValueError(f"need blocks >= 0 (0: interleaved) and settle_s >= 0; got {blocks}, {settle_s}")
    if blocks:
        samples = _one_at_a_time(candidates, warmup, max(1, repeat // blocks), blocks, settle_s)
    else:
        samples = _interleaved(candidates, warmup, repeat)
    return BenchTable([Timing.from_samples(name, batch_size, values) for name, values in samples.items()], baseline)


def _interleaved(candidates: Mapping[str, Callable[[], object]], warmup: int, repeat: int) -> dict[str, list[float]]:
    for fn in candidates.values():
        _warm_up(fn, warmup)
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeat):
        for name, fn in candidates.items():
            samples[name] += _timed_calls(fn, 1)
    return samples


def _one_at_a_time(
    candidates: Mapping[str, Callable[[], object]], warmup: int, per_block: int, blocks: int, settle_s: float
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(blocks):
        for name, fn in candidates.items():
            time.sleep(settle_s)
            _warm_up(fn, warmup)
            samples[name] += _timed_calls(fn, per_block)
    return samples


def speed_verdict(ratio: float, noise: float = 0.1) -> str:
    """Words for a latency ratio candidate / baseline: "1.62x faster than", "1.25x slower than", or
    "as fast as (within ±10%)" when the ratio is within the timing ``noise`` (notebook 05)."""
    if not ratio > 0 or not 0 <= noise < 1:
        raise ValueError(f"need a latency ratio > 0 and 0 <= noise < 1; got {ratio}, {noise}")
    if abs(ratio - 1) <= noise:
        return f"as fast as (within ±{noise:.0%})"
    return f"{1 / ratio:.2f}x faster than" if ratio < 1 else f"{ratio:.2f}x slower than"


def merge(tables: Sequence[BenchTable]) -> BenchTable:
    """One table from several (e.g. one per batch size) that share a baseline."""
    if not tables:
        raise ValueError("merge() needs at least one table")
    baselines = {table.baseline for table in tables}
    if len(baselines) != 1:
        raise ValueError(f"tables have different baselines: {sorted(baselines)}")
    return BenchTable([t for table in tables for t in table.timings], tables[0].baseline)


def plot(table: BenchTable, title: str = "Latency and throughput"):
    """Median latency (p90 as error bar) and throughput per batch size, one line per candidate."""
    import matplotlib.pyplot as plt

    figure, (latency_ax, throughput_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for name in dict.fromkeys(t.name for t in table.timings):
        points = sorted((t for t in table.timings if t.name == name), key=lambda t: t.batch_size)
        batches = [t.batch_size for t in points]
        medians = [t.median_ms for t in points]
        spread = [t.p90_ms - t.median_ms for t in points]
        latency_ax.errorbar(batches, medians, yerr=[np.zeros(len(spread)), spread], marker="o", capsize=3, label=name)
        throughput_ax.plot(batches, [t.throughput for t in points], marker="o", label=name)
    for ax, label in ((latency_ax, "median latency, ms (bar: p90)"), (throughput_ax, "throughput, items/s")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    figure.suptitle(title)
    figure.tight_layout()
    return figure
