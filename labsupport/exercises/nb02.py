"""Exercises of notebook 02 (from PyTorch): export with a dynamic batch; make a branching model exportable;
export a 1-D CNN over sequences with a dynamic batch and sequence length (transfer)."""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

from labsupport.course.compare import ParityError, compare
from labsupport.course.data import load_digits
from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import answer_path, blame_answer, onnx_session
from labsupport.onnxutil.export import quiet_export

CHECK_BATCH_SIZES = (1, 7, 64)
BRIGHT_THRESHOLD = 0.3


def exercise_mlp() -> nn.Module:
    """The model to export in exercise 1: a seeded MLP on (N, 1, 8, 8) digits (untrained; weights fixed by the seed)."""
    torch.manual_seed(2)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 10))
    with torch.no_grad():  # running statistics far from (0, 1), so BatchNorm with batch statistics gives other numbers
        model[2].running_mean.uniform_(-0.5, 0.5)
        model[2].running_var.uniform_(0.5, 2.0)
    return model.eval()


class ScaleIfBright(nn.Module):
    """Exercise 2's model: halve the whole batch when its mean pixel is above 0.3, else leave it unchanged.

    The Python ``if`` on a tensor value is data-dependent control flow: ``torch.onnx.export`` fails on it.
    """

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if image.mean() > BRIGHT_THRESHOLD:
            return image * 0.5
        return image


def _training_mode_dropouts(model: onnx.ModelProto) -> list[str]:
    """Names of the Dropout nodes whose ``training_mode`` input is not a constant False (an export in training mode)."""
    constants = {t.name: t for t in model.graph.initializer}
    constants |= {n.output[0]: n.attribute[0].t for n in model.graph.node if n.op_type == "Constant" and n.attribute}
    flagged = []
    for node in model.graph.node:
        if node.op_type != "Dropout" or len(node.input) < 3 or not node.input[2]:
            continue
        value = constants.get(node.input[2])
        if value is None or numpy_helper.to_array(value).any():
            flagged.append(node.name)
    return flagged


def _load_one_file_eval_export(answer) -> tuple:
    """(path, ModelProto) of the answer: an existing one-file .onnx exported in eval mode, else ``Incorrect``."""
    if isinstance(answer, torch.onnx.ONNXProgram):
        raise Incorrect("that is the ONNXProgram export returns: save it with program.save(path) and answer with the path")
    path = answer_path(answer, "the path (str or Path) of the .onnx file you exported")
    with blame_answer("onnx.load cannot read the file"):
        model = onnx.load(path, load_external_data=False)
    if any(tensor.data_location == onnx.TensorProto.EXTERNAL for tensor in model.graph.initializer):
        raise Incorrect(
            f"the weights are in a second file beside {path.name}: export as one file with external_data=False "
            "(a copy of the .onnx alone would not run)"
        )
    if dropouts := _training_mode_dropouts(model):
        raise Incorrect(f"exported in training mode (Dropout {dropouts[0]} has training_mode=True): call model.eval() first")
    return path, model


def _check_dynamic_export(answer) -> str:
    path, _ = _load_one_file_eval_export(answer)
    # ORT's default optimizations delete every Dropout, even a training-mode one: run the graph as it was written
    session = onnx_session(path, optimization="disable")
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if len(inputs) != 1 or len(outputs) != 1:
        raise Incorrect(f"expected one input and one output, got {len(inputs)} inputs and {len(outputs)} outputs")
    if inputs[0].name != "image" or outputs[0].name != "logits":
        raise Incorrect(f'name the input "image" and the output "logits"; got {inputs[0].name!r} and {outputs[0].name!r}')
    images = load_digits().test.images
    model = exercise_mlp()
    for batch in CHECK_BATCH_SIZES:
        feed = images[:batch]
        with blame_answer(f"running it with a batch of {batch} failed (is the batch dimension dynamic?)"):
            got = session.run(None, {"image": feed})[0]
        with torch.no_grad():
            want = model(torch.from_numpy(feed)).numpy()
        try:
            compare(want, got, atol=1e-4, name=f"batch {batch}")
        except ParityError:
            raise Incorrect(
                f"at batch {batch} its logits differ from exercise_mlp() in eval mode; "
                "export exactly that model (eval mode) with the weights exercise_mlp() gives it"
            ) from None
    return f"runs at batch sizes {', '.join(map(str, CHECK_BATCH_SIZES))} and matches PyTorch"


