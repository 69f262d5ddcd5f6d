"""deploy/azureml/score.py in a virtual environment of conda.yml's pip section: only what the deployment's image installs.

The venv is built once under build/ (a folder named after conda.yml's sha256; pip needs PyPI or its cache the first
time, under 10 s from its cache), then reused. score.py runs there with Azure ML's own inference-server package importable,
on the course's CNN and on a registry version whose sha256 init() checks.
"""

from __future__ import annotations

import dataclasses

import pytest

from labsupport.models.digits_cnn import ensure_digits_cnn
from labsupport.topics import azure_ml

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def conda_python():
    return azure_ml.conda_venv()


@pytest.fixture(scope="module")
def code(tmp_path_factory):
    return azure_ml.stage_code(tmp_path_factory.mktemp("azureml") / "code")


def test_the_venv_holds_conda_yml_and_not_the_course_packages(conda_python):
    import subprocess

    probe = (
        "import importlib.util as u; print([m for m in ('starlette', 'anyio', 'fastapi', 'labsupport', 'onnx_service') if u.find_spec(m)])"
    )
    found = subprocess.run([str(conda_python), "-I", "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert found == "[]"
    assert conda_python.parent.parent.name.startswith(azure_ml.VENV_PREFIX)
    assert (conda_python.parent / "azmlinfsrv").is_file()  # Azure ML's inference server, from conda.yml


def test_score_py_serves_the_course_model_in_the_conda_venv(conda_python, code):
    lines = azure_ml._check_scoring(code, ensure_digits_cnn(), conda_python)
    assert f"the Python of build/{conda_python.parent.parent.name}" in lines[0]
    assert "classified exactly as onnx_service's model does" in lines[0]
    assert "422 missing_field" in lines[1]


def test_score_py_checks_the_registry_sha256_in_the_conda_venv(conda_python, code):
    from labsupport.course.data import sha256_of

    cnn = ensure_digits_cnn()
    source = azure_ml.ModelSource(cnn, "7", sha256_of(cnn))
    assert "its sha256 checked by init()" in azure_ml._check_scoring(code, source, conda_python)[0]
    with pytest.raises(azure_ml.AzureMLValidationError, match=r"(?s)score\.py failed.*model sha256 mismatch"):
        azure_ml._check_scoring(code, dataclasses.replace(source, sha256="0" * 64), conda_python)


def test_a_service_module_that_needs_a_package_conda_yml_lacks_fails_in_the_venv(conda_python, code):
    validation = code / "onnx_service" / "validation.py"
    text = validation.read_text(encoding="utf-8")
    # a module-level import of starlette: it comes with FastAPI, which conda.yml does not list
    validation.write_text(text.replace("import numpy as np\n", "import numpy as np\nfrom starlette.requests import ClientDisconnect\n", 1))
    try:
        with pytest.raises(azure_ml.AzureMLValidationError, match="No module named 'starlette'"):
            azure_ml._check_scoring(code, ensure_digits_cnn(), conda_python)
        azure_ml._check_scoring(code, ensure_digits_cnn())  # the course's interpreter cannot see it: it has starlette
    finally:
        validation.write_text(text, encoding="utf-8")


def test_azure_ml_inference_server_serves_score_py_from_the_conda_venv(conda_python, code, tmp_path):
    """The real server (azmlinfsrv, gunicorn) as the deployment runs it: the service's answers over HTTP, 200, 422 and 415,
    and the two that are the server's own, as deploy/azureml/README.md and score.py say: GET /score with query parameters
    (the service has no GET /predict) and a body that is not UTF-8 (UTF-16 included), refused before score.py runs."""
    import json
    import os
    import shutil
    import socket
    import subprocess
    import time

    import httpx

    from labsupport.course.data import load_digits

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model_dir = tmp_path / azure_ml.MODEL_NAME / "1"
    model_dir.mkdir(parents=True)
    shutil.copy2(ensure_digits_cnn(), model_dir)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    environment.update({"AZUREML_MODEL_DIR": str(model_dir), **azure_ml.SERVICE_SETTINGS, "WORKER_COUNT": "1"})
    command = [str(conda_python.parent / "azmlinfsrv"), "--entry_script", str(code / azure_ml.SCORING_SCRIPT), "--port", str(port)]
    log = tmp_path / "azmlinfsrv.log"  # a file, not a pipe: the server logs every request and would fill a pipe nobody reads
    server = subprocess.Popen(command, env=environment, cwd=tmp_path, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url, images = f"http://127.0.0.1:{port}/score", load_digits().test.images[:2]
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.poll() is None:
            try:
                served = httpx.post(url, json={"inputs": images.tolist()}, timeout=30)
                break
            except httpx.TransportError:
                time.sleep(0.5)
        else:
            pytest.fail(f"azmlinfsrv did not answer:\n{log.read_text()[-2000:]}")
        refused = httpx.post(url, json={"input": images.tolist()}, timeout=30)
        wrong_type = httpx.post(url, content=json.dumps({"inputs": images.tolist()}), headers={"content-type": "text/plain"}, timeout=30)
        by_query = httpx.get(url, params={"inputs": "[1,2]"}, timeout=30)
        not_utf8 = [
            httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=30)
            for body in (b'{"inputs": "\xff"}', json.dumps({"inputs": images.tolist()}).encode("utf-16"))
        ]
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert served.status_code == 200 and len(served.json()["predictions"]) == 2
    assert (refused.status_code, refused.json()["error"]) == (422, "missing_field")
    assert (wrong_type.status_code, wrong_type.json()["error"]) == (415, "unsupported_media_type")
    assert (by_query.status_code, by_query.json()["error"]) == (422, "wrong_shape")  # score.py's answer to the query
    undecoded = "Input cannot be decoded as UTF-8"
    for answer in not_utf8:
        assert answer.status_code == 400 and answer.json()["message"].startswith(undecoded), answer.text
    for told in (azure_ml.DEPLOY_DIR / "README.md", code / azure_ml.SCORING_SCRIPT):
        text = " ".join(told.read_text(encoding="utf-8").split())
        assert undecoded in text and "GET /score?inputs=[1,2]" in text and "GET /predict" in text, told
