"""The ONNX Lab inference service (notebook 08); the code lives in ``onnx_service``.

From the repo root: ``.venv/bin/python -m deploy.service`` (see README.md in this folder).
"""
