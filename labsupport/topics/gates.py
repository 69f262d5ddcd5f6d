"""The gates between registered versions and the ``champion`` alias: promotion, the first champion, rollback (notebook 13).

``gate`` re-runs the candidate and the champion on the same split and refuses a version that fails a
parity, accuracy or latency budget (``lifecycle.Budgets``), that a rollback took out of production, or
whose records cannot be read (it fails closed); ``promote`` moves the ``champion`` alias through that
gate and records that the version served (``first_champion`` does it for the very first, appointed by
a person); ``rollback`` restores a named version that served as champion before, gated on that
version's own evidence only (``rollback_gate``). The registry itself is ``labsupport.topics.lifecycle``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from labsupport.course.compare import compare
from labsupport.models import contract
from labsupport.models.contract import onnx_logits
from labsupport.onnxutil.sessions import open_session
from labsupport.onnxutil.timing import compare_candidates
from labsupport.topics.lifecycle import (
    CHALLENGER,
    CHAMPION,
    PREVIOUS,
    ROLLED_BACK,
    SERVED,
    SPLIT,
    Budgets,
    Registry,
    split_fingerprint,
    version_number,
)

DEFAULT_BUDGETS = Budgets()  # frozen: one instance serves every call


@dataclass
class GateCheck:
    """One budget: its name, whether the version met it, the rule in words, and the measured figure (CPU-dependent)."""

    name: str
    passed: bool
    rule: str
    measured: str

    def __str__(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.rule}"


@dataclass
class GateReport:
    """The verdict on one version: every check, and ``passed`` only when there are checks and all of them passed."""

    version: str
    checks: list[GateCheck] = field(default_factory=list)
    action: str = "promoted"  # what the version may be when every check passed ("restored" for a rollback)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    def __str__(self) -> str:
        verdict = f"may be {self.action}" if self.passed else "REFUSED"
        return "\n".join([f"version {self.version}: {verdict}", *(f"  {check}" for check in self.checks)])

    def details(self) -> str:
        """The measured figures (they vary with the CPU: show them in an uncompared cell)."""
        return "\n".join(f"version {self.version} {check.name}: {check.measured}" for check in self.checks)


def latency_medians_ms(paths: list[Path], example: np.ndarray, repeat: int = 400) -> list[float]:
    """Median CPU time of a single-example run of each model in ms, one intra-op thread each (the run is the calling
    thread's work, so a busy machine does not inflate it: notebook 05), the runs interleaved (``compare_candidates``)."""
    sessions = [open_session(path, threads=1, spinning=False) for path in paths]
    runs = {str(index): lambda s=session: s.run(None, {s.get_inputs()[0].name: example}) for index, session in enumerate(sessions)}
    table = compare_candidates(runs, baseline="0", warmup=5, repeat=repeat)
    return [table.get(name).cpu_median_ms for name in runs]


def _reference_logits(registry: Registry, tags: dict[str, str]) -> np.ndarray:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="reference-") as folder:  # MLflow copies the artifact: no copy is left behind
        return np.load(registry.download(run_id=tags["run_id"], artifact_path="reference_logits.npy", dst_path=folder))


def _own_checks(registry: Registry, version: str, split: Any, budgets: Budgets) -> tuple[list[GateCheck], Path, float]:
    """The checks on a version's own evidence (parity, history), its sha256-checked file and its accuracy on ``split``."""
    path, tags = registry.model_path(version), registry.tags(version)
    logits = onnx_logits(path, split)
    parity = compare(
        _reference_logits(registry, tags),
        logits,
        atol=budgets.atol,
        rtol=budgets.rtol,
        name="registered artifact vs reference",
        raise_on_failure=False,
    )
    accuracy = contract.accuracy(logits, split.labels)
    checks = [
        GateCheck(
            "parity",
            parity.passed,
            f"outputs within atol={budgets.atol:g}, rtol={budgets.rtol:g} of the logged reference",
            f"max abs err {parity.max_abs:.2e}, max rel err {parity.max_rel:.2e}",
        ),
        GateCheck(
            "history",
            tags.get(ROLLED_BACK) != "true",
            f"not taken out of production by a rollback (no {ROLLED_BACK!r} tag)",
            f"{ROLLED_BACK}={tags.get(ROLLED_BACK, 'absent')}",
        ),
    ]
    return checks, path, accuracy


