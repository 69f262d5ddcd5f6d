"""The classroom hub's own parts (labsupport/maintain/hub.py): the class list, the passwords, the log-in, the refusals.

tests/integration/test_hub.py runs the whole hub; these check each rule without starting anything.
"""

from __future__ import annotations

import asyncio
import json
from argparse import ArgumentTypeError

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


def test_a_class_that_names_a_system_user_too_long_is_refused_before_anything_is_made(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(hub.os, "geteuid", lambda: 0)
    monkeypatch.setattr(hub, "PROXY", tmp_path)  # present
    course = tmp_path / "course" / "notebooks"
    course.mkdir(parents=True)
    (course / "00_start_here.ipynb").write_text("{}")
    arguments = ["--class", str(_class(tmp_path, "a" * 30 + "\n")), "--course", str(tmp_path / "course"), "--state", str(tmp_path / "s")]
    assert hub.main(arguments) == 1
    assert "system user names are at most 32 characters: jupyter-aaaa" in capsys.readouterr().err


def test_learners_folders_are_their_homes_in_the_secure_mode_and_under_the_state_otherwise():
    shared = hub.HubSettings(state="/s", course="/c")
    secure = hub.HubSettings(state="/s", course="/c", secure=True, homes="/home", user_prefix="jupyter-")
    assert shared.learner_folder("bob").as_posix() == "/s/learners/bob"
    assert secure.learner_folder("bob").as_posix() == "/home/jupyter-bob"
    assert secure.python_path("bob").split(":") == [
        "/home/jupyter-bob/onnx-lab",
        *(f"/home/jupyter-bob/onnx-lab/deploy/{name}" for name in ("service", "web")),
    ]


@pytest.mark.parametrize(("idle", "interval"), [(3600, 300), (86400, 300), (60, 10), (20, 3), (3, 1)])
def test_servers_report_activity_often_enough_for_the_culler(idle, interval):
    assert hub.HubSettings(state="/s", course="/c", cull_idle=idle).activity_interval == interval


def test_the_culler_is_a_hub_service_with_the_scopes_it_needs(monkeypatch):
    class Config(dict):
        def __getattr__(self, name):
            return self.setdefault(name, Config())

        def __setattr__(self, name, value):
            self[name] = value

    c = Config()
    hub.configure_culler(c, hub.HubSettings(state="/s", course="/c", cull_idle=600))
    [service] = c.JupyterHub.services
    assert service["command"][1:] == ["-m", "jupyterhub_idle_culler", "--timeout=600", "--cull-every=100"]
    assert c.JupyterHub.load_roles == [{"name": "idle-culler", "scopes": hub.CULLER_SCOPES, "services": ["idle-culler"]}]


@pytest.mark.parametrize(("text", "size"), [("512M", 512 << 20), ("2G", 2 << 30), ("2g", 2 << 30), ("100K", 100 << 10)])
def test_memory_limits_are_read_in_binary_units(text, size):
    assert hub.parse_size(text) == size


@pytest.mark.parametrize("text", ["2", "2GB", "-1G", "lots"])
def test_a_memory_limit_without_its_unit_is_refused(text):
    with pytest.raises(ArgumentTypeError, match="is not a size such as 512M or 2G"):
        hub.parse_size(text)


def test_the_progress_report_says_when_the_hub_never_ran(tmp_path, capsys):
    assert hub.main(["progress", "--state", str(tmp_path)]) == 1
    assert "hub.json is missing: start the hub once" in capsys.readouterr().err


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
