"""Exporting PyTorch models to ONNX the course's way: quiet, reproducible, one self-contained file.

Introduced in notebook 02. ``export_torch`` is the one export call of ``labsupport`` (the digits CNN,
the wide MLP, the tiny transformer): an eval-mode copy, the dynamo exporter,
one CPU thread, the exporter's chatter collected instead of printed (``quiet_export``) and the
stack traces that name this machine's files removed (``remove_stack_traces``).
"""

from __future__ import annotations

import copy
import io
import logging
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn


@contextmanager
def single_thread() -> Iterator[None]:
    """Run the block with one intra-op thread (bit-for-bit reproducible on CPU), then restore the count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass
class ExportChatter:
    """What the exporter said while ``quiet_export`` kept it off the screen: warnings, log lines, stderr text."""

    messages: list[str] = field(default_factory=list)

    def find(self, pattern: str) -> str | None:
        """The first message matching the regular expression ``pattern`` (None if there is none)."""
        regex = re.compile(pattern)
        return next((message for message in self.messages if regex.search(message)), None)


class _Collect(logging.Handler):
    def __init__(self, chatter: ExportChatter) -> None:
        super().__init__(logging.WARNING)
        self.chatter = chatter

    def emit(self, record: logging.LogRecord) -> None:
        self.chatter.messages.append(record.getMessage())


_NOISY_LOGGERS = ("torch", "onnxscript", "onnx_ir")


@contextmanager
def quiet_export() -> Iterator[ExportChatter]:
    """Keep torch.onnx's console chatter (warnings, log lines, traced graphs on stderr) out of a notebook.

    Yields an ``ExportChatter`` that collects it, so a lesson can still print the one warning that
    matters (``chatter.find("training mode")``). Introduced in notebook 02.
    """
    chatter = ExportChatter()
    collector = _Collect(chatter)
    saved: list[tuple[logging.Logger, list[logging.Handler]]] = []
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and logger.handlers and name.split(".")[0] in _NOISY_LOGGERS:
            saved.append((logger, logger.handlers[:]))
            logger.handlers = [collector]
    for name in _NOISY_LOGGERS:  # loggers without handlers of their own that propagate to the root
        logger = logging.getLogger(name)
        if not logger.handlers:
            saved.append((logger, []))
            logger.handlers = [collector]
    stderr = io.StringIO()
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught, redirect_stderr(stderr):
            warnings.simplefilter("always")
            yield chatter
    finally:
        for logger, handlers in saved:
            logger.handlers = handlers
        chatter.messages[:0] = [str(warning.message) for warning in caught]
        chatter.messages.extend(line for line in stderr.getvalue().splitlines() if line.strip())


STACK_TRACE_KEY = "pkg.torch.onnx.stack_trace"


def remove_stack_traces(program: torch.onnx.ONNXProgram) -> int:
    """Drop the Python stack trace the exporter stores in each node's metadata; returns how many were removed.

    The traces name files on the exporting machine (its absolute paths), so a shared artifact should
    not carry them. Introduced in notebook 02.
    """
    if not isinstance(program, torch.onnx.ONNXProgram):
        raise TypeError(f"remove_stack_traces() expects the ONNXProgram returned by torch.onnx.export, got {type(program).__name__}")
    removed = 0
    for node in program.model.graph.all_nodes():
        if node.metadata_props.pop(STACK_TRACE_KEY, None) is not None:
            removed += 1
    return removed


def export_torch(
    module: nn.Module,
    args: tuple[Any, ...],
    path: str | Path,
    *,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_shapes: Sequence[Any] | Mapping[str, Any] | None = None,
    opset_version: int | None = None,
) -> Path:
    """Export ``module`` (an eval-mode copy; the caller's is untouched) called on ``args`` to one .onnx file at ``path``.

    The dynamo exporter at ``opset_version`` (None: the exporter's default, which notebook 02 reads back from
    the file), on one CPU thread, its chatter kept quiet, stack traces removed, the weights inside the file.
    Returns ``path``. Introduced in notebook 02.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"export_torch() expects a torch.nn.Module, got {type(module).__name__}")
    path = Path(path)
    if path.suffix != ".onnx":
        raise ValueError(f"the ONNX file name must end in .onnx, got {path.name!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    frozen = copy.deepcopy(module).eval()
    with quiet_export(), single_thread():
        program = torch.onnx.export(
            frozen,
            args,
            dynamo=True,
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_shapes=dynamic_shapes,
            opset_version=opset_version,
            verbose=False,
        )
    remove_stack_traces(program)
    program.save(path, external_data=False)
    return path
