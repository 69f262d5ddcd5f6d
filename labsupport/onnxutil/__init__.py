"""ONNX and ONNX Runtime utilities used across lessons (the README's table lists them)."""
