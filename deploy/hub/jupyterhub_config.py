"""JupyterHub for a small class on one machine: start it with `make hub` (python -m labsupport.maintain.hub).

Every setting is made by labsupport.maintain.hub.configure from what `make hub` was given; read that module's
docstring for what the hub does and which isolation it gives.
"""

from labsupport.maintain.hub import configure

configure(get_config())  # noqa: F821 (JupyterHub defines get_config in the namespace of its config file)