def _checks(registry: Registry, version: str, split: Any, budgets: Budgets) -> list[GateCheck]:
    checks, path, accuracy = _own_checks(registry, version, split, budgets)
    champion = registry.version_of(CHAMPION)
    if champion is None or champion == version:
        rule = f"accuracy >= {budgets.min_accuracy:.0%} (no other champion to compare with)"
        checks.append(GateCheck("accuracy", accuracy >= budgets.min_accuracy, rule, f"accuracy {accuracy:.2%}"))
        return checks
    champion_path = registry.model_path(champion)
    champion_accuracy = contract.accuracy(onnx_logits(champion_path, split), split.labels)
    floor = max(budgets.min_accuracy, champion_accuracy - budgets.max_accuracy_drop)
    candidate_ms, champion_ms = latency_medians_ms([path, champion_path], split.images[:1])
    return [
        *checks,
        GateCheck(
            "accuracy",
            accuracy >= floor,
            f"accuracy >= {budgets.min_accuracy:.0%} and at most {budgets.max_accuracy_drop * 100:g} point(s) below "
            f"champion version {champion} on the same split",
            f"accuracy {accuracy:.2%}, champion {champion_accuracy:.2%} (floor {floor:.2%})",
        ),
        GateCheck(
            "latency",
            candidate_ms <= budgets.max_latency_ratio * champion_ms,
            f"median single-example run <= {budgets.max_latency_ratio:g}x champion version {champion}'s (CPU time, side by side)",
            f"median {candidate_ms:.4f} ms, champion {champion_ms:.4f} ms of CPU time (ratio {candidate_ms / champion_ms:.2f})",
        ),
    ]


def gate(registry: Registry, version: int | str, split: Any, budgets: Budgets = DEFAULT_BUDGETS) -> GateReport:
    """Run the registered artifact of ``version`` and the champion's on ``split`` and check ``budgets``; fails closed.

    Parity: the artifact's outputs vs the reference logits logged with it (``labsupport.course.compare``).
    History: a version that a rollback took out of production (tag ``rolled_back``) is refused until a
    person removes the tag. Accuracy: at least ``min_accuracy`` and at most ``max_accuracy_drop`` below the champion's, re-measured
    on the same split. Latency: median single-example run at most ``max_latency_ratio`` times the
    champion's, both measured in alternating rounds. Any error reading either version (a missing record,
    a file whose sha256 differs from the recorded one, an unreadable store, a version that is not a number) refuses the
    version with the reason.
    """
    try:
        version = version_number(version)
        return GateReport(version, _checks(registry, version, split, budgets))
    except Exception as error:  # fail closed: whatever could not be read or verified is a refusal, with its reason
        reason = f"{type(error).__name__}: {error}"
        return GateReport(str(version), [GateCheck("records", False, f"could not read or verify the versions ({reason})", reason)])


def _crown(registry: Registry, version: str) -> None:
    """Point ``champion`` at ``version`` and record, in its ``served_as_champion`` tag, that it served (UTC time)."""
    import datetime

    registry.client.set_registered_model_alias(registry.name, CHAMPION, version)
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    registry.client.set_model_version_tag(registry.name, version, SERVED, now)


def first_champion(registry: Registry, version: int | str) -> None:
    """A person appoints the very first champion (there is nothing to gate it against); refused when one exists.

    Sets the ``champion`` alias, as ``set_registered_model_alias`` does, and records that the version served,
    which makes it a possible rollback target later.
    """
    current = registry.version_of(CHAMPION)
    if current is not None:
        raise ValueError(f"version {current} is champion already: a new champion goes through promote(), an old one through rollback()")
    version = version_number(version)
    registry.client.get_model_version(registry.name, version)  # a version that does not exist raises here
    _crown(registry, version)


def promote(registry: Registry, version: int | str, split: Any, budgets: Budgets = DEFAULT_BUDGETS) -> GateReport:
    """Gate ``version``; when it passes, point ``champion`` at it (recorded as served) and ``previous`` at the old champion."""
    report = gate(registry, version, split, budgets)
    if report.passed:
        old = registry.version_of(CHAMPION)
        if old and old != report.version:
            registry.client.set_registered_model_alias(registry.name, PREVIOUS, old)
        _crown(registry, report.version)
    return report