def _exercise2_inputs() -> list[np.ndarray]:
    """Batches on both sides of the threshold: far from it, and rescaled to a mean just above and just below it.

    The near batches put their first images on the other side of the threshold from the batch mean
    (darkest first in the bright one, brightest first in the dark one), so a mean over the first few
    images takes the other branch.
    """
    images = load_digits().test.images
    dark = images[:16] * 0.5  # mean well below the threshold
    bright = np.clip(images[:16] * 3.0, 0.0, 1.0)  # mean well above it
    near = images[16:32][np.argsort(images[16:32].mean(axis=(1, 2, 3)))]  # darkest first
    just_above = near * np.float32(0.301 / near.mean())
    just_below = near[::-1] * np.float32(0.299 / near.mean())
    # 40 images, 16 bright ones first (then last) and 24 dark ones (mean about 0.21): a mean over the first (last)
    # 16 images, or a sum divided by a hard-coded 16 x 64 pixels, halves them
    long_dark = np.concatenate([np.clip(images[32:48] * 3.0, 0.0, 1.0), images[48:72] * np.float32(0.2)])
    return [dark, bright, images[16:21], just_above, just_below, long_dark, long_dark[::-1].copy()]


# constant batches from far below to far above the pixel range (0..1): any threshold in between sends them down
# different branches, so a threshold written in 0..16 pixel units (4.8) or below zero is blamed on the condition
_EXTREME_BATCHES = tuple(np.full((2, 1, 8, 8), value, np.float32) for value in (-1.0, 0.01, 1.0, 20.0))


def _branch_taken(feed: np.ndarray, got: np.ndarray) -> str | None:
    """Which of ScaleIfBright's branches ``got`` is for ``feed``: "halve", "keep", or None (neither)."""
    for branch, expected in (("halve", feed * np.float32(0.5)), ("keep", feed)):
        if got.shape == feed.shape and np.allclose(got, expected, atol=1e-6):
            return branch
    return None


def _decided_per_image(feed: np.ndarray, got: np.ndarray) -> bool:
    """Whether ``got`` halves some images of ``feed`` and keeps the others (a condition computed per image)."""
    if got.shape != feed.shape:
        return False
    return {_branch_taken(image[None], out[None]) for image, out in zip(feed, got, strict=True)} == {"halve", "keep"}


def _expect_branches(feeds: list[np.ndarray], outputs: list[np.ndarray], extremes: list[str | None]) -> None:
    """``Incorrect`` unless every output took ScaleIfBright's branch; says whether a branch was lost or the condition is wrong.

    ``extremes`` are the branches taken by ``_EXTREME_BATCHES``: if they differ, the export kept both branches.
    """
    taken = [_branch_taken(feed, got) for feed, got in zip(feeds, outputs, strict=True)]
    for feed, got, branch in zip(feeds, outputs, taken, strict=True):
        mean = float(feed.mean())
        want = "halve" if mean > BRIGHT_THRESHOLD else "keep"
        if branch == want:
            continue
        side = "above" if mean > BRIGHT_THRESHOLD else "below"
        if branch is None:
            if _decided_per_image(feed, got):
                raise Incorrect(
                    "the output halves some images of a batch and keeps others: the condition must be one value per batch "
                    f"(the mean over the whole batch, image.mean() > {BRIGHT_THRESHOLD}), not one per image"
                )
            raise Incorrect(f"for a batch whose mean is {side} {BRIGHT_THRESHOLD} the output is neither image * 0.5 nor image")
        if set(taken) == {branch} and len(set(extremes)) == 1:
            raise Incorrect(
                f"the exported model takes the {branch!r} branch for every batch, even for constant pixels from -1 to 20: "
                "both branches must survive the export"
            )
        raise Incorrect(
            f"for a batch whose mean is {mean:.4f} ({side} {BRIGHT_THRESHOLD}) the {branch!r} branch ran: both branches are "
            f"in the export, so check the condition and the threshold (halve when image.mean() > {BRIGHT_THRESHOLD})"
        )


