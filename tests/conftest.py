"""Helpers for the tests under tests/ (the nbval settings for notebooks are in the root conftest.py)."""

from __future__ import annotations

import os
import shutil

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_tool(executable: str, why: str) -> str:
    """Path of an external program; in CI a missing one fails the test, elsewhere it skips with ``why``."""
    path = shutil.which(executable) or (executable if os.path.isfile(executable) else None)
    if path is None:
        message = f"{executable} not found: {why}"
        if IN_CI:
            pytest.fail(message + " (CI must install it: see .ci/run)")
        pytest.skip(message)
    return path
