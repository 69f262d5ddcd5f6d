import sys

import pytest

from labsupport.__main__ import main as labsupport_main
from labsupport.course import env, paths


def test_pins_follow_requirements_and_markers(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        '# comment\nonnx==1.0.0  # why\nlinux-only==2.0; sys_platform == "linux"\nnever==3.0; sys_platform == "plan9"\nloose>=1\n'
    )
    pins = env.pinned_versions(requirements)
    assert pins["onnx"] == "1.0.0" and "never" not in pins and "loose" not in pins
    assert ("linux-only" in pins) == sys.platform.startswith("linux")


def test_check_versions_names_missing_and_wrong_packages(monkeypatch):
    monkeypatch.delenv(env.UNPINNED_ENV_VAR, raising=False)
    problems = env.check_versions(["numpy", "surely-not-installed-pkg"], {"numpy": "0.0.1", "surely-not-installed-pkg": "1.0"})
    assert any("numpy" in p and "pins 0.0.1" in p for p in problems)
    assert any("surely-not-installed-pkg is not installed" in p for p in problems)
    assert all("make reinstall" in p and "pip install -r" in p for p in problems)
    assert env.check_versions(["numpy"]) == []


def test_unpinned_mode_accepts_other_versions_but_not_missing_packages(monkeypatch):
    monkeypatch.setenv(env.UNPINNED_ENV_VAR, "1")
    pins = {"numpy": "0.0.1", "surely-not-installed-pkg": "1.0"}
    assert env.check_versions(["numpy", "surely-not-installed-pkg"], pins) == [
        "surely-not-installed-pkg is not installed (the course pins 1.0); " + env.FIX_HINT
    ]


def test_require_prints_ok_or_raises(capsys, monkeypatch):
    monkeypatch.delenv(env.UNPINNED_ENV_VAR, raising=False)
    env.require("numpy", "onnx")
    assert capsys.readouterr().out.startswith("Environment OK: numpy ")
    monkeypatch.setattr(env, "pinned_versions", lambda: {"numpy": "0.0.1"})
    with pytest.raises(env.EnvironmentMismatch, match=r"numpy .* pins 0\.0\.1"):
        env.require("numpy")


def test_require_resolves_platform_specific_distributions(capsys, monkeypatch):
    monkeypatch.delenv(env.UNPINNED_ENV_VAR, raising=False)
    monkeypatch.setattr(env, "pinned_versions", lambda: {"tensorflow-cpu": "1.0", "numpy": env.installed_version("numpy")})
    monkeypatch.setattr(env, "installed_version", lambda name: {"tensorflow-cpu": "1.0"}.get(name, "2.0"))
    assert env.check_versions(["tensorflow"]) == []
    env.require("tensorflow")
    assert capsys.readouterr().out == "Environment OK: tensorflow 1.0\n"
    monkeypatch.setattr(env, "installed_version", lambda name: None)
    with pytest.raises(env.EnvironmentMismatch, match="tensorflow-cpu is not installed"):
        env.require("tensorflow")


def test_report_lists_packages_providers_and_cpus(capsys):
    result = env.report()
    printed = capsys.readouterr().out
    assert result.ok, result.problems
    assert "CPUExecutionProvider" in result.providers and result.cpu_count >= 1
    assert 1 <= result.usable_cpus <= result.cpu_count and f"{result.usable_cpus} usable CPUs" in printed
    assert set(result.packages) == set(env.pinned_versions())
    assert "onnxruntime" in printed and "All checks passed." in printed


def test_report_flags_an_unwritable_artifacts_folder(monkeypatch):
    def broken():
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(env, "artifacts_dir", broken)
    result = env.report(show=False)
    assert not result.ok and any("artifacts/ folder is not writable" in p for p in result.problems)


def test_doctor_exit_codes(monkeypatch, capsys):
    monkeypatch.delenv(env.UNPINNED_ENV_VAR, raising=False)
    assert labsupport_main(["doctor"]) == 0
    monkeypatch.setattr(env, "pinned_versions", lambda: {"numpy": "0.0.1"})
    assert labsupport_main(["doctor"]) == 1
    assert "PROBLEM: numpy" in capsys.readouterr().out
    assert labsupport_main([]) == 2


