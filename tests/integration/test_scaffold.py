"""The scaffold of CONTRIBUTING.md writes what the course's own tests accept: run in a copy of the course, then tested there.

``python -m labsupport.maintain.new notebook 14 ...`` and ``... exercise 14 --execute`` run in a temporary copy of
the tracked files (imports from the copy: $PYTHONPATH and $ONNX_LAB_ROOT point at it); then the copy's consistency,
module-list, solution-hiding and exercise tests (test_all_exercises) run on the copy, the new notebook under strict nbval and ruff, so the
recipe cannot drift from the rules those tests hold. It executes a notebook: an integration test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from labsupport.course.paths import ARTIFACTS_ENV_VAR, ROOT_ENV_VAR, repo_root

pytestmark = pytest.mark.slow
NAME = "14_first_steps.ipynb"
COPY_TESTS = [
    "tests/unit/test_consistency.py",
    "tests/unit/test_module_list.py",
    "tests/unit/test_solution_hiding.py",
    "tests/unit/test_exercises_nb14.py",
    "tests/integration/test_all_exercises.py",
    f"notebooks/{NAME}",
]


def _copy_of_the_course(destination: Path) -> Path:
    root = repo_root()
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        source = root / name
        if source.is_file():  # a file deleted in the work tree is still listed until it is committed
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def _run(copy: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in (ARTIFACTS_ENV_VAR, "PYTHONPATH")}
    environment.update(
        {
            "PYTHONPATH": os.pathsep.join(str(copy / folder) for folder in ("", "deploy/service", "deploy/web")),
            ROOT_ENV_VAR: str(copy),
        }
    )
    return subprocess.run([sys.executable, *args], cwd=copy, env=environment, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory) -> Path:
    copy = _copy_of_the_course(tmp_path_factory.mktemp("course"))
    for command in (["notebook", "14", "first_steps", "a lesson the scaffold wrote"], ["exercise", "14", "--execute"]):
        made = _run(copy, "-m", "labsupport.maintain.new", *command)
        assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    return copy


def test_the_scaffold_writes_the_course_shape(scaffolded):
    notebook = nbformat.read(scaffolded / "notebooks" / NAME, as_version=4)
    tags = [tag for cell in notebook.cells for tag in cell.metadata.get("tags", [])]
    assert tags.count("recipe") == 1 and tags.count("going-deeper") == 1 and tags[-1] == "navigation"
    deeper = next(cell for cell in notebook.cells if "going-deeper" in cell.metadata.get("tags", []))
    assert deeper.metadata["jp-MarkdownHeadingCollapsed"] is True
    sources = [cell.source for cell in notebook.cells]
    assert "from labsupport.exercises.nb14 import q1, q2, q3" in "\n".join(sources)
    assert sources.index("q3.check(answer)") < next(i for i, text in enumerate(sources) if text.startswith("## Summary"))
    assert "[14_first_steps.ipynb](notebooks/14_first_steps.ipynb)" in (scaffolded / "README.md").read_text()
    following = nbformat.read(scaffolded / "notebooks" / "13_model_lifecycle.ipynb", as_version=4).cells[-1].source
    assert f"]({NAME}) →" in following, "navigation.sync links 13 to the new notebook"


@pytest.mark.parametrize("check", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_what_the_scaffold_wrote_is_ruff_clean(scaffolded, check):
    written = [f"notebooks/{NAME}", "labsupport/exercises/nb14.py", "tests/unit/test_exercises_nb14.py"]
    linted = _run(scaffolded, "-m", "ruff", *check, "--no-cache", *written)
    assert linted.returncode == 0, linted.stdout[-3000:]


def test_the_copys_own_tests_pass_on_what_the_scaffold_wrote(scaffolded):
    tested = _run(scaffolded, "-m", "pytest", "-q", "-k", "not nb0 and not nb10 and not nb11 and not nb12 and not nb13", *COPY_TESTS)
    assert tested.returncode == 0, tested.stdout[-6000:]