def _rollback_checks(registry: Registry, version: str, split: Any, budgets: Budgets) -> list[GateCheck]:
    tags = registry.tags(version)
    served = GateCheck(
        "served",
        SERVED in tags,
        f"served as champion before (a {SERVED!r} tag, set by promote or first_champion): a rollback restores, it never promotes",
        f"{SERVED}={tags.get(SERVED, 'absent')}",
    )
    same_split = GateCheck(
        "split",
        tags.get(SPLIT) == split_fingerprint(split),
        "the split it was registered with (its reference outputs and accuracy were recorded on that split)",
        f"{SPLIT} recorded {tags.get(SPLIT, 'absent')[:12]}, this split {split_fingerprint(split)[:12]}",
    )
    if not same_split.passed:  # nothing recorded can be compared with what this split would measure
        return [served, same_split]
    checks, _path, accuracy = _own_checks(registry, version, split, budgets)
    recorded = float(tags["accuracy"])
    floor = max(budgets.min_accuracy, recorded - budgets.max_accuracy_drop)
    rule = (
        f"accuracy >= {budgets.min_accuracy:.0%} and at most {budgets.max_accuracy_drop * 100:g} point(s) below "
        "the accuracy recorded when it was registered (the champion being replaced is not consulted)"
    )
    return [
        served,
        same_split,
        *checks,
        GateCheck("accuracy", accuracy >= floor, rule, f"accuracy {accuracy:.2%}, recorded {recorded:.2%}"),
    ]


def rollback_gate(registry: Registry, version: int | str, split: Any, budgets: Budgets = DEFAULT_BUDGETS) -> GateReport:
    """The gate of a rollback target, on its own evidence only; fails closed like ``gate``.

    The target must have served as champion before (its ``served_as_champion`` tag: a version that never
    served, a refused one or a mistyped number, is refused), its registered file must match the recorded
    sha256, ``split`` must be the one it was registered with, its outputs the reference logged with it, its
    accuracy on ``split`` the floor and the accuracy recorded with it (within ``max_accuracy_drop``), and it
    must not carry a ``rolled_back`` tag. The champion being abandoned is never read: a champion that is broken, slower or whose file was
    damaged cannot block the way back.
    """
    try:
        version = version_number(version)
        return GateReport(version, _rollback_checks(registry, version, split, budgets), action="restored")
    except Exception as error:
        reason = f"{type(error).__name__}: {error}"
        return GateReport(
            str(version), [GateCheck("records", False, f"could not read or verify the version ({reason})", reason)], "restored"
        )


def _already_champion(registry: Registry, version: int | str) -> GateReport | None:
    """The report of a rollback to the champion's own number (2, "2" or "02"), None otherwise or when it cannot be read."""
    with contextlib.suppress(Exception):  # a version that is not a number, an unreadable store: rollback_gate refuses it
        number = version_number(version)
        if registry.version_of(CHAMPION) == number:
            return GateReport(number, [GateCheck(CHAMPION, True, "already champion: nothing changed", f"{CHAMPION}={number}")], "kept")
    return None


def rollback(registry: Registry, version: int | str, split: Any, budgets: Budgets = DEFAULT_BUDGETS) -> GateReport:
    """Make ``version``, which served as champion before, the champion again, through ``rollback_gate``; twice changes nothing more.

    The version rolled back from is tagged ``rolled_back`` (the gates then refuse it) and loses the
    ``challenger`` alias if it held it; ``previous`` is removed (it named the champion before the
    promotion that was undone). A refused rollback, or one to the champion itself, changes nothing.
    """
    unchanged = _already_champion(registry, version)
    if unchanged is not None:
        return unchanged
    report = rollback_gate(registry, version, split, budgets)
    if report.passed:
        version, current = report.version, registry.version_of(CHAMPION)
        _crown(registry, version)
        if current and current != version:
            registry.client.set_model_version_tag(registry.name, current, ROLLED_BACK, "true")
            if registry.version_of(CHALLENGER) == current:
                registry.client.delete_registered_model_alias(registry.name, CHALLENGER)
        if registry.version_of(PREVIOUS) is not None:
            registry.client.delete_registered_model_alias(registry.name, PREVIOUS)
    return report
