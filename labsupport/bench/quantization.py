"""Measuring quantized variants, the course's targets, and ``python -m labsupport.bench quantization``.

Introduced in notebook 06 (section 8): ``measure_variants`` takes the files that
``labsupport.topics.quantization.build_variants`` makes and measures file size, test accuracy and
median latency per batch size of each, in one run; the ``VariantReport`` it returns gives the ratios
against FP32, the timing noise that the A/A row shows, a table and a plot; ``check_targets`` holds
the course's targets for them.

Speed is compared on CPU time (``labsupport.onnxutil.timing``): each session has one intra-op thread, so the CPU
time of a call is its cost even when other programs share the machine, which inflates wall-clock times (by 2-5x for
runs of a few milliseconds while short runs stay clean, so wall-clock ratios between a long and a short candidate
are exaggerated). The wall clock is shown next to it, with the load the run saw.

The suite is the headless twin of notebook 06: it builds each model's variants (INT8 dynamic and
INT8 static QDQ per-channel, both with 7-bit weights; INT4 weight-only where the model has MatMul
weights; FP16; the FP32 file again as an A/A control) under ``artifacts/quantization/``, measures
them at batch 1 and 64, prints the ratios and the targets' verdicts and writes
``artifacts/bench_quantization.json``. Exit status 0 even when a timing target is missed (the
report says which and why); 1 when a size or accuracy target is missed.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from onnxruntime import InferenceSession

from labsupport.course.data import load_digits
from labsupport.course.paths import artifact, relative
from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.models.wide_mlp import ensure_digits_mlp
from labsupport.onnxutil.sessions import open_session
from labsupport.onnxutil.timing import BenchTable, Load, compare_candidates, merge, speed_verdict
from labsupport.topics.hardware import cpu_features
from labsupport.topics.quantization import AA_NAME, accuracy, build_variants, inputs_for

NOISE_FLOOR = 0.10  # latency ratios within 1 +- 10% (or the A/A deviation, if larger) are no measurable difference
RATIO_VARIANTS = ("INT8 dynamic", "INT8 static", "INT4 weights", "FP16", AA_NAME)
TEST_IMAGES = 540  # one test image is 100 / 540 = 0.185 accuracy points
# An INT8 dot-product instruction (x86 VNNI vpdpbusd, Arm sdot) does 4x the multiply-adds of an FP32 FMA of the same
# width, and INT8 weights are 4x smaller to fetch: where that is the CPU's fastest INT8 instruction, a speed-up of INT8
# over FP32 much beyond 4x is a measuring error. Matrix instructions go further (Intel AMX tiles, Arm i8mm's smmla):
# there no ceiling is claimed.
INT8_SPEEDUP_CEILING = 5.0
MATRIX_INT8_FEATURES = ("amx_int8", "i8mm")


def int8_ceiling() -> float | None:
    """``INT8_SPEEDUP_CEILING`` on CPUs whose fastest INT8 instruction is a dot product (VNNI, SDOT, or none), else None."""
    return None if any(feature in cpu_features().features for feature in MATRIX_INT8_FEATURES) else INT8_SPEEDUP_CEILING


# --------------------------------------------------------------------------------------------
# measuring


@dataclass
class VariantResult:
    """Size, test accuracy and median CPU time and wall-clock latency (ms, per batch size) of one model file (notebook 06)."""

    name: str
    size_kb: float
    accuracy: float
    cpu_ms: dict[int, float] = field(default_factory=dict)
    latency_ms: dict[int, float] = field(default_factory=dict)


@dataclass
class VariantReport:
    """Measurements of several variants of one model, with ratios against ``baseline`` (notebook 06)."""

    model: str
    baseline: str
    results: list[VariantResult]
    threads: int = 1
    load: Load | None = None

    def get(self, name: str) -> VariantResult:
        """The result of the variant called ``name``."""
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(f"no variant {name!r}; measured: {[r.name for r in self.results]}")

    def size_ratio(self, name: str) -> float:
        """File size of ``name`` / the baseline's (below 1: smaller)."""
        return self.get(name).size_kb / self.get(self.baseline).size_kb

    def latency_ratio(self, name: str, batch_size: int, clock: str = "cpu") -> float:
        """Median CPU time (``clock="wall"``: wall-clock latency) of ``name`` / the baseline's at ``batch_size`` (below 1: faster)."""
        if clock not in ("cpu", "wall"):
            raise ValueError(f"clock must be 'cpu' or 'wall', got {clock!r}")
        field_name = "cpu_ms" if clock == "cpu" else "latency_ms"
        mine, base = getattr(self.get(name), field_name), getattr(self.get(self.baseline), field_name)
        if batch_size not in mine or batch_size not in base:
            raise KeyError(f"latency at batch {batch_size} was not measured (measured: {sorted(base)})")
        return mine[batch_size] / base[batch_size]

    def timing_noise(self, batch_size: int) -> float:
        """Relative latency differences below this are noise: the A/A deviation ``|ratio(AA_NAME) - 1|``, at least ``NOISE_FLOOR``."""
        try:
            deviation = abs(self.latency_ratio(AA_NAME, batch_size) - 1)
        except KeyError:
            deviation = 0.0
        return max(deviation, NOISE_FLOOR)

    def speed_text(self, name: str, batch_size: int) -> str:
        """``name``'s CPU time against the baseline in words, saying so when the difference is inside the timing noise
        and when an INT8 speed-up exceeds what this CPU's INT8 instructions allow (``int8_ceiling``)."""
        ratio, noise = self.latency_ratio(name, batch_size), self.timing_noise(batch_size)
        measured = f"{ratio:.2f}x the {self.baseline} CPU time at batch {batch_size}"
        if noise >= 1:  # the A/A control took twice as long or more: no difference is measurable
            return f"{measured}: no verdict, the A/A control differed by {noise:.0%}"
        text = f"{measured}: {speed_verdict(ratio, noise=noise)} {self.baseline}"
        ceiling = int8_ceiling()
        if name.startswith("INT8") and ceiling is not None and 1 / ratio > ceiling:
            text += " (beyond the ~4x that INT8 dot products can gain over FP32 on this CPU: a measuring error)"
        return text

    def conditions(self) -> str:
        """What the timings were measured under: the load, and wall/CPU of the baseline's calls per batch size."""
        base = self.get(self.baseline)
        spread = ", ".join(f"{base.latency_ms[b] / base.cpu_ms[b]:.2f} at batch {b}" for b in sorted(base.cpu_ms) if base.cpu_ms[b] > 0)
        return f"{self.load if self.load is not None else 'load not recorded'}; wall/CPU of the {self.baseline} calls: {spread}"

    def accuracy_delta(self, name: str) -> float:
        """Accuracy change of ``name`` against the baseline, in percentage points (positive: better).

        Both accuracies are rounded to 0.1 % first, as every table shows them, so the change always
        equals the difference of the printed accuracies (99.3 -> 99.4 is +0.1, never +0.2).
        """
        mine, base = round(100 * self.get(name).accuracy, 1), round(100 * self.get(self.baseline).accuracy, 1)
        return round(mine - base, 1)

    def _row(self, result: VariantResult, timings: bool, accuracy: bool) -> dict[str, object]:
        row: dict[str, object] = {
            "variant": result.name,
            "size KiB": round(result.size_kb),
            "size ratio": round(self.size_ratio(result.name), 2),
        }
        if accuracy:
            row["accuracy %"] = round(100 * result.accuracy, 1)
            row["Δ acc (points)"] = f"{self.accuracy_delta(result.name):+.1f}"
        if timings:
            for batch, ms in sorted(result.cpu_ms.items()):
                row[f"CPU ms @ batch {batch}"] = round(ms, 3)
                row[f"CPU ratio @ {batch}"] = round(self.latency_ratio(result.name, batch), 2)
                row[f"wall ms @ batch {batch}"] = round(result.latency_ms[batch], 3)
        return row

    def rows(self, timings: bool = True, accuracy: bool = True) -> list[dict[str, object]]:
        """One row per variant; ``timings=False`` leaves the run-dependent latency columns out, ``accuracy=False``
        the accuracy columns (after integer quantization they depend on the CPU's kernels)."""
        return [self._row(result, timings, accuracy) for result in self.results]

    def to_frame(self, timings: bool = True, accuracy: bool = True):
        """The rows as a pandas DataFrame indexed by variant."""
        import pandas as pd

        return pd.DataFrame(self.rows(timings, accuracy)).set_index("variant")

    def within(self, points: float = 1.0) -> bool:
        """True when every variant's test accuracy is within ``points`` percentage points of the baseline's."""
        base = self.get(self.baseline).accuracy
        return all(abs(result.accuracy - base) * 100 <= points for result in self.results)

    def to_dict(self) -> dict[str, object]:
        """The measurements as plain data (what the suite writes to JSON)."""
        load = asdict(self.load) if self.load is not None else None
        return {
            "model": self.model,
            "baseline": self.baseline,
            "threads": self.threads,
            "load": load,
            "results": [asdict(r) for r in self.results],
        }

    def plot(self, ax=None, batch_size: int = 64):
        """Scatter of size ratio vs CPU-time ratio (log scale) at ``batch_size``; the legend gives accuracy deltas."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(5.5, 4))
        for result in self.results:
            x, y = self.size_ratio(result.name), self.latency_ratio(result.name, batch_size)
            colour, marker = VARIANT_STYLES.get(result.name, ("black", "X"))
            label = f"{result.name} ({self.accuracy_delta(result.name):+.1f} pt acc.)"
            ax.scatter(x, y, s=60, color=colour, marker=marker, label=label, alpha=0.8)
        ax.axhline(1, color="grey", lw=0.8, ls="--")
        ax.axvline(1, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("file size / FP32")
        ax.set_ylabel(f"median CPU time / FP32 (batch {batch_size})")
        ax.set_title(self.model)
        ax.set_xlim(0, 1.15)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        return ax


# one colour and marker per variant name, the same in every panel (notebook 06 plots two models side by side)
VARIANT_STYLES = {
    "FP32": ("tab:blue", "o"),
    AA_NAME: ("tab:gray", "o"),
    "INT8 dynamic": ("tab:orange", "s"),
    "INT8 static": ("tab:green", "D"),
    "INT4 weights": ("tab:red", "v"),
    "FP16": ("tab:purple", "^"),
    "INT8 static QOperator": ("tab:brown", "P"),
    "INT8 static QOperator, U8 activations": ("tab:pink", "*"),
}


def _latencies(
    variants: Mapping[str, str | Path], sessions: Mapping[str, InferenceSession], *, baseline: str, batch: int, warmup: int, repeat: int
) -> BenchTable:
    """CPU time and latency of each variant's session at ``batch``, measured interleaved on real test digits."""
    test = load_digits().test
    if batch > len(test):
        raise ValueError(f"batch size {batch} exceeds the {len(test)} test images")
    candidates = {}
    for name, path in variants.items():
        input_name, data = inputs_for(path, test)
        feed = {input_name: np.ascontiguousarray(data[:batch])}
        candidates[name] = lambda s=sessions[name], f=feed: s.run(None, f)
    return compare_candidates(candidates, baseline=baseline, batch_size=batch, warmup=warmup, repeat=repeat)


