"""The scaffold of CONTRIBUTING.md: a new notebook, or the next exercise of a notebook, in the course's shape.

    python -m labsupport.maintain.new notebook 14 name "what it teaches"
    python -m labsupport.maintain.new exercise 06 [--execute]

``notebook`` writes notebooks/NN_name.ipynb (opening cell, setup cell, the recipe, one section, one collapsed
Going deeper part, two exercises, summary), its row of the README's course map, labsupport/exercises/nbNN.py
and tests/unit/test_exercises_nbNN.py, then runs ``navigation.sync()`` and executes the notebook.
``exercise`` adds exercise N+1: a checker stub and ``qN`` in nbNN.py, the markdown, answer and check cells
before the Summary, ``qN`` in the exercise import, and a test stub; ``--execute`` re-executes the notebook.
Every placeholder the author must replace says ``TODO``; the files pass the course's tests as written.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell

from labsupport.course.paths import repo_root
from labsupport.maintain import navigation

EXERCISE_IMPORT = "from labsupport.exercises import PLACEHOLDER as ____  # ____ is the blank each answer cell starts with; keep this line"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}

OPENING = """# {number} · {title}

TODO: one paragraph of motivation: the problem a learner meets at work that this notebook solves ({teaches}).

**What you will learn**
- TODO: the plain recipe of the topic, run and checked
- TODO: one idea per section below

**Prerequisites:** [00 · Start here](00_start_here.ipynb) (TODO: only the notebooks this one really needs).

**Time:** computed by `python -m labsupport.maintain.navigation`."""

SETUP = """from labsupport.course.env import require, seed_everything

require("onnx", "onnxruntime", "numpy")

import numpy as np

from labsupport.course import paths
from labsupport.course.compare import compare

SEED = seed_everything(0)"""

RECIPE_TEXT = """## The recipe

TODO: in 2-4 sentences, what a learner writes at work, without `labsupport`: here, build a one-node ONNX graph,
save it under `artifacts/nb{number}/`, run it with ONNX Runtime and check the result against NumPy."""

RECIPE = """from pathlib import Path

import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

ARTIFACTS = Path("../artifacts/nb{number}")
ARTIFACTS.mkdir(parents=True, exist_ok=True)

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "recipe", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)  # ONNX Runtime reads IR 10
onnx.checker.check_model(model)
onnx.save(model, ARTIFACTS / "relu.onnx")

session = ort.InferenceSession(ARTIFACTS / "relu.onnx", providers=["CPUExecutionProvider"])
inputs = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
(outputs,) = session.run(None, {{"x": inputs}})
np.testing.assert_allclose(outputs, np.maximum(inputs, 0), rtol=0, atol=0)
print("ONNX Runtime's Relu equals NumPy's maximum(x, 0) on", inputs.shape)"""

HELPERS_TEXT = """The rest of the notebook uses the course's helpers as shortcuts for what the recipe just showed:
`compare(expected, actual)` is the `assert_allclose` above, with the tolerance and a verdict printed, and
`paths.artifact("nb{number}/...")` is the `artifacts/nb{number}/` folder.

## 1 · TODO: the first idea

TODO: why before how, in a few sentences; then a small runnable cell and a visible result."""

SECTION = """print(compare(np.maximum(inputs, 0), outputs, name="Relu", classifier=False))
print("saved under artifacts/:", paths.artifact("nb{number}/relu.onnx").relative_to(paths.artifacts_dir()))"""

GOING_DEEPER = """### Going deeper: TODO

TODO: version-specific internals and long caveats that a first reading may skip. No code outside this part
may use a name defined inside it, and no exercise may need it."""

EXERCISES_TEXT = """## Exercises

Replace `____` in each answer cell and run the check cell below it; `q1.hint()` and `q1.solution()` help."""

SUMMARY = """## Summary

