"""labsupport.onnxutil.export: one quiet, reproducible torch.onnx export to a self-contained file."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from labsupport.onnxutil.export import STACK_TRACE_KEY, export_torch, quiet_export, remove_stack_traces, single_thread
from labsupport.onnxutil.sessions import open_session


class Doubler(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(x) * 2


def _traced(module: torch.nn.Module) -> torch.onnx.ONNXProgram:
    with quiet_export():
        return torch.onnx.export(module, (torch.ones(2, 3),), dynamo=True, verbose=False)


def test_export_torch_writes_one_eval_mode_file_with_named_io(tmp_path, capsys):
    module = Doubler().train()  # dropout on: an export of the module as it is would not be deterministic
    batch = torch.export.Dim("batch", min=1, max=64)
    path = export_torch(
        module,
        (torch.ones(2, 3),),
        tmp_path / "nested" / "doubler.onnx",
        input_names=["x"],
        output_names=["y"],
        dynamic_shapes=({0: batch},),
    )
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert module.training, "the caller's module keeps its mode: a copy is exported"
    assert path == tmp_path / "nested" / "doubler.onnx" and [p.name for p in path.parent.iterdir()] == ["doubler.onnx"]
    proto = onnx.load(path)
    assert [i.name for i in proto.graph.input] == ["x"] and [o.name for o in proto.graph.output] == ["y"]
    assert "Dropout" not in {node.op_type for node in proto.graph.node}
    assert not [p for node in proto.graph.node for p in node.metadata_props if p.key == STACK_TRACE_KEY]
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(open_session(path).run(None, {"x": x})[0], 2 * x)


def test_export_torch_honours_the_opset_and_rejects_bad_arguments(tmp_path):
    path = export_torch(Doubler(), (torch.ones(1, 3),), tmp_path / "o18.onnx", input_names=["x"], output_names=["y"], opset_version=18)
    assert {entry.domain: entry.version for entry in onnx.load(path).opset_import}[""] == 18
    with pytest.raises(TypeError, match=r"expects a torch\.nn\.Module, got str"):
        export_torch("model.pt", (), tmp_path / "x.onnx", input_names=["x"], output_names=["y"])
    with pytest.raises(ValueError, match=r"must end in \.onnx, got 'x\.pt'"):
        export_torch(Doubler(), (torch.ones(1, 3),), tmp_path / "x.pt", input_names=["x"], output_names=["y"])


def test_single_thread_restores_the_thread_count():
    before = torch.get_num_threads()
    with single_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_remove_stack_traces_counts_and_rejects_other_objects():
    program = _traced(Doubler().eval())
    nodes = len(program.model_proto.graph.node)
    assert nodes >= 1 and remove_stack_traces(program) == nodes
    assert remove_stack_traces(program) == 0
    with pytest.raises(TypeError, match="ONNXProgram"):
        remove_stack_traces(program.model_proto)


def test_quiet_export_collects_what_the_exporter_says(capsys):
    with quiet_export() as chatter:
        torch.onnx.export(Doubler().train(), (torch.ones(2, 3),), dynamo=True, verbose=False)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert "model.eval()" in chatter.find("training mode")
    assert chatter.find("no such message") is None


def test_quiet_export_keeps_messages_when_the_export_fails():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(torch.onnx.OnnxExporterError, match="data-dependent"), quiet_export() as chatter:
        torch.onnx.export(Branchy().eval(), (torch.ones(2),), dynamo=True, verbose=False)
    assert chatter.find("Unable to find user code"), "the exporter's log lines were collected, not printed"
