"""The exercise API that every notebook uses (introduced in notebook 00).

A notebook imports its exercises (``from labsupport.exercises.nb01 import q1``); the learner
replaces the placeholder ``____`` in the answer cell and runs ``q1.check(answer)``, which prints
*correct*, *incorrect* with the reason, or *not attempted yet*. ``q1.hint()`` and ``q1.solution()``
print help. Checkers test behaviour (they run the learner's model or function on inputs), never
the source text. An exception that the learner's own code raises while the checker runs it makes
the answer *incorrect* (the message says so); any other exception escaping a checker is reported
as a *checker error*: a bug in the course, not the learner's mistake. ``q1.reference_answer()``
executes the printed solution, which the tests use to prove that every solution passes its own
checker, and that no checker crashes on answers of the wrong kind.

Two levels of hiding. *Out of sight*: ``hide_solutions()`` (what the learner notebooks run first) or
``ONNX_LAB_SOLUTIONS=hidden`` (a classroom setting) make ``solution()``, ``solution_code`` and
``reference_answer()`` reveal nothing, although the source of these modules still holds the solutions.
*Out of reach*: the learner copy of the course that ``make student`` writes
(``python -m labsupport.maintain.student``) holds no solution text at all: its exercise modules pass
``solution_code=None``, which this module treats as hidden.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import linecache
import os
import pkgutil
import sysconfig
import textwrap
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any

from labsupport.exercises import progress


class NotAttempted(Exception):
    """Raised when the placeholder ``____`` is used: the learner has not answered yet."""


class Incorrect(Exception):
    """Raised by a checker with the reason an answer is wrong (shown to the learner)."""


class _Placeholder:
    """``____``: any use of it (arithmetic, calls, attributes) means "not attempted yet"."""

    def __repr__(self) -> str:
        return "____"

    def _refuse(self, *args: object, **kwargs: object) -> Any:
        raise NotAttempted("the answer still contains ____")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        self._refuse()

    __call__ = __getitem__ = __iter__ = __len__ = __bool__ = __float__ = __int__ = __index__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __matmul__ = __rmatmul__ = _refuse
    __truediv__ = __rtruediv__ = __pow__ = __neg__ = __lt__ = __gt__ = __le__ = __ge__ = _refuse
    __array__ = _refuse


____ = _Placeholder()
PLACEHOLDER = ____  # notebooks import it as ____: `from labsupport.exercises import PLACEHOLDER as ____`

SOLUTIONS_VARIABLE = "ONNX_LAB_SOLUTIONS"
_hidden_in_this_kernel = False


def hide_solutions() -> None:
    """Switch ``solution()``, ``solution_code`` and ``reference_answer()`` off in this kernel (what learner copies run first)."""
    global _hidden_in_this_kernel
    _hidden_in_this_kernel = True


def solutions_hidden() -> bool:
    """True after ``hide_solutions()``, or when ``$ONNX_LAB_SOLUTIONS`` is ``hidden`` (a classroom setting)."""
    return _hidden_in_this_kernel or os.environ.get(SOLUTIONS_VARIABLE, "").strip().lower() == "hidden"


_SWITCHED_OFF = "solutions are switched off in this copy of the course (hide_solutions / $ONNX_LAB_SOLUTIONS / a learner copy)"


CORRECT, INCORRECT, NOT_ATTEMPTED, CHECKER_ERROR = "correct", "incorrect", "not attempted", "checker error"
_MARKS = {CORRECT: "✅ Correct", INCORRECT: "❌ Incorrect", NOT_ATTEMPTED: "⏳ Not attempted yet", CHECKER_ERROR: "⚠️ Checker error"}


@dataclass(frozen=True)
class Outcome:
    """The result of checking one answer: ``status`` (correct / incorrect / not attempted / checker error) and a message."""

    status: str
    message: str
    details: str = ""  # for a checker error: the traceback, for whoever fixes the checker

    def __bool__(self) -> bool:
        return self.status == CORRECT


def _guarded(function: Callable[..., Any]) -> Callable[..., Any]:
    """The learner's function, raising NotAttempted when what it returns still contains ``____``."""

    def checked(result: Any) -> Any:
        if _contains_placeholder(result):
            raise NotAttempted("the function still returns ____")
        return result

    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return checked(await function(*args, **kwargs))

        return call_async

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        return checked(function(*args, **kwargs))

    return call