- TODO: what was learned
- TODO: common pitfalls
- Next: TODO; official docs: [ONNX](https://onnx.ai/onnx/), [ONNX Runtime](https://onnxruntime.ai/docs/)."""

FIRST_EXERCISES = [
    ("**Exercise 1: TODO (a question on this notebook).** How many nodes has the recipe's graph?", "answer = ____"),
    (
        "**Exercise 2: TODO (transfer: the recipe on a model not shown).** Write `answer(path, x)` that opens the "
        "ONNX model at `path` with ONNX Runtime and returns its first output for the float32 array `x`.",
        "def answer(path, x):\n    return ____",
    ),
]

MODULE = '''"""Exercises of notebook {number} ({teaches}). TODO: replace both exercises with the notebook's own."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import blame_answer, expect_close, expect_value, whole_number
from labsupport.models.contract import IR_VERSION, OPSET


def _check_node_count(count) -> str:
    expect_value(
        whole_number(count, "the number of nodes"),
        1,
        mistakes=[(2, "count the nodes (operators), not the inputs and outputs: the graph has one Relu")],
        wrong="the recipe's graph has one node per operator it applies",
    )
    return "one Relu node"


def _affine_model() -> onnx.ModelProto:
    """A model the notebook does not show: y = 3x - 2 (Mul, then Sub)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])
    three, two = (helper.make_tensor(name, TensorProto.FLOAT, [], [value]) for name, value in (("three", 3.0), ("two", 2.0)))
    nodes = [helper.make_node("Mul", ["x", "three"], ["scaled"]), helper.make_node("Sub", ["scaled", "two"], ["y"])]
    graph = helper.make_graph(nodes, "affine", [x], [y], initializer=[three, two])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _check_run(run) -> str:
    if not callable(run):
        raise Incorrect(f"expected a function answer(path, x), got {{type(run).__name__}}")
    x = np.array([[-1.0, 0.0, 2.5], [4.0, -3.0, 1.0]], dtype=np.float32)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "affine.onnx"
        onnx.save(_affine_model(), path)
        with blame_answer("answer(path, x) raised"):
            result = run(path, x.copy())
    if isinstance(result, list):
        raise Incorrect("session.run returns a list of outputs: return its first element")
    expect_close(3 * x - 2, result, what="the outputs of the model at path")
    return "your function ran a model it had not seen"


q1 = Exercise(
    1,
    "TODO: the nodes of the recipe's graph",
    _check_node_count,
    hint="Each operator of the graph is one node: look at the list passed to helper.make_graph.",
    solution_code="""
    answer = 1  # one Relu: len(model.graph.node) in the notebook
    """,
)
q2 = Exercise(
    2,
    "TODO: run a model you have not seen",
    _check_run,
    hint="Open an InferenceSession on the path, run it on {{input name: x}} and return the first output.",
    solution_code="""
    import onnxruntime as ort

    def answer(path, x):
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return session.run(None, {{session.get_inputs()[0].name: x}})[0]
    """,
)
EXERCISES = [q1, q2]
'''

TEST = '''"""Notebook {number}'s checkers: each right answer passes, each known wrong answer is rejected with its reason."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from labsupport.exercises import CORRECT, INCORRECT, nb{number}


def test_q1_accepts_one_node_and_names_the_mistake_of_counting_inputs_and_outputs():
    assert nb{number}.q1.evaluate(1).status == CORRECT
    wrong = nb{number}.q1.evaluate(2)
    assert wrong.status == INCORRECT and "not the inputs and outputs" in wrong.message, wrong.message


def _run(path, x):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {{"x": x}})


def test_q2_accepts_a_function_that_runs_the_model():
    assert nb{number}.q2.evaluate(lambda path, x: _run(path, x)[0]).status == CORRECT


def test_q2_rejects_the_list_of_outputs_and_an_answer_that_ignores_the_model():
    listed = nb{number}.q2.evaluate(_run)
    assert listed.status == INCORRECT and "first element" in listed.message, listed.message
    assert nb{number}.q2.evaluate(lambda path, x: np.maximum(x, 0)).status == INCORRECT
'''

CHECKER_STUB = '''


def _check_q{n}(answer) -> str:
    """TODO: run the learner's answer and raise Incorrect with the mistake it shows (checks.py has helpers)."""
    if answer == 24.5:
        raise Incorrect("TODO: the reason of a typical mistake")
    if answer != 42.5:
        raise Incorrect("TODO: what was expected")
    return "TODO: what the right answer showed"


q{n} = Exercise(
    {n},
    "TODO: the title of exercise {n}",
    _check_q{n},
    hint="TODO: a hint that does not print the answer",
    solution_code="""
    answer = 6 * 7 + 0.5
    """,
)
'''

TEST_STUB = """

def test_q{n}_accepts_the_answer_and_names_a_typical_mistake():  # TODO: the exercise's own right and wrong answers
    from labsupport.exercises import CORRECT, INCORRECT, nb{number}

    assert nb{number}.q{n}.evaluate(42.5).status == CORRECT
    wrong = nb{number}.q{n}.evaluate(24.5)
    assert wrong.status == INCORRECT and "TODO: the reason" in wrong.message, wrong.message
"""


def notebook_cells(number: str, title: str, teaches: str) -> list:
    """The cells of a new notebook in the course's shape (the navigation cell comes from ``navigation.sync``)."""
    recipe = new_code_cell(RECIPE.format(number=number), metadata={"tags": ["recipe"]})
    deeper = new_markdown_cell(GOING_DEEPER, metadata={"jp-MarkdownHeadingCollapsed": True, "tags": ["going-deeper"]})
    cells = [
        new_markdown_cell(OPENING.format(number=number, title=title, teaches=teaches)),
        new_code_cell(SETUP),
        new_markdown_cell(RECIPE_TEXT.format(number=number)),
        recipe,
        new_markdown_cell(HELPERS_TEXT.format(number=number)),
        new_code_cell(SECTION.format(number=number)),
        deeper,
        new_markdown_cell(EXERCISES_TEXT),
        new_code_cell(f"{EXERCISE_IMPORT}\nfrom labsupport.exercises.nb{number} import q1, q2"),
    ]
    for n, (question, answer) in enumerate(FIRST_EXERCISES, start=1):
        cells += [new_markdown_cell(question), new_code_cell(answer), new_code_cell(f"q{n}.check(answer)")]
    return [*cells, new_markdown_cell(SUMMARY)]


def add_map_row(readme: Path, number: str, name: str, teaches: str) -> None:
    """Add the notebook's row at the end of the README's course map (``navigation.sync`` fills in its times)."""
    text = readme.read_text(encoding="utf-8")
    row = f"| {number} | [{name}](notebooks/{name}) | {teaches} | 0 / 0 |\n"
    readme.write_text(text.replace(navigation.MAP_END, row + navigation.MAP_END, 1), encoding="utf-8")


def execute(path: Path) -> None:
    """Run every cell in order in a fresh kernel and keep the outputs (what ``make test`` compares)."""
    command = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace"]
    subprocess.run([*command, "--ExecutePreprocessor.timeout=600", path.name], cwd=path.parent, check=True)


def new_notebook(number: str, name: str, teaches: str) -> list[Path]:
    """Write notebook ``number``, its exercises, their test and the course-map row; sync navigation; execute it."""
    root = repo_root()
    expected = f"{len(navigation.course_map(root / 'README.md')):02d}"
    if number != expected or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"the next notebook is number {expected}, named in lower case with underscores: got {number} {name!r}")
    path = root / "notebooks" / f"{number}_{name}.ipynb"
    notebook = nbformat.v4.new_notebook(cells=notebook_cells(number, name.replace("_", " ").capitalize(), teaches))
    notebook.metadata["kernelspec"] = KERNELSPEC
    nbformat.write(notebook, path)
    module = root / "labsupport" / "exercises" / f"nb{number}.py"
    module.write_text(MODULE.format(number=number, teaches=teaches), encoding="utf-8")
    test = root / "tests" / "unit" / f"test_exercises_nb{number}.py"
    test.write_text(TEST.format(number=number), encoding="utf-8")
    add_map_row(root / "README.md", number, path.name, teaches)
    navigation.sync()
    execute(path)
    return [path, module, test, root / "README.md"]


