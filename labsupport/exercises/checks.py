"""Helpers shared by the exercise checkers (used by notebooks 03 and 04)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from labsupport.exercises import Incorrect

if TYPE_CHECKING:
    import onnxruntime


def onnx_session(answer: object, what: str = "an ONNX ModelProto or a .onnx path") -> onnxruntime.InferenceSession:
    """For checkers: a CPU InferenceSession for ``answer`` (a ModelProto or a .onnx path).

    Raises ``Incorrect`` naming ``what`` was expected when the answer is neither, when the path
    does not exist, or when ONNX Runtime cannot load the model (first line of its message only).
    """
    import onnx
    import onnxruntime as ort

    if isinstance(answer, (str, Path)):
        if not Path(answer).is_file():
            raise Incorrect(f"expected {what}; {Path(answer).name!r} does not exist")
        answer = onnx.load(str(answer))
    if not isinstance(answer, onnx.ModelProto):
        raise Incorrect(f"expected {what}, got {type(answer).__name__}")
    try:
        return ort.InferenceSession(answer.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as error:
        raise Incorrect(f"ONNX Runtime cannot load the model: {str(error).splitlines()[0]}") from None
