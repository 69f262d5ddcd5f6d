"""``python -m deploy.service`` from the repo root: the same as ``python -m onnx_service`` in the container."""

import sys

from deploy.service.onnx_service.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
