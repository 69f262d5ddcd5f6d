"""The course's files agree with each other: pins, course map, notebooks, navigation."""

import json
import re

import pytest
import yaml

from labsupport.course.paths import repo_root
from labsupport.maintain import navigation, sync_environment

ROOT = repo_root()
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PIN = re.compile(r"^\s*([A-Za-z0-9_.\-]+)==([^\s;#]+)\s*(?:;\s*(.+?))?\s*$")
ABSOLUTE_PATH = re.compile(r"(/root/|/work/|/home/[a-z]|/Users/[A-Za-z]|/tmp/[A-Za-z0-9_.-]+/|[A-Z]:\\\\Users)")


def _pins(lines):
    pins = set()
    for line in lines:
        match = PIN.match(line.split(" #")[0])
        if match:
            pins.add((match.group(1).lower(), match.group(2), (match.group(3) or "").strip()))
    return pins


def _conda_pins(path):
    document = yaml.safe_load(path.read_text())
    pip_section = next(item["pip"] for item in document["dependencies"] if isinstance(item, dict))
    return _pins(pip_section)


def test_the_three_environment_files_agree():
    requirements = _pins((ROOT / "requirements.txt").read_text().splitlines())
    assert len(requirements) >= 20
    assert _conda_pins(ROOT / "environment.yml") == requirements
    assert _conda_pins(ROOT / "binder" / "environment.yml") == requirements
    for name in ("environment.yml", "binder/environment.yml"):
        document = yaml.safe_load((ROOT / name).read_text())
        assert "python=3.11" in document["dependencies"]


def test_environment_files_are_generated_from_requirements():
    requirements = (ROOT / "requirements.txt").read_text().splitlines()
    for name, header in sync_environment.HEADERS.items():
        expected = sync_environment.render(header, requirements, sync_environment.PIP_OPTIONS.get(name, []))
        assert (ROOT / name).read_text() == expected, f"{name} is stale: run python -m labsupport.maintain.sync_environment"


def test_every_pin_says_who_needs_it():
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    for index, line in enumerate(lines):
        if PIN.match(line):
            above = next((earlier for earlier in reversed(lines[:index]) if not PIN.match(earlier)), "")
            assert above.startswith("#") and "(" in above, f"pin without a comment naming its users above it: {line}"


def test_course_map_and_notebooks_match_and_have_no_gaps():
    course = navigation.course_map()
    numbers = [int(number) for number, _, _ in course]
    assert numbers == list(range(len(course)))
    assert {name for _, name, _ in course} == {path.name for path in NOTEBOOKS}
    for number, name, _ in course:
        assert name.startswith(f"{number}_")


def test_navigation_cells_are_up_to_date():
    assert navigation.sync(check=True) == [], "run: python -m labsupport.maintain.navigation"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_notebook_is_committed_executed_in_order_and_clean(path):
    notebook = json.loads(path.read_text())
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code" and "".join(cell["source"]).strip()]
    assert code, "a notebook without code"
    assert [cell["execution_count"] for cell in code] == list(range(1, len(code) + 1)), "restart and run all"
    assert any(cell["outputs"] for cell in code), "committed without outputs"
    for cell in code:
        for output in cell["outputs"]:
            assert output.get("output_type") != "error", f"a cell shows an error: {''.join(cell['source'])[:80]}"
            found = ABSOLUTE_PATH.search(json.dumps(output))
            assert not found, f"an output shows an absolute path of this machine: {found.group(0)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_notebook_follows_the_course_shape(path):
    notebook = json.loads(path.read_text())
    text = "\n".join("".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown")
    first_code = next("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    assert re.search(rf"^# {path.name[:2]} · ", text, re.M), "title '# NN · Title'"
    for heading in ("What you will learn", "Prerequisites", "Time", "Exercises", "Summary"):
        assert heading in text, f"missing '{heading}'"
    assert "require(" in first_code, "the setup cell must check versions with labsupport.course.env.require"
    checks = sum("".join(c["source"]).count(".check(") for c in notebook["cells"] if c["cell_type"] == "code")
    assert checks >= 2, "at least two checked exercises"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_at_most_a_quarter_of_code_cells_is_uncompared(path):
    """nbval must compare most of a notebook: CPU-dependent numbers go to few cells, verdicts to compared ones."""
    notebook = json.loads(path.read_text())
    code = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]
    uncompared = [source for source in code if "NBVAL_IGNORE_OUTPUT" in source]
    assert len(uncompared) <= len(code) / 4, f"{len(uncompared)} of {len(code)} code cells are uncompared"
