"""What is installed and whether it is what the course was written for.

Introduced in notebook 00. ``report()`` lists the course packages, Python, the ONNX Runtime
providers and the CPU count (with the CPUs this process may really use: affinity and cgroup quota);
``require(...)`` is the first line of every notebook's setup cell;
``python -m labsupport doctor`` prints the report and exits non-zero with a list of problems.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import platform
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from labsupport.course.paths import artifacts_dir, repo_root

if TYPE_CHECKING:
    from onnx_service.cpus import CpuBudget

PYTHON_SERIES = (3, 11)
# Set by `make test-latest`: newer releases than the pins are accepted (missing packages are still problems).
UNPINNED_ENV_VAR = "ONNX_LAB_UNPINNED"
_PIN = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)\s*(?:;\s*([^#]+))?")
# make lab/test/doctor reinstall only when requirements.txt changes, never after a package was changed by hand
FIX_HINT = (
    "reinstall the pins: `make reinstall` in a `make lab` checkout, or `%pip install -r ../requirements.txt` in a "
    "notebook (the kernel's own Python), then restart the kernel; on Binder or JupyterHub the environment comes "
    "from binder/, so tell whoever runs the hub"
)
# the course's own packages under deploy/, which requirements.txt cannot pin: 00's CPU report, 08, 09 and 13 import them
DEPLOY_PACKAGES = {"onnx-service": "deploy/service", "onnx-web-demo": "deploy/web"}
# the graphviz pip package only calls the `dot` program, which is a system package
DOT_FIX = "install Graphviz: `apt-get install graphviz` (Debian/Ubuntu), `conda install graphviz` or `brew install graphviz`"
# requirements.txt headings of the tooling no lesson imports: report(full=False) counts these packages instead of listing them
TOOLING_HEADINGS = ("JupyterLab and tests", "the classroom", "the course website", "CI workflows")
DEPLOY_FIX = "from the repo root: pip install --no-deps -e . -e deploy/service -e deploy/web (make lab does it)"


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _marker_applies(marker: str | None) -> bool:
    if not marker:
        return True
    from packaging.markers import Marker

    return Marker(marker).evaluate()


def pinned_versions(requirements: Path | None = None) -> dict[str, str]:
    """``{package: version}`` pinned in requirements.txt for this platform (environment markers applied)."""
    path = requirements or repo_root() / "requirements.txt"
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _PIN.match(line)
        if match and _marker_applies(match.group(3)):
            pins[_normalize(match.group(1))] = match.group(2)
    return pins


def installed_version(package: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _same_release(installed: str, pinned: str) -> bool:
    return installed.split("+")[0] == pinned.split("+")[0]


@dataclass
class EnvReport:
    """Versions, providers and hardware, plus the problems found (empty when all is well)."""

    python: str
    platform: str
    cpu_count: int
    packages: dict[str, str | None]
    providers: list[str]
    problems: list[str] = field(default_factory=list)
    sections: dict[str, str] = field(default_factory=dict)  # package -> what the course needs it for
    usable_cpus: int = 0  # what affinity and the cgroup quota leave of cpu_count (08 sizes thread pools by it)
    cpu_limits: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        return self.describe(full=True)

    def describe(self, *, full: bool = True) -> str:
        """The report as text; ``full=False`` lists only the packages the lessons use and counts the tooling ones."""
        width = max(map(len, self.packages), default=10)
        lines = [f"Python {self.python} on {self.platform}, {self.cpu_limits or f'{self.cpu_count} CPU cores'}"]
        heading = None
        tooling = [name for name in self.packages if self.sections.get(name, "").startswith(TOOLING_HEADINGS)]
        for name, version in self.packages.items():
            if not full and name in tooling:
                continue
            if self.sections.get(name, "") != heading:
                heading = self.sections.get(name, "")
                lines.append(f"{heading or 'other'}:")
            lines.append(f"  {name:<{width}}  {version or 'MISSING'}")
        if tooling and not full:
            lines.append(
                f"+ {len(tooling)} tooling packages (JupyterLab, tests, the classroom hub, the docs site, CI): print() the returned report to list them"
            )
        lines.append(f"ONNX Runtime providers: {', '.join(self.providers) or 'none (onnxruntime missing)'}")
        lines += [f"PROBLEM: {problem}" for problem in self.problems] or ["All checks passed."]
        return "\n".join(lines)


def _providers() -> list[str]:
    try:
        import onnxruntime
    except ImportError:
        return []
    return list(onnxruntime.get_available_providers())


# A name a notebook asks for -> the distributions that provide it on different platforms.
ALIASES = {"tensorflow": ("tensorflow-cpu", "tensorflow")}


def _distribution(package: str, pins: dict[str, str]) -> str:
    """The pinned distribution behind ``package`` on this platform (``tensorflow`` -> ``tensorflow-cpu`` on Linux)."""
    for candidate in ALIASES.get(_normalize(package), ()):
        if candidate in pins:
            return candidate
    return package


def check_versions(packages: list[str] | None = None, pins: dict[str, str] | None = None) -> list[str]:
    """Problems with the given (default: all pinned) packages: missing or not the pinned version."""
    pins = pins if pins is not None else pinned_versions()
    problems = []
    for package in (_distribution(name, pins) for name in packages or list(pins)):
        wanted = pins.get(_normalize(package))
        have = installed_version(package)
        if have is None:
            problems.append(f"{package} is not installed (the course pins {wanted}); {FIX_HINT}")
        elif wanted and not _same_release(have, wanted) and not os.environ.get(UNPINNED_ENV_VAR):
            problems.append(f"{package} {have} is installed but the course pins {wanted}; {FIX_HINT}")
    return problems


def cpu_budget() -> CpuBudget:
    """The CPUs this process may use (host count, affinity, cgroup quota): the service's ``onnx_service.cpus`` helper (08)."""
    from onnx_service.cpus import cpu_budget as budget  # the installed service package of deploy/service

    return budget()


