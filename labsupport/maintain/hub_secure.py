"""The secure mode of the class hub (``make hub`` started as root): one system user per learner, limits, a shared environment.

labsupport/maintain/hub.py uses these pieces when it runs as root:

- ``ensure_user``: each learner of the class list gets a system user ``PREFIX+NAME`` (``jupyter-`` as The Littlest
  JupyterHub names them, so that a learner called ``bin`` never becomes the system's ``bin``) with a home of
  mode 0700. A user of that name that the hub did not create is refused.
- ``build_environment``: the course's environment where every learner can read and run it but not write it. The
  course's ``.venv`` usually cannot serve as it is: it lies in the teacher's clone (which holds the solutions and is
  made private) and its interpreter may lie under a private folder (pyenv's in /root, mode 0700). The hub links
  the venv's files (hard links: no copy, nothing to download) into a new venv owned by root, outside the clone,
  with the base interpreter linked in too when learners cannot reach it. Editable installs that point into the
  clone are left out: each learner imports their own copy of ``labsupport`` and the deploy packages.
- ``copy_course``: a learner's first start copies the learner course (linked into the environment, since it holds
  no solutions) into their home, run as the learner: root never writes into a folder that a learner controls.
- ``Cgroups``: a cgroup (v1) per learner under the hub's own, in the ``memory`` controller with a cap on the
  learner's processes together and in ``cpu`` with equal ``cpu.shares``; ``LearnerSpawner`` puts the server in
  them before it drops root, so its kernels and terminals are counted too. Where a controller is missing or
  read-only (cgroup v2, an unprivileged container) the hub says so at start and runs without that limit.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from traitlets import Dict, Unicode

MARK = "ONNX Lab hub user"  # the comment (GECOS) of the users the hub creates
OWN_PACKAGES = ("__editable__.onnx_lab", "__editable___onnx_lab", "__editable__.onnx_service", "__editable___onnx_service")
OWN_PACKAGES += ("__editable__.onnx_web_demo", "__editable___onnx_web_demo")
CPU_SHARES = 1024  # the kernel's default: every learner weighs the same when the CPUs are busy


def reachable_by_others(path: Path) -> bool:
    """Whether a user who is neither owner nor group can reach ``path`` (every folder above it searchable, it readable)."""
    path = Path(path).resolve()
    folders_ok = all(parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)
    return folders_ok and bool(path.stat().st_mode & stat.S_IROTH)


def make_private(path: Path) -> bool:
    """Take every permission of group and others off ``path``; returns whether it changed anything."""
    mode = Path(path).stat().st_mode
    if not mode & 0o077:
        return False
    Path(path).chmod(stat.S_IMODE(mode) & 0o700)
    return True


def ensure_user(system_name: str, home: Path) -> pwd.struct_passwd:
    """The learner's system user with a home of mode 0700, created when missing; a user the hub did not create is refused."""
    try:
        entry = pwd.getpwnam(system_name)
    except KeyError:
        command = ["useradd", "--home-dir", str(home), "--create-home", "--shell", "/bin/bash", "--comment", MARK, "--user-group"]
        subprocess.run([*command, system_name], check=True, capture_output=True)
        entry = pwd.getpwnam(system_name)
    if entry.pw_gecos != MARK or Path(entry.pw_dir) != Path(home):
        raise ValueError(
            f"a system user {system_name!r} exists that the hub did not create (home {entry.pw_dir}): choose another --user-prefix"
        )
    Path(home).mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    Path(home).chmod(0o700)
    return entry


