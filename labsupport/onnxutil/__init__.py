"""ONNX and ONNX Runtime utilities used across lessons: sessions, export, reading and drawing graphs, timing, profiling, optimization."""
