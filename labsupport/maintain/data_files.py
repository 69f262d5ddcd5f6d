"""``python -m labsupport.maintain.data_files verify|rebuild``: check the shipped data files, or write them again.

``rebuild`` writes them from ``labsupport.course.data.build_digits`` bit for bit (the checksums do not change) and
rewrites data/MANIFEST; ``verify`` checks every file against it.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from labsupport.course.data import MANIFEST_NAME, DataIntegrityError, build_digits, read_manifest, verified_path
from labsupport.course.paths import data_dir


def rebuild(root: Path | None = None) -> list[str]:
    """Rewrite the shipped data files and data/MANIFEST; returns the manifest lines."""
    root = root or data_dir()
    lines = []
    for name, payload in build_digits().items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(payload)
        lines.append(f"{hashlib.sha256(payload).hexdigest()}  {name}")
    header = [
        "# sha256  path   (checked by labsupport.course.data; rebuild: python -m labsupport.maintain.data_files rebuild)",
        "# digits/*: scikit-learn's bundled 8x8 digits (UCI ML hand-written digits, 1,797 images),",
        "#   pixels 0..16 as uint8; split.npy: 0 train, 1 calibration, 2 test (stratified, seed 0).",
    ]
    (root / MANIFEST_NAME).write_text("\n".join(header + lines) + "\n", encoding="utf-8")
    return lines


def main(argv: list[str]) -> int:
    command = argv or ["verify"]
    if command[0] == "rebuild":
        for line in rebuild():
            print(line)
        return 0
    if command[0] == "verify":
        try:
            for name in read_manifest():
                verified_path(name)
                print(f"ok  data/{name}")
        except DataIntegrityError as error:
            print(f"ERROR: {error}", file=sys.stderr)
            return 1
        return 0
    print("usage: python -m labsupport.maintain.data_files [verify|rebuild]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
