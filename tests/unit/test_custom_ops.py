"""labsupport.topics.custom_ops finds ONNX Runtime's headers where notebook 10 says and builds the g++ command."""

from __future__ import annotations

from pathlib import Path

import onnxruntime
import pytest

from labsupport.topics import custom_ops


def test_ort_include_dir_override_wins(tmp_path, monkeypatch):
    (tmp_path / custom_ops.HEADER).write_text("")
    monkeypatch.setenv(custom_ops.INCLUDE_ENV_VAR, str(tmp_path))
    assert custom_ops.find_ort_headers() == tmp_path


def test_an_override_without_the_header_is_not_taken(tmp_path, monkeypatch):
    monkeypatch.setenv(custom_ops.INCLUDE_ENV_VAR, str(tmp_path))
    assert custom_ops.find_ort_headers() != tmp_path


def test_headers_dir_is_under_build():
    assert custom_ops.headers_dir().parts[-3:] == ("build", "ort-headers", "include")


def test_compile_command_builds_a_shared_library_against_the_headers(monkeypatch):
    monkeypatch.setattr(custom_ops.shutil, "which", lambda name: f"/usr/bin/{name}")
    command = custom_ops.compile_command(Path("op.cc"), Path("libop.so"), Path("inc"))
    assert command[0] == "/usr/bin/g++" and {"-shared", "-fPIC", "-std=c++17"} <= set(command)
    assert command[command.index("-I") + 1] == "inc" and command[-2:] == ["-o", "libop.so"]


def test_no_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(custom_ops.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler"):
        custom_ops.compile_command(Path("op.cc"), Path("libop.so"), Path("inc"))


def _headers_of_api_version(folder: Path, version: int) -> Path:
    (folder / "onnxruntime_c_api.h").write_text(f"#pragma once\n#define ORT_API_VERSION {version}\n")
    return folder


def test_header_api_version_reads_the_define(tmp_path):
    assert custom_ops.header_api_version(_headers_of_api_version(tmp_path, 21)) == 21


def test_runtime_api_version_is_the_minor_version_of_onnxruntime(monkeypatch):
    monkeypatch.setattr(onnxruntime, "__version__", "1.31.1")
    assert custom_ops.runtime_api_version() == 31


def test_build_blocker_names_the_fetch_for_missing_headers():
    assert "make ort-headers" in custom_ops.build_blocker(None)


def test_build_blocker_refuses_headers_newer_than_the_runtime(tmp_path, monkeypatch):
    monkeypatch.setattr(custom_ops.shutil, "which", lambda name: f"/usr/bin/{name}")
    newer = _headers_of_api_version(tmp_path, custom_ops.runtime_api_version() + 1)
    assert "newer than this ONNX Runtime" in custom_ops.build_blocker(newer)
    same = _headers_of_api_version(tmp_path, custom_ops.runtime_api_version())
    assert custom_ops.build_blocker(same) is None


def test_build_blocker_names_a_missing_compiler(tmp_path, monkeypatch):
    monkeypatch.setattr(custom_ops.shutil, "which", lambda name: None)
    assert "no g++ on PATH" in custom_ops.build_blocker(_headers_of_api_version(tmp_path, 21))


def test_build_blocker_wants_g_plus_plus_which_notebook_10_calls(tmp_path, monkeypatch):
    monkeypatch.setattr(custom_ops.shutil, "which", lambda name: "/usr/bin/c++" if name == "c++" else None)
    assert "no g++ on PATH" in custom_ops.build_blocker(tmp_path)
