"""ONNX Runtime's built-in profiler: run a model with it, read the JSON trace, sum the time per operator.

Introduced in notebook 05. ORT writes a Chrome-trace JSON (a list of events); the events with
``cat == "Node"`` and a name ending in ``_kernel_time`` are the kernels that ran, each with its
``op_name`` and the ``provider`` that executed it. ``Profile.op_table()`` is the per-operator time
table, ``hottest_op()`` the operator type with the largest total time, ``placement()`` which
provider ran which node (the way to see a partial fallback to the CPU).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from labsupport.onnxutil.graph import ModelLike
from labsupport.onnxutil.sessions import ProviderSpec, open_session, session_options

KERNEL_SUFFIX = "_kernel_time"


class TraceError(ValueError):
    """A file that is not an ONNX Runtime profile, or a profile without any kernel events."""


@dataclass(frozen=True)
class KernelEvent:
    """One kernel execution from the trace: node name, operator type, provider and duration (microseconds)."""

    node: str
    op_type: str
    provider: str
    duration_us: float


def load_trace(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The events of an ORT profile JSON file (raises TraceError when it is not one). Notebook 05."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no profile at {path} (expected the JSON file that end_profiling() returned)")
    try:
        events = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise TraceError(f"{path.name} is not JSON: {error}") from error
    if not isinstance(events, list) or not all(isinstance(e, dict) and "cat" in e and "dur" in e for e in events):
        raise TraceError(f"{path.name} is not an ONNX Runtime profile: expected a JSON list of events with 'cat' and 'dur'")
    return events


def kernel_events(events: Sequence[Mapping[str, Any]]) -> list[KernelEvent]:
    """The kernel executions among trace events (``cat == "Node"``, name ending in ``_kernel_time``)."""
    kernels = []
    for event in events:
        name = str(event.get("name", ""))
        if event.get("cat") != "Node" or not name.endswith(KERNEL_SUFFIX):
            continue
        args = event.get("args", {}) or {}
        kernels.append(
            KernelEvent(
                node=name[: -len(KERNEL_SUFFIX)],
                op_type=str(args.get("op_name", "?")),
                provider=str(args.get("provider", "?")),
                duration_us=float(event["dur"]),
            )
        )
    return kernels


@dataclass
class Profile:
    """A loaded profile: its file and kernel events, with per-operator tables (notebook 05)."""

    path: Path
    kernels: list[KernelEvent]

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Profile:
        """Read a profile JSON; raises TraceError when it contains no kernel events."""
        kernels = kernel_events(load_trace(path))
        if not kernels:
            raise TraceError(f"{Path(path).name} has no kernel events (did the session run at least once with profiling on?)")
        return cls(Path(path), kernels)

    def op_table(self):
        """DataFrame: one row per operator type with calls, total/mean time (µs) and share of kernel time, largest first."""
        import pandas as pd

        frame = pd.DataFrame([{"op_type": k.op_type, "us": k.duration_us} for k in self.kernels])
        grouped = frame.groupby("op_type")["us"].agg(calls="count", total_us="sum", mean_us="mean")
        grouped["share"] = grouped["total_us"] / grouped["total_us"].sum()
        return grouped.sort_values(["total_us", "calls"], ascending=[False, False]).reset_index()

    def hottest_op(self) -> str:
        """The operator type with the largest total kernel time."""
        return str(self.op_table()["op_type"].iloc[0])

    def node_providers(self) -> dict[str, tuple[str, str]]:
        """``{node name: (op type, provider)}`` for every node that ran, in first-run order."""
        placed: dict[str, tuple[str, str]] = {}
        for kernel in self.kernels:
            placed.setdefault(kernel.node, (kernel.op_type, kernel.provider))
        return placed

    def placement(self):
        """DataFrame: per provider, how many nodes it ran and which operator types (from the trace's provider field)."""
        import pandas as pd

        rows: dict[str, dict[str, Any]] = {}
        for op_type, provider in self.node_providers().values():
            row = rows.setdefault(provider, {"provider": provider, "nodes": 0, "op types": set()})
            row["nodes"] += 1
            row["op types"].add(op_type)
        return pd.DataFrame([{**row, "op types": ", ".join(sorted(row["op types"]))} for row in rows.values()]).sort_values(
            "nodes", ascending=False, ignore_index=True
        )

    def total_ms(self) -> float:
        """Sum of all kernel times in milliseconds."""
        return sum(k.duration_us for k in self.kernels) / 1e3


def profile_session(
    model: ModelLike,
    feeds: Mapping[str, np.ndarray],
    *,
    runs: int = 20,
    providers: Sequence[ProviderSpec] = ("CPUExecutionProvider",),
    options: ort.SessionOptions | None = None,
    prefix: str | os.PathLike[str] | None = None,
    output_names: Sequence[str] | None = None,
) -> Profile:
    """Run ``model`` ``runs`` times with ORT's profiler on and return the loaded Profile. Notebook 05.

    Profiling is switched on in ``options`` (the object passed in is modified); ``prefix`` is where
    the JSON goes (default ``artifacts/profiles/ort``; ORT appends a timestamp and ``.json``);
    ``output_names`` is what each run asks for (default: every output).
    """
    if not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs must be a whole number >= 1, got {runs!r}")
    if not isinstance(feeds, Mapping) or not feeds:
        raise ValueError("feeds must be a non-empty {input name: array} dict")
    from labsupport.course.paths import artifact

    options = options or session_options()
    options.enable_profiling = True
    options.profile_file_prefix = str(prefix if prefix is not None else artifact("profiles/ort"))
    session = open_session(model, providers=providers, options=options)
    names = None if output_names is None else list(output_names)
    for _ in range(runs):
        session.run(names, dict(feeds))
    return Profile.load(session.end_profiling())


def plot_op_times(profile: Profile, title: str = "Kernel time per operator type"):
    """Horizontal bar plot of total kernel time per operator type (largest on top)."""
    import matplotlib.pyplot as plt

    table = profile.op_table().iloc[::-1]
    figure, ax = plt.subplots(figsize=(7, 0.45 * len(table) + 1.2))
    ax.barh(table["op_type"], table["total_us"] / 1e3)
    ax.set_xlabel("total kernel time, ms")
    ax.set_title(title)
    for y, (total, share) in enumerate(zip(table["total_us"], table["share"], strict=True)):
        ax.text(total / 1e3, y, f" {share:.0%}", va="center")
    figure.tight_layout()
    return figure
