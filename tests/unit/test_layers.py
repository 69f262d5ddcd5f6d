"""Imports go one way: labsupport's subpackages in the order of labsupport/__init__.py, then the deploy packages.

Every import counts, the lazy ones inside functions too: a lazy upward import is still a cycle between
subpackages. The deploy packages (onnx_service, onnx_web_demo) may be imported from any layer and never
import labsupport: they are installed and run without the course.
"""

from __future__ import annotations

import importlib
import tomllib
from collections.abc import Callable
from importlib.metadata import distribution
from pathlib import Path

import pytest

from labsupport.course.paths import repo_root

# lowest first; a subpackage may import only those of a lower rank (bench and exercises share one)
RANKS = {"course": 0, "onnxutil": 1, "models": 2, "topics": 3, "bench": 4, "exercises": 4, "maintain": 5}
TOP = "labsupport"


def subpackage(module: str) -> str | None:
    """``labsupport.topics.memory`` -> ``topics``; None for the top-level modules and anything outside labsupport."""
    parts = module.split(".")
    return parts[1] if parts[0] == TOP and len(parts) > 1 and parts[1] in RANKS else None


def import_violations(package_root: Path, imports: Callable[[Path], list[tuple[Path, int, str]]]) -> list[str]:
    """Every import between subpackages of ``package_root`` that goes up (or sideways between equal ranks).

    ``imports`` is the unit tests' scanner (the ``imports`` fixture of tests/unit/conftest.py).
    """
    problems: dict[tuple[str, int, str], str] = {}  # one per import statement and subpackage: its longest name
    for path, line, target in imports(package_root):
        where = path.relative_to(package_root.parent)
        source = subpackage(".".join(where.parts))
        destination = subpackage(target)
        if source is not None and destination not in (None, source) and RANKS[destination] >= RANKS[source]:
            key = (str(where), line, destination)
            problems[key] = max(problems.get(key, ""), target, key=len)
    return [
        f"{where}:{line}: {where.split('/')[1]} imports {target} ({dest} is not below it)"
        for (where, line, dest), target in sorted(problems.items())
    ]


def test_labsupport_imports_go_one_way(imports):
    assert import_violations(repo_root() / "labsupport", imports) == []


def test_every_subpackage_has_a_rank():
    folders = {p.name for p in (repo_root() / "labsupport").iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(RANKS), "a new subpackage needs a place in RANKS and in labsupport/__init__.py's order"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / TOP / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / TOP


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"onnxutil/optimize.py": "from labsupport.bench.timing import measure\n"}, "onnxutil imports labsupport.bench.timing"),
        ({"topics/lifecycle.py": "def f():\n    from labsupport.bench import timing\n"}, "topics imports labsupport.bench"),
        ({"bench/runtime.py": "import labsupport.exercises.nb05\n"}, "bench imports labsupport.exercises.nb05"),
        ({"course/env.py": "from ..models import digits_cnn\n"}, "course imports labsupport.models.digits_cnn"),
    ],
)
def test_the_check_catches_upward_lazy_relative_and_sideways_imports(tmp_path, imports, files, expected):
    problems = import_violations(_tree(tmp_path, files), imports)
    assert len(problems) == 1 and expected in problems[0]


def test_the_check_allows_downward_and_deploy_imports(tmp_path, imports):
    files = {
        "topics/serving.py": "import onnx_service\nfrom labsupport.models import digits_cnn\nfrom . import memory\n",
        "maintain/student.py": "from labsupport.exercises import nb01\n",
    }
    assert import_violations(_tree(tmp_path, files), imports) == []


@pytest.mark.parametrize(
    ("folder", "distribution_name", "package"), [("service", "onnx-service", "onnx_service"), ("web", "onnx-web-demo", "onnx_web_demo")]
)
def test_deploy_packages_are_installed_and_never_import_labsupport(imports, folder, distribution_name, package):
    root = repo_root() / "deploy" / folder
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == distribution_name and project["dependencies"] == []  # the course's requirements.txt pins them
    assert not (root / "__init__.py").exists(), f"deploy/{folder} is a project folder, not a package: import {package}"
    installed = distribution(distribution_name)  # `make` installs it editable
    assert installed.version == importlib.import_module(package).__version__
    upward = [f"{path.name}:{line}: {name}" for path, line, name in imports(root / package) if name.split(".")[0] == TOP]
    assert upward == [], "imports go one way: labsupport -> deploy packages"
