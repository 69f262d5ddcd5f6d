"""``python -m labsupport doctor`` as a learner runs it: a separate process, started from any folder."""

import subprocess
import sys


def test_doctor_command_line_runs_from_anywhere(tmp_path):
    completed = subprocess.run([sys.executable, "-m", "labsupport", "doctor"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "All checks passed." in completed.stdout
