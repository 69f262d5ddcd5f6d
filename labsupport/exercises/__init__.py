"""The exercise API that every notebook uses (introduced in notebook 00).

A notebook imports its exercises (``from labsupport.exercises.nb01 import q1``); the learner
replaces the placeholder ``____`` in the answer cell and runs ``q1.check(answer)``, which prints
*correct*, *incorrect* with the reason, or *not attempted yet*. ``q1.hint()`` and ``q1.solution()``
print help. Checkers test behaviour (they run the learner's model or function on inputs), never
the source text. ``q1.reference_answer()`` executes the printed solution, which the tests use to
prove that every solution passes its own checker.

Learner copies (``make student``, tools/student.py) call ``hide_solutions()`` before importing the
exercises, and a classroom can set ``ONNX_LAB_SOLUTIONS=hidden`` for every kernel: then
``solution()`` and ``reference_answer()`` reveal nothing. It keeps solutions out of sight, not
secret: they ship in this package's source, which the notebooks need.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import pkgutil
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


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

SOLUTIONS_VARIABLE = "ONNX_LAB_SOLUTIONS"
_hidden_in_this_kernel = False


def hide_solutions() -> None:
    """Switch ``solution()`` and ``reference_answer()`` off in this kernel (what learner copies run first)."""
    global _hidden_in_this_kernel
    _hidden_in_this_kernel = True


def solutions_hidden() -> bool:
    """True after ``hide_solutions()``, or when ``$ONNX_LAB_SOLUTIONS`` is ``hidden`` (a classroom setting)."""
    return _hidden_in_this_kernel or os.environ.get(SOLUTIONS_VARIABLE, "").strip().lower() == "hidden"

CORRECT, INCORRECT, NOT_ATTEMPTED = "correct", "incorrect", "not attempted"


@dataclass(frozen=True)
class Outcome:
    """The result of checking one answer: ``status`` (correct / incorrect / not attempted) and a message."""

    status: str
    message: str

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


class Exercise:
    """One checked exercise: ``check(answer)``, ``hint()``, ``solution()``.

    ``checker(answer)`` raises ``Incorrect("reason")`` for a wrong answer and returns normally
    (optionally a short success note) for a right one. ``solution_code`` is Python that assigns
    ``answer``; it is printed by ``solution()`` and executed by ``reference_answer()``.
    """

    def __init__(self, number: int, title: str, checker: Callable[[Any], str | None], hint: str, solution_code: str):
        self.number = number
        self.title = title
        self._checker = checker
        self._hint = hint.strip()
        self._solution = textwrap.dedent(solution_code).strip()

    def __repr__(self) -> str:
        return f"Exercise {self.number}: {self.title}"

    @property
    def solution_code(self) -> str:
        """The reference solution's source (for tools/student.py's solution copies; not shown in notebooks)."""
        return self._solution

    def evaluate(self, answer: object) -> Outcome:
        """Check an answer and return the Outcome without printing."""
        if _contains_placeholder(answer):
            return Outcome(NOT_ATTEMPTED, "replace ____ with your answer, then run this cell again")
        if inspect.isfunction(answer):
            answer = _guarded(answer)
        try:
            note = self._checker(answer)
        except NotAttempted:
            return Outcome(NOT_ATTEMPTED, "your answer still uses ____; replace it and run again")
        except Incorrect as reason:
            return Outcome(INCORRECT, str(reason))
        except Exception as error:  # the learner's code failed while being checked
            return Outcome(INCORRECT, f"checking your answer raised {type(error).__name__}: {error}")
        return Outcome(CORRECT, note or "well done")

    def check(self, answer: object) -> None:
        """Print whether ``answer`` is correct, incorrect (with the reason) or not attempted yet."""
        outcome = self.evaluate(answer)
        mark = {CORRECT: "✅ Correct", INCORRECT: "❌ Incorrect", NOT_ATTEMPTED: "⏳ Not attempted yet"}[outcome.status]
        print(f"Exercise {self.number} ({self.title}): {mark}: {outcome.message}")
        if outcome.status != CORRECT:
            print(f"   Stuck? q{self.number}.hint() gives a hint, q{self.number}.solution() the answer.")

    def hint(self) -> None:
        """Print the hint."""
        print(f"Hint: {self._hint}")

    def solution(self) -> None:
        """Print the reference solution (Python code that assigns ``answer``), unless solutions are hidden."""
        if solutions_hidden():
            print(f"Solutions are switched off in this copy of the course; q{self.number}.hint() helps, "
                  "and your teacher has the solutions.")
            return
        print(f"Solution:\n{self._solution}")

    def reference_answer(self) -> Any:
        """Execute the reference solution in a fresh namespace and return its ``answer``."""
        if solutions_hidden():
            raise RuntimeError("solutions are switched off in this copy of the course (hide_solutions / $ONNX_LAB_SOLUTIONS)")
        namespace: dict[str, Any] = {}
        exec(compile(self._solution, f"<solution to exercise {self.number}>", "exec"), namespace)
        if "answer" not in namespace:
            raise RuntimeError(f"the solution of exercise {self.number} does not assign `answer`")
        return namespace["answer"]


def all_exercises() -> Iterator[tuple[str, Exercise]]:
    """Every exercise of every notebook: modules ``labsupport.exercises.nbNN`` list theirs in ``EXERCISES``."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda module: module.name):
        if info.name.startswith("nb"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            for exercise in module.EXERCISES:
                yield info.name, exercise
