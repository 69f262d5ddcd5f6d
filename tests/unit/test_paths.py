from pathlib import Path

import pytest

from labsupport.course import paths


def test_repo_root_found_from_any_working_directory(tmp_path, monkeypatch):
    root = paths.repo_root()
    assert (root / "pyproject.toml").is_file() and (root / "labsupport").is_dir()
    monkeypatch.chdir(tmp_path)  # outside the repo: falls back to the package's location
    assert paths.repo_root() == root
    monkeypatch.chdir(root / "notebooks")
    assert paths.repo_root() == root


def test_root_override_must_be_the_course(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.ROOT_ENV_VAR, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="not the ONNX Lab folder"):
        paths.repo_root()


def test_artifact_paths_are_created_inside_artifacts():
    path = paths.artifact("unit-test/model.onnx")
    assert path.parent.is_dir()
    assert path.parent.parent == paths.artifacts_dir()
    assert paths.relative(path) == "artifacts/unit-test/model.onnx"
    assert paths.data_dir() == paths.repo_root() / "data"


@pytest.mark.parametrize("bad", ["", "/etc/passwd", "../escape.onnx", "a/../../b"])
def test_artifact_rejects_paths_outside_artifacts(bad):
    with pytest.raises(ValueError, match="relative path inside artifacts"):
        paths.artifact(bad)


def test_relative_never_shows_an_absolute_path_outside_the_repo(tmp_path):
    assert paths.relative(tmp_path / "x.onnx") == "x.onnx"
    assert not Path(paths.relative(paths.repo_root() / "README.md")).is_absolute()


def test_artifacts_folder_can_be_moved_and_still_shows_as_artifacts(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.ARTIFACTS_ENV_VAR, str(tmp_path / "elsewhere"))
    path = paths.artifact("nb02/model.onnx")
    assert path.parent == tmp_path / "elsewhere" / "nb02" and path.parent.is_dir()
    assert paths.relative(path) == "artifacts/nb02/model.onnx"
    assert paths.relative(paths.repo_root() / "README.md") == "README.md"
