"""One list of modules: the README's "How the course works" table names every module of the folders it lists, and no other."""

from __future__ import annotations

import re

import pytest

from labsupport.course.paths import repo_root

ROOT = repo_root()
TABLE_START, TABLE_END = "## How the course works", "\n\n"
ROW = re.compile(r"^\| `([\w/]+/)` \| (.+) \|$")
MODULE = re.compile(r"`(\w+)\.py`")
PER_NOTEBOOK = re.compile(r"nb\d\d")  # the table names them once, as `nbNN.py`
FOLDERS = sorted(
    [path.relative_to(ROOT).as_posix() + "/" for path in (ROOT / "labsupport").iterdir() if (path / "__init__.py").exists()]
    + ["deploy/service/onnx_service/"]
)


def table_rows(readme: str) -> dict[str, str]:
    """The table's rows by folder: ``{"labsupport/course/": "what every notebook uses: ..."}``."""
    table = readme.split(TABLE_START, 1)[1].split(TABLE_END, 2)[1]
    return {match.group(1): match.group(2) for line in table.splitlines() if (match := ROW.match(line))}


def named_modules(text: str) -> set[str]:
    """The modules a text names as ``name.py``, with ``nbNN.py`` standing for every ``nb00.py`` ... ``nb99.py``."""
    return set(MODULE.findall(text))


def folder_modules(folder: str) -> set[str]:
    """The folder's modules, without ``__init__``/``__main__``; the ``nbNN`` ones as one ``nbNN``."""
    stems = {path.stem for path in (ROOT / folder).glob("*.py") if not path.stem.startswith("__")}
    return {"nbNN" if PER_NOTEBOOK.fullmatch(stem) else stem for stem in stems}


ROWS = table_rows((ROOT / "README.md").read_text(encoding="utf-8"))


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_readme_table_names_every_module_of_the_folder_and_no_other(folder):
    assert folder in ROWS, f"README.md's 'How the course works' table has no row for `{folder}`"
    named, present = named_modules(ROWS[folder]), folder_modules(folder)
    assert present - named == set(), f"modules of {folder} the README table does not name (as `name.py`)"
    assert named - present == set(), f"modules the README table names that {folder} lacks"


def test_the_service_readme_describes_every_module_of_the_package():
    code = (ROOT / "deploy/service/README.md").read_text(encoding="utf-8").split("## Code", 1)[1]
    assert folder_modules("deploy/service/onnx_service/") <= named_modules(code), "deploy/service/README.md, 'Code'"


def test_the_package_docstrings_leave_the_list_to_the_readme():
    """A subpackage docstring may say what the subpackage is for, but listing its modules would be a second copy."""
    everything = set().union(*(folder_modules(folder) for folder in FOLDERS))
    for folder, modules in [*((folder, folder_modules(folder)) for folder in FOLDERS), ("labsupport/", everything)]:
        init = (ROOT / folder / "__init__.py").read_text(encoding="utf-8")
        listed = {stem for stem in modules if f"``{stem}``" in init}
        assert len(listed) < 2, f"{folder}__init__.py lists modules ({sorted(listed)}): the README table is the list"


def test_the_table_reader_finds_rows_and_names():
    readme = "## How the course works\n\n| path | what |\n| --- | --- |\n| `a/b/` | `x.py` and `nbNN.py`, `y` |\n\nmore"
    assert table_rows(readme) == {"a/b/": "`x.py` and `nbNN.py`, `y`"}
    assert named_modules(table_rows(readme)["a/b/"]) == {"x", "nbNN"}
