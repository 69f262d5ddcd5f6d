"""Container-aware CPU counting (deploy/service/onnx_service/cpus.py): fake cgroup trees, and real affinity masks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from labsupport.course.paths import repo_root
from labsupport.models.digits_cnn import ensure_digits_cnn
from onnx_service import cpus

V2_MOUNT = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V1_MOUNTS = (
    "32 31 0:29 {root} /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
)


def _tree(tmp_path, mountinfo: str, cgroup: str, files: dict[str, str]):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text(mountinfo)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    for name, text in files.items():
        path = tmp_path / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_cgroup_v2_quota_in_a_container_namespace(tmp_path):
    root = _tree(tmp_path, V2_MOUNT, "0::/\n", {"/sys/fs/cgroup/cpu.max": "150000 100000\n"})
    assert cpus.cgroup_quota(root) == 1.5


def test_cgroup_v2_unlimited_and_nested_parent_limit(tmp_path):
    root = _tree(
        tmp_path,
        V2_MOUNT,
        "0::/kubepods/pod1/app\n",
        {
            "/sys/fs/cgroup/kubepods/pod1/app/cpu.max": "max 100000\n",
            "/sys/fs/cgroup/kubepods/pod1/cpu.max": "300000 100000\n",
            "/sys/fs/cgroup/kubepods/cpu.max": "max 100000\n",
        },
    )
    assert cpus.cgroup_quota(root) == 3.0  # the pod's limit applies to the container inside it


def test_cgroup_v2_without_any_limit(tmp_path):
    root = _tree(tmp_path, V2_MOUNT, "0::/user.slice\n", {"/sys/fs/cgroup/user.slice/cpu.max": "max 100000\n"})
    assert cpus.cgroup_quota(root) is None


def test_cgroup_v1_quota_with_the_mount_root_of_a_container(tmp_path):
    # docker without a cgroup namespace: /proc/self/cgroup names /docker/abc, which is the mount's root
    root = _tree(
        tmp_path,
        V1_MOUNTS.format(root="/docker/abc"),
        "4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n",
        {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "50000\n", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
    )
    assert cpus.cgroup_quota(root) == 0.5


def test_cgroup_v1_unlimited_quota_is_none(tmp_path):
    root = _tree(
        tmp_path,
        V1_MOUNTS.format(root="/"),
        "4:cpu,cpuacct:/\n",
        {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
    )
    assert cpus.cgroup_quota(root) is None


def test_hybrid_hierarchy_reads_the_v1_cpu_controller(tmp_path):
    mountinfo = V1_MOUNTS.format(root="/") + "40 31 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    root = _tree(
        tmp_path,
        mountinfo,
        "4:cpu,cpuacct:/job\n0::/job\n",
        {"/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "200000\n", "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"},
    )
    assert cpus.cgroup_quota(root) == 2.0


def test_missing_or_garbled_files_mean_no_limit(tmp_path):
    assert cpus.cgroup_quota(tmp_path) is None
    root = _tree(tmp_path, V2_MOUNT, "0::/\n", {"/sys/fs/cgroup/cpu.max": "garbage\n"})
    assert cpus.cgroup_quota(root) is None


def test_usable_takes_the_tightest_limit_and_rounds_a_fraction_down():
    assert cpus.CpuBudget(host=64, affinity=8, quota=None).usable == 8
    assert cpus.CpuBudget(host=64, affinity=64, quota=2.5).usable == 2
    assert cpus.CpuBudget(host=64, affinity=None, quota=0.5).usable == 1  # at least one
    assert cpus.CpuBudget(host=4, affinity=4, quota=16.0).usable == 4
    assert "cgroup quota 2.5 CPUs" in cpus.CpuBudget(host=64, affinity=64, quota=2.5).describe()


def _in_one_cpu(code: str) -> str:
    """Run ``code`` in a fresh interpreter pinned to one CPU with os.sched_setaffinity; returns its stdout."""
    first = min(os.sched_getaffinity(0))
    prelude = f"import os; os.sched_setaffinity(0, {{{first}}})\n"
    completed = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True, timeout=120, cwd=repo_root()
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return completed.stdout


needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity masks on this OS (Linux only)")


@needs_affinity
def test_affinity_limits_the_budget_and_the_service_limiter():
    out = _in_one_cpu(
        f"""
        import json
        from fastapi.testclient import TestClient
        from onnx_service.app import create_app
        from onnx_service.config import Settings
        from onnx_service.cpus import cpu_budget
        with TestClient(create_app(Settings(model={str(ensure_digits_cnn())!r}))) as client:
            ready = client.get("/ready").json()
        print(json.dumps({{"usable": cpu_budget().usable, "ready_cpus": ready["cpus"], "slots": ready["inference_slots"]}}))
        """
    )
    result = json.loads(out.strip().splitlines()[-1])
    assert result["usable"] == 1 and result["ready_cpus"]["affinity"] == 1
    assert result["ready_cpus"]["host"] == os.cpu_count()
    assert result["slots"] == 1


@needs_affinity
def test_taskset_limits_what_the_environment_report_says(require_tool):
    taskset = require_tool("taskset", "util-linux's taskset pins the child process to one CPU")
    code = "from labsupport.course.env import report; r = report(show=False); print(r.usable_cpus, r.cpu_count)"
    completed = subprocess.run(
        [taskset, "-c", str(min(os.sched_getaffinity(0))), sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=repo_root(),
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    usable, host = map(int, completed.stdout.split())
    assert usable == 1 and host == os.cpu_count()