def _check_exportable(answer) -> str:
    if not isinstance(answer, nn.Module):
        raise Incorrect(f"expected a torch.nn.Module instance, got {type(answer).__name__}")
    answer.eval()
    example = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    try:
        with quiet_export():
            program = torch.onnx.export(
                answer,
                (example,),
                dynamo=True,
                input_names=["image"],
                dynamic_shapes=({0: torch.export.Dim("batch")},),  # by position: any argument name works
                verbose=False,
            )
    except Exception as error:
        summary = next((line for line in str(error).splitlines() if "Exception summary" not in line and "<class" in line), "")
        if "No ONNX function found" in str(error):
            raise Incorrect(f"torch.onnx.export cannot translate an op your model uses: {summary.strip()[:240]}") from None
        raise Incorrect(f"torch.onnx.export still fails ({type(error).__name__}) {summary.strip()[:240]}") from None
    session = onnx_session(program.model_proto)
    feeds = [*_exercise2_inputs(), *_EXTREME_BATCHES]  # the extremes are checked too: their 2 rows catch a fixed count
    with blame_answer("running the exported model failed"):
        outputs = [session.run(None, {session.get_inputs()[0].name: feed})[0] for feed in feeds]
    extremes = [_branch_taken(feed, got) for feed, got in zip(_EXTREME_BATCHES, outputs[-len(_EXTREME_BATCHES) :], strict=True)]
    _expect_branches(feeds, outputs, extremes)
    return "exports with torch.onnx.export and both branches match ScaleIfBright"


SEQUENCE_FEATURES = 8
# (batch, steps): batch 1 and one step (the sizes torch.export specialises), long and short sequences, a larger batch
SEQUENCE_SHAPES = ((1, 1), (1, 12), (5, 3), (8, 30))


