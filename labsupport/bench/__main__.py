"""``python -m labsupport.bench runtime|quantization|service|all``: run the headless benchmark suites."""

from __future__ import annotations

import importlib
import sys

# suite name -> module with ``main(argv) -> int``
SUITES = {
    "runtime": "labsupport.bench.runtime",
    "quantization": "labsupport.bench.quantization",
    "service": "labsupport.bench.service",
}


def main(argv: list[str] | None = None) -> int:
    """Run the suites named on the command line (``all`` when none is named); 2 for an unknown name."""
    args = argv if argv is not None else sys.argv[1:]
    wanted = args[:1] or ["all"]
    names = list(SUITES) if wanted == ["all"] else wanted
    unknown = [name for name in names if name not in SUITES]
    if unknown:
        print(f"unknown suite {unknown[0]!r}; choose one of: {', '.join(SUITES)}, all", file=sys.stderr)
        return 2
    status = 0
    for name in names:
        print(f"=== benchmark suite: {name}")
        status |= importlib.import_module(SUITES[name]).main(args[1:])
    return status


if __name__ == "__main__":
    raise SystemExit(main())