def measure_variants(
    variants: Mapping[str, str | Path],
    *,
    model: str = "model",
    baseline: str = "FP32",
    batch_sizes: Sequence[int] = (1, 64),
    threads: int = 1,
    warmup: int = 5,
    repeat: int = 30,
    timings: bool = True,
) -> VariantReport:
    """File size, test accuracy and (``timings=True``) median CPU time and latency per batch size of each variant, in one run.

    Calls are timed interleaved across variants (``labsupport.onnxutil.timing.compare_candidates``) on real test
    digits, with ``threads`` intra-op threads (keep 1: then the CPU time is the cost). Introduced in notebook 06.
    """
    if baseline not in variants:
        raise KeyError(f"baseline {baseline!r} is not among the variants {list(variants)}")
    if not batch_sizes or any(not isinstance(b, int) or b < 1 for b in batch_sizes):
        raise ValueError(f"batch_sizes must be positive ints, got {batch_sizes!r}")
    results = {}
    for name, path in variants.items():
        correct = accuracy(path)  # first: a clear error for a missing file
        results[name] = VariantResult(name, Path(path).stat().st_size / 1024, correct)
    sessions = {name: open_session(path, threads=threads) for name, path in variants.items()} if timings else {}
    tables = (
        [_latencies(variants, sessions, baseline=baseline, batch=batch, warmup=warmup, repeat=repeat) for batch in batch_sizes]
        if timings
        else []
    )
    for table in tables:
        for timed in table.timings:
            results[timed.name].cpu_ms[timed.batch_size] = timed.cpu_median_ms
            results[timed.name].latency_ms[timed.batch_size] = timed.median_ms
    return VariantReport(model, baseline, list(results.values()), threads, merge(tables).load if tables else None)


