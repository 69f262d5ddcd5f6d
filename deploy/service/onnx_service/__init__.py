"""A FastAPI + ONNX Runtime inference service for any single-input ONNX classifier (ONNX Lab, notebook 08).

Its modules are described in deploy/service/README.md ("Code") and listed in the course README's table. Start it with ``python -m onnx_service``.
"""

__version__ = "1.0.0"
# start-up prints this prefix and the URL it serves, once the port is bound (ONNX_SERVICE_PORT=0: any free port)
LISTENING = "onnx_service: listening on "
# set by a supervising process (labsupport.topics.serving): on Linux the service gets SIGTERM when that process dies
PARENT_PID = "ONNX_SERVICE_PARENT_PID"
