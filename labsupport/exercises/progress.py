"""Each exercise check's verdict, kept in the learner's own folder, and the teacher's report of them (``make hub``).

On the class hub every learner's server has ``ONNX_LAB_PROGRESS`` set to ``~/.onnx-lab/progress.jsonl``; each
``qN.check(answer)`` then appends one line ``{"time": ..., "exercise": "nb00.q1", "status": "correct"}`` to it.
Anywhere else (``make lab``, Binder, the tests) the variable is unset and nothing is written.

The file belongs to the learner, who can edit or delete it: the report is a formative view of who is stuck
where, not a grade. ``report`` reads the files as data (it never runs learner code) and refuses links and
oversized files, so a learner's file cannot make it read anything else.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

VARIABLE = "ONNX_LAB_PROGRESS"
FOLDER, FILE = ".onnx-lab", "progress.jsonl"
MAX_BYTES = 1 << 20  # a thousand checks a day for a term fit in far less
FORMATIVE = (
    "Learners can edit their own records: this is a formative view of who is stuck where, not a grade. "
    "For graded work use nbgrader (see the README's teacher section)."
)


def exercise_name(exercise) -> str:
    """``nbNN.qN`` for an exercise of ``labsupport.exercises.nbNN``; ``qN`` when no loaded module lists it."""
    for name, module in list(sys.modules.items()):
        if name.startswith("labsupport.exercises.nb") and any(item is exercise for item in getattr(module, "EXERCISES", ())):
            return f"{name.rsplit('.', 1)[1]}.q{exercise.number}"
    return f"q{exercise.number}"


def record(exercise, status: str) -> None:
    """Append the verdict of one check to ``$ONNX_LAB_PROGRESS`` when it is set; a failed write never fails the check."""
    path = os.environ.get(VARIABLE)
    if not path:
        return
    line = {"time": datetime.now(UTC).isoformat(timespec="seconds"), "exercise": exercise_name(exercise), "status": status}
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as records:
            records.write(json.dumps(line) + "\n")
    except OSError:
        pass  # a full disk or a removed folder: the learner still sees the verdict


def read_records(home: Path) -> list[dict]:
    """The records in ``home/.onnx-lab/progress.jsonl``; links, non-files, oversized files and bad lines are skipped."""
    flags = os.O_RDONLY | os.O_NOFOLLOW
    try:
        home_fd = os.open(home, flags | os.O_DIRECTORY)
        try:
            folder_fd = os.open(FOLDER, flags | os.O_DIRECTORY, dir_fd=home_fd)
            try:
                file_fd = os.open(FILE, flags | os.O_NONBLOCK, dir_fd=folder_fd)
            finally:
                os.close(folder_fd)
        finally:
            os.close(home_fd)
    except OSError:
        return []
    with os.fdopen(file_fd, "rb") as records:
        if not os.path.stat.S_ISREG(os.fstat(records.fileno()).st_mode):
            return []
        text = records.read(MAX_BYTES).decode("utf-8", errors="replace")
    return [item for item in map(_parse, text.splitlines()) if item]


def _parse(line: str) -> dict | None:
    try:
        item = json.loads(line)
    except ValueError:
        return None
    fields = ("time", "exercise", "status")
    return item if isinstance(item, dict) and all(isinstance(item.get(key), str) for key in fields) else None


@dataclass
class Progress:
    """One learner's progress: exercises passed, tried but not passed yet, and the time of their last check."""

    learner: str
    passed: set[str] = field(default_factory=set)
    tried: set[str] = field(default_factory=set)
    last: str = ""


def summarize(learner: str, records: list[dict]) -> Progress:
    """Fold a learner's records: an exercise passed once stays passed; *not attempted* checks count for nothing."""
    progress = Progress(learner)
    for item in records:
        if item["status"] == "correct":
            progress.passed.add(item["exercise"])
        elif item["status"] in ("incorrect", "checker error"):
            progress.tried.add(item["exercise"])
        progress.last = max(progress.last, item["time"])
    progress.tried -= progress.passed
    return progress


def report(homes: dict[str, Path]) -> str:
    """The teacher's table: one line per learner (``{name: home}``), the exercises passed and those tried but not passed."""
    rows = [summarize(name, read_records(home)) for name, home in homes.items()]
    lines = [f"Progress of {len(rows)} learners, from each one's ~/{FOLDER}/{FILE}.", FORMATIVE, ""]
    lines.append(f"{'learner':<16} {'passed':<40} {'tried, not passed yet':<40} last check")
    for row in rows:
        passed, tried = " ".join(sorted(row.passed)) or "-", " ".join(sorted(row.tried)) or "-"
        lines.append(f"{row.learner:<16} {passed:<40} {tried:<40} {row.last or 'none yet'}")
    return "\n".join(lines)
