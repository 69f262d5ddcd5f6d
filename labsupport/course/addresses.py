"""Where the learner's browser reaches a server that a notebook starts on this machine (notebooks 01 and 09).

``make lab`` runs the browser and the kernel on one machine, so ``http://127.0.0.1:PORT`` works. On
JupyterHub (the class hub of ``make hub``) and Binder the kernel runs on a server whose 127.0.0.1 is not
the learner's computer; jupyter-server-proxy (pinned in requirements.txt) forwards
``<server prefix>proxy/PORT/`` to that port, and JupyterHub tells the server its prefix in
``JUPYTERHUB_SERVICE_PREFIX`` (``/user/NAME/``).
"""

from __future__ import annotations

import importlib.util
import os

HUB_PREFIX_VARIABLE = "JUPYTERHUB_SERVICE_PREFIX"  # set for every server JupyterHub starts, Binder's included


def on_a_hub() -> bool:
    """True when this kernel's server was started by JupyterHub (a class hub or Binder)."""
    return os.environ.get(HUB_PREFIX_VARIABLE) is not None


def browser_address(port: int) -> str | None:
    """The address to open for a server on this machine's ``port``: ``http://127.0.0.1:PORT`` for a local lab;
    on a hub the path through jupyter-server-proxy (``{JUPYTERHUB_HOST}/user/NAME/proxy/PORT/``), or None when
    jupyter-server-proxy is not installed there (nothing the browser could open)."""
    prefix = os.environ.get(HUB_PREFIX_VARIABLE)
    if prefix is None:
        return f"http://127.0.0.1:{port}"
    if importlib.util.find_spec("jupyter_server_proxy") is None:
        return None
    return f"{os.environ.get('JUPYTERHUB_HOST', '')}{prefix.rstrip('/')}/proxy/{port}/"