@dataclass(frozen=True)
class Environment:
    """The learners' environment: its interpreter, the library path its interpreter needs, and the npm packages of notebook 09."""

    root: str

    @property
    def python(self) -> str:
        return str(Path(self.root) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")

    @property
    def library_path(self) -> str:
        return str(Path(self.root) / "base" / "lib")

    @property
    def course(self) -> Path:
        """The learner course (no solutions in it), where learners can read it: each copies it as themselves."""
        return Path(self.root) / "course"

    def node_modules(self, deploy_folder: str) -> Path:
        return Path(self.root) / "node_modules" / deploy_folder


def publish_course(course: Path, environment: Environment) -> None:
    """Link the learner course into the environment afresh (``make student`` may have rewritten it since the last start)."""
    shutil.rmtree(environment.course, ignore_errors=True)
    _link_tree(Path(course), environment.course)
    for folder, _, _ in os.walk(environment.course):
        os.chmod(folder, 0o755)


# run by the learner's own user: root never writes into a folder that a learner controls (a planted link would redirect it)
COPY_COURSE = """
import os, shutil, sys
source, target, *links = sys.argv[1:]
partial = os.path.join(os.path.dirname(target), ".onnx-lab-copying")
shutil.rmtree(partial, ignore_errors=True)
shutil.copytree(source, partial, symlinks=True)
for link in links:
    folder, packages = link.split("=", 1)
    if os.path.isdir(os.path.join(partial, "deploy", folder)):
        os.symlink(packages, os.path.join(partial, "deploy", folder, "node_modules"))
os.rename(partial, target)
"""


def copy_course(python: str, source: Path, target: Path, links: dict[str, Path], *, as_user: str = "", library_path: str = "") -> None:
    """Copy the learner course to ``target`` with links to the npm packages of notebook 09, as ``as_user`` when given."""
    command = [python, "-c", COPY_COURSE, str(source), str(target), *(f"{name}={path}" for name, path in links.items())]
    environment = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": library_path} if library_path else None
    become = set_user_setuid(as_user, chdir=False) if as_user else None
    copied = subprocess.run(command, capture_output=True, text=True, preexec_fn=become, env=environment, cwd="/")
    if copied.returncode != 0:
        raise RuntimeError(f"copying the course to {target} failed: {copied.stderr[-2000:]}")


def _link_tree(source: Path, target: Path) -> None:
    """Hard-link the tree ``source`` at ``target`` (``cp --link``); a full copy where they lie on different file systems."""
    target.parent.mkdir(parents=True, exist_ok=True)
    linked = subprocess.run(["cp", "-a", "--link", str(source), str(target)], capture_output=True)
    if linked.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run(["cp", "-a", str(source), str(target)], check=True, capture_output=True)


def _source_signature(node_modules: dict[str, Path]) -> str:
    """What the environment is made from; a change (a package installed or upgraded) makes the hub link it anew."""
    site_packages = Path(sysconfig.get_path("purelib"))
    parts = [sys.prefix, sys.base_prefix, str(site_packages.stat().st_mtime_ns)]
    parts += [f"{name}={path.stat().st_mtime_ns}" for name, path in sorted(node_modules.items())]
    return "\n".join(parts) + "\n"


def build_environment(root: Path, node_modules: dict[str, Path]) -> tuple[Environment, bool]:
    """Link this venv (and its base interpreter when learners cannot reach it) into ``root``, a venv owned by root, read-only to others.

    Returns the environment and whether it was (re)built; an environment made from the same sources is kept.
    """
    root, version = Path(root), f"python{sys.version_info[0]}.{sys.version_info[1]}"
    signature = _source_signature(node_modules)
    stamp = root / ".made-from"
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == signature:
        return Environment(str(root)), False
    building = root.with_name(root.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    base = Path(sys.base_prefix)
    home = base / "bin"
    if not reachable_by_others(Path(sys._base_executable)):  # pyenv's interpreter under /root (0700), for example
        _link_base_interpreter(base, building / "base", version)
        home = root / "base" / "bin"  # where it will be once built
    lib = building / "lib" / version
    _link_tree(Path(sysconfig.get_path("purelib")), lib / "site-packages")
    for name in os.listdir(lib / "site-packages"):
        if name.startswith(OWN_PACKAGES):
            (lib / "site-packages" / name).unlink()
    for folder in ("share", "etc"):
        if (Path(sys.prefix) / folder).is_dir():
            _link_tree(Path(sys.prefix) / folder, building / folder)
    for name, path in node_modules.items():
        _link_tree(path, building / "node_modules" / name)
    (building / "bin").mkdir()
    (building / "bin" / version).symlink_to(home / version)
    for alias in ("python", "python3"):
        (building / "bin" / alias).symlink_to(version)
    config = f"home = {home}\ninclude-system-site-packages = false\nversion = {'.'.join(map(str, sys.version_info[:3]))}\n"
    (building / "pyvenv.cfg").write_text(config, encoding="utf-8")
    (building / ".made-from").write_text(signature, encoding="utf-8")
    for folder, _, _ in os.walk(building):
        os.chmod(folder, 0o755)
    building.chmod(0o755)
    if root.exists():
        old = root.with_name(root.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        root.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    building.rename(root)
    return Environment(str(root)), True


def _link_base_interpreter(base: Path, target: Path, version: str) -> None:
    """The base interpreter, its shared library and its standard library (without its tests and its own site-packages)."""
    (target / "bin").mkdir(parents=True)
    _link_tree(base / "bin" / version, target / "bin" / version)
    (target / "lib" / version).mkdir(parents=True)
    for library in (base / "lib").glob(f"libpython{sys.version_info[0]}*.so*"):
        _link_tree(library, target / "lib" / library.name)
    for entry in (base / "lib" / version).iterdir():
        if entry.name not in ("site-packages", "test"):
            _link_tree(entry, target / "lib" / version / entry.name)


def cgroup_parent(controller: str, name: str) -> tuple[Path | None, str]:
    """A folder ``name`` for the learners' cgroups under this process's cgroup (v1) of ``controller``, or None and why not."""
    mount = next((Path(fields[4]) for fields in _mounts() if fields[-3] == "cgroup" and controller in fields[-1].split(",")), None)
    if mount is None:
        return None, f"no cgroup v1 {controller} controller is mounted (cgroup v2 is not supported by this hub)"
    own = next(
        (
            line.split(":", 2)[2]
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if controller in line.split(":")[1].split(",")
        ),
        "/",
    )
    parent = mount / own.lstrip("/") / name
    try:
        parent.mkdir(exist_ok=True)
    except OSError as error:
        return None, f"cannot make a cgroup under {parent.parent}: {error.strerror}"
    return parent, "ok"


def _mounts() -> list[list[str]]:
    """/proc/self/mountinfo as fields: the mount point is the fifth, the file system type third from the end."""
    return [line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines()]


def prepare_cgroups(parents: dict[str, str], system_name: str, memory_limit: int) -> list[str]:
    """The learner's cgroups under ``parents`` (``{"memory": ..., "cpu": ...}``) with their limits; returns their ``cgroup.procs`` files."""
    procs = []
    for controller, parent in parents.items():
        group = Path(parent) / system_name
        group.mkdir(exist_ok=True)
        if controller == "memory":
            (group / "memory.limit_in_bytes").write_text(str(memory_limit))
            if (group / "memory.memsw.limit_in_bytes").exists():  # swap counted too, where the kernel accounts it
                (group / "memory.memsw.limit_in_bytes").write_text(str(memory_limit))
        elif controller == "cpu":
            (group / "cpu.shares").write_text(str(CPU_SHARES))
        procs.append(str(group / "cgroup.procs"))
    return procs


class LearnerSpawner(LocalProcessSpawner):
    """A learner's server as their own system user (``PREFIX+NAME``), moved into their cgroups before it drops root."""

    user_prefix = Unicode("jupyter-", config=True, help="the system user of learner NAME is PREFIX+NAME")
    cgroup_parents = Dict(config=True, help="{controller: folder} of the learners' cgroups; empty: no limits")
    memory_limit = Unicode("0", config=True, help="bytes for a learner's processes together")

    @property
    def system_name(self) -> str:
        return self.user_prefix + self.user.name

    def make_preexec_fn(self, name):
        """Join the learner's cgroups as root, then become the learner (JupyterHub's own setuid step)."""
        procs = prepare_cgroups(self.cgroup_parents, self.system_name, int(self.memory_limit)) if self.cgroup_parents else []
        become_learner = set_user_setuid(self.system_name)

        def preexec():
            for path in procs:
                with open(path, "w") as cgroup:
                    cgroup.write(str(os.getpid()))
            become_learner()

        return preexec

    def user_env(self, env):
        entry = pwd.getpwnam(self.system_name)
        env.update(USER=self.system_name, HOME=entry.pw_dir, SHELL=entry.pw_shell)
        return env
