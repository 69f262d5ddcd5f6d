"""Showing things in a notebook: errors that teach, and tables.

Introduced in notebook 01. ``expect_error`` runs a block that must fail and prints the real
error text (with this machine's paths replaced), so a notebook can show a traceback's lesson
without a failing cell; if the block does *not* fail, it raises, so the lesson cannot rot.
"""

from __future__ import annotations

import re
import site
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from labsupport.course.paths import repo_root


def scrub_paths(text: str) -> str:
    """Replace this machine's absolute paths (repo, site-packages, temp) with placeholders; drop colour codes."""
    replacements = {str(repo_root()): "<repo>", sysconfig.get_paths()["purelib"]: "<site-packages>"}
    replacements.update({path: "<site-packages>" for path in site.getsitepackages()})
    replacements[sys.prefix] = "<python>"
    for path, placeholder in sorted(replacements.items(), key=lambda item: -len(item[0])):
        text = text.replace(path, placeholder)
    text = re.sub(r"/tmp/[\w.\-]+", "<tmp>", text)
    text = re.sub(r"0x[0-9a-fA-F]{6,}", "0x...", text)
    return re.sub(r"\x1b\[[0-9;]*m", "", text)  # terminal colour codes


@dataclass
class CaughtError:
    """The exception caught by ``expect_error`` (filled in when the block has failed)."""

    error: BaseException | None = None

    @property
    def message(self) -> str:
        return scrub_paths(str(self.error)) if self.error is not None else ""


@contextmanager
def expect_error(*types: type[BaseException], max_lines: int = 12, match: str | None = None) -> Iterator[CaughtError]:
    """Run a block that must raise one of ``types`` (default: any Exception) and print its message.

    The message has machine paths scrubbed and is shortened to ``max_lines`` lines: the first ones,
    or, when ``match`` is given, the ones starting at the first line it matches. ``match`` is a
    regular expression the message must contain. Raises AssertionError when nothing is raised.
    """
    expected = types or (Exception,)
    caught = CaughtError()
    try:
        yield caught
    except expected as error:
        caught.error = error
    if caught.error is None:
        names = " or ".join(t.__name__ for t in expected)
        raise AssertionError(f"expected the block to raise {names}, but it completed without error")
    if match is not None and not re.search(match, caught.message):
        raise AssertionError(f"the error did not mention {match!r}: {caught.message[:300]}")
    lines = caught.message.strip().splitlines() or [""]
    start = 0
    if match is not None and len(lines) > max_lines:
        start = next(index for index, line in enumerate(lines) if re.search(match, line) or index == len(lines) - 1)
        start = min(start, len(lines) - max_lines)
    shown = lines[start : start + max_lines]
    if start:
        shown.insert(0, f"... ({start} lines)")
    if start + max_lines < len(lines):
        shown.append(f"... ({len(lines) - start - max_lines} more lines)")
    print(f"{type(caught.error).__name__}: " + "\n".join(shown))


def table(rows: Sequence[dict[str, object]], index: str | None = None):
    """A pandas DataFrame from a list of row dicts (rendered as a table in a notebook)."""
    import pandas as pd

    if not rows:
        raise ValueError("table() needs at least one row")
    frame = pd.DataFrame(list(rows))
    return frame.set_index(index) if index else frame


def format_bytes(size: int) -> str:
    """``1536`` -> ``"1.5 KiB"``: binary units (1 KiB = 1024 bytes, 1 GiB = 1024**3), one decimal. Notebook 01."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"size must be a whole number of bytes >= 0, got {size!r}")
    value = float(size)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
