"""Smoke test: JupyterLab starts from the installed environment and serves the course.

The ``jupyterlab`` fixture (tests/conftest.py) starts it with ``--port=0`` and reads the port it
picked from its server-info file.
"""

import urllib.request


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode("utf-8", "replace")


def test_jupyterlab_serves_the_lab_and_the_notebooks(jupyterlab):
    lab = jupyterlab("--ServerApp.open_browser=False")
    status, page = _get(lab.url("/lab"))
    assert status == 200 and "JupyterLab" in page
    status, listing = _get(lab.url("/api/contents/notebooks"))
    assert status == 200 and '"00_start_here.ipynb"' in listing