def _contains_placeholder(answer: object, depth: int = 0) -> bool:
    if answer is ____:
        return True
    if depth < 3 and isinstance(answer, (list, tuple, set)):
        return any(_contains_placeholder(item, depth + 1) for item in answer)
    if depth < 3 and isinstance(answer, dict):
        return any(_contains_placeholder(item, depth + 1) for item in answer.values())
    return False


# Who raised it? An exception is the learner's when a frame of their own code is on its traceback.
_LIBRARY_ROOTS = tuple(
    str(Path(root).resolve()) + os.sep
    for root in {*(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")), str(Path(__file__).parents[1])}
)


@functools.cache
def _is_library_file(filename: str) -> bool:
    """True for the standard library, installed packages and labsupport itself; False for notebook cells, scripts, tests."""
    if filename.startswith("<"):
        return filename.startswith("<frozen")
    return str(Path(filename).resolve()).startswith(_LIBRARY_ROOTS)


def _functions_of(answer: object) -> list[Callable[..., Any]]:
    """The Python functions an answer carries: itself (a function or method), else the methods of its class."""
    target = answer.func if isinstance(answer, functools.partial) else answer
    if inspect.isfunction(target) or inspect.ismethod(target):
        return [inspect.unwrap(getattr(target, "__func__", target))]
    cls = target if isinstance(target, type) else type(target)
    members = [value for klass in cls.__mro__ for value in vars(klass).values()]
    members = [getattr(value, "__func__", value) for value in members]  # staticmethod, classmethod
    return [value for value in members if inspect.isfunction(value)]


def _code_objects(code: CodeType) -> Iterator[CodeType]:
    yield code
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield from _code_objects(constant)


def _learner_code(answer: object) -> set[CodeType]:
    """The code objects (nested ones included) of the functions in ``answer`` that the learner wrote."""
    code = (function.__code__ for function in _functions_of(answer))
    return {nested for top in code if not _is_library_file(top.co_filename) for nested in _code_objects(top)}


def _learner_frame(error: BaseException, learner_code: set[CodeType]) -> str | None:
    """Where the learner's code was running when ``error`` (or an exception it chains) was raised, else None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and learner_code:
        seen.add(id(current))
        frames = [(frame.f_code, line) for frame, line in traceback.walk_tb(current.__traceback__) if frame.f_code in learner_code]
        if frames:
            code, line = frames[-1]
            return f"in {code.co_name}, line {line}"
        current = current.__cause__ or current.__context__
    return None


def _short_text(error: BaseException, limit: int = 400) -> str:
    from labsupport.exercises.checks import without_ort_location  # checks imports this module

    text = without_ort_location(" ".join(str(error).split()))
    return f"{type(error).__name__}: {text[:limit]}{'...' if len(text) > limit else ''}"


def _crash_outcome(error: Exception, learner_code: set[CodeType]) -> Outcome:
    """Incorrect when the learner's own code raised ``error``; otherwise a bug of the checker (a checker error)."""
    where = _learner_frame(error, learner_code)
    if where is not None:
        return Outcome(INCORRECT, f"your code raised {_short_text(error)} ({where})")
    details = "".join(traceback.format_exception(error))
    return Outcome(
        CHECKER_ERROR,
        f"this is a bug in the course's checker, not your answer; please report it ({_short_text(error)})",
        details,
    )


class Exercise:
    """One checked exercise: ``check(answer)``, ``hint()``, ``solution()``.

    ``checker(answer)`` raises ``Incorrect("reason")`` for a wrong answer and returns normally
    (optionally a short success note) for a right one. ``solution_code`` is Python that assigns
    ``answer``; it is printed by ``solution()`` and executed by ``reference_answer()``. ``None`` means
    that this copy of the course holds no solution (a learner copy).
    """

    def __init__(self, number: int, title: str, checker: Callable[[Any], str | None], hint: str, solution_code: str | None):
        self.number = number
        self.title = title
        self._checker = checker
        self._hint = hint.strip()
        self._solution = None if solution_code is None else textwrap.dedent(solution_code).strip()

    def __repr__(self) -> str:
        return f"Exercise {self.number}: {self.title}"

    def _solution_shown(self) -> bool:
        return self._solution is not None and not solutions_hidden()

    def _shown_solution(self) -> str:
        if not self._solution_shown():
            raise RuntimeError(_SWITCHED_OFF)
        return self._solution

    @property
    def solution_code(self) -> str:
        """The reference solution's source; raises while solutions are hidden (see the module's docstring)."""
        return self._shown_solution()

    def evaluate(self, answer: object) -> Outcome:
        """Check an answer and return the Outcome without printing.

        An exception that is not ``Incorrect`` is the learner's (*incorrect*) when their own code raised
        it while the checker ran it, and a *checker error* (a bug in the course) otherwise.
        """
        if _contains_placeholder(answer):
            return Outcome(NOT_ATTEMPTED, "replace ____ with your answer, then run this cell again")
        learner_code = _learner_code(answer)
        if inspect.isfunction(answer):
            answer = _guarded(answer)
        try:
            note = self._checker(answer)
        except NotAttempted:
            return Outcome(NOT_ATTEMPTED, "your answer still uses ____; replace it and run again")
        except Incorrect as reason:
            return Outcome(INCORRECT, str(reason))
        except Exception as error:
            return _crash_outcome(error, learner_code)
        return Outcome(CORRECT, note or "well done")

    def check(self, answer: object) -> None:
        """Print whether ``answer`` is correct, incorrect (with the reason), not attempted yet, or hit a checker bug."""
        outcome = self.evaluate(answer)
        progress.record(self, outcome.status)  # only on the class hub (labsupport.exercises.progress)
        print(f"Exercise {self.number} ({self.title}): {_MARKS[outcome.status]}: {outcome.message}")
        if outcome.status in (INCORRECT, NOT_ATTEMPTED):
            solution = f", q{self.number}.solution() the answer" if self._solution_shown() else ""
            print(f"   Stuck? q{self.number}.hint() gives a hint{solution}.")

    def hint(self) -> None:
        """Print the hint."""
        print(f"Hint: {self._hint}")

    def solution(self) -> None:
        """Print the reference solution (Python code that assigns ``answer``), unless solutions are hidden."""
        if not self._solution_shown():
            print(
                f"Solutions are switched off in this copy of the course; q{self.number}.hint() helps, and your teacher has the solutions."
            )
            return
        print(f"Solution:\n{self._solution}")

    def reference_answer(self) -> Any:
        """Execute the reference solution in a fresh namespace and return its ``answer``."""
        namespace: dict[str, Any] = {}
        source, filename = self._shown_solution(), f"<solution to exercise {self.number}>"
        # in the line cache, its functions have a source: TensorFlow's AutoGraph converts them without a warning
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        exec(compile(source, filename, "exec"), namespace)
        if "answer" not in namespace:
            raise RuntimeError(f"the solution of exercise {self.number} does not assign `answer`")
        return namespace["answer"]


def _solution_source(exercise: Exercise) -> str:
    """The reference solution whatever the switch says: labsupport.maintain.student writes the teacher's key with it."""
    if exercise._solution is None:
        raise ValueError(f"exercise {exercise.number}: this copy of the course holds no solution (a learner copy)")
    return exercise._solution


def all_exercises() -> Iterator[tuple[str, Exercise]]:
    """Every exercise of every notebook: modules ``labsupport.exercises.nbNN`` list theirs in ``EXERCISES``."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda module: module.name):
        if info.name.startswith("nb"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            for exercise in module.EXERCISES:
                yield info.name, exercise
