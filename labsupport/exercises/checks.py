"""Helpers shared by the exercise checkers (notebooks 00 to 13): they turn a learner's mistake into ``Incorrect``.

A checker that lets an exception escape is reported as a bug in the course (a *checker error*), so
every step that runs or loads the learner's answer goes through these helpers or ``blame_answer``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from labsupport.course.compare import compare
from labsupport.exercises import Incorrect, NotAttempted

if TYPE_CHECKING:
    import onnxruntime


# ONNX Runtime's errors start with where in its C++ source they were raised: "[ONNXRuntimeError] : 1 : FAIL :
# /onnxruntime_src/.../model.cc:256 onnxruntime::Model::Model(onnx::ModelProto&&, ...) Unsupported model IR version ..."
_ORT_LOCATION = re.compile(r"(?:\[ONNXRuntimeError\] : \d+ : \w+ : )?\S+\.(?:cc|cpp|h|hpp):\d+ ")
_CPP_SIGNATURE = re.compile(r"(?:[\w:<>*&~]+ )?[\w:<>~]+\(")


def _after_parentheses(text: str) -> str:
    """``text`` after the parenthesis that closes its first one (the end of a C++ parameter list)."""
    depth = 0
    for position, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ")" and depth == 0:
            return text[position + 1 :].lstrip()
    return text


def without_ort_location(text: str) -> str:
    """An ONNX Runtime error message without its C++ source location and function signature: only the reason."""
    location = _ORT_LOCATION.search(text)
    if location is None:
        return text
    rest = text[location.end() :]
    if _CPP_SIGNATURE.match(rest):
        rest = _after_parentheses(rest)
    return text[: location.start()] + rest


def error_summary(error: BaseException, limit: int = 300) -> str:
    """The first part of an error message on one line, without onnx's ``==> Context`` appendix or ORT's C++ location."""
    text = without_ort_location(" ".join(str(error).split("==> Context")[0].split()))
    return text[:limit] or type(error).__name__


@contextmanager
def blame_answer(action: str) -> Iterator[None]:
    """Inside the block, any exception is caused by the learner's answer: it becomes ``Incorrect("{action}: ...")``.

    Wrap the calls that load or run what the learner gave (a model the runtime refuses, a file the
    optimizer cannot read); anything else a checker raises is reported as a checker error.
    """
    try:
        yield
    except (Incorrect, NotAttempted):
        raise
    except Exception as error:
        raise Incorrect(f"{action}: {error_summary(error)}") from None


def answer_path(answer: object, what: str) -> Path:
    """``answer`` as a Path to an existing file; ``Incorrect`` naming ``what`` was expected otherwise."""
    if not isinstance(answer, (str, os.PathLike)):
        raise Incorrect(f"expected {what}, got {type(answer).__name__}")
    path = Path(answer)
    if path.is_dir():
        raise Incorrect(f"expected {what}; {path.name!r} is a folder, not a file")
    if not path.is_file():
        raise Incorrect(f"expected {what}; {path.name!r} does not exist")
    return path


def whole_number(value: object, what: str) -> int:
    """``value`` as an int when it is a whole number (Python or numpy int, not bool); ``Incorrect`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise Incorrect(f"the {what} must be a whole number, got {type(value).__name__}")
    return int(value)


def expect_value(got: object, truth: object, *, mistakes: Iterable[tuple[object, str]] = (), wrong: str) -> None:
    """Pass when ``got == truth``; else raise ``Incorrect`` with the reason of the first typical mistake it equals, or ``wrong``."""
    if got == truth:
        return
    reason = next((reason for value, reason in mistakes if got == value), wrong)
    raise Incorrect(reason)


def expect_close(want: object, got: object, *, what: str, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """``Incorrect`` unless ``got`` (the learner's numbers) matches ``want`` within the tolerances (``compare``'s rule)."""
    with blame_answer(f"{what} do not match"):
        compare(want, got, atol=atol, rtol=rtol, name="yours vs expected", classifier=False)


def onnx_session(
    answer: object, what: str = "an ONNX ModelProto or a .onnx path", *, optimization: str = "all"
) -> onnxruntime.InferenceSession:
    """A CPU InferenceSession for ``answer`` (a ModelProto or the path of an .onnx file), for checkers.

    Raises ``Incorrect`` naming ``what`` was expected when the answer is neither, when the path
    does not exist, or when ONNX Runtime cannot load the model (first line of its message only).
    ``optimization="disable"`` runs the graph as written (ORT's default rewrites delete a Dropout, for one).
    """
    import onnx

    from labsupport.onnxutil.sessions import open_session

    if not isinstance(answer, onnx.ModelProto):
        answer = answer_path(answer, what)
    with blame_answer("ONNX Runtime cannot load the model"):
        return open_session(
            answer, optimization=optimization, log_severity=4
        )  # fatal only: a failed run is reported in the verdict, not in red
