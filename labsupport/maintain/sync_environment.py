"""Write environment.yml and binder/environment.yml from requirements.txt (the single source of pins).

Run after editing requirements.txt:  python -m labsupport.maintain.sync_environment
tests/unit/test_consistency.py fails when the three files disagree.
"""

from __future__ import annotations

from labsupport.course.paths import repo_root

ROOT = repo_root()
CONDA_PACKAGES = ["python=3.11", "pip", "make", "graphviz"]  # graphviz: the `dot` program that draws graphs
# Binder builds on Linux x86-64: take PyTorch's CPU wheel instead of the default CUDA build (GBs smaller).
PIP_OPTIONS = {"binder/environment.yml": ["--extra-index-url https://download.pytorch.org/whl/cpu"]}
HEADERS = {
    "environment.yml": [
        "# ONNX Lab for conda users:  conda env create -f environment.yml && conda activate onnx-lab",
        "#   then, in the repo root, labsupport and the deploy packages that notebooks 00, 08, 09 and 13 import:",
        "#   pip install --no-deps -e . -e deploy/service -e deploy/web  &&  jupyter lab notebooks/00_start_here.ipynb",
    ],
    "binder/environment.yml": [
        "# Binder (repo2docker reads only binder/ when it exists): it updates its base environment with these pins,",
        "# then binder/postBuild installs labsupport and the deploy packages (tests/integration/test_binder.py).",
    ],
}


def render(header: list[str], requirements: list[str], pip_options: list[str]) -> str:
    """An environment.yml text: conda-forge Python plus a pip section with the requirements' lines."""
    lines = [
        *header,
        "# Generated from requirements.txt by python -m labsupport.maintain.sync_environment: edit that file, then run this.",
        "name: onnx-lab",
        "channels:",
        "  - conda-forge",
        "dependencies:",
    ]
    lines += [f"  - {package}" for package in CONDA_PACKAGES] + ["  - pip:"]
    lines += [f"      - {option}" for option in pip_options]
    for line in requirements:
        stripped = line.strip()
        if stripped.startswith("#"):
            lines.append(f"      {stripped}")
        elif stripped:
            lines.append(f"      - {stripped!r}" if ";" in stripped else f"      - {stripped}")
    return "\n".join(lines) + "\n"


def main() -> None:
    requirements = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    for name, header in HEADERS.items():
        (ROOT / name).write_text(render(header, requirements, PIP_OPTIONS.get(name, [])), encoding="utf-8")
        print(f"wrote {name}")


if __name__ == "__main__":
    main()
