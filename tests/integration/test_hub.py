"""The classroom hub (`make hub`, labsupport/maintain/hub.py): a real JupyterHub with two learners on loopback.

The hub starts exactly as `make hub` starts it (python -m labsupport.maintain.hub), with its own state folder
and free ports. Alice and Bob log in through the login form with the passwords the hub generated, each gets
a server of their own from this environment, and each runs notebook 00's checker in a kernel through the hub's
API. What one learner tries on the other's server or files is answered 403.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
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


@pytest.fixture(scope="module")
def hub(tmp_path_factory, require_tool) -> Iterator[Hub]:
    require_tool(str(classroom_hub.PROXY), "the hub's proxy is configurable-http-proxy from npm: make js-deps installs it in deploy/hub")
    folder = tmp_path_factory.mktemp("hub")
    student.write_learner_course([ROOT / "notebooks" / "00_start_here.ipynb"], folder / "course")
    (folder / "class.txt").write_text("# two learners\nalice\nbob  # and a comment\n", encoding="utf-8")
    port, hub_port, proxy_api_port = _free_ports(3)
    command = [sys.executable, "-m", "labsupport.maintain.hub", "--class", str(folder / "class.txt"), "--course", str(folder / "course")]
    command += ["--state", str(folder / "state"), "--port", str(port), "--hub-port", str(hub_port), "--proxy-api-port", str(proxy_api_port)]
    command += ["--allow-root"] if os.geteuid() == 0 else []  # CI runs as root in a throw-away machine
    environment = {name: value for name, value in os.environ.items() if not name.startswith(("ONNX_LAB_", "JUPYTER"))}
    log = folder / "hub.log"
    with log.open("wb") as output:  # a file, not a pipe: a chatty hub never blocks on a full pipe
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=environment, cwd=folder)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"the hub exited: {log.read_text(errors='replace')[-3000:]}"
            assert time.monotonic() < deadline, "the hub did not answer within 60 s"
            try:
                if httpx.get(f"{base}/hub/api", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        passwords = classroom_hub.read_passwords(folder / "state" / "passwords.txt")
        learners = {name: _start_server(base, name, passwords[name]) for name in LEARNERS}
        yield Hub(base, folder / "state", log, learners)
    finally:
        process.terminate()
        process.wait(timeout=60)


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
    assert "Using Spawner: jupyterhub.spawner.SimpleLocalProcessSpawner" in hub.log.read_text(errors="replace")


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
    code = "from labsupport.exercises.nb01 import mlp\nfrom labsupport.onnxutil.draw import view_in_netron\nprint(view_in_netron(mlp([6, 4, 3], name='hub_check')))"
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
