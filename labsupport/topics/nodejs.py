"""The course model in Node.js with onnxruntime-node: ``deploy/node``'s programs, run as subprocesses (notebook 09).

* ``run_node_classifier`` runs ``deploy/node/classify.js`` and parses its JSON;
* ``node_event_loop`` runs ``deploy/node/event_loop.js``: a heartbeat timer while the model runs on
  Node's main thread or in a worker thread;
* ``node_missing`` says why they cannot run here (Binder has no npm packages), so that the notebook
  prints the reason and skips that cell.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from labsupport.course.paths import relative, repo_root

ORT_NODE_VERSION = "1.30.0"


def node_dir() -> Path:
    """``deploy/node``: ``classify.js``, its ``package.json`` and (after ``npm ci``) ``node_modules``."""
    return repo_root() / "deploy" / "node"


def node_executable() -> str | None:
    """Path of ``node`` on PATH, or None."""
    return shutil.which("node")


def node_missing(node: str | None = None) -> str | None:
    """Why ``deploy/node``'s programs cannot run here (no ``node``, or no onnxruntime-node in ``node_modules``), or None (09).

    Binder has Node.js (repo2docker's base environment) but not the npm packages.
    """
    if (node or node_executable()) is None:
        return "node not found on PATH: install Node.js 18 or newer to run the programs in deploy/node"
    if not (node_dir() / "node_modules" / "onnxruntime-node").is_dir():
        return (
            "onnxruntime-node is not installed in deploy/node/node_modules: run `make js-deps` "
            "(or `cd deploy/node && ONNXRUNTIME_NODE_INSTALL=skip npm ci`)"
        )
    return None


def _node_ready(node: str | None) -> str:
    """``node`` (or the one on PATH) once node and the npm packages are there; FileNotFoundError naming the fix."""
    missing = node_missing(node)
    if missing is not None:
        raise FileNotFoundError(missing)
    return node or str(node_executable())


def _run_node_script(script: str, arguments: list[str], node: str, timeout: float) -> dict[str, Any]:
    """Run ``node deploy/node/<script> ARGUMENTS`` and parse the one JSON object it prints."""
    done = subprocess.run([node, script, *arguments], cwd=node_dir(), capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{script} exited with status {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
    return json.loads(done.stdout)


def _existing_files(**paths: str | os.PathLike[str]) -> None:
    for what, value in paths.items():
        if not Path(value).is_file():
            raise FileNotFoundError(f"{what} {relative(value)} does not exist")


def run_node_classifier(
    images_json: str | os.PathLike[str],
    model_path: str | os.PathLike[str],
    node: str | None = None,
    timeout: float = 120,
) -> dict[str, Any]:
    """Run ``node deploy/node/classify.js --model M --input J`` and return its JSON (predictions, probabilities, logits).

    Raises FileNotFoundError when node or the npm packages are missing, RuntimeError with the
    program's own error message when it exits non-zero.
    """
    node = _node_ready(node)
    _existing_files(images_json=images_json, model_path=model_path)
    arguments = ["--model", str(Path(model_path).resolve()), "--input", str(Path(images_json).resolve())]
    return _run_node_script("classify.js", arguments, node, timeout)


@dataclass(frozen=True)
class EventLoopTrace:
    """What ``deploy/node/event_loop.js`` saw: each run's ``(start, end)`` and every heartbeat, in ms."""

    mode: str
    runs: list[tuple[float, float]]
    heartbeats: list[float]

    @property
    def run_ms(self) -> list[float]:
        return [end - start for start, end in self.runs]

    @property
    def longest_gap_ms(self) -> list[float]:
        """Per run: the longest stretch without a heartbeat while the run was in flight."""
        beats = np.asarray(self.heartbeats)
        gaps = []
        for start, end in self.runs:
            inside = beats[(beats > start) & (beats < end)]
            gaps.append(float(np.diff(np.concatenate([[start], inside, [end]])).max()))
        return gaps


def node_event_loop(
    model_path: str | os.PathLike[str], mode: str, runs: int = 4, batch: int = 64, node: str | None = None, timeout: float = 120
) -> EventLoopTrace:
    """Run the model ``runs`` times with a 1 ms heartbeat timer, on Node's main thread (mode "main") or in a worker.

    Runs ``node deploy/node/event_loop.js``; the same errors as ``run_node_classifier``.
    """
    if mode not in ("main", "worker"):
        raise ValueError(f"mode must be 'main' (session.run on the event loop's thread) or 'worker', got {mode!r}")
    node = _node_ready(node)
    _existing_files(model_path=model_path)
    arguments = ["--model", str(Path(model_path).resolve()), "--mode", mode, "--runs", str(runs), "--batch", str(batch)]
    traced = _run_node_script("event_loop.js", arguments, node, timeout)
    return EventLoopTrace(traced["mode"], [tuple(run) for run in traced["runs"]], traced["heartbeats"])
