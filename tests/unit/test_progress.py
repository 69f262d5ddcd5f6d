"""Progress records (labsupport/exercises/progress.py): written only on the hub, read safely by the teacher's report."""

from __future__ import annotations

import json
import os

from labsupport.exercises import ____, progress
from labsupport.exercises.nb00 import q1


def _records(home):
    return home / ".onnx-lab" / "progress.jsonl"


def test_a_check_records_nothing_outside_the_hub(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(progress.VARIABLE, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    q1.check(____)
    assert not (tmp_path / ".onnx-lab").exists()


def test_each_check_on_the_hub_appends_its_verdict(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(progress.VARIABLE, str(_records(tmp_path)))
    q1.check(____)
    q1.check(lambda pixels: pixels)
    lines = [json.loads(line) for line in _records(tmp_path).read_text().splitlines()]
    assert [(line["exercise"], line["status"]) for line in lines] == [("nb00.q1", "not attempted"), ("nb00.q1", "incorrect")]
    assert "❌ Incorrect" in capsys.readouterr().out


def test_a_record_that_cannot_be_written_never_fails_the_check(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(progress.VARIABLE, str(tmp_path / "file" / "progress.jsonl"))  # a folder that cannot exist
    q1.check(____)
    assert "Not attempted yet" in capsys.readouterr().out


def _write(home, *lines):
    _records(home).parent.mkdir(parents=True, exist_ok=True)
    _records(home).write_text("".join(line + "\n" for line in lines))


def test_a_passed_exercise_stays_passed_and_not_attempted_counts_for_nothing(tmp_path):
    records = [
        {"time": "2026-01-01T10:00:00+00:00", "exercise": "nb00.q1", "status": "incorrect"},
        {"time": "2026-01-01T10:05:00+00:00", "exercise": "nb00.q1", "status": "correct"},
        {"time": "2026-01-01T10:06:00+00:00", "exercise": "nb00.q1", "status": "incorrect"},
        {"time": "2026-01-01T10:07:00+00:00", "exercise": "nb00.q2", "status": "not attempted"},
        {"time": "2026-01-01T10:08:00+00:00", "exercise": "nb01.q1", "status": "checker error"},
    ]
    summary = progress.summarize("alice", records)
    assert (summary.passed, summary.tried, summary.last) == ({"nb00.q1"}, {"nb01.q1"}, "2026-01-01T10:08:00+00:00")


def test_the_report_skips_bad_lines_and_refuses_links_a_learner_plants(tmp_path):
    alice, bob, carol = tmp_path / "alice", tmp_path / "bob", tmp_path / "carol"
    _write(alice, '{"time": "t1", "exercise": "nb00.q1", "status": "correct"}', "not json", '{"time": 1}', "[]")
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"time": "t9", "exercise": "nb13.q9", "status": "correct"}\n')
    _records(bob).parent.mkdir(parents=True)
    _records(bob).symlink_to(secret)  # the teacher's report must not read what the link points at
    (carol).mkdir()
    (carol / ".onnx-lab").symlink_to(secret.parent)
    assert progress.read_records(alice) == [{"time": "t1", "exercise": "nb00.q1", "status": "correct"}]
    assert progress.read_records(bob) == [] and progress.read_records(carol) == []
    report = progress.report({"alice": alice, "bob": bob, "carol": carol, "dave": tmp_path / "nobody"})
    rows = {line.split()[0]: line.split()[1:] for line in report.splitlines()[3:]}
    assert rows == {"learner": ["passed", "tried,", "not", "passed", "yet", "last", "check"], "alice": ["nb00.q1", "-", "t1"]} | {
        name: ["-", "-", "none", "yet"] for name in ("bob", "carol", "dave")
    }
    assert progress.FORMATIVE in report


def test_a_fifo_in_place_of_the_records_does_not_hang_the_report(tmp_path):
    _records(tmp_path).parent.mkdir(parents=True)
    os.mkfifo(_records(tmp_path))
    assert progress.read_records(tmp_path) == []