# --------------------------------------------------------------------------------------------
# the course's targets for notebook 06 and this suite


@dataclass(frozen=True)
class Target:
    """One target of notebook 06 and the suite: ``value`` must be <= ``limit`` (or >= ``limit`` when ``at_least``)."""

    model: str
    what: str
    value: float
    limit: float
    timing: bool  # True when the value is a CPU-time ratio (varies from run to run)
    at_least: bool = False  # True for accuracy changes: higher is better
    fmt: str = ".2f"  # how the value is printed
    cpu_dependent: bool = False  # True when the value depends on the CPU's kernels (accuracy after quantization)

    @property
    def met(self) -> bool:
        """True when the value is on the right side of the limit."""
        return self.value >= self.limit if self.at_least else self.value <= self.limit

    @property
    def _relation(self) -> str:
        return ">=" if self.at_least else "<="

    def __str__(self) -> str:
        return f"{'MET ' if self.met else 'MISSED'}  {self.model}: {self.what} = {self.value + 0.0:{self.fmt}} (target {self._relation} {self.limit:g})"

    @property
    def verdict(self) -> str:
        """Like ``str(target)``, without the value when it varies by run or CPU: the same text on every machine."""
        if not (self.timing or self.cpu_dependent):
            return str(self)
        return f"{'MET ' if self.met else 'MISSED'}  {self.model}: {self.what} {self._relation} {self.limit:g}"