def _notebook_path(number: str, root: Path) -> Path:
    found = sorted((root / "notebooks").glob(f"{number}_*.ipynb"))
    if len(found) != 1:
        raise ValueError(f"no notebook numbered {number} under notebooks/")
    return found[0]


def _add_to_exercise_list(module: str, n: int) -> str:
    listed = re.search(r"^(EXERCISES(?:: [^=\n]+)? = )\[(.*?)\]$", module, re.M | re.S)
    if listed is None:
        raise ValueError("the exercise module has no 'EXERCISES = [...]' (or 'EXERCISES: list[Exercise] = [...]') at the start of a line")
    names = [*re.findall(r"q\d+", listed.group(2)), f"q{n}"]
    before = module[: listed.start()].rstrip("\n")
    return f"{before}{CHECKER_STUB.format(n=n)}{listed.group(1)}[{', '.join(names)}]{module[listed.end() :]}"


def _add_cells(notebook, number: str, n: int) -> None:
    imports = [cell for cell in notebook.cells if f"from labsupport.exercises.nb{number} import" in cell.source]
    if not imports:
        raise ValueError(f"no cell imports from labsupport.exercises.nb{number}")
    line = re.compile(rf"^(from labsupport\.exercises\.nb{number} import .*)$", re.M)
    imports[0].source = line.sub(lambda match: f"{match.group(1)}, q{n}", imports[0].source, count=1)
    summary = next(i for i, cell in enumerate(notebook.cells) if cell.source.startswith("## Summary"))
    question = f"**Exercise {n}: TODO.** TODO: the question (what to compute, and what `answer` must be)."
    notebook.cells[summary:summary] = [new_markdown_cell(question), new_code_cell("answer = ____"), new_code_cell(f"q{n}.check(answer)")]