def test_seed_everything_makes_numpy_repeatable():
    import numpy as np

    env.seed_everything(3)
    first = np.random.rand(3)
    env.seed_everything(3)
    assert (np.random.rand(3) == first).all()
    assert paths.repo_root().is_dir()


def test_report_names_missing_deploy_packages_and_how_to_install_them(monkeypatch):
    real = env.installed_version
    monkeypatch.setattr(env, "installed_version", lambda name: None if name == "onnx-service" else real(name))
    monkeypatch.setattr(env, "cpu_budget", lambda: pytest.fail("onnx_service is missing: its CPU helper must not be imported"))
    result = env.report(show=False)
    assert result.problems == [f"onnx-service (deploy/service) is not installed; {env.DEPLOY_FIX}"]
    assert "pip install --no-deps -e . -e deploy/service -e deploy/web" in env.DEPLOY_FIX and result.cpu_count >= 1


def test_report_lists_an_unimportable_service_package_instead_of_crashing(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx_service", None)  # installed per its metadata, but the import fails
    monkeypatch.setitem(sys.modules, "onnx_service.cpus", None)
    result = env.report(show=False)
    assert any("onnx-service is installed but cannot be imported" in p and env.DEPLOY_FIX in p for p in result.problems)
    assert result.cpu_count >= 1 and "PROBLEM: onnx-service" in str(result)


def test_report_and_require_notice_a_missing_graphviz_dot(monkeypatch):
    monkeypatch.delenv(env.UNPINNED_ENV_VAR, raising=False)
    monkeypatch.setattr(env.shutil, "which", lambda program: None)
    assert any("`dot` program is not on PATH" in p for p in env.report(show=False).problems)
    with pytest.raises(env.EnvironmentMismatch, match=r"`dot` program is not on PATH.*apt-get install graphviz"):
        env.require("numpy", "graphviz")
    env.require("numpy")  # a notebook that does not draw does not need dot


def test_doctor_fails_without_dot_or_the_service_package(monkeypatch, capsys):
    monkeypatch.delenv(env.UNPINNED_ENV_VAR, raising=False)
    monkeypatch.setattr(env.shutil, "which", lambda program: None)
    assert labsupport_main(["doctor"]) == 1
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "onnx_service.cpus", None)
    assert labsupport_main(["doctor"]) == 1
    assert "PROBLEM: onnx-service is installed but cannot be imported" in capsys.readouterr().out


def test_report_groups_the_packages_under_the_requirements_headings(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# --- ONNX core ---\nonnx==1.0\n# a comment\nonnxruntime==2.0\n\n# --- frameworks ---\ntorch==3.0\n")
    sections = env.pinned_sections(requirements)
    assert sections == {"onnx": "ONNX core", "onnxruntime": "ONNX core", "torch": "frameworks"}
    text = str(env.EnvReport("3.11", "Linux", 2, {"onnx": "1.0", "onnxruntime": None, "torch": "3.0"}, [], sections=sections))
    assert text.splitlines()[1:6] == ["ONNX core:", "  onnx         1.0", "  onnxruntime  MISSING", "frameworks:", "  torch        3.0"]


def test_short_report_lists_the_lesson_packages_and_counts_the_tooling(capsys):
    sections = {"onnx": "ONNX core", "pytest": "JupyterLab and tests", "sphinx": "the course website (make docs)"}
    packages = {"onnx": "1.0", "pytest": "9.0", "sphinx": None}
    result = env.EnvReport("3.11", "Linux", 2, packages, [], problems=["sphinx is not installed"], sections=sections)
    short = result.describe(full=False)
    assert "onnx" in short and "pytest" not in short and "  sphinx" not in short
    assert "+ 2 tooling packages" in short and "PROBLEM: sphinx is not installed" in short  # a problem is never hidden
    assert "pytest" in str(result) and "sphinx" in str(result)
    printed = env.report(full=False)
    out = capsys.readouterr().out
    assert "onnxruntime" in out and "zizmor" not in out and ("All checks passed." in out) == printed.ok
    headings = set(env.pinned_sections().values())
    assert all(any(h.startswith(prefix) for h in headings) for prefix in env.TOOLING_HEADINGS)  # no stale prefix