def _accuracy_target(report: VariantReport, name: str) -> Target:
    what = f"{name} accuracy change (points)"
    return Target(report.model, what, report.accuracy_delta(name), -1.0, False, at_least=True, fmt="+.1f", cpu_dependent=True)


def check_targets(mlp: VariantReport, cnn: VariantReport | None = None, batch_size: int = 64) -> list[Target]:
    """The course's targets: wide MLP INT8 size ratio <= 0.27, CPU-time ratio <= 0.5 at batch 64,
    accuracy change >= -1 point; CNN static per-channel QDQ accuracy change >= -1 point (notebook 06)."""
    targets = []
    for name in ("INT8 dynamic", "INT8 static"):
        targets.append(Target(mlp.model, f"{name} size ratio", mlp.size_ratio(name), 0.27, False))
        if batch_size in mlp.get(name).cpu_ms:
            targets.append(Target(mlp.model, f"{name} CPU-time ratio @ batch {batch_size}", mlp.latency_ratio(name, batch_size), 0.5, True))
        targets.append(_accuracy_target(mlp, name))
    if cnn is not None:
        targets.append(_accuracy_target(cnn, "INT8 static"))
    return targets


# --------------------------------------------------------------------------------------------
# the suite


def _measured(report: VariantReport) -> list[str]:
    names = {result.name for result in report.results}
    return [name for name in RATIO_VARIANTS if name in names]


