"""Unit tests train nothing and write nothing into the run's artifacts folder (the checkout's artifacts/, or the
$ONNX_LAB_ARTIFACTS that ``make test`` gives its tests half while the notebooks half writes artifacts/).

Every unit test runs with $ONNX_LAB_ARTIFACTS pointing at a fresh temporary folder that already holds
an *untrained* digits CNN (seeded, exported as ``ensure_digits_cnn`` would), so a helper that asks for
the course CNN gets it without training; the mechanics under test (quantization, Triton configs,
Dockerfile checks) do not need good weights. Tests that need a trained model live in tests/integration.
Any backward pass fails the test that makes it, and so does a change to the run's artifacts folder
during the test.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from labsupport.course.paths import ARTIFACTS_ENV_VAR, repo_root
from labsupport.models.digits_cnn import DigitsCNN, save_digits_cnn

RUN_ARTIFACTS = Path(os.environ.get(ARTIFACTS_ENV_VAR) or repo_root() / "artifacts")  # before any test points it elsewhere


def _snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")} if folder.is_dir() else {}


@pytest.fixture(scope="session")
def unit_artifacts(tmp_path_factory) -> Path:
    """The temporary artifacts folder of the unit tests, holding an untrained digits CNN."""
    folder = tmp_path_factory.mktemp("artifacts")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ARTIFACTS_ENV_VAR, str(folder))
        torch.manual_seed(0)
        save_digits_cnn(DigitsCNN().eval())
    return folder


@pytest.fixture(autouse=True)
def isolated(unit_artifacts, monkeypatch) -> Iterator[None]:
    """Point artifacts/ at ``unit_artifacts``, refuse any backward pass, and fail if the run's artifacts folder changed."""

    def refuse(*args, **kwargs):
        raise AssertionError("unit tests train nothing: move this test to tests/integration")

    untouched = _snapshot(RUN_ARTIFACTS)
    monkeypatch.setenv(ARTIFACTS_ENV_VAR, str(unit_artifacts))
    monkeypatch.setattr(torch.Tensor, "backward", refuse)
    monkeypatch.setattr(torch.autograd, "backward", refuse)
    yield
    assert _snapshot(RUN_ARTIFACTS) == untouched, f"this unit test wrote into {RUN_ARTIFACTS}: use tmp_path"


def package_imports(package_root: Path) -> list[tuple[Path, int, str]]:
    """(file, line, dotted name) of every import in the package folder ``package_root``, lazy ones inside functions too.

    Relative imports are resolved against the importing file's package; ``from a import b`` yields ``a`` and ``a.b``
    (b may be a module).
    """
    found = []
    for path in sorted(package_root.rglob("*.py")):
        parts = path.relative_to(package_root.parent).with_suffix("").parts  # ("labsupport", "topics", "memory")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [(path, node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against the file's package
                    base = ".".join([*parts[: len(parts) - node.level], *([base] if base else [])])
                found += [(path, node.lineno, base)] + [(path, node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


@pytest.fixture(scope="session")
def imports() -> Callable[[Path], list[tuple[Path, int, str]]]:
    """The unit tests' one AST import scanner (the layer rules, the service image's requirements): ``package_imports``."""
    return package_imports
