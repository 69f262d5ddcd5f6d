"""``python -m labsupport.maintain.azure_ml_yaml [--conda-venv]``: rewrite deploy/azureml's YAML files, then validate them offline.

The documents come from ``labsupport.topics.azure_ml.yaml_documents`` (notebook 13); ``--conda-venv`` first builds
the venv of conda.yml's pip section (network or pip's cache) and runs score.py there.
"""

from __future__ import annotations

import sys
from pathlib import Path

from labsupport.course.paths import relative
from labsupport.topics.azure_ml import DEPLOY_DIR, YAML_FILES, conda_venv, no_network, validate, yaml_text


def write_yaml(folder: Path = DEPLOY_DIR) -> list[Path]:
    """Write the four YAML files into ``folder`` (deploy/azureml by default)."""
    written = []
    for kind, name in YAML_FILES.items():
        (folder / name).write_text(yaml_text(kind), encoding="utf-8")
        written.append(folder / name)
    return written


def main(argv: list[str]) -> int:
    for path in write_yaml():
        print(f"wrote {relative(path)}")
    python = conda_venv() if "--conda-venv" in argv else sys.executable
    with no_network() as attempts:
        for line in validate(python=python):
            print(line)
    print(f"network connections attempted: {len(attempts)}")
    return 0 if not attempts else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