def _ratio_lines(report: VariantReport) -> list[str]:
    fp32 = report.get("FP32")
    lines = [
        f"{report.model} (baseline FP32: {fp32.size_kb:,.0f} KiB, accuracy {100 * fp32.accuracy:.1f}%)",
        f"  {'variant':<18}{'size/FP32':>10}{'CPU/FP32 b1':>13}{'CPU/FP32 b64':>14}{'wall/FP32 b64':>15}{'Δacc pt':>9}",
    ]
    for name in _measured(report):
        lines.append(
            f"  {name:<18}{report.size_ratio(name):>10.2f}{report.latency_ratio(name, 1):>13.2f}"
            f"{report.latency_ratio(name, 64):>14.2f}{report.latency_ratio(name, 64, clock='wall'):>15.2f}{report.accuracy_delta(name):>+9.1f}"
        )
    noise = {batch: report.timing_noise(batch) for batch in (1, 64)}
    lines.append(
        f"  timing noise (A/A, at least 10%): ±{noise[1]:.0%} at batch 1, ±{noise[64]:.0%} at batch 64; "
        f"accuracy resolution: 1 test image = {100 / TEST_IMAGES:.3f} points"
    )
    lines.append(f"  measured under: {report.conditions()}")
    return lines


def _ratios(report: VariantReport) -> dict[str, dict[str, float]]:
    return {
        name: {
            "size": report.size_ratio(name),
            "cpu_time_b1": report.latency_ratio(name, 1),
            "cpu_time_b64": report.latency_ratio(name, 64),
            "wall_clock_b64": report.latency_ratio(name, 64, clock="wall"),
            "accuracy_delta_points": report.accuracy_delta(name),
        }
        for name in _measured(report)
    }


def _write_json(path: Path, payload: Mapping[str, object]) -> Path:
    path.write_text(json.dumps(payload, indent=2, default=float), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    """Run the suite; prints the ratio table and target verdicts, writes artifacts/bench_quantization.json."""
    parser = argparse.ArgumentParser(prog="python -m labsupport.bench quantization")
    parser.add_argument("--repeat", type=int, default=30, help="timed runs per variant and batch size")
    parser.add_argument("--threads", type=int, default=1, help="ORT intra-op threads per session")
    args = parser.parse_args(argv or [])

    cpu = cpu_features()
    print(cpu)
    folder = artifact("quantization/bench")
    folder.mkdir(parents=True, exist_ok=True)
    models = (("wide MLP 64-2048-2048-10", ensure_digits_mlp()), ("digits CNN", ensure_digits_cnn()))
    reports = [
        measure_variants(build_variants(src, folder), model=model, threads=args.threads, repeat=args.repeat) for model, src in models
    ]
    for report in reports:
        print("\n" + "\n".join(_ratio_lines(report)))
    print("\nNo INT4 row for the CNN: MatMulNBits quantizes MatMul weights only, and the CNN has Conv and Gemm.")
    targets = check_targets(*reports)
    print("\nTargets:")
    for target in targets:
        print(f"  {target}")
    if any(t.timing and not t.met for t in targets):
        print(
            "  A CPU-time target was missed: check the CPU features above "
            "(without VNNI/AMX the INT8 kernels have little advantage over FP32)."
        )
    payload = {
        "cpu": {"arch": cpu.arch, "features": cpu.features, "int8_dot_product": cpu.int8_dot_product},
        "threads": args.threads,
        "models": [r.to_dict() for r in reports],
        "ratios": {r.model: _ratios(r) for r in reports},
        "targets": [{"model": t.model, "what": t.what, "value": t.value, "limit": t.limit, "met": t.met} for t in targets],
    }
    print(f"\nwrote {relative(_write_json(artifact('bench_quantization.json'), payload))}")
    return 1 if any(not t.met and not t.timing for t in targets) else 0


if __name__ == "__main__":
    raise SystemExit(main())
