"""deploy/azureml/score.py in a virtual environment of conda.yml's pip section: only what the deployment's image installs.

The venv is built once under build/ (a folder named after conda.yml's sha256; pip needs PyPI or its cache the first
time, about a minute), then reused. score.py runs there with Azure ML's own inference-server package importable,
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
    # the module-level import the review of issue 34 found: starlette is a FastAPI package, not in conda.yml
    validation.write_text(text.replace("import numpy as np\n", "import numpy as np\nfrom starlette.requests import ClientDisconnect\n", 1))
    try:
        with pytest.raises(azure_ml.AzureMLValidationError, match="No module named 'starlette'"):
            azure_ml._check_scoring(code, ensure_digits_cnn(), conda_python)
        azure_ml._check_scoring(code, ensure_digits_cnn())  # the course's interpreter cannot see it: it has starlette
    finally:
        validation.write_text(text, encoding="utf-8")
