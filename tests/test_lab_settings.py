"""JupyterLab as a classroom expects it: binder/overrides.json, installed by `make` and by binder/postBuild.

The overrides turn off the "official Jupyter news" prompt, the news feed and the update check (the
requests JupyterLab would make to other sites) and the extension manager (PyPI), as defaults that a
user can still change in the Settings Editor.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jsonschema
import pytest

from conftest import IN_CI

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = ROOT / "binder" / "overrides.json"
LAB_DIR = Path(sys.prefix) / "share" / "jupyter" / "lab"
INSTALLED = LAB_DIR / "settings" / "overrides.d" / "onnx-lab.json"
TOKEN = "onnx-lab-settings-test"
EXPECTED = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/extensionmanager-extension:plugin": {"enabled": False},
}


def _schema(plugin_id: str) -> dict:
    package, plugin = plugin_id.split(":")
    return json.loads((LAB_DIR / "schemas" / package / f"{plugin}.json").read_text(encoding="utf-8"))


def test_overrides_turn_off_what_reaches_other_sites_and_match_the_schemas():
    overrides = json.loads(OVERRIDES.read_text(encoding="utf-8"))
    assert overrides == EXPECTED
    for plugin_id, values in overrides.items():
        schema = _schema(plugin_id)
        jsonschema.validate(values, schema)  # names and types as this JupyterLab defines them
        assert set(values) <= set(schema["properties"]), plugin_id


def test_overrides_are_installed_in_this_environment():
    if not INSTALLED.is_file():
        message = f"{INSTALLED} is missing: `make lab` / `make test` install it from binder/overrides.json"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    assert json.loads(INSTALLED.read_text(encoding="utf-8")) == json.loads(OVERRIDES.read_text(encoding="utf-8"))


def test_binder_installs_the_overrides_where_jupyterlab_reads_them():
    post_build = (ROOT / "binder" / "postBuild").read_text(encoding="utf-8")
    assert "cp binder/overrides.json" in post_build and "/settings/overrides.d" in post_build and "/onnx-lab.json" in post_build
    assert "binder/overrides.json" in (ROOT / "Makefile").read_text(encoding="utf-8")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode("utf-8")


@pytest.mark.slow
def test_jupyterlab_starts_with_the_news_prompt_and_update_check_off(tmp_path):
    settings = tmp_path / "app-settings" / "overrides.d"
    settings.mkdir(parents=True)
    shutil.copy(OVERRIDES, settings / "onnx-lab.json")
    port = _free_port()
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--allow-root",
        f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={ROOT}", f"--LabApp.app_settings_dir={settings.parent}",
    ]
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "user-settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _get(f"{base}/api/status?token={TOKEN}")
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "JupyterLab did not start within 60 s"
                time.sleep(0.5)
        for plugin_id, values in EXPECTED.items():
            reply = json.loads(_get(f"{base}/lab/api/settings/{plugin_id}?token={TOKEN}"))
            # overrides become the defaults of the schema that the server hands to the page
            defaults = {key: reply["schema"]["properties"][key]["default"] for key in values}
            assert defaults == values and reply["settings"] == {}, plugin_id
    finally:
        server.terminate()
        server.wait(timeout=30)
