"""The classroom hub's own parts (labsupport/maintain/hub.py): the class list, the passwords, the log-in, the refusals.

tests/integration/test_hub.py runs the whole hub; these check each rule without starting anything.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from labsupport.maintain import hub


def _class(tmp_path, text: str):
    path = tmp_path / "class.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_class_list_is_names_with_comments(tmp_path):
    assert hub.read_class(_class(tmp_path, "# my class\nalice\n\nbob_2  # late\nalice\nc-3\n")) == ["alice", "bob_2", "c-3"]


@pytest.mark.parametrize("name", ["Alice", "al ice", "2pac", "teacher", "a" * 33])
def test_a_name_the_hub_cannot_use_is_refused_with_its_line(tmp_path, name):
    with pytest.raises(ValueError, match=rf"class.txt:2: '{name}' is not a learner name"):
        hub.read_class(_class(tmp_path, f"bob\n{name}\n"))


def test_an_empty_class_is_refused(tmp_path):
    with pytest.raises(ValueError, match="names no learner"):
        hub.read_class(_class(tmp_path, "# nobody yet\n"))


def test_passwords_are_generated_once_kept_and_readable_by_the_owner_only(tmp_path):
    path = tmp_path / "state" / "passwords.txt"
    first = hub.ensure_passwords(["teacher", "alice"], path)
    assert len(set(first.values())) == 2 and all(len(password) >= 16 for password in first.values())
    assert path.stat().st_mode & 0o777 == 0o600
    second = hub.ensure_passwords(["teacher", "alice", "bob"], path)
    assert {name: second[name] for name in first} == first and second["bob"] not in first.values()
    assert hub.read_passwords(path) == second


def _log_in(tmp_path, name: str, password: str):
    path = tmp_path / "passwords.txt"
    hub.ensure_passwords(["alice"], path)
    authenticator = hub.ClassListAuthenticator(passwords_file=str(path))
    return asyncio.run(authenticator.authenticate(None, {"username": name, "password": password})), hub.read_passwords(path)


def test_the_authenticator_lets_in_a_name_with_its_own_password_only(tmp_path):
    name, passwords = _log_in(tmp_path, "alice", "x")
    assert name is None
    assert _log_in(tmp_path, "alice", passwords["alice"])[0] == "alice"
    assert _log_in(tmp_path, "Alice", passwords["alice"])[0] == "alice"
    assert _log_in(tmp_path, "mallory", passwords["alice"])[0] is None
    assert _log_in(tmp_path, "alice", passwords["alice"] + " ")[0] is None


def test_the_hub_refuses_to_run_learners_as_root_unless_told(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(hub.os, "geteuid", lambda: 0)
    assert hub.main(["--class", str(_class(tmp_path, "alice\n")), "--state", str(tmp_path / "state")]) == 1
    assert "would run as root" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()


def test_the_hub_says_what_to_run_when_the_learner_course_is_missing(tmp_path, capsys):
    arguments = ["--class", str(_class(tmp_path, "alice\n")), "--course", str(tmp_path / "nothing"), "--allow-root"]
    assert hub.main([*arguments, "--state", str(tmp_path / "state")]) == 1
    assert "run `make student`" in capsys.readouterr().err


def test_the_config_file_refuses_to_load_without_make_hub(monkeypatch):
    monkeypatch.delenv(hub.SETTINGS_VARIABLE, raising=False)
    with pytest.raises(RuntimeError, match="start the hub with `make hub`"):
        hub.settings_from_environment()
    monkeypatch.setenv(hub.SETTINGS_VARIABLE, json.dumps({"state": "/s", "course": "/c", "port": 9}))
    assert hub.settings_from_environment().learner_folder("bob").as_posix() == "/s/learners/bob"
