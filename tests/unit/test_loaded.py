"""labsupport.course.loaded: the runner of make test-loaded starts the CPU burner, runs the command, stops the burner."""

import sys

import psutil
import pytest

from labsupport.course import loaded

MARK = "stands-in-for-stress-ng"
SLEEPER = [sys.executable, "-c", f"import time; time.sleep(600)  # {MARK}"]  # runs until it is stopped

# the command's view of the burner: its sibling process whose command line carries MARK (none once it has exited)
FIND_BURNER = (
    "import psutil, sys, time; me = psutil.Process()\n"
    "def burners():\n"
    "    found = []\n"
    "    for p in me.parent().children():\n"
    "        try:\n"
    f"            if p.pid != me.pid and {MARK!r} in ' '.join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:\n"
    "                found.append(p)\n"
    "        except psutil.NoSuchProcess:\n"
    "            pass\n"
    "    return found\n"
)


def test_the_command_runs_while_the_burner_runs_and_the_burner_is_stopped_after(tmp_path):
    seen = tmp_path / "seen"
    probe = FIND_BURNER + f"open({str(seen)!r}, 'w').write(str(burners()[0].pid)); sys.exit(3)"
    status = loaded.run_loaded([sys.executable, "-c", probe], burners=1, burner=SLEEPER)
    assert status == 3  # the command's own exit status
    burner_pid = int(seen.read_text())
    assert not psutil.pid_exists(burner_pid) or psutil.Process(burner_pid).status() == psutil.STATUS_ZOMBIE


def test_a_burner_that_ended_before_the_command_is_an_error():
    wait_until_the_burner_ends = FIND_BURNER + "while burners(): time.sleep(0.01)"  # an event, not a guess of how long
    quitter = [sys.executable, "-c", f"pass  # {MARK}"]
    with pytest.raises(RuntimeError, match=r"ended early \(exit status 0\)"):
        loaded.run_loaded([sys.executable, "-c", wait_until_the_burner_ends], burners=1, burner=quitter)


def test_bad_input_names_what_was_expected(monkeypatch, capsys):
    with pytest.raises(ValueError, match="burners must be a whole number >= 1"):
        loaded.burner_command(0)
    with pytest.raises(ValueError, match="name the command"):
        loaded.run_loaded([], burners=1, burner=SLEEPER)
    monkeypatch.setattr(loaded.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="stress-ng not found: install it"):
        loaded.burner_command(2)
    assert loaded.main(["--", "true"]) == 2 and "stress-ng not found" in capsys.readouterr().err