class SequenceCNN(nn.Module):
    """Exercise 3's model: a 1-D convolution over a (batch, steps, 8) sequence, averaged over the steps, then 4 logits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(SEQUENCE_FEATURES, 16, kernel_size=3, padding=1)
        self.dropout = nn.Dropout(0.3)
        self.head = nn.Linear(16, 4)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        features = torch.relu(self.conv(sequence.transpose(1, 2)))  # Conv1d wants (batch, channels, steps)
        return self.head(self.dropout(features.mean(dim=2)))  # the mean over the steps: any length gives 16 features


def exercise_sequence_cnn() -> nn.Module:
    """The model to export in exercise 3: a seeded, untrained ``SequenceCNN`` in eval mode (the same weights on every call)."""
    torch.manual_seed(3)
    return SequenceCNN().eval()


def _sequence_feed(batch: int, steps: int) -> np.ndarray:
    generator = np.random.default_rng(batch * 100 + steps)
    return generator.standard_normal((batch, steps, SEQUENCE_FEATURES)).astype(np.float32)


def _fixed_axes(session) -> str | None:
    """What the file fixes about the batch and steps axes, said in words; None when each has a symbol of its own."""
    shape = session.get_inputs()[0].shape
    if len(shape) != 3:
        return f"the input has shape {shape}; expected (batch, steps, {SEQUENCE_FEATURES})"
    fixed = [f"axis {axis} ({what}) is fixed to {shape[axis]}" for axis, what in ((0, "the batch"), (1, "the sequence length"))]
    fixed = [text for text, size in zip(fixed, shape[:2], strict=True) if isinstance(size, int)]
    if not fixed and shape[0] == shape[1]:  # one Dim for both axes: the file promises batch == steps
        return f"the batch and the sequence length are one symbol, {shape[0]!r}, so the file says they are always equal"
    return "; ".join(fixed) or None


def _check_sequence_export(answer) -> str:
    path, _ = _load_one_file_eval_export(answer)
    session = onnx_session(path, optimization="disable")  # the graph as written: a training-mode Dropout would run
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if len(inputs) != 1 or len(outputs) != 1:
        raise Incorrect(f"expected one input and one output, got {len(inputs)} inputs and {len(outputs)} outputs")
    if inputs[0].name != "sequence" or outputs[0].name != "logits":
        raise Incorrect(f'name the input "sequence" and the output "logits"; got {inputs[0].name!r} and {outputs[0].name!r}')
    if fixed := _fixed_axes(session):
        raise Incorrect(
            f"{fixed} in the file: give each axis its own Dim in dynamic_shapes, and an example whose batch and length "
            "are not 0 or 1 (torch.export specialises those sizes)"
        )
    model = exercise_sequence_cnn()
    for batch, steps in SEQUENCE_SHAPES:
        feed = _sequence_feed(batch, steps)
        with blame_answer(f"running it on a ({batch}, {steps}, {SEQUENCE_FEATURES}) sequence failed"):
            got = session.run(None, {"sequence": feed})[0]
        with torch.no_grad():
            want = model(torch.from_numpy(feed)).numpy()
        try:
            compare(want, got, atol=1e-4, name=f"shape ({batch}, {steps})")
        except ParityError:
            raise Incorrect(
                f"for a batch of {batch} sequences of {steps} steps its logits differ from exercise_sequence_cnn() in eval mode; "
                "export exactly that model, with its weights"
            ) from None
    shapes = ", ".join(f"({b}, {t})" for b, t in SEQUENCE_SHAPES)
    return f"runs at (batch, steps) = {shapes} and matches PyTorch"


q1 = Exercise(
    1,
    "export with a dynamic batch",
    _check_dynamic_export,
    hint=(
        "Call torch.onnx.export(model, (example,), path, dynamo=True, external_data=False, input_names=['image'], "
        "output_names=['logits'], dynamic_shapes=...) on exercise_mlp() (already in eval mode), then answer "
        "with the path (external_data=False keeps the weights inside the one .onnx file). The keys of a dynamic_shapes dict are the names of forward()'s arguments; "
        "nn.Sequential's is 'input', so write {'input': {0: torch.export.Dim('batch')}}, or give a tuple "
        "by position: ({0: torch.export.Dim('batch')},)."
    ),
    solution_code="""
        import torch
        from labsupport.exercises.nb02 import exercise_mlp
        from labsupport.onnxutil.export import quiet_export
        from labsupport.course.paths import artifact

        model = exercise_mlp().eval()
        example = torch.rand(2, 1, 8, 8)
        path = artifact("exercises/nb02_mlp.onnx")
        with quiet_export():
            torch.onnx.export(
                model,
                (example,),
                path,
                dynamo=True,
                external_data=False,  # one self-contained .onnx file
                input_names=["image"],
                output_names=["logits"],
                dynamic_shapes={"input": {0: torch.export.Dim("batch")}},  # nn.Sequential.forward(input)
                verbose=False,
            )
        answer = path
    """,
)

q2 = Exercise(
    2,
    "make a branching model exportable",
    _check_exportable,
    hint=(
        "Replace the Python `if` by an operation that keeps both branches in the graph: "
        "torch.where(condition, if_true, if_false) computes both and picks one, "
        "torch.cond(condition, true_fn, false_fn, (image,)) becomes an ONNX If node."
    ),
    solution_code="""
        import torch
        from torch import nn

        class ScaleIfBrightExportable(nn.Module):
            def forward(self, image):
                # both branches stay in the graph; Where picks one at run time
                return torch.where(image.mean() > 0.3, image * 0.5, image)

        answer = ScaleIfBrightExportable()
    """,
)

q3 = Exercise(
    3,
    "export a sequence model with a dynamic batch and length",
    _check_sequence_export,
    hint=(
        "The recipe at the top of the notebook, with two changes: the example is a (batch, steps, 8) tensor and dynamic_shapes names "
        "two axes of forward()'s argument, {'sequence': {0: Dim('batch'), 1: Dim('steps')}}. Pick an example whose "
        "batch and length are both at least 2 (torch.export fixes a dimension whose example size is 0 or 1), read "
        "program.exported_program.range_constraints, and run the file at a few shapes before you answer."
    ),
    solution_code="""
        import torch
        from torch.export import Dim
        from labsupport.exercises.nb02 import exercise_sequence_cnn
        from labsupport.onnxutil.export import quiet_export
        from labsupport.course.paths import artifact

        model = exercise_sequence_cnn().eval()
        example = torch.randn(3, 5, 8)  # batch 3, 5 steps: neither is 0 or 1
        with quiet_export():
            program = torch.onnx.export(
                model,
                (example,),
                dynamo=True,
                input_names=["sequence"],
                output_names=["logits"],
                dynamic_shapes={"sequence": {0: Dim("batch"), 1: Dim("steps")}},
                verbose=False,
            )
        path = artifact("exercises/nb02_sequence_cnn.onnx")
        program.save(path, external_data=False)
        answer = path
    """,
)

EXERCISES = [q1, q2, q3]
