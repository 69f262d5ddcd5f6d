"""labsupport.models.wide_mlp (notebook 06): the model's shape and argument errors (training and export: tests/integration)."""

from __future__ import annotations

import pytest
import torch

from labsupport.models import wide_mlp


def test_wide_mlp_maps_flat_digits_to_ten_logits():
    model = wide_mlp.build_wide_mlp(8)
    assert [tuple(p.shape) for p in model.parameters()] == [(64, 8), (8,), (8, 8), (8,), (8, 10), (10,)]
    assert model(torch.zeros(3, 64)).shape == (3, 10)


@pytest.mark.parametrize("width", [0, -1, 2.0, True])
def test_build_rejects_bad_widths(width):
    with pytest.raises(ValueError, match="width"):
        wide_mlp.build_wide_mlp(width)


def test_train_and_export_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="epochs"):
        wide_mlp.train_wide_mlp(epochs=0)
    with pytest.raises(ValueError, match=r"must end in \.onnx"):
        wide_mlp.export_wide_mlp(wide_mlp.build_wide_mlp(8), tmp_path / "mlp.pt")
