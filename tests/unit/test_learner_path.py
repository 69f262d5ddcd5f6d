"""Every notebook opens with the plain recipe of its topic and lets a first reading skip its Going deeper parts.

The conventions (COURSE.md, "Shape of every notebook"): right after the setup cell a ``## The recipe`` section
whose code cells (tagged ``recipe``) use only the libraries, never ``labsupport``, and end in a check; "Going
deeper" parts open collapsed in JupyterLab, hold no exercise, and define nothing that the rest of the
notebook needs.
"""

import ast
import json

import nbformat
import pytest

from labsupport.course.paths import repo_root
from labsupport.maintain.reading_time import COLLAPSED, DEEPER_TAG, going_deeper, heading, is_deeper_heading

NOTEBOOKS = sorted((repo_root() / "notebooks").glob("*.ipynb"))
RECIPE_TAG = "recipe"


def _tree(source: str) -> ast.Module:
    """A code cell's syntax tree (IPython magics and shell lines left out; top-level await allowed)."""
    plain = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    return compile(plain, "<cell>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def _bound(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):  # a parameter is bound where its function is defined
            names.add(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _used(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _from_labsupport(trees) -> set[str]:
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("labsupport"):
                names.update(alias.asname or alias.name for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.asname or "labsupport" for alias in node.names if alias.name.startswith("labsupport"))
    return names


def _checks_something(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Assert) or (isinstance(node, ast.Attribute) and node.attr.startswith("assert_")) for node in ast.walk(tree)
    )


def _tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def _load(path):
    return nbformat.reads(json.dumps(json.loads(path.read_text())), as_version=4)


def recipe_problems(cells) -> list[str]:
    """What keeps a notebook's opening from being the plain recipe, checked."""
    setup = next(index for index, cell in enumerate(cells) if cell.cell_type == "code")
    headings = [found for cell in cells[setup:] if (found := heading(cell)) and found[0] == 2]
    if not (headings and headings[0][1].startswith("The recipe")):
        return ["the first section after the setup cell must be '## The recipe'"]
    code = [cell for cell in cells if cell.cell_type == "code"]
    recipe = [cell for cell in code if RECIPE_TAG in _tags(cell)]
    if not recipe:
        return [f"no code cell tagged {RECIPE_TAG!r}"]
    problems = [] if code[1 : 1 + len(recipe)] == recipe else ["the recipe cells come right after the setup cell"]
    helpers = _from_labsupport(_tree(cell.source) for cell in code)
    own = set().union(*(_bound(_tree(cell.source)) for cell in recipe))
    for cell in recipe:
        if "labsupport" in cell.source:
            problems.append(f"a recipe cell imports labsupport: {cell.source[:80]!r}")
        if borrowed := (_used(_tree(cell.source)) & helpers) - own:
            problems.append(f"a recipe cell uses course helpers {sorted(borrowed)}: write the library calls")
    if not any(_checks_something(_tree(cell.source)) for cell in recipe):
        problems.append("the recipe ends in a check (assert, np.testing.assert_...)")
    return problems


def _buried_headings(cells) -> list[str]:
    """Headings further down a markdown cell that open or end a Going deeper part (JupyterLab collapses by a cell's first line)."""
    problems, opened_at = [], None
    for cell in cells:
        lines = [line for line in cell.source.splitlines() if line.strip()] if cell.cell_type == "markdown" else []
        for position, line in enumerate(lines):
            if not (found := heading(_md(line))):
                continue
            closes = opened_at is not None and found[0] <= opened_at
            opens = found[1].startswith("Going deeper") and (opened_at is None or closes)
            if position > 0 and (closes or opens):
                problems.append(f"start a new markdown cell at {line!r}: it opens or ends a Going deeper part")
            opened_at = found[0] if opens else None if closes else opened_at
    return problems


def deeper_problems(cells) -> list[str]:
    """Going deeper parts that do not open collapsed, hold an exercise, or open or end inside a cell."""
    problems = _buried_headings(cells)
    for cell, deeper in zip(cells, going_deeper(cells), strict=True):
        if is_deeper_heading(cell) and (cell.metadata.get(COLLAPSED) is not True or DEEPER_TAG not in _tags(cell)):
            problems.append(f"{cell.source[:60]!r}: needs metadata {COLLAPSED}: true and the tag {DEEPER_TAG!r}")
        if deeper and cell.cell_type == "code" and ".check(" in cell.source:
            problems.append(f"an exercise inside a Going deeper part: {cell.source[:60]!r}")
    return problems


def first_reading_problems(cells) -> list[str]:
    """Cells outside the Going deeper parts that use a name defined only inside one."""
    parts = [(cell, deeper) for cell, deeper in zip(cells, going_deeper(cells), strict=True) if cell.cell_type == "code"]
    outside = set().union(*(_bound(_tree(cell.source)) for cell, deeper in parts if not deeper))
    only_inside = set().union(*(_bound(_tree(cell.source)) for cell, deeper in parts if deeper)) - outside
    return [
        f"{sorted(needed)} are defined only in a Going deeper part: {cell.source[:80]!r}"
        for cell, deeper in parts
        if not deeper and (needed := (_used(_tree(cell.source)) - _bound(_tree(cell.source))) & only_inside)
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_the_recipe_comes_first_without_labsupport_and_checks_its_result(path):
    assert recipe_problems(_load(path).cells) == []


def foreign_paths(cells, number: str) -> list[str]:
    """Literal ../artifacts paths of a recipe outside its notebook's own folder: a course model must come from the setup
    cell (ensure_*), which follows $ONNX_LAB_ARTIFACTS (the lanes and make test's tests half), while ../artifacts does not."""
    literals = [
        node.value
        for cell in cells
        if RECIPE_TAG in _tags(cell)
        for node in ast.walk(_tree(cell.source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    return [text for text in literals if text.startswith("../artifacts") and not text.startswith(f"../artifacts/nb{number}")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_a_recipe_writes_only_its_own_artifacts_folder_by_path(path):
    assert foreign_paths(_load(path).cells, path.name[:2]) == []


def test_a_recipe_that_reads_a_course_model_by_path_is_named():
    cell = _cell('session = ort.InferenceSession("../artifacts/digits_cnn.onnx")\nout = "../artifacts/nb05/x"', RECIPE_TAG)
    assert foreign_paths([cell], "05") == ["../artifacts/digits_cnn.onnx"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_going_deeper_parts_open_collapsed_and_hold_no_exercise(path):
    assert deeper_problems(_load(path).cells) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_a_first_reading_needs_nothing_defined_in_a_going_deeper_part(path):
    assert first_reading_problems(_load(path).cells) == []


def _md(text, **metadata):
    return nbformat.v4.new_markdown_cell(text, metadata=metadata)


def _cell(source, *tags):
    return nbformat.v4.new_code_cell(source, metadata={"tags": list(tags)} if tags else {})


SETUP = _cell("from labsupport.course.compare import compare\nimport numpy as np")
RECIPE_HEADING = _md("## The recipe: export, run, check")
DEEPER = _md("## Going deeper: internals", **{COLLAPSED: True, "tags": [DEEPER_TAG]})


@pytest.mark.parametrize(
    ("cells", "problem"),
    [
        ([SETUP, _md("## 1 · Something else"), _cell("assert 1", RECIPE_TAG)], "must be '## The recipe'"),
        ([SETUP, RECIPE_HEADING, _cell("x = 1")], "no code cell tagged"),
        ([SETUP, RECIPE_HEADING, _cell("compare(np.ones(2), np.ones(2))", RECIPE_TAG)], "uses course helpers ['compare']"),
        ([SETUP, RECIPE_HEADING, _cell("from labsupport import x\nassert x", RECIPE_TAG)], "imports labsupport"),
        ([SETUP, RECIPE_HEADING, _cell("y = np.ones(2)", RECIPE_TAG)], "ends in a check"),
        ([SETUP, RECIPE_HEADING, _cell("y = 1"), _cell("assert y", RECIPE_TAG)], "right after the setup cell"),
    ],
)
def test_a_recipe_that_breaks_a_rule_is_named(cells, problem):
    assert any(problem in found for found in recipe_problems(cells))


def test_a_plain_recipe_that_defines_its_own_compare_passes():
    cells = [SETUP, RECIPE_HEADING, _cell("def compare(a, b):\n    np.testing.assert_allclose(a, b)", RECIPE_TAG)]
    assert recipe_problems(cells) == []


def test_a_going_deeper_part_that_ends_inside_a_cell_is_named():
    cells = [DEEPER, _cell("x = 1"), _md("Some text.\n\n## Exercises")]
    assert deeper_problems(cells) == ["start a new markdown cell at '## Exercises': it opens or ends a Going deeper part"]
    assert deeper_problems([DEEPER, _md("text\n\n### a sub-heading inside the part")]) == []


def test_a_going_deeper_part_that_is_open_or_holds_an_exercise_is_named():
    open_part = _md("### Going deeper: open")
    assert deeper_problems([open_part]) and deeper_problems([DEEPER, _cell("q1.check(answer)")])
    assert deeper_problems([DEEPER, _md("## Exercises"), _cell("q1.check(answer)")]) == []


def test_a_name_defined_only_in_a_going_deeper_part_and_used_later_is_named():
    cells = [DEEPER, _cell("table = 1"), _md("## 2 · Main path"), _cell("print(table)")]
    assert first_reading_problems(cells) == ["['table'] are defined only in a Going deeper part: 'print(table)'"]
    assert first_reading_problems([_cell("table = 0"), *cells]) == []


def test_a_parameter_is_bound_in_its_own_cell():
    cells = [DEEPER, _cell("for key, value in {}.items():\n    pass"), _md("## 2 · Main path"), _cell("def f(value):\n    return value")]
    assert first_reading_problems(cells) == []
