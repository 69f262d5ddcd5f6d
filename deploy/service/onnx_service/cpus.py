"""How many CPUs this process may really use: the scheduler affinity and the cgroup (v2 or v1) CPU quota.

``os.cpu_count()`` is the host's count. Inside a container limited with ``docker run --cpus=2``
(a cgroup CPU quota) or ``taskset``/``--cpuset-cpus`` (an affinity mask) it overstates what the
process gets, and a pool sized from it oversubscribes the cores it really has. Standard library
only: the container image imports it too.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuBudget:
    """The host's CPU count, the affinity mask's size, the cgroup quota in CPUs (None: unlimited) and what is usable."""

    host: int
    affinity: int | None
    quota: float | None

    @property
    def usable(self) -> int:
        """Whole CPUs to size thread pools by: the smallest limit, a fractional quota rounded down, at least 1."""
        limits = [self.host] + ([self.affinity] if self.affinity else []) + ([math.floor(self.quota)] if self.quota else [])
        return max(1, min(limits))

    def describe(self) -> str:
        """One line: usable CPUs and where the limit comes from."""
        quota = "none" if self.quota is None else f"{self.quota:g} CPUs"
        return f"{self.usable} usable CPUs (host {self.host}, affinity {self.affinity or 'n/a'}, cgroup quota {quota})"

    def as_dict(self) -> dict[str, object]:
        """The figures for JSON (GET /ready)."""
        return {"usable": self.usable, "host": self.host, "affinity": self.affinity, "cgroup_quota": self.quota}


def _mounts(root: Path) -> list[tuple[str, str, str, set[str]]]:
    """(fstype, cgroup root, mount point, super options) of every cgroup mount in /proc/self/mountinfo."""
    try:
        text = (root / "proc/self/mountinfo").read_text(encoding="utf-8")
    except OSError:
        return []
    mounts = []
    for line in text.splitlines():
        fields, _, rest = line.partition(" - ")
        parts, tail = fields.split(), rest.split()
        if len(parts) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            mounts.append((tail[0], parts[3], parts[4], set(tail[2].split(","))))
    return mounts


def _memberships(root: Path) -> dict[str, str]:
    """Controller list (``""`` for cgroup v2) -> this process's cgroup path, from /proc/self/cgroup."""
    try:
        text = (root / "proc/self/cgroup").read_text(encoding="utf-8")
    except OSError:
        return {}
    memberships = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            memberships[parts[1]] = parts[2]
    return memberships


def _read_limit(folder: Path, version: int) -> float | None:
    """The quota in CPUs set in one cgroup folder, None when unlimited or unreadable."""
    try:
        if version == 2:
            quota, period = (folder / "cpu.max").read_text(encoding="utf-8").split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        quota_us = int((folder / "cpu.cfs_quota_us").read_text(encoding="utf-8"))
        period_us = int((folder / "cpu.cfs_period_us").read_text(encoding="utf-8"))
        return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def cgroup_quota(root: Path | str = "/") -> float | None:
    """The tightest CPU quota (in CPUs, e.g. 1.5) on this process's cgroup and its ancestors; None when unlimited.

    ``root`` is the filesystem root to read ``proc/self/{mountinfo,cgroup}`` and the cgroup files
    from (tests pass a fake tree).
    """
    root = Path(root)
    memberships = _memberships(root)
    limits = []
    for fstype, cgroup_root, mount_point, options in _mounts(root):
        if fstype == "cgroup2":
            version, path = 2, memberships.get("")
        elif "cpu" in options:
            version, path = 1, next((p for c, p in memberships.items() if "cpu" in c.split(",")), None)
        else:
            continue
        if path is None:
            continue
        relative = os.path.relpath(path, cgroup_root) if path.startswith(cgroup_root) else "."
        top = root / mount_point.lstrip("/")
        folder = top / relative if relative != "." else top
        if ".." in Path(relative).parts or not folder.is_dir():
            folder = top  # the cgroup namespace hides our path: the mount point is our cgroup
        while True:
            limit = _read_limit(folder, version)
            if limit is not None:
                limits.append(limit)
            if folder == top or top not in folder.parents:
                break
            folder = folder.parent
    return min(limits) if limits else None


def cpu_budget(root: Path | str = "/") -> CpuBudget:
    """The CPUs this process may use now: host count, affinity mask (Linux) and cgroup quota."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return CpuBudget(host=os.cpu_count() or 1, affinity=affinity, quota=cgroup_quota(root))


def usable_cpus() -> int:
    """Whole CPUs this process may use (what ``cpu_budget().usable`` says)."""
    return cpu_budget().usable
