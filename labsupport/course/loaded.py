"""A busy machine on purpose: run a command with CPU burners beside it (``make test-loaded``).

Learners run the course on busy laptops, shared JupyterHub nodes and 2-CPU Binder pods, so the course's
measurements and tests must hold when other programs compete for the CPUs: speed verdicts come from CPU time,
wall-clock comparisons say "machine busy" instead of a verdict, and tests that depend on scheduling wait for
events instead of racing a clock. This runner checks that: it starts ``stress-ng --cpu N`` (Debian's and Homebrew's
``stress-ng``; by default N is twice the CPUs, at normal priority), runs the command, stops the burners and returns
the command's exit status::

    python -m labsupport.course.loaded -- python -m pytest notebooks/06_quantization.ipynb
    python -m labsupport.course.loaded --burners 4 -- python -m pytest tests/integration/test_service_batching.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

BURNER = "stress-ng"


def burner_command(burners: int) -> list[str]:
    """The command that keeps ``burners`` CPU workers busy until it is stopped."""
    if not isinstance(burners, int) or isinstance(burners, bool) or burners < 1:
        raise ValueError(f"burners must be a whole number >= 1, got {burners!r}")
    executable = shutil.which(BURNER)
    if executable is None:
        raise RuntimeError(f"{BURNER} not found: install it (apt-get install stress-ng, brew install stress-ng)")
    return [executable, "--cpu", str(burners), "--quiet"]


def run_loaded(command: Sequence[str], burners: int, burner: Sequence[str] | None = None) -> int:
    """Run ``command`` while ``burner`` (default: ``burner_command(burners)``) keeps the CPUs busy; its exit status."""
    if not command:
        raise ValueError("name the command to run after --")
    burner_process = subprocess.Popen(list(burner or burner_command(burners)))
    try:
        status = subprocess.call(list(command))
        if burner_process.poll() is not None:  # a green run beside a burner that died proves nothing
            raise RuntimeError(f"the CPU burner ended early (exit status {burner_process.returncode}): the command ran on a quiet machine")
        return status
    finally:
        burner_process.terminate()
        try:
            burner_process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            burner_process.kill()
            burner_process.wait()


def main(argv: list[str] | None = None) -> int:
    """``[--burners N] -- COMMAND ...``: run the command with N CPU burners beside it."""
    parser = argparse.ArgumentParser(prog="python -m labsupport.course.loaded", description=__doc__.split("\n\n")[0])
    default = 2 * (os.cpu_count() or 1)
    parser.add_argument(
        "--burners", type=int, default=default, help=f"CPU workers to run beside the command (default {default}: twice the CPUs)"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        print(f">>> {args.burners} CPU burners ({BURNER} --cpu {args.burners}) beside: {' '.join(command)}", flush=True)
        return run_loaded(command, args.burners)
    except (ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
