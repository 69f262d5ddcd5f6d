"""labsupport: the small helper package that the ONNX Lab notebooks import.

Each public helper says in its docstring which notebook introduces it. Modules:

- ``paths``: the repo root, ``data/`` and ``artifacts/`` from any working directory (00)
- ``data``: the course's data sets, offline, checksum-verified (00, 02)
- ``env``: version and hardware report, ``python -m labsupport doctor`` (00)
- ``compare``: numerical parity between two sets of outputs (01, 02)
- ``bench``: latency/throughput measurement and ratio tables (05)
- ``exercises``: the exercise API (``check`` / ``hint`` / ``solution``) (00)
- ``display``: showing expected errors and tables in a notebook (01)
"""

__version__ = "0.1.0"
