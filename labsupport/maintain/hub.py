"""A JupyterHub for a small class on one machine (`make hub`): each learner logs in and works in their own copy of the course.

    python -m labsupport.maintain.hub [--class deploy/hub/class-example.txt] [--ip 127.0.0.1] [--port 8010]
                                      [--course build/classroom/learner] [--state build/hub] [--cull-idle 3600]
                                      [--homes /home] [--environment /opt/onnx-lab/env] [--memory-limit 2G]
    python -m labsupport.maintain.hub progress [--state build/hub]     (the teacher's view of the class)

It starts JupyterHub (PyPI ``jupyterhub``) and its proxy (npm ``configurable-http-proxy`` in deploy/hub, which
``make js-deps`` installs) with deploy/hub/jupyterhub_config.py, which calls ``configure``:

- Log-in: the names of the class list (one a line) and ``teacher``, the hub's admin. Each gets a password
  generated at the first start into STATE/passwords.txt, readable by its owner only; JupyterHub generates its
  cookie secret and the proxy's token itself. No secret is committed, and any other log-in is refused (403).
- Servers: each learner's server is ``jupyterhub-singleuser`` from this environment (the course's ``.venv``),
  opened on notebook 00 of their own folder (STATE/learners/NAME/onnx-lab, or ~jupyter-NAME/onnx-lab in the
  secure mode), a copy of the learner course (``make student``: no solution text in it) made at their first start
  and kept afterwards. Their kernels import that copy's ``labsupport`` and deploy packages (``PYTHONPATH``) with
  ``ONNX_LAB_SOLUTIONS=hidden``.

Two modes, chosen by who starts it (the README's teacher section compares them):

- Shared (started by an ordinary user, or as root with ``--allow-root``): the hub lets a learner reach their own
  server only; another learner's server, kernels and files answer 403 (tests/integration/test_hub.py shows it).
  The servers all run as the operating-system user who started the hub (JupyterHub's
  ``SimpleLocalProcessSpawner``) and share its loopback, so code that a learner runs, in a kernel or a terminal,
  can read the other learners' folders and this clone of the course with its solutions, and reach the services
  their notebooks start on 127.0.0.1. That suits a workshop among colleagues; the hub says so when it starts.
- Secure (started as root, on a machine or container given to the class; labsupport/maintain/hub_secure.py):
  learner NAME is the system user ``jupyter-NAME`` with a home of mode 0700 holding their copy of the course;
  their server runs as that user, in cgroups that cap their memory and give each learner an equal CPU share,
  with the course's environment linked where learners can read but not write it. This clone (solutions
  included) and the hub's state (passwords, database) are made private to root.
  tests/integration/test_hub.py shows each of these from inside a learner's kernel, as root.

In both modes ``jupyterhub-idle-culler`` (a hub service) stops servers idle for ``--cull-idle`` seconds (an hour),
and each learner's ``qN.check()`` records its verdict in their own ``~/.onnx-lab/progress.jsonl``, which
``python -m labsupport.maintain.hub progress`` sums up for the teacher (labsupport/exercises/progress.py).
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import pwd
import re
import secrets
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jupyterhub.auth import Authenticator
from traitlets import Unicode

from labsupport.course.paths import repo_root
from labsupport.exercises import progress
from labsupport.maintain import hub_secure

ROOT = repo_root()
CONFIG = ROOT / "deploy" / "hub" / "jupyterhub_config.py"
PROXY = ROOT / "deploy" / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
SETTINGS_VARIABLE = "ONNX_LAB_HUB_SETTINGS"
TEACHER = "teacher"
NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
START_PAGE = "/lab/tree/notebooks/00_start_here.ipynb"
CULLER_SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers"]  # jupyterhub-idle-culler's README
SIZE = re.compile(r"(\d+)([KMG])")


@dataclass(frozen=True)
class HubSettings:
    """Where the hub keeps its state, what it serves, and the ports it binds."""

    state: str
    course: str
    ip: str = "127.0.0.1"
    port: int = 8010
    hub_port: int = 8011
    proxy_api_port: int = 8012
    allow_root: bool = False
    cull_idle: int = 3600
    learners: list[str] = field(default_factory=list)
    secure: bool = False  # the fields below serve the secure mode only
    homes: str = "/home"
    user_prefix: str = "jupyter-"
    environment: str = ""
    memory_limit: int = 0
    cgroups: dict[str, str] = field(default_factory=dict)

    @property
    def passwords(self) -> Path:
        return Path(self.state) / "passwords.txt"

    @property
    def activity_interval(self) -> int:
        """How often servers report activity and the culler looks: a sixth of the idle time, at most JupyterHub's 300 s."""
        return max(1, min(300, self.cull_idle // 6))

    def learner_folder(self, name: str) -> Path:
        """The learner's home; their copy of the course is its ``onnx-lab`` folder."""
        if self.secure:
            return Path(self.homes) / (self.user_prefix + name)
        return Path(self.state) / "learners" / name

    def python_path(self, name: str) -> str:
        """The learner's own copy of ``labsupport`` and of the deploy packages come first on their kernels' path."""
        course = self.learner_folder(name) / "onnx-lab"
        return os.pathsep.join(str(folder) for folder in (course, course / "deploy" / "service", course / "deploy" / "web"))


def read_class(path: Path) -> list[str]:
    """The learners' names in a class list: one a line, ``#`` starts a comment; lowercase letters, digits, ``-``, ``_``."""
    names = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        name = line.split("#")[0].strip()
        if not name:
            continue
        if not NAME.fullmatch(name) or name == TEACHER:
            raise ValueError(f"{path}:{number}: {name!r} is not a learner name (lowercase letter first, then a-z 0-9 - _; not {TEACHER!r})")
        names.append(name)
    if not names:
        raise ValueError(f"{path} names no learner")
    return list(dict.fromkeys(names))


def read_passwords(path: Path) -> dict[str, str]:
    """``{name: password}`` from a passwords file (``name password`` lines)."""
    if not Path(path).is_file():
        return {}
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return dict(line.split(" ", 1) for line in lines if line and not line.startswith("#"))


def ensure_passwords(names: list[str], path: Path) -> dict[str, str]:
    """A password for each name, generated for names that have none yet; the file is readable by its owner only."""
    passwords = read_passwords(path)
    passwords = {name: passwords.get(name) or secrets.token_urlsafe(12) for name in names}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    text = "# ONNX Lab hub: name password (generated by make hub; hand each learner theirs)\n"
    path.write_text(text + "".join(f"{name} {password}\n" for name, password in passwords.items()), encoding="utf-8")
    return passwords


class ClassListAuthenticator(Authenticator):
    """The names of the class list log in with the password the hub generated for them; nobody else does."""

    passwords_file = Unicode(config=True, help="the file of `name password` lines that `make hub` writes")

    async def authenticate(self, handler, data):
        passwords = read_passwords(Path(self.passwords_file))
        name, given = self.normalize_username(data.get("username", "")), data.get("password", "")
        expected = passwords.get(name, secrets.token_urlsafe(12))
        if name in passwords and hmac.compare_digest(expected.encode(), given.encode()):
            return name
        self.log.warning("refused a log-in as %r", name)
        return None


def settings_from_environment() -> HubSettings:
    """The settings ``main`` hands to deploy/hub/jupyterhub_config.py."""
    text = os.environ.get(SETTINGS_VARIABLE)
    if not text:
        raise RuntimeError(f"${SETTINGS_VARIABLE} is not set: start the hub with `make hub` (python -m labsupport.maintain.hub)")
    return HubSettings(**json.loads(text))


def give_course_copy(spawner) -> None:
    """JupyterHub's ``pre_spawn_hook``: a learner's first start copies the learner course into their folder."""
    settings = settings_from_environment()
    course = settings.learner_folder(spawner.user.name) / "onnx-lab"
    if course.exists():
        return  # their work stays
    links = {packages.parent.name: packages for packages in (ROOT / "deploy").glob("*/node_modules")}  # notebook 09's, shared read-only
    if not settings.secure:
        hub_secure.copy_course(sys.executable, Path(settings.course), course, links)
        return
    learners = hub_secure.Environment(settings.environment)  # this clone is private: the environment holds copies
    links = {folder: learners.node_modules(folder) for folder in links}
    system_name = settings.user_prefix + spawner.user.name
    hub_secure.copy_course(learners.python, learners.course, course, links, as_user=system_name, library_path=learners.library_path)


def configure(c) -> None:
    """Fill JupyterHub's configuration ``c`` (deploy/hub/jupyterhub_config.py) from the settings of ``make hub``."""
    settings = settings_from_environment()
    state = Path(settings.state)
    c.JupyterHub.bind_url = f"http://{settings.ip}:{settings.port}"
    c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{settings.hub_port}"
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{settings.proxy_api_port}"
    c.ConfigurableHTTPProxy.command = [str(PROXY)]
    c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
    c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
    c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
    c.JupyterHub.pid_file = str(state / "jupyterhub.pid")

    c.JupyterHub.authenticator_class = ClassListAuthenticator
    c.ClassListAuthenticator.passwords_file = str(settings.passwords)
    c.Authenticator.allowed_users = set(read_passwords(settings.passwords))
    c.Authenticator.admin_users = {TEACHER}

    c.Spawner.default_url = START_PAGE
    c.Spawner.pre_spawn_hook = give_course_copy
    c.Spawner.notebook_dir = str(settings.learner_folder("{username}") / "onnx-lab")
    environment = {
        "ONNX_LAB_SOLUTIONS": "hidden",
        "PYTHONPATH": lambda spawner: settings.python_path(spawner.user.name),
        progress.VARIABLE: lambda spawner: str(settings.learner_folder(spawner.user.name) / progress.FOLDER / progress.FILE),
        "JUPYTERHUB_ACTIVITY_INTERVAL": str(settings.activity_interval),
    }
    c.Spawner.http_timeout = c.Spawner.start_timeout = 180  # JupyterLab starts slowly on a busy machine
    configure_culler(c, settings)
    if settings.secure:
        configure_learner_users(c, settings, environment)
        return
    c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
    c.SimpleLocalProcessSpawner.home_dir_template = str(state / "learners" / "{username}")
    c.Spawner.cmd = [str(Path(sys.executable).with_name("jupyterhub-singleuser"))]
    c.Spawner.environment = environment
    if settings.allow_root:
        c.Spawner.args = ["--allow-root"]  # a container or CI, where root is the only user


def configure_culler(c, settings: HubSettings) -> None:
    """``jupyterhub-idle-culler`` as a hub service; servers report activity often enough that an active one is never culled."""
    c.JupyterHub.last_activity_interval = settings.activity_interval
    c.JupyterHub.activity_resolution = min(30, settings.activity_interval)
    culler = [
        sys.executable,
        "-m",
        "jupyterhub_idle_culler",
        f"--timeout={settings.cull_idle}",
        f"--cull-every={settings.activity_interval}",
    ]
    c.JupyterHub.services = [{"name": "idle-culler", "command": culler}]
    c.JupyterHub.load_roles = [{"name": "idle-culler", "scopes": CULLER_SCOPES, "services": ["idle-culler"]}]


def configure_learner_users(c, settings: HubSettings, environment: dict) -> None:
    """The secure mode: each learner's server as their own system user, in their cgroups, on the learners' environment."""
    learners = hub_secure.Environment(settings.environment)
    c.JupyterHub.spawner_class = hub_secure.LearnerSpawner
    c.LearnerSpawner.user_prefix = settings.user_prefix
    c.LearnerSpawner.cgroup_parents = settings.cgroups
    c.LearnerSpawner.memory_limit = str(settings.memory_limit)
    c.Spawner.cmd = [learners.python, "-m", "jupyterhub.singleuser"]
    path = os.pathsep.join([str(Path(learners.python).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    c.Spawner.environment = {**environment, "PATH": path, "LD_LIBRARY_PATH": learners.library_path, "VIRTUAL_ENV": settings.environment}


def parse_size(text: str) -> int:
    """Bytes from ``512M`` or ``2G`` (binary units)."""
    match = SIZE.fullmatch(text.strip().upper())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 512M or 2G")
    return int(match.group(1)) << {"K": 10, "M": 20, "G": 30}[match.group(2)]


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--class", dest="class_file", type=Path, default=ROOT / "deploy" / "hub" / "class-example.txt")
    parser.add_argument("--course", type=Path, default=ROOT / "build" / "classroom" / "learner", help="the learner course (make student)")
    parser.add_argument(
        "--state", type=Path, default=ROOT / "build" / "hub", help="passwords, database (and learners' folders when shared)"
    )
    parser.add_argument("--ip", default="127.0.0.1", help="the address learners reach (default: this machine only)")
    parser.add_argument("--port", type=int, default=8010)
    parser.add_argument("--hub-port", type=int, default=8011, help="the hub's internal API, on 127.0.0.1")
    parser.add_argument("--proxy-api-port", type=int, default=8012, help="the proxy's internal API, on 127.0.0.1")
    parser.add_argument("--cull-idle", type=int, default=3600, help="stop a server idle this many seconds (jupyterhub-idle-culler)")
    parser.add_argument(
        "--allow-root", action="store_true", help="as root, run the shared mode anyway, every server as root (a throw-away container)"
    )
    secure = parser.add_argument_group("secure mode (started as root)")
    secure.add_argument("--homes", type=Path, default=Path("/home"), help="where the learners' homes are made")
    secure.add_argument("--user-prefix", default="jupyter-", help="learner NAME is the system user PREFIX+NAME")
    secure.add_argument("--environment", type=Path, default=Path("/opt/onnx-lab/env"), help="the learners' read-only environment")
    secure.add_argument("--memory-limit", type=parse_size, default="2G", help="memory of one learner's processes together (cgroup v1)")
    return parser.parse_args(argv)


def prepare_secure_mode(settings: HubSettings, names: list[str], options: argparse.Namespace) -> HubSettings:
    """Make the learners' users, their environment and cgroups; make this clone and the state private. Prints each step."""
    too_long = [name for name in [TEACHER, *names] if len(options.user_prefix + name) > 32]
    if too_long:
        raise ValueError(
            f"system user names are at most 32 characters: {options.user_prefix}{too_long[0]} is longer (shorten --user-prefix)"
        )
    for private in (ROOT, Path(settings.state)):
        if hub_secure.make_private(private):
            print(f">>> made {private} private to {pwd.getpwuid(os.geteuid()).pw_name} (chmod go-rwx): learners must not read it")
    for name in [TEACHER, *names]:  # the teacher's own server runs unprivileged too
        hub_secure.ensure_user(options.user_prefix + name, options.homes.resolve() / (options.user_prefix + name))
    node_modules = {path.parent.name: path.resolve() for path in (ROOT / "deploy").glob("*/node_modules")}
    environment, built = hub_secure.build_environment(options.environment.resolve(), node_modules)
    hub_secure.publish_course(Path(settings.course), environment)
    print(
        f">>> the learners' environment: {environment.root} ({'linked from' if built else 'kept, made from'} {sys.prefix}; read-only to learners)"
    )
    if not hub_secure.reachable_by_others(Path(environment.python)):
        raise ValueError(f"learners cannot reach {environment.python}: choose an --environment whose folders others may search")
    cgroups = {}
    for controller in ("memory", "cpu"):
        parent, why = hub_secure.cgroup_parent(controller, f"onnx-lab-hub-{settings.port}")
        if parent is None:
            print(f">>> no {'memory cap' if controller == 'memory' else 'CPU share'} per learner: {why}")
        else:
            cgroups[controller] = str(parent)
    if "memory" in cgroups:
        print(
            f">>> each learner's processes together may use {options.memory_limit >> 20} MiB; past it the kernel stops the largest of them"
        )
    if "cpu" in cgroups:
        print(">>> each learner gets an equal share of the CPUs when they are busy (cpu.shares)")
    print(">>> not isolated: the loopback; a service one learner's notebook starts on 127.0.0.1 is reachable from another's code")
    secure = {"secure": True, "homes": str(options.homes.resolve()), "user_prefix": options.user_prefix, "environment": environment.root}
    return HubSettings(**{**asdict(settings), **secure, "memory_limit": options.memory_limit, "cgroups": cgroups})


SHARED_WARNING = (
    ">>> shared mode: every learner's server runs as {user}, so code a learner runs can read and change the other learners' "
    "folders and this clone with its solutions; nothing caps memory. Fine for colleagues; for a class, start it as root (secure mode)."
)


def progress_main(argv: list[str]) -> int:
    """``progress [--state build/hub]``: the teacher's view of which exercises each learner has passed."""
    parser = argparse.ArgumentParser(prog="python -m labsupport.maintain.hub progress", description=progress_main.__doc__)
    parser.add_argument("--state", type=Path, default=ROOT / "build" / "hub")
    options = parser.parse_args(argv)
    saved = options.state / "hub.json"
    if not saved.is_file():
        print(f"error: {saved} is missing: start the hub once (make hub) with this --state", file=sys.stderr)
        return 1
    settings = HubSettings(**json.loads(saved.read_text(encoding="utf-8")))
    print(progress.report({name: settings.learner_folder(name) for name in settings.learners}))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["progress"]:
        return progress_main(argv[1:])
    options = parse_arguments(argv)
    try:
        names = read_class(options.class_file)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for needed, how in ((options.course / "notebooks" / "00_start_here.ipynb", "make student"), (PROXY, "make js-deps")):
        if not needed.exists():
            print(f"error: {needed} is missing: run `{how}`", file=sys.stderr)
            return 1
    state = options.state.resolve()
    settings = HubSettings(
        str(state), str(options.course.resolve()), options.ip, options.port, options.hub_port, options.proxy_api_port, options.allow_root
    )
    settings = HubSettings(**{**asdict(settings), "cull_idle": options.cull_idle, "learners": names})
    state.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0 and not options.allow_root:
        try:
            settings = prepare_secure_mode(settings, names, options)
        except (OSError, ValueError, subprocess.CalledProcessError) as error:
            print(f"error: secure mode: {error}", file=sys.stderr)
            return 1
    else:
        print(SHARED_WARNING.format(user=pwd.getpwuid(os.geteuid()).pw_name))
    ensure_passwords([TEACHER, *names], settings.passwords)
    (state / "hub.json").write_text(json.dumps(asdict(settings)), encoding="utf-8")
    print(f">>> JupyterHub for {len(names)} learners on http://{options.ip}:{options.port}/ (stop it with Ctrl-C)")
    print(f">>> names and passwords: {settings.passwords} (readable by you only; {TEACHER} is the admin)")
    print(
        f">>> learners' folders: {settings.learner_folder('NAME')}; a name added to {options.class_file} gets a password at the next start"
    )
    print(
        f">>> idle servers stop after {options.cull_idle} s; the class's progress: python -m labsupport.maintain.hub progress --state {state}"
    )
    environment = {**os.environ, SETTINGS_VARIABLE: json.dumps(asdict(settings))}
    # started in the background by a non-interactive shell (`make hub &` in a script, CI), this process ignores SIGINT, and
    # so would what JupyterHub starts before it installs its own SIGINT handler: its services, such as the idle culler,
    # which it stops with SIGINT, then SIGTERM after 10 s
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execve(sys.executable, [sys.executable, "-m", "jupyterhub", "-f", str(CONFIG)], environment)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
