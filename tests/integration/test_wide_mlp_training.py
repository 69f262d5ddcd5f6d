"""labsupport.models.wide_mlp (notebook 06): deterministic training and the exported MatMul + Add graph."""

from __future__ import annotations

import numpy as np
import onnx
import torch

from labsupport.course.data import load_digits
from labsupport.models import wide_mlp
from labsupport.onnxutil.sessions import open_session
from labsupport.topics import quantization as quant


def test_small_wide_mlp_trains_deterministically_and_exports_matmuls(tmp_path):
    first = wide_mlp.train_wide_mlp(epochs=2, width=64)
    second = wide_mlp.train_wide_mlp(epochs=2, width=64)
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)
    path = wide_mlp.export_wide_mlp(first, tmp_path / "mlp.onnx")
    ops = [n.op_type for n in onnx.load(path).graph.node]
    assert ops.count("MatMul") == 3 and ops.count("Add") == 3
    assert quant.model_input(path) == (wide_mlp.INPUT_NAME, 2)
    assert quant.accuracy(path) > 0.5
    rows = load_digits().test.flat[:5]
    with torch.no_grad():
        want = first(torch.from_numpy(rows)).numpy()
    got = open_session(path, threads=1).run(None, {wide_mlp.INPUT_NAME: rows})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
