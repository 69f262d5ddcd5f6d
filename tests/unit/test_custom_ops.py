"""labsupport.topics.custom_ops finds ONNX Runtime's headers where notebook 10 says and builds the g++ command."""

from __future__ import annotations

from pathlib import Path

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
