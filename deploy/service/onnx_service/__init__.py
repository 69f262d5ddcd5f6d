"""A FastAPI + ONNX Runtime inference service for any single-input ONNX classifier (ONNX Lab, notebook 08).

Modules: ``config`` (settings from environment variables), ``model`` (load + verify + run the
model), ``validation`` (request checks derived from the model's input signature), ``metrics``
(Prometheus text format), ``cpus`` (the CPUs the process may use: affinity and cgroup quota),
``batching`` (dynamic batching of concurrent requests), ``service`` (slots, overload, shadow runs,
readiness), the routers ``probes``, ``predict`` and ``admin``, ``app`` (wires them into the FastAPI application),
``triton`` (a Triton Inference Server model repository for the same model). Start it with ``python -m onnx_service``.
"""

__version__ = "1.0.0"
# start-up prints this prefix and the URL it serves, once the port is bound (ONNX_SERVICE_PORT=0: any free port)
LISTENING = "onnx_service: listening on "
# set by a supervising process (labsupport.topics.serving): on Linux the service gets SIGTERM when that process dies
PARENT_PID = "ONNX_SERVICE_PARENT_PID"
