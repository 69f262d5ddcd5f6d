"""The classroom hub (`make hub`, labsupport/maintain/hub.py): a real JupyterHub with two learners on loopback.

The hub starts exactly as `make hub` starts it (python -m labsupport.maintain.hub), with its own state folder
and free ports. Alice and Bob log in through the login form with the passwords the hub generated, each gets
a server of their own from this environment, and each runs notebook 00's checker in a kernel through the hub's
API. What one learner tries on the other's server or files is answered 403.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from labsupport.course.paths import repo_root
from labsupport.maintain import hub as classroom_hub
from labsupport.maintain import sitecheck, student

ROOT = repo_root()
LEARNERS = ["alice", "bob"]
SCALE = """
import numpy as np
from labsupport.exercises.nb00 import q1

def answer(pixels):
    return (np.asarray(pixels) / 16.0).astype(np.float32)
"""


@dataclass
class Learner:
    """A learner logged in to the hub: ``token`` is an API token they made for themselves after logging in."""

    name: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}


@dataclass
class Hub:
    base: str
    state: Path
    log: Path
    learners: dict[str, Learner]
    pid: int

    def get(self, path: str, learner: Learner, **kwargs) -> httpx.Response:
        return httpx.get(self.base + path, headers=learner.headers, timeout=60, **kwargs)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def _log_in(base: str, name: str, password: str) -> tuple[httpx.Client, httpx.Response]:
    """Log in through the hub's login form, as a browser does (the form's _xsrf field and cookie)."""
    client = httpx.Client(base_url=base, timeout=60)
    client.get("/hub/login")
    reply = client.post("/hub/login", data={"username": name, "password": password, "_xsrf": client.cookies.get("_xsrf", "")})
    return client, reply


def _start_server(base: str, name: str, password: str) -> Learner:
    """Log in, make a token, and start the learner's server (the hub's API answers once it is ready)."""
    client, reply = _log_in(base, name, password)
    assert reply.status_code == 302, f"{name} could not log in: {reply.status_code}"
    xsrf = {"X-XSRFToken": client.cookies.get("_xsrf", "")}
    made = client.post(f"/hub/api/users/{name}/tokens", json={"note": "test_hub", "expires_in": 3600}, headers=xsrf)
    assert made.status_code == 201, made.text
    started = client.post(f"/hub/api/users/{name}/server", headers=xsrf, timeout=240)
    assert started.status_code in (201, 202), started.text
    learner = Learner(name, made.json()["token"])
    deadline = time.monotonic() + 240
    while not httpx.get(f"{base}/hub/api/users/{name}", headers=learner.headers, timeout=60).json()["servers"].get("", {}).get("ready"):
        assert time.monotonic() < deadline, f"{name}'s server did not start within 240 s"
        time.sleep(1)
    return learner


@contextmanager
def _running_hub(folder: Path, learners: list[str], extra: list[str], environment: dict[str, str]) -> Iterator[Hub]:
    """Start the hub as `make hub` does, with its own state and free ports, and log each learner in with their server started."""
    student.write_learner_course([ROOT / "notebooks" / "00_start_here.ipynb"], folder / "course")
    (folder / "class.txt").write_text("# the learners\n" + "".join(f"{name}  # a comment\n" for name in learners), encoding="utf-8")
    port, hub_port, proxy_api_port = _free_ports(3)
    command = [sys.executable, "-m", "labsupport.maintain.hub", "--class", str(folder / "class.txt"), "--course", str(folder / "course")]
    command += ["--state", str(folder / "state"), "--port", str(port), "--hub-port", str(hub_port), "--proxy-api-port", str(proxy_api_port)]
    log = folder / "hub.log"
    with log.open("wb") as output:  # a file, not a pipe: a chatty hub never blocks on a full pipe
        # SIGINT ignored, as a non-interactive shell starts a command in the background (`make hub &` in a script, CI)
        in_the_background = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"]
        process = subprocess.Popen(
            [*in_the_background, *command, *extra], stdout=output, stderr=subprocess.STDOUT, env=environment, cwd=folder
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # the secure mode's first start links the environment (100,000 files) first
        while True:
            assert process.poll() is None, f"the hub exited: {log.read_text(errors='replace')[-3000:]}"
            assert time.monotonic() < deadline, f"the hub did not answer within 300 s: {log.read_text(errors='replace')[-3000:]}"
            try:
                if httpx.get(f"{base}/hub/api", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        passwords = classroom_hub.read_passwords(folder / "state" / "passwords.txt")
        with ThreadPoolExecutor(len(learners)) as pool:  # their servers start side by side, as in a class
            started = dict(zip(learners, pool.map(lambda name: _start_server(base, name, passwords[name]), learners), strict=True))
        yield Hub(base, folder / "state", log, started, process.pid)
    finally:
        process.terminate()
        process.wait(timeout=60)


def _clean_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith(("ONNX_LAB_", "JUPYTER"))}


@pytest.fixture(scope="module")
def hub(tmp_path_factory, require_tool) -> Iterator[Hub]:
    require_tool(str(classroom_hub.PROXY), "the hub's proxy is configurable-http-proxy from npm: make js-deps installs it in deploy/hub")
    extra = ["--allow-root"] if os.geteuid() == 0 else []  # CI runs as root: the shared mode, as a throw-away container would
    with _running_hub(tmp_path_factory.mktemp("hub"), LEARNERS, extra, _clean_environment()) as running:
        yield running


def _execute(hub: Hub, learner: Learner, kernel: str, code: str) -> str:
    """Run ``code`` in one of the learner's kernels through the hub (the kernel's websocket); returns what it printed."""
    import websocket

    url = hub.base.replace("http://", "ws://") + f"/user/{learner.name}/api/kernels/{kernel}/channels"
    channel = websocket.create_connection(url, header=[f"Authorization: token {learner.token}"], timeout=180)
    request = uuid.uuid4().hex
    header = {"msg_id": request, "msg_type": "execute_request", "username": learner.name, "session": uuid.uuid4().hex, "version": "5.3"}
    content = {"code": code, "silent": False, "store_history": False, "user_expressions": {}, "allow_stdin": False}
    channel.send(json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}))
    printed = []
    try:
        while True:
            message = json.loads(channel.recv())
            if message["msg_type"] == "status" and message["content"]["execution_state"] in ("restarting", "dead"):
                return "".join(printed) + f"(the kernel is {message['content']['execution_state']})\n"  # it died: the server says so
            if message.get("parent_header", {}).get("msg_id") != request:
                continue
            if message["msg_type"] == "stream":
                printed.append(message["content"]["text"])
            elif message["msg_type"] == "error":
                printed.append(f"{message['content']['ename']}: {message['content']['evalue']}\n")
            elif message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                return "".join(printed)
    finally:
        channel.close()


def _kernel(hub: Hub, learner: Learner) -> str:
    reply = httpx.post(f"{hub.base}/user/{learner.name}/api/kernels", headers=learner.headers, json={}, timeout=120)
    assert reply.status_code == 201, reply.text
    return reply.json()["id"]


def test_only_the_class_logs_in_with_its_own_passwords(hub):
    passwords = classroom_hub.read_passwords(hub.state / "passwords.txt")
    assert set(passwords) == {"teacher", *LEARNERS} and len(set(passwords.values())) == 3
    assert (hub.state / "passwords.txt").stat().st_mode & 0o777 == 0o600
    assert (hub.state / "jupyterhub_cookie_secret").stat().st_mode & 0o777 == 0o600  # generated by JupyterHub, not committed
    for name, password in [("alice", "wrong"), ("alice", passwords["bob"]), ("alice", ""), ("mallory", passwords["alice"]), ("", "")]:
        client, reply = _log_in(hub.base, name, password)
        assert reply.status_code == 403, (name, reply.status_code)
        assert "Invalid username or password" in reply.text and "jupyterhub-hub-login" not in client.cookies
    client, reply = _log_in(hub.base, "ALICE", passwords["alice"])  # JupyterHub lowercases names
    assert reply.status_code == 302 and "jupyterhub-hub-login" in client.cookies


def test_each_learner_gets_their_own_course_from_this_environment_on_notebook_00(hub):
    for name, learner in hub.learners.items():
        home = hub.get(f"/user/{name}/", learner)
        assert home.status_code == 302 and home.headers["location"].startswith(f"/user/{name}{classroom_hub.START_PAGE}")
        notebook = hub.get(f"/user/{name}/api/contents/notebooks/00_start_here.ipynb", learner).json()
        assert notebook["content"]["metadata"]["onnx_lab"] == {"copy": "learner"}
        assert (hub.state / "learners" / name / "onnx-lab" / "notebooks" / "00_start_here.ipynb").is_file()
        assert not (hub.state / "learners" / name / "onnx-lab" / "tests").exists()
    log = hub.log.read_text(errors="replace")
    assert "Using Spawner: jupyterhub.spawner.SimpleLocalProcessSpawner" in log
    assert ">>> shared mode: every learner's server runs as" in log  # the hub says what it does not isolate


def test_each_learner_runs_a_notebook_00_checker_in_their_own_kernel(hub):
    alice, bob = hub.learners["alice"], hub.learners["bob"]
    right = _execute(
        hub,
        alice,
        _kernel(hub, alice),
        SCALE + "q1.check(answer)\nq1.solution()\nimport labsupport, sys\nprint(labsupport.__file__, sys.prefix)",
    )
    assert "✅ Correct" in right and "Solutions are switched off" in right
    assert f"{hub.state / 'learners' / 'alice' / 'onnx-lab' / 'labsupport' / '__init__.py'} {sys.prefix}\n" in right  # this environment
    unattempted = _execute(
        hub,
        bob,
        _kernel(hub, bob),
        "from labsupport.exercises import ____\nfrom labsupport.exercises.nb00 import q1\nq1.check(____)\nprint(q1.solution_code)",
    )
    assert "⏳ Not attempted yet" in unattempted and "RuntimeError: solutions are switched off" in unattempted
    assert "16.0" not in unattempted


def test_a_learner_cannot_reach_another_learners_server_kernels_or_files(hub):
    alice, bob = hub.learners["alice"], hub.learners["bob"]
    saved = httpx.put(
        f"{hub.base}/user/alice/api/contents/notes.txt",
        headers=alice.headers,
        json={"type": "file", "format": "text", "content": "alice's notes"},
        timeout=60,
    )
    assert saved.status_code in (200, 201), saved.text
    assert hub.get("/user/alice/api/contents/notes.txt", alice).json()["content"] == "alice's notes"
    for path in ["/user/alice/api/contents/notes.txt", "/user/alice/api/contents", "/user/alice/api/kernels", "/user/alice/lab"]:
        assert hub.get(path, bob).status_code == 403, path
    assert hub.get("/user/bob/api/contents/notes.txt", bob).status_code == 404, "Bob's folder is his own"
    assert not (hub.state / "learners" / "bob" / "onnx-lab" / "notes.txt").exists()
    # in a browser: Bob's session cookie on Alice's server is refused by the hub's authorization step
    client, _ = _log_in(hub.base, "bob", classroom_hub.read_passwords(hub.state / "passwords.txt")["bob"])
    refused = client.get("/user/alice/lab", follow_redirects=True)
    assert refused.status_code == 403 and "/hub/api/oauth2/authorize" in str(refused.url)
    assert client.get("/user/bob/lab", follow_redirects=True).status_code == 200


def test_netron_opens_through_the_hub_for_its_learner_only(hub):
    alice, bob = hub.learners["alice"], hub.learners["bob"]
    code = "from labsupport.models.graph_mlp import mlp\nfrom labsupport.onnxutil.draw import view_in_netron\nprint(view_in_netron(mlp([6, 4, 3], name='hub_check')))"
    printed = _execute(hub, alice, _kernel(hub, alice), code)  # the kernel stays up: Netron runs in it
    address = re.fullmatch(r"(/user/alice/proxy/\d+/)\n", printed)
    assert address, printed
    page = hub.get(address.group(1), alice)
    assert page.status_code == 200 and '<meta name="file" content="/data/hub_check.onnx">' in page.text
    model = hub.get(address.group(1) + "data/hub_check.onnx", alice)
    assert model.status_code == 200 and model.content.startswith(b"\x08")  # an ONNX ModelProto: field 1, ir_version
    assert hub.get(address.group(1), bob).status_code == 403


def _course_repository(folder: Path) -> Path:
    """A git repository holding a learner course, as a teacher would publish it (here a local path instead of a URL)."""
    repository = folder / "onnx-lab-class"
    student.write_learner_course([ROOT / "notebooks" / "00_start_here.ipynb"], repository)
    git = ["git", "-C", str(repository), "-c", "user.name=teacher", "-c", "user.email=teacher@example.org"]
    for step in (["init", "-q", "-b", "spring"], ["add", "-A"], ["commit", "-q", "-m", "the learner course"]):
        subprocess.run([*git, *step], check=True, capture_output=True)
    return repository


def test_the_docs_sites_hub_link_pulls_the_course_with_nbgitpuller(hub, tmp_path):
    alice = hub.learners["alice"]
    launch = sitecheck.Launch(str(_course_repository(tmp_path)), "spring", hub.base)
    link = dict(launch.links("00_start_here.ipynb"))["Open on the class JupyterHub"]
    client, _ = _log_in(hub.base, "alice", classroom_hub.read_passwords(hub.state / "passwords.txt")["alice"])
    opened = client.get(link.removeprefix(hub.base), follow_redirects=True)  # as a click on the site does, logged in
    assert opened.status_code == 200 and opened.url.path == "/user/alice/git-pull", opened.url
    assert "nbgitpuller" in opened.text.lower()
    # the page's script then asks nbgitpuller's API to pull, and opens urlpath once it has
    with httpx.stream(
        "GET", f"{hub.base}/user/alice/git-pull/api?{opened.url.query.decode()}", headers=alice.headers, timeout=180
    ) as events:
        phases = [json.loads(line[len("data:") :])["phase"] for line in events.iter_lines() if line.startswith("data:")]
    assert phases[-1] == "finished", phases
    pulled = hub.get(f"/user/alice/api/contents/{launch.folder}/notebooks/00_start_here.ipynb", alice)
    assert pulled.status_code == 200 and pulled.json()["content"]["metadata"]["onnx_lab"] == {"copy": "learner"}
    assert opened.url.params["urlpath"] == f"lab/tree/{launch.folder}/notebooks/00_start_here.ipynb"  # where the page goes next


def _children(pid: int) -> list[int]:
    return [int(child) for task in Path(f"/proc/{pid}/task").iterdir() for child in (task / "children").read_text().split()]


def _ignores_sigint(pid: int) -> bool:
    ignored = next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigIgn:"))
    return bool(int(ignored, 16) & (1 << (signal.SIGINT - 1)))


def test_the_hubs_services_stop_on_sigint_though_the_hub_was_started_ignoring_it(hub):
    """JupyterHub stops a service with SIGINT and waits 10 s before SIGTERM: an idle culler that inherited SIGINT ignored
    from a background shell made every stop of the hub take 10 s longer. (The servers start after JupyterHub installs
    its SIGINT handler, so they never inherited it; they are checked too.)"""
    started = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode() for pid in _children(hub.pid)}
    assert any("idle_culler" in line for line in started.values()), started
    assert not [line for pid, line in started.items() if _ignores_sigint(pid)]


# --- the secure mode: started as root, one system user per learner (labsupport/maintain/hub_secure.py) ---

SECURE_IDLE = 20  # seconds: the culler's timeout here; servers report activity every 3 s (a sixth of it)
MEMORY_LIMIT = 700  # MiB for each learner's processes together: a server and a kernel with numpy take about 200
# kept between runs (hard links, rebuilt when the venv changes): linking 100,000 files takes seconds, deleting them more
TEST_ENVIRONMENT = Path("/var/tmp/onnx-lab-hub-test-environment")
ATTEMPTS = """
import os
def attempt(label, action):
    try:
        action()
        print(label, "allowed")
    except PermissionError:
        print(label, "PermissionError")
