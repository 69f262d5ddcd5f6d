"""``python -m labsupport doctor``: check the environment and say what to fix."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m labsupport``."""
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] == ["doctor"]:
        from labsupport.course.env import doctor

        return doctor()
    print("usage: python -m labsupport doctor", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