_SECTION = re.compile(r"^#\s*---\s*(.+?)\s*---\s*$")


def pinned_sections(requirements: Path | None = None) -> dict[str, str]:
    """``{package: section}``: the ``# --- section ---`` heading of requirements.txt each pin stands under."""
    path = requirements or repo_root() / "requirements.txt"
    sections: dict[str, str] = {}
    heading = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if found := _SECTION.match(line):
            heading = found.group(1)
        elif match := _PIN.match(line):
            sections[_normalize(match.group(1))] = heading
    return sections


def report(show: bool = True, *, full: bool = True) -> EnvReport:
    """Versions of every course package, Python, ORT providers and CPU counts; printed unless show=False.

    ``full=False`` prints the packages the lessons use and only counts the tooling (tests, docs, hub, CI); every
    problem is printed either way, and ``print(result)`` shows the full list.
    """
    pins = pinned_versions()
    problems = check_versions(list(pins), pins)
    if sys.version_info[:2] != PYTHON_SERIES:
        problems.append(f"Python {platform.python_version()} is running; the course is pinned for Python 3.11")
    try:
        probe = artifacts_dir() / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        problems.append(f"the artifacts/ folder is not writable ({error.strerror}); check its permissions")
    missing = [
        f"{name} ({folder}) is not installed; {DEPLOY_FIX}" for name, folder in DEPLOY_PACKAGES.items() if not installed_version(name)
    ]
    problems += missing + _graphviz_problems()
    cpus = None
    if not missing:  # onnx_service's helper counts the usable CPUs
        try:
            cpus = cpu_budget()
        except ImportError as error:
            problems.append(f"onnx-service is installed but cannot be imported ({error}); {DEPLOY_FIX}")
    result = EnvReport(
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        cpu_count=cpus.host if cpus else os.cpu_count() or 1,
        packages={name: installed_version(name) for name in pins},
        sections=pinned_sections(),
        providers=_providers(),
        problems=problems,
        usable_cpus=cpus.usable if cpus else 0,
        cpu_limits=cpus.describe() if cpus else "",
    )
    if show:
        print(result.describe(full=full))
    return result


def _graphviz_problems() -> list[str]:
    """A problem line when Graphviz's ``dot`` program (which draw() runs) is not on PATH; the pip package alone cannot draw."""
    if shutil.which("dot"):
        return []
    return [f"Graphviz's `dot` program is not on PATH, so draw() cannot render graphs; {DOT_FIX}"]


class EnvironmentMismatch(RuntimeError):
    """The running environment lacks a package or has another version than the course pins."""


def require(*packages: str) -> None:
    """Setup-cell check: raise EnvironmentMismatch naming each wrong package and the fix, else print the versions."""
    problems = check_versions(list(packages))
    if "graphviz" in packages:
        problems += _graphviz_problems()
    if problems:
        raise EnvironmentMismatch("this notebook needs:\n  - " + "\n  - ".join(problems))
    pins = pinned_versions()
    versions = ", ".join(f"{name} {installed_version(_distribution(name, pins)).split('+')[0]}" for name in packages)
    print(f"Environment OK: {versions}")


def doctor() -> int:
    """Print the report; exit status 1 with the list of problems when anything is wrong."""
    result = report(show=True)
    return 0 if result.ok else 1


def seed_everything(seed: int = 0) -> int:
    """Seed Python's, NumPy's and (when imported) PyTorch's and TensorFlow's generators; returns the seed."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)
    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].random.set_seed(seed)
    return seed