"""


@dataclass
class SecureHub:
    hub: Hub
    homes: Path
    prefix: str

    def home(self, name: str) -> Path:
        return self.homes / (self.prefix + name)

    def cgroup(self, controller: str, name: str) -> Path:
        settings = json.loads((self.hub.state / "hub.json").read_text())
        return Path(settings["cgroups"][controller]) / (self.prefix + name)


@pytest.fixture(scope="module")
def secure_hub(tmp_path_factory, require_tool) -> Iterator[SecureHub]:
    if os.geteuid() != 0:
        pytest.skip("the secure mode makes system users: it runs as root (CI does)")
    require_tool(str(classroom_hub.PROXY), "the hub's proxy is configurable-http-proxy from npm: make js-deps installs it in deploy/hub")
    require_tool("useradd", "the secure mode makes a system user per learner with useradd (Debian's passwd package)")
    homes = Path(tempfile.mkdtemp(prefix="onnx-lab-homes-"))
    homes.chmod(0o755)
    prefix = f"olt{os.getpid()}-"
    root_mode = ROOT.stat().st_mode & 0o777
    extra = ["--homes", str(homes), "--user-prefix", prefix, "--environment", str(TEST_ENVIRONMENT)]
    extra += ["--cull-idle", str(SECURE_IDLE), "--memory-limit", f"{MEMORY_LIMIT}M"]
    folder = tmp_path_factory.mktemp("secure-hub")
    try:
        with _running_hub(folder, LEARNERS, extra, _clean_environment()) as running:
            yield SecureHub(running, homes, prefix)
    finally:
        ROOT.chmod(root_mode)  # the hub made this clone private, as it should on a class's machine
        for name in [classroom_hub.TEACHER, *LEARNERS]:
            subprocess.run(["userdel", "--force", prefix + name], capture_output=True)
        saved = folder / "state" / "hub.json"
        for parent in json.loads(saved.read_text())["cgroups"].values() if saved.is_file() else []:
            for group in [*Path(parent).glob(f"{prefix}*"), Path(parent)]:
                _remove_cgroup(group)
        shutil.rmtree(homes, ignore_errors=True)


def _remove_cgroup(group: Path) -> None:
    """Remove an empty cgroup; its last processes may take a moment to exit after the hub stopped them."""
    deadline = time.monotonic() + 30
    while group.exists():
        try:
            group.rmdir()
        except OSError:
            assert time.monotonic() < deadline, f"{group} still holds {(group / 'cgroup.procs').read_text()}"
            time.sleep(0.5)


def _running(secure: SecureHub, name: str) -> Learner:
    """The learner with a running server: one the culler stopped (idle more than 20 s) is started again."""
    learner = secure.hub.learners[name]
    if not httpx.get(f"{secure.hub.base}/hub/api/users/{name}", headers=learner.headers, timeout=60).json()["servers"]:
        passwords = classroom_hub.read_passwords(secure.hub.state / "passwords.txt")
        secure.hub.learners[name] = learner = _start_server(secure.hub.base, name, passwords[name])
    return learner


def test_secure_each_learner_runs_as_their_own_user_in_their_cgroups(secure_hub):
    alice = _running(secure_hub, "alice")
    printed = _execute(secure_hub.hub, alice, _kernel(secure_hub.hub, alice), "import os, sys\nprint(os.getuid(), os.getpid(), sys.prefix)")
    uid, pid, prefix = printed.split()
    assert int(uid) == pwd.getpwnam(secure_hub.prefix + "alice").pw_uid != 0
    assert prefix == str(TEST_ENVIRONMENT) and (secure_hub.home("alice").stat().st_mode & 0o777) == 0o700
    assert pwd.getpwnam(secure_hub.prefix + "teacher").pw_uid != 0  # the teacher's own server does not run as root either
    assert pid in (secure_hub.cgroup("memory", "alice") / "cgroup.procs").read_text().split()
    assert pid in (secure_hub.cgroup("cpu", "alice") / "cgroup.procs").read_text().split()
    assert int((secure_hub.cgroup("memory", "alice") / "memory.limit_in_bytes").read_text()) == MEMORY_LIMIT << 20
    assert (secure_hub.cgroup("cpu", "alice") / "cpu.shares").read_text().strip() == "1024"
    assert (ROOT.stat().st_mode & 0o077) == 0 and (secure_hub.hub.state.stat().st_mode & 0o077) == 0


def test_secure_a_learner_cannot_read_or_change_another_learners_work_or_the_solutions(secure_hub):
    alice, bob = _running(secure_hub, "alice"), _running(secure_hub, "bob")
    bobs_kernel = _kernel(secure_hub.hub, bob)
    connection = secure_hub.home("bob") / ".local" / "share" / "jupyter" / "runtime" / f"kernel-{bobs_kernel}.json"
    assert connection.is_file()  # root sees it: the attempts below are refused, not pointed at nothing
    bobs_notebook = secure_hub.home("bob") / "onnx-lab" / "notebooks" / "00_start_here.ipynb"
    solutions = ROOT / "labsupport" / "exercises" / "nb00.py"
    assert bobs_notebook.is_file() and "solution_code=" in solutions.read_text()
    site_packages = TEST_ENVIRONMENT / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    targets = {
        "read Bob's notebook": f"lambda: open({str(bobs_notebook)!r}).read()",
        "write Bob's notebook": f"lambda: open({str(bobs_notebook)!r}, 'a').write('x')",
        "list Bob's home": f"lambda: os.listdir({str(secure_hub.home('bob'))!r})",
        "read Bob's kernel connection file": f"lambda: open({str(connection)!r}).read()",
        "read the teacher's solutions": f"lambda: open({str(solutions)!r}).read()",
        "read the passwords": f"lambda: open({str(secure_hub.hub.state / 'passwords.txt')!r}).read()",
        "change the course's environment": f"lambda: open({str(site_packages / 'numpy' / '__init__.py')!r}, 'a')",
        "write my own notebook": f"lambda: open({str(secure_hub.home('alice') / 'onnx-lab' / 'notebooks' / '00_start_here.ipynb')!r}, 'a')",
    }
    code = ATTEMPTS + "".join(f"attempt({label!r}, {action})\n" for label, action in targets.items())
    printed = _execute(secure_hub.hub, alice, _kernel(secure_hub.hub, alice), code)
    expected = [f"{label} PermissionError" for label in targets if label != "write my own notebook"] + ["write my own notebook allowed"]
    assert printed.splitlines() == expected


def test_secure_mode_leaves_the_loopback_shared_as_the_readme_says(secure_hub):
    alice, bob = _running(secure_hub, "alice"), _running(secure_hub, "bob")
    service = """
