"""The guards of tests/unit/conftest.py hold: unit tests see a temporary artifacts folder and cannot train."""

from __future__ import annotations

import pytest

from labsupport.course.paths import artifacts_dir, repo_root
from labsupport.models.digits_cnn import ensure_digits_cnn, train_digits_cnn


def test_unit_tests_write_into_a_temporary_artifacts_folder(unit_artifacts):
    assert artifacts_dir() == unit_artifacts.resolve() and not unit_artifacts.is_relative_to(repo_root())
    assert ensure_digits_cnn().parent == artifacts_dir()  # the untrained CNN is there: nothing is trained


def test_training_fails_a_unit_test():
    with pytest.raises(AssertionError, match="unit tests train nothing"):
        train_digits_cnn(epochs=1, progress=False)
