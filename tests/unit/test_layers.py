"""labsupport's subpackages import each other one way only (the order in labsupport/__init__.py), with no cycles.

Every import counts, the lazy ones inside functions too: a lazy upward import is still a cycle between
subpackages. The deploy packages may be imported from any layer (they never import labsupport:
tests/unit/test_dockerfile.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from labsupport.course.paths import repo_root

# lowest first; a subpackage may import only those of a lower rank (bench and exercises share one)
RANKS = {"course": 0, "onnxutil": 1, "models": 2, "topics": 3, "bench": 4, "exercises": 4, "maintain": 5}
TOP = "labsupport"


def _module_name(path: Path, package_root: Path) -> str:
    parts = path.relative_to(package_root.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def _imported_modules(tree: ast.Module, module: str, is_package: bool) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*package, base] if base else package)
            found += [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def subpackage(module: str) -> str | None:
    """``labsupport.topics.memory`` -> ``topics``; None for the top-level modules and anything outside labsupport."""
    parts = module.split(".")
    return parts[1] if parts[0] == TOP and len(parts) > 1 and parts[1] in RANKS else None


def import_violations(package_root: Path) -> list[str]:
    """Every import between subpackages of ``package_root`` that goes up (or sideways between equal ranks)."""
    problems: dict[tuple[str, int, str], str] = {}  # one per import statement and subpackage: its longest name
    for path in sorted(package_root.rglob("*.py")):
        module = _module_name(path, package_root)
        source = subpackage(module)
        if source is None:
            continue
        where = str(path.relative_to(package_root.parent))
        for line, target in _imported_modules(ast.parse(path.read_text(encoding="utf-8")), module, path.name == "__init__.py"):
            destination = subpackage(target)
            if destination not in (None, source) and RANKS[destination] >= RANKS[source]:
                key = (where, line, destination)
                problems[key] = max(problems.get(key, ""), target, key=len)
    return [
        f"{where}:{line}: {_source_of(where)} imports {target} ({dest} is not below it)"
        for (where, line, dest), target in sorted(problems.items())
    ]


def _source_of(where: str) -> str:
    """The subpackage of a file given as ``labsupport/<subpackage>/...``."""
    return where.split("/")[1]


def test_labsupport_imports_go_one_way():
    assert import_violations(repo_root() / "labsupport") == []


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
def test_the_check_catches_upward_lazy_relative_and_sideways_imports(tmp_path, files, expected):
    problems = import_violations(_tree(tmp_path, files))
    assert len(problems) == 1 and expected in problems[0]


def test_the_check_allows_downward_and_deploy_imports(tmp_path):
    files = {
        "topics/serving.py": "import onnx_service\nfrom labsupport.models import digits_cnn\nfrom . import memory\n",
        "maintain/student.py": "from labsupport.exercises import nb01\n",
    }
    assert import_violations(_tree(tmp_path, files)) == []
