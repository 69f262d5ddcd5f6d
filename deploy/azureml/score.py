"""Azure Machine Learning scoring script for the course's ONNX classifier (deploy/azureml; notebook 13).

Azure ML's inference server (PyPI ``azureml-inference-server-http``, in the deployment's environment) loads
this file by its path, calls ``init()`` once and ``run(raw_data, request_headers)`` for every POST /score,
with the request body as text. Validation and inference are the course service's own code: ``onnx_service``
(deploy/service), which ``labsupport.topics.azure_ml.stage_code`` copies next to this file into the code
folder Azure ML uploads. A request gets the same checks of its JSON body (content type, shape, dtype, batch
limit), and score.py answers with the same status codes, messages and predictions as the service's POST /predict.
A client of a managed online endpoint sees those codes only on a local run: Azure's front end turns every non-200
answer into 424, with score.py's code in the header ms-azureml-model-error-statuscode (deploy/azureml/README.md).
Unlike the service, it does not limit the body's size (the service's 413 above max_body_bytes), and its answer
names no version or alias. Two answers come from Azure ML's inference server, not from the service's rules: it
also serves GET /score, each query parameter turned into a JSON field (GET /score?inputs=[1,2] gets score.py's 422,
where the service has no GET /predict: 405), and a body that is not UTF-8 gets the server's own 400
{"message": "Input cannot be decoded as UTF-8: ..."} before score.py runs (the service answers 400 invalid_json, and
reads UTF-16 and UTF-32 JSON). It imports only onnx_service's modules that need nothing beyond conda.yml (make test
runs it in a venv of conda.yml's pip section); nothing here imports labsupport.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

# the server imports this file from its path, which adds nothing to sys.path: the service package lies beside it
sys.path.insert(0, str(Path(__file__).resolve().parent))

from onnx_service.config import Settings
from onnx_service.model import load_served_model
from onnx_service.validation import RequestError, check_content_type, parse_json, to_batch

MODEL_DIR_VARIABLE = "AZUREML_MODEL_DIR"  # where Azure ML mounts the registered model's files
_served: dict[str, Any] = {}


def model_file(model_dir: str | os.PathLike[str]) -> Path:
    """The one .onnx file under the model folder (its layout depends on how the model was registered)."""
    found = sorted(Path(model_dir).rglob("*.onnx"))
    if len(found) != 1:
        listed = ", ".join(str(path) for path in found) or "none"
        raise FileNotFoundError(f"expected exactly one .onnx file under {MODEL_DIR_VARIABLE}={model_dir}; found {listed}")
    return found[0]


def init() -> None:
    """Load and verify the model once, with the service's settings (ONNX_SERVICE_* variables of the deployment)."""
    settings = Settings.from_env()
    model = load_served_model(model_file(os.environ[MODEL_DIR_VARIABLE]), settings.model_sha256, settings.threads, settings.model_name)
    _served.update(model=model, contract=model.contract(settings.max_batch))


def _refusal(error: RequestError) -> Any:
    # the server's own response class: it is installed in the deployment's environment, not in the course's
    from azureml_inference_server_http.api.aml_response import AMLResponse

    return AMLResponse(error.body(), error.status, json_str=True)


def run(raw_data: str, request_headers: dict[str, str] | None = None) -> Any:
    """Classify one example or a batch, like POST /predict; a bad request gets the service's 4xx and message."""
    model = _served["model"]
    content_type = next((value for key, value in (request_headers or {}).items() if key.lower() == "content-type"), None)
    try:
        check_content_type(content_type)
        batch, _single = to_batch(parse_json(raw_data.encode("utf-8")), _served["contract"])
    except RequestError as error:
        return _refusal(error)
    return {"model": model.name, "batch_size": len(batch), **model.postprocess(model.run(batch))}