import http.server, threading
class Reply(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"bob's service")
server = http.server.HTTPServer(("127.0.0.1", 0), Reply)
threading.Thread(target=server.serve_forever, daemon=True).start()
print(server.server_address[1])
"""
    port = int(_execute(secure_hub.hub, bob, _kernel(secure_hub.hub, bob), service))
    fetch = f"import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=30).read().decode())"
    assert _execute(secure_hub.hub, alice, _kernel(secure_hub.hub, alice), fetch) == "bob's service\n"


def test_secure_the_progress_report_lists_each_learners_passed_exercises(secure_hub):
    alice, bob = _running(secure_hub, "alice"), _running(secure_hub, "bob")
    assert "✅ Correct" in _execute(secure_hub.hub, alice, _kernel(secure_hub.hub, alice), SCALE + "q1.check(answer)")
    wrong = (
        "from labsupport.exercises import ____\nfrom labsupport.exercises.nb00 import q1\nq1.check(____)\nq1.check(lambda pixels: pixels)"
    )
    assert "❌ Incorrect" in _execute(secure_hub.hub, bob, _kernel(secure_hub.hub, bob), wrong)
    records = secure_hub.home("bob") / ".onnx-lab" / "progress.jsonl"
    assert records.stat().st_uid == pwd.getpwnam(secure_hub.prefix + "bob").pw_uid  # Bob's own file, written by his kernel
    command = [sys.executable, "-m", "labsupport.maintain.hub", "progress", "--state", str(secure_hub.hub.state)]
    report = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    rows = {line.split()[0]: line.split()[1:3] for line in report.splitlines() if line.startswith(("alice ", "bob "))}
    assert rows == {"alice": ["nb00.q1", "-"], "bob": ["-", "nb00.q1"]}, report
    assert "Learners can edit their own records" in report


def test_secure_a_kernel_that_allocates_past_the_cap_is_stopped(secure_hub):
    alice = _running(secure_hub, "alice")
    group = secure_hub.cgroup("memory", "alice")
    kills = _oom_kills(group)
    printed = _execute(secure_hub.hub, alice, _kernel(secure_hub.hub, alice), f"memory = b'x' * ({MEMORY_LIMIT} << 20)\nprint('allocated')")
    assert "allocated" not in printed and "(the kernel is restarting)" in printed, printed
    assert _oom_kills(group) > kills
    assert secure_hub.hub.get("/user/alice/api/status", alice).status_code == 200  # the largest process went, the server stayed


def _oom_kills(group: Path) -> int:
    counts = dict(line.split() for line in (group / "memory.oom_control").read_text().splitlines())
    return int(counts["oom_kill"])


def test_secure_an_idle_server_is_culled(secure_hub):
    bob = secure_hub.hub.learners["bob"]
    deadline = time.monotonic() + SECURE_IDLE + 60
    while httpx.get(f"{secure_hub.hub.base}/hub/api/users/bob", headers=bob.headers, timeout=60).json()["servers"]:
        assert time.monotonic() < deadline, "Bob's idle server was not culled"
        time.sleep(1)
    assert "Culling server bob" in secure_hub.hub.log.read_text(errors="replace")
