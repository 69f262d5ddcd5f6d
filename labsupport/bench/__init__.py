"""Benchmarks: one module per headless suite (the measuring code they share is ``onnxutil.timing``).

``python -m labsupport.bench SUITE`` (``make bench``) runs ``runtime`` (05), ``quantization`` (06),
``service`` (08) or ``all``, prints ratios measured in one run and writes their JSON under ``artifacts/``.
"""
