"""Notebook 02's exercises: the reference solutions pass, typical wrong answers fail."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from labsupport.exercises import CORRECT, INCORRECT, nb02
from labsupport.onnxutil.export import quiet_export

BATCH = {"input": {0: torch.export.Dim("batch")}}


def _export(model: nn.Module, path, **options) -> str:
    options.setdefault("input_names", ["image"])
    options.setdefault("output_names", ["logits"])
    options.setdefault("external_data", False)
    with quiet_export():
        torch.onnx.export(model, (torch.rand(2, 1, 8, 8),), path, dynamo=True, verbose=False, **options)
    return str(path)


def test_exercise_mlp_is_fixed_and_in_eval_mode():
    first, second = nb02.exercise_mlp(), nb02.exercise_mlp()
    assert not first.training
    for name, tensor in first.state_dict().items():
        assert torch.equal(tensor, second.state_dict()[name]), name
    assert first(torch.rand(3, 1, 8, 8)).shape == (3, 10)


def test_q1_rejects_a_static_batch(tmp_path):
    path = _export(nb02.exercise_mlp(), tmp_path / "static.onnx")
    outcome = nb02.q1.evaluate(path)
    assert outcome.status == INCORRECT and "batch of 1 failed" in outcome.message


def test_q1_rejects_other_weights(tmp_path):
    torch.manual_seed(5)
    other = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)).eval()
    outcome = nb02.q1.evaluate(_export(other, tmp_path / "other.onnx", dynamic_shapes=BATCH))
    assert outcome.status == INCORRECT and "differ from exercise_mlp()" in outcome.message
    assert "trained" not in outcome.message  # exercise_mlp() is untrained: its weights come from a seed


def test_q1_rejects_wrong_names(tmp_path):
    path = _export(nb02.exercise_mlp(), tmp_path / "names.onnx", dynamic_shapes=BATCH, input_names=["x"])
    outcome = nb02.q1.evaluate(path)
    assert outcome.status == INCORRECT and "name the input" in outcome.message


@pytest.mark.parametrize("wrong", ["no/such/file.onnx", 42, nb02.exercise_mlp()])
def test_q1_rejects_things_that_are_not_an_exported_file(wrong):
    assert nb02.q1.evaluate(wrong).status == INCORRECT


def test_q2_rejects_the_original_model_with_the_exporter_error():
    outcome = nb02.q2.evaluate(nb02.ScaleIfBright())
    assert outcome.status == INCORRECT and "still fails" in outcome.message and "data-dependent" in outcome.message


class _AlwaysHalve(nn.Module):
    def forward(self, image):
        return image * 0.5


class _Cond(nn.Module):
    def forward(self, image):
        return torch.cond(image.mean() > 0.3, lambda x: x * 0.5, lambda x: x * 1.0, (image,))


class _Identity(nn.Module):
    def forward(self, image):
        return image * 1.0


@pytest.mark.parametrize("one_branch", [_AlwaysHalve, _Identity])
def test_q2_rejects_a_model_that_kept_one_branch(one_branch):
    outcome = nb02.q2.evaluate(one_branch())
    assert outcome.status == INCORRECT and "both branches must survive the export" in outcome.message, outcome.message


def test_q2_accepts_torch_cond_and_rejects_non_modules():
    assert nb02.q2.evaluate(_Cond()).status == CORRECT
    assert nb02.q2.evaluate(lambda image: image).status == INCORRECT


def test_q1_rejects_an_export_in_training_mode(tmp_path):
    path = _export(nb02.exercise_mlp().train(), tmp_path / "train.onnx", dynamic_shapes=BATCH)
    outcome = nb02.q1.evaluate(path)
    assert outcome.status == INCORRECT and "training mode" in outcome.message and "model.eval()" in outcome.message


def test_q1_accepts_the_deprecated_dynamic_axes_of_the_dynamo_exporter(tmp_path):
    path = _export(nb02.exercise_mlp(), tmp_path / "axes.onnx", dynamic_axes={"image": {0: "batch"}})
    assert nb02.q1.evaluate(path).status == CORRECT


class _Threshold(nn.Module):
    def __init__(self, threshold: float) -> None:
        super().__init__()
        self.threshold = threshold

    def forward(self, image):
        return torch.where(image.mean() > self.threshold, image * 0.5, image)


# 0.1, 0.45, 0.5, -0.5 and 4.8 (0..16 pixel units) send every test batch down one branch, yet the Where keeps both:
# the condition is what is wrong
@pytest.mark.parametrize("threshold", [-0.5, 0.1, 0.2, 0.25, 0.295, 0.305, 0.35, 0.4, 0.45, 0.5, 4.8])
def test_q2_rejects_a_wrong_threshold_and_blames_the_condition(threshold):
    outcome = nb02.q2.evaluate(_Threshold(threshold))
    assert outcome.status == INCORRECT and "check the condition and the threshold" in outcome.message, outcome.message
    assert "must survive" not in outcome.message


def test_q2_message_does_not_round_the_mean_across_the_threshold():
    outcome = nb02.q2.evaluate(_Threshold(0.295))
    assert "mean is 0.2992 (below 0.3)" in outcome.message, outcome.message


class _FirstImages(nn.Module):
    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count

    def forward(self, image):
        return torch.where(image[: self.count].mean() > 0.3, image * 0.5, image)


@pytest.mark.parametrize("count", [1, 4])
def test_q2_rejects_a_mean_over_the_first_images(count):
    outcome = nb02.q2.evaluate(_FirstImages(count))
    assert outcome.status == INCORRECT and "check the condition" in outcome.message, outcome.message


class _BrightestPixel(nn.Module):
    def forward(self, image):
        return torch.where(image.max() > 0.3, image * 0.5, image)


def test_q2_rejects_a_condition_on_the_brightest_pixel():
    outcome = nb02.q2.evaluate(_BrightestPixel())
    assert outcome.status == INCORRECT and "check the condition" in outcome.message, outcome.message


class _Mask(nn.Module):
    def forward(self, image):
        return image * (1 - 0.5 * (image.mean() > 0.3).float())


class _PerImage(nn.Module):
    def forward(self, image):
        bright = image.mean(dim=(1, 2, 3), keepdim=True) > 0.3
        return torch.where(bright, image * 0.5, image)


def test_q2_accepts_other_exportable_forms_and_rejects_a_per_image_mean():
    assert nb02.q2.evaluate(_Threshold(0.3)).status == CORRECT
    assert nb02.q2.evaluate(_Mask()).status == CORRECT
    outcome = nb02.q2.evaluate(_PerImage())
    assert outcome.status == INCORRECT and "one value per batch" in outcome.message, outcome.message


def test_q2_test_batches_lie_on_both_sides_close_to_the_threshold():
    means = sorted(float(feed.mean()) for feed in nb02._exercise2_inputs())
    above = [m for m in means if m > nb02.BRIGHT_THRESHOLD]
    below = [m for m in means if m <= nb02.BRIGHT_THRESHOLD]
    assert min(above) - nb02.BRIGHT_THRESHOLD <= 0.0011 and nb02.BRIGHT_THRESHOLD - max(below) <= 0.0011


def test_q1_rejects_an_export_in_two_files_and_names_save_for_a_program(tmp_path):
    path = _export(nb02.exercise_mlp(), tmp_path / "two.onnx", dynamic_shapes=BATCH, external_data=True)
    outcome = nb02.q1.evaluate(path)
    assert outcome.status == INCORRECT and "external_data=False" in outcome.message, outcome.message
    with quiet_export():
        program = torch.onnx.export(nb02.exercise_mlp(), (torch.rand(2, 1, 8, 8),), dynamo=True, verbose=False)
    outcome = nb02.q1.evaluate(program)
    assert outcome.status == INCORRECT and "program.save(path)" in outcome.message, outcome.message


class _HardCodedCount(nn.Module):
    def forward(self, image):
        return torch.where(image.sum() / 1024 > 0.3, image * 0.5, image)  # 16 images x 64 pixels: right only for 16


class _LastImages(nn.Module):
    def forward(self, image):
        return torch.where(image[-16:].mean() > 0.3, image * 0.5, image)


class _Quartered(nn.Module):
    def forward(self, image):
        return torch.where(image.mean() > 0.3, image * 0.25, image)


class _Reversed(nn.Module):
    def forward(self, image):
        return torch.where(image.mean() < 0.3, image * 0.5, image)


@pytest.mark.parametrize(
    "wrong",
    [_HardCodedCount(), _FirstImages(16), _LastImages(), _Quartered(), _Reversed()],
    ids=["hard-coded-element-count", "first-16-images", "last-16-images", "quartered", "condition-reversed"],
)
def test_q2_rejects_answers_right_only_for_16_images_and_other_wrong_branches(wrong):
    outcome = nb02.q2.evaluate(wrong)
    assert outcome.status == INCORRECT, outcome.message


class _Median(nn.Module):
    def forward(self, image):
        return torch.where(image.median() > 0.3, image * 0.5, image)


def test_q2_says_which_op_the_exporter_cannot_translate():
    outcome = nb02.q2.evaluate(_Median())
    assert outcome.status == INCORRECT and "cannot translate an op" in outcome.message, outcome.message


# exercise 3 (transfer): a 1-D CNN over (batch, steps, 8) sequences, batch and sequence length dynamic
BATCH_AND_STEPS = {"sequence": {0: torch.export.Dim("batch"), 1: torch.export.Dim("steps")}}
ONE_DIM = torch.export.Dim("size")


def _export_sequence_model(model: nn.Module, path, example_shape=(3, 5, 8), **options) -> str:
    options.setdefault("input_names", ["sequence"])
    options.setdefault("output_names", ["logits"])
    options.setdefault("external_data", False)
    with quiet_export():
        torch.onnx.export(model, (torch.randn(*example_shape),), path, dynamo=True, verbose=False, **options)
    return str(path)


def test_q3_reference_passes_and_the_model_is_fixed_and_in_eval_mode():
    assert nb02.q3.evaluate(nb02.q3.reference_answer()).status == CORRECT
    first, second = nb02.exercise_sequence_cnn(), nb02.exercise_sequence_cnn()
    assert not first.training
    for name, tensor in first.state_dict().items():
        assert torch.equal(tensor, second.state_dict()[name]), name


def test_q3_accepts_dynamic_shapes_by_position(tmp_path):
    by_position = ({0: torch.export.Dim("batch"), 1: torch.export.Dim("steps")},)
    path = _export_sequence_model(nb02.exercise_sequence_cnn(), tmp_path / "sequence.onnx", dynamic_shapes=by_position)
    outcome = nb02.q3.evaluate(path)
    assert outcome.status == CORRECT, outcome.message


@pytest.mark.parametrize(
    ("options", "example_shape", "reason"),
    [
        ({}, (3, 5, 8), "axis 0 (the batch) is fixed to 3; axis 1 (the sequence length) is fixed to 5"),
        ({"dynamic_shapes": {"sequence": {0: torch.export.Dim("batch")}}}, (3, 5, 8), "axis 1 (the sequence length) is fixed to 5"),
        # an example of one step: torch.onnx.export specialises the length to 1 without a word
        ({"dynamic_shapes": BATCH_AND_STEPS}, (3, 1, 8), "axis 1 (the sequence length) is fixed to 1"),
        ({"dynamic_shapes": BATCH_AND_STEPS, "input_names": ["x"]}, (3, 5, 8), 'name the input "sequence"'),
        # one Dim for both axes: ONNX Runtime runs (1, 12), but the file declares the batch and the length equal
        ({"dynamic_shapes": {"sequence": {0: ONE_DIM, 1: ONE_DIM}}}, (5, 5, 8), "one symbol"),
        ({"dynamic_shapes": BATCH_AND_STEPS, "external_data": True}, (3, 5, 8), "external_data=False"),
    ],
)
def test_q3_wrong_exports_fail_with_the_reason(tmp_path, options, example_shape, reason):
    path = _export_sequence_model(nb02.exercise_sequence_cnn(), tmp_path / "sequence.onnx", example_shape, **options)
    outcome = nb02.q3.evaluate(path)
    assert outcome.status == INCORRECT and reason in outcome.message, outcome.message


def test_q3_rejects_an_export_in_training_mode(tmp_path):
    path = _export_sequence_model(nb02.exercise_sequence_cnn().train(), tmp_path / "sequence.onnx", dynamic_shapes=BATCH_AND_STEPS)
    outcome = nb02.q3.evaluate(path)
    assert outcome.status == INCORRECT and "training mode" in outcome.message and "model.eval()" in outcome.message


def test_q3_rejects_other_weights_and_the_mlp_of_exercise_1(tmp_path):
    torch.manual_seed(9)
    other = nb02.SequenceCNN().eval()
    outcome = nb02.q3.evaluate(_export_sequence_model(other, tmp_path / "other.onnx", dynamic_shapes=BATCH_AND_STEPS))
    assert outcome.status == INCORRECT and "differ from exercise_sequence_cnn()" in outcome.message
    mlp = _export(nb02.exercise_mlp(), tmp_path / "mlp.onnx", dynamic_shapes=BATCH)
    outcome = nb02.q3.evaluate(mlp)
    assert outcome.status == INCORRECT and 'name the input "sequence"' in outcome.message


def test_q3_rejects_the_program_object_and_a_missing_file():
    assert nb02.q3.evaluate("no/such/sequence.onnx").status == INCORRECT
    assert nb02.q3.evaluate(nb02.exercise_sequence_cnn()).status == INCORRECT
