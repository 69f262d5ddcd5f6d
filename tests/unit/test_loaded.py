"""labsupport.course.loaded: the runner of make test-loaded starts the CPU burner, runs the command, stops the burner."""

import sys

import psutil
import pytest

from labsupport.course import loaded

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]  # stands in for stress-ng: runs until it is stopped


def test_the_command_runs_while_the_burner_runs_and_the_burner_is_stopped_after(tmp_path):
    seen = tmp_path / "seen"
    probe = (
        "import psutil, sys; me = psutil.Process(); "
        "siblings = [p for p in me.parent().children() if p.pid != me.pid and p.is_running()]; "
        f"open({str(seen)!r}, 'w').write(str(siblings[0].pid)); sys.exit(3)"
    )
    status = loaded.run_loaded([sys.executable, "-c", probe], burners=1, burner=SLEEPER)
    assert status == 3  # the command's own exit status
    burner_pid = int(seen.read_text())
    assert not psutil.pid_exists(burner_pid) or psutil.Process(burner_pid).status() == psutil.STATUS_ZOMBIE


def test_bad_input_names_what_was_expected(monkeypatch, capsys):
    with pytest.raises(ValueError, match="burners must be a whole number >= 1"):
        loaded.burner_command(0)
    with pytest.raises(ValueError, match="name the command"):
        loaded.run_loaded([], burners=1, burner=SLEEPER)
    monkeypatch.setattr(loaded.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="stress-ng not found: install it"):
        loaded.burner_command(2)
    assert loaded.main(["--", "true"]) == 2 and "stress-ng not found" in capsys.readouterr().err