def _test_path(number: str, root: Path) -> Path:
    """The notebook's exercise tests: integration when its checkers train, export or quantize, else unit."""
    for folder in ("unit", "integration"):
        path = root / "tests" / folder / f"test_exercises_nb{number}.py"
        if path.exists():
            return path
    path = root / "tests" / "unit" / f"test_exercises_nb{number}.py"
    path.write_text(f'"""Notebook {number}\'s checkers: right answers pass, known wrong answers are rejected."""\n', encoding="utf-8")
    return path


def new_exercise(number: str, run: bool = False) -> list[Path]:
    """Add the next exercise to notebook ``number``: checker stub, cells before the Summary, import, test stub."""
    root = repo_root()
    path = _notebook_path(number, root)
    module = root / "labsupport" / "exercises" / f"nb{number}.py"
    text = module.read_text(encoding="utf-8")
    n = len(re.findall(r"^q\d+ = ", text, re.M)) + 1
    module.write_text(_add_to_exercise_list(text, n), encoding="utf-8")
    notebook = nbformat.read(path, as_version=4)
    _add_cells(notebook, number, n)
    nbformat.write(notebook, path)
    test = _test_path(number, root)
    test.write_text(test.read_text(encoding="utf-8") + TEST_STUB.format(n=n, number=number), encoding="utf-8")
    navigation.sync()
    if run:
        execute(path)
    return [module, path, test]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m labsupport.maintain.new", description=__doc__.split("\n\n")[0])
    kinds = parser.add_subparsers(dest="kind", required=True)
    notebook = kinds.add_parser("notebook", help="a new notebook, its exercises and their tests")
    notebook.add_argument("number")
    notebook.add_argument("name")
    notebook.add_argument("teaches", help="what it teaches: the course map's third column")
    exercise = kinds.add_parser("exercise", help="the next exercise of an existing notebook")
    exercise.add_argument("number")
    exercise.add_argument("--execute", action="store_true", help="re-execute the notebook afterwards")
    args = parser.parse_args(argv)
    try:
        if args.kind == "notebook":
            written = new_notebook(args.number, args.name, args.teaches)
        else:
            written = new_exercise(args.number, run=args.execute)
    except ValueError as error:
        print(f"new: {error}", file=sys.stderr)
        return 2
    print("\n".join(f"wrote {path.relative_to(repo_root())}" for path in written))
    print("then: replace every TODO, run python -m labsupport.maintain.navigation, re-execute the notebook (CONTRIBUTING.md)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
