"""Benchmarks: one module per headless suite (the measuring code they share is ``onnxutil.timing``).

``python -m labsupport.bench SUITE`` (``make bench``) runs the suite of that module's name or ``all``, prints ratios
measured in one run and writes their JSON under ``artifacts/``.
"""
