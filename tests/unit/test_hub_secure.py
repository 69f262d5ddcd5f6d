"""The secure mode's parts (labsupport/maintain/hub_secure.py) that need no root: tests/integration/test_hub.py runs the rest."""

from __future__ import annotations

import pwd
import sys
from pathlib import Path

import pytest

from labsupport.maintain import hub_secure


def test_a_system_user_the_hub_did_not_create_is_refused():
    with pytest.raises(ValueError, match="a system user 'root' exists that the hub did not create"):
        hub_secure.ensure_user("root", Path(pwd.getpwnam("root").pw_dir))


def test_make_private_takes_group_and_others_off_and_says_whether_it_did(tmp_path):
    folder = tmp_path / "clone"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    assert hub_secure.make_private(folder) and folder.stat().st_mode & 0o777 == 0o700
    assert not hub_secure.make_private(folder)


def test_a_path_under_a_private_folder_is_not_reachable_by_others(tmp_path):
    (tmp_path / "open").mkdir()
    (tmp_path / "open" / "file").write_text("x")
    tmp_path.chmod(0o755)
    (tmp_path / "open").chmod(0o755)
    (tmp_path / "open" / "file").chmod(0o644)
    reachable = all(parent.stat().st_mode & 0o001 for parent in tmp_path.resolve().parents)
    assert hub_secure.reachable_by_others(tmp_path / "open" / "file") == reachable
    (tmp_path / "open").chmod(0o700)
    assert not hub_secure.reachable_by_others(tmp_path / "open" / "file")


def test_without_a_cgroup_v1_controller_the_hub_says_why(monkeypatch):
    monkeypatch.setattr(hub_secure, "_mounts", lambda: [["1", "2", "0:1", "/", "/sys/fs/cgroup", "rw", "-", "cgroup2", "cgroup2", "rw"]])
    parent, why = hub_secure.cgroup_parent("memory", "onnx-lab-hub-8010")
    assert parent is None and why == "no cgroup v1 memory controller is mounted (cgroup v2 is not supported by this hub)"


def test_a_cgroup_folder_that_cannot_be_made_is_reported_not_raised(monkeypatch, tmp_path):
    mount = tmp_path / "memory"
    mount.write_text("")  # not a folder: mkdir fails even for root, as it does on a read-only /sys/fs/cgroup
    monkeypatch.setattr(hub_secure, "_mounts", lambda: [["1", "2", "0:1", "/", str(mount), "rw", "-", "cgroup", "cgroup", "rw,memory"]])
    parent, why = hub_secure.cgroup_parent("memory", "onnx-lab-hub-8010")
    assert parent is None and why.startswith(f"cannot make a cgroup under {mount}")


def test_a_learners_cgroups_get_the_memory_cap_and_an_equal_cpu_share(tmp_path):
    parents = {"memory": tmp_path / "memory", "cpu": tmp_path / "cpu"}
    for parent in parents.values():
        parent.mkdir()
    procs = hub_secure.prepare_cgroups({name: str(path) for name, path in parents.items()}, "jupyter-alice", 512 << 20)
    assert procs == [str(tmp_path / "memory" / "jupyter-alice" / "cgroup.procs"), str(tmp_path / "cpu" / "jupyter-alice" / "cgroup.procs")]
    assert (tmp_path / "memory" / "jupyter-alice" / "memory.limit_in_bytes").read_text() == str(512 << 20)
    assert (tmp_path / "cpu" / "jupyter-alice" / "cpu.shares").read_text() == "1024"


def test_the_course_copy_is_made_whole_with_links_to_the_npm_packages(tmp_path):
    course = tmp_path / "course"
    (course / "deploy" / "web").mkdir(parents=True)
    (course / "notebooks").mkdir()
    (course / "notebooks" / "00_start_here.ipynb").write_text("{}")
    packages = tmp_path / "packages"
    packages.mkdir()
    target = tmp_path / "home" / "onnx-lab"
    target.parent.mkdir()
    hub_secure.copy_course(sys.executable, course, target, {"web": packages, "node": packages})
    assert (target / "notebooks" / "00_start_here.ipynb").read_text() == "{}"
    assert (target / "deploy" / "web" / "node_modules").resolve() == packages and not (target / "deploy" / "node").exists()
    assert not (tmp_path / "home" / ".onnx-lab-copying").exists()


def test_a_failed_course_copy_says_why(tmp_path):
    with pytest.raises(RuntimeError, match=r"copying the course to .* failed: (?s:.*)FileNotFoundError"):
        hub_secure.copy_course(sys.executable, tmp_path / "nothing", tmp_path / "home" / "onnx-lab", {})
