"""Exercises of notebook 03 (converting TensorFlow/Keras models with tf2onnx); exercise 3 (transfer) converts a
functional model with two inputs.

The learner's answer is an ONNX model (a ``ModelProto`` or the path of a .onnx file); the
checkers run it with ONNX Runtime at several batch sizes and compare it with TensorFlow.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from labsupport.course.compare import ParityError, compare
from labsupport.course.data import load_digits
from labsupport.exercises import Exercise, Incorrect
from labsupport.exercises.checks import onnx_session

_WHAT = "an ONNX ModelProto (what tf2onnx returns first) or a .onnx path"

BATCH_SIZES = (1, 7, 64)
EXERCISE_SEED = 3


@lru_cache(maxsize=1)
def _reference_model():
    """The checker's own exercise model (seeded, untrained, called once); the learner only ever sees copies of it."""
    return _built_and_called()


def _built_and_called():
    from labsupport.models.digits_keras import IMAGE_SHAPE_NHWC, build_digits_keras

    model = build_digits_keras(seed=EXERCISE_SEED)
    model(np.zeros((1, *IMAGE_SHAPE_NHWC), np.float32), training=False)
    return model


def exercise_model():
    """A fresh copy of the untrained (seeded, so always the same) Keras digits model that exercises 1 and 2 convert.

    A new model on every call, with the reference's weights: training or changing it cannot change what the
    checker compares with. It has been called once, so ``model.export(path, format="onnx")`` accepts it: Keras
    refuses to export any model that has never been called unless it is given ``input_signature=`` (notebook 03,
    section 7).
    """
    model = _built_and_called()
    model.set_weights(_reference_model().get_weights())
    return model


def _class_scores_outputs(session) -> list[str]:
    """The names of the answer's candidate outputs: its only output, or every one of shape (batch, 10) among several."""
    outputs = session.get_outputs()
    if len(outputs) == 1:
        return [outputs[0].name]
    scores = [o.name for o in outputs if len(o.shape) == 2 and o.shape[1] == 10]
    if not scores:
        found = [(o.name, o.shape) for o in outputs]
        raise Incorrect(f"expected an output of shape (batch, 10) among the outputs, found {found}")
    return scores


def _compare_at_batch_sizes(session, output: str, nchw: bool, reference, logs: bool) -> None:
    """Run ``output`` at BATCH_SIZES; raises Incorrect with the first difference from ``reference(images_nchw)``.

    With ``logs`` the logarithms of the outputs (probabilities) must agree too.
    """
    name = session.get_inputs()[0].name
    images = load_digits().test.images
    for batch in BATCH_SIZES:
        x = images[:batch]
        feed = x if nchw else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        try:
            got = session.run([output], {name: feed})[0]
        except Exception as error:
            raise Incorrect(f"running at batch size {batch} failed: {str(error).splitlines()[0]}") from None
        want = reference(x)
        try:
            compare(want, got, atol=1e-4, rtol=1e-3, name=f"batch {batch}")
            if logs:  # the untrained model's probabilities all lie near 0.1: their logarithms show a 1% temperature
                compare(np.log(want), np.log(np.maximum(got, 1e-30)), atol=1e-4, rtol=1e-4, name=f"batch {batch} log")
        except ParityError as error:
            raise Incorrect(
                f"the outputs differ from TensorFlow's at batch size {batch}{_what_it_looks_like(got, logs)}: {error}"
            ) from None


def _what_it_looks_like(got: np.ndarray, probabilities_wanted: bool) -> str:
    """A clause naming the likely mistake: probabilities where logits are wanted, or rows that are no probabilities."""
    rows_sum_to_one = bool(np.allclose(got.sum(axis=-1), 1.0, atol=1e-4)) and bool((got >= 0).all())
    if probabilities_wanted and not rows_sum_to_one:
        return " (its rows are not probabilities that sum to 1: apply tf.nn.softmax to the logits, over the last axis)"
    if not probabilities_wanted and rows_sum_to_one:
        return " (its rows sum to 1, like probabilities: convert the model itself, whose output is the logits)"
    return ""


def _answer_session(answer):
    """``onnx_session`` for the answer; a TensorFlow random op left in the graph is blamed on training mode."""
    try:
        return onnx_session(answer, _WHAT)
    except Incorrect as error:
        if "StatelessRandom" in str(error) or "RandomUniform" in str(error):
            raise Incorrect(
                "the graph holds a TensorFlow random op that ONNX Runtime cannot run: the model was called in training "
                "mode (training=True), which put dropout's random op in the graph; call it with training=False"
            ) from None
        raise


def _run_at_batch_sizes(answer, reference, logs: bool = False) -> str:
    """Run the answer at BATCH_SIZES with NHWC or NCHW input; one of its (batch, 10) outputs must match ``reference``."""
    session = _answer_session(answer)
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise Incorrect(f"expected one model input (the image batch), found {len(inputs)}: {[i.name for i in inputs]}")
    shape = inputs[0].shape
    if len(shape) != 4:
        raise Incorrect(f"expected a 4-D image input, found shape {shape}")
    nchw = list(shape[1:]) == [1, 8, 8]
    if not nchw and list(shape[1:]) != [8, 8, 1]:
        raise Incorrect(f"expected input shape (batch, 8, 8, 1) or (batch, 1, 8, 8), found {shape}")
    if isinstance(shape[0], int):
        raise Incorrect(f"the batch dimension is fixed to {shape[0]}; give the input signature a None batch")
    candidates = _class_scores_outputs(session)
    reasons = []
    for output in candidates:
        try:
            _compare_at_batch_sizes(session, output, nchw, reference, logs)
        except Incorrect as error:
            reasons.append(f"{output}: {error}" if len(candidates) > 1 else str(error))
            continue
        which = f"output {output!r} " if len(candidates) > 1 else ""
        return f"{which}matches TensorFlow at batch sizes {', '.join(map(str, BATCH_SIZES))}"
    raise Incorrect("; ".join(reasons) if len(candidates) == 1 else f"no (batch, 10) output matches: {'; '.join(reasons)}")


def _keras_logits(x):
    from labsupport.models.digits_keras import predict_logits

    return predict_logits(_reference_model(), x)


def _keras_probabilities(x):
    import tensorflow as tf

    return tf.nn.softmax(_keras_logits(x)).numpy()


def _check_dynamic(answer) -> str:
    return _run_at_batch_sizes(answer, _keras_logits)


def _check_probabilities(answer) -> str:
    note = _run_at_batch_sizes(answer, _keras_probabilities, logs=True)
    return note + "; rows are probabilities that sum to 1"


FEATURES = 3  # exercise 3's second input: three numbers per image (say, the scanner's brightness, contrast and tilt)


def _build_two_inputs(seed: int = 4):
    """Exercise 3's functional model: an image branch (Conv2D, Flatten) and a features branch (Dense), concatenated,
    then dropout and 10 logits. Built with fixed seeds and called once (so Keras' own exporter accepts it too)."""
    import keras

    keras.utils.set_random_seed(seed)
    image = keras.Input((8, 8, 1), name="image")
    features = keras.Input((FEATURES,), name="features")
    pixels = keras.layers.Flatten()(keras.layers.Conv2D(4, 3, activation="relu")(image))
    extra = keras.layers.Dense(4, activation="relu")(features)
    joined = keras.layers.Dropout(0.2)(keras.layers.Concatenate()([pixels, extra]))
    model = keras.Model([image, features], keras.layers.Dense(10, name="logits")(joined), name="two_inputs")
    model([np.zeros((1, 8, 8, 1), np.float32), np.zeros((1, FEATURES), np.float32)], training=False)
    return model


@lru_cache(maxsize=1)
def _two_inputs_reference():
    return _build_two_inputs()


def exercise_two_input_model():
    """A fresh copy of exercise 3's two-input Keras model (untrained, seeded): inputs ``image`` (N, 8, 8, 1) and
    ``features`` (N, 3), output ``logits`` (N, 10). Changing the copy cannot change what the checker compares with."""
    model = _build_two_inputs()
    model.set_weights(_two_inputs_reference().get_weights())
    return model


def _two_input_feeds(batch: int) -> tuple[np.ndarray, np.ndarray]:
    """NHWC digits images and seeded standard-normal features for a batch of ``batch`` rows."""
    images = np.ascontiguousarray(load_digits().test.images[:batch].transpose(0, 2, 3, 1))
    features = np.random.default_rng(batch).standard_normal((batch, FEATURES)).astype(np.float32)
    return images, features


def _check_two_inputs(answer) -> str:
    session = _answer_session(answer)
    inputs = {i.name: i.shape for i in session.get_inputs()}
    if set(inputs) != {"image", "features"}:
        raise Incorrect(f'expected two inputs named "image" and "features" (the names of the TensorSpecs), found {sorted(inputs)}')
    want_shapes = {"image": [8, 8, 1], "features": [FEATURES]}
    for name, shape in inputs.items():
        if list(shape[1:]) != want_shapes[name]:
            raise Incorrect(f"input {name!r} has shape {shape}; expected (batch, {', '.join(map(str, want_shapes[name]))})")
        if isinstance(shape[0], int):
            raise Incorrect(f"the batch of input {name!r} is fixed to {shape[0]}: give every TensorSpec a None batch")
    outputs = session.get_outputs()
    if len(outputs) != 1:
        raise Incorrect(f"expected one output (the logits), found {[o.name for o in outputs]}")
    reference = _two_inputs_reference()
    for batch in BATCH_SIZES:
        images, features = _two_input_feeds(batch)
        try:
            got = session.run(None, {"image": images, "features": features})[0]
        except Exception as error:
            raise Incorrect(f"running at batch size {batch} failed: {str(error).splitlines()[0]}") from None
        want = reference([images, features], training=False).numpy()
        try:
            compare(want, got, atol=1e-4, rtol=1e-3, name=f"batch {batch}")
        except ParityError as error:
            raise Incorrect(
                f"the logits differ from exercise_two_input_model()'s at batch size {batch}: {error} "
                "(convert that model, in inference mode)"
            ) from None
    return f"both inputs dynamic; matches TensorFlow at batch sizes {', '.join(map(str, BATCH_SIZES))}"


q1 = Exercise(
    1,
    "convert a Keras model with a dynamic batch",
    _check_dynamic,
    hint=(
        "tf2onnx.convert.from_keras(model, input_signature=(tf.TensorSpec((None, 8, 8, 1), tf.float32, name='image'),)) "
        "returns (model_proto, storage). None in the first position makes the batch dynamic."
    ),
    solution_code="""
        import tensorflow as tf
        import tf2onnx
        from labsupport.exercises.nb03 import exercise_model

        model = exercise_model()
        signature = (tf.TensorSpec((None, 8, 8, 1), tf.float32, name="image"),)
        answer, _ = tf2onnx.convert.from_keras(model, input_signature=signature, opset=18)
    """,
)

q2 = Exercise(
    2,
    "convert a tf.function that returns probabilities",
    _check_probabilities,
    hint=(
        "Decorate a function with @tf.function(input_signature=[tf.TensorSpec((None, 8, 8, 1), tf.float32)]) "
        "that returns tf.nn.softmax(model(image, training=False)), then tf2onnx.convert.from_function(fn, "
        "input_signature=..., opset=18)."
    ),
    solution_code="""
        import tensorflow as tf
        import tf2onnx
        from labsupport.exercises.nb03 import exercise_model

        model = exercise_model()
        signature = [tf.TensorSpec((None, 8, 8, 1), tf.float32, name="image")]

        @tf.function(input_signature=signature)
        def probabilities(image):
            return tf.nn.softmax(model(image, training=False))

        answer, _ = tf2onnx.convert.from_function(probabilities, input_signature=signature, opset=18)
    """,
)

q3 = Exercise(
    3,
    "convert a Keras model with two inputs",
    _check_two_inputs,
    hint=(
        "input_signature takes one tf.TensorSpec per model input, in the order of model.inputs, each with a None batch "
        "and the name the ONNX input will get. Run the result with a feed dict of two arrays before you answer."
    ),
    solution_code="""
        import tensorflow as tf
        import tf2onnx
        from labsupport.exercises.nb03 import exercise_two_input_model

        model = exercise_two_input_model()
        signature = (
            tf.TensorSpec((None, 8, 8, 1), tf.float32, name="image"),
            tf.TensorSpec((None, 3), tf.float32, name="features"),
        )
        answer, _ = tf2onnx.convert.from_keras(model, input_signature=signature, opset=18)
    """,
)

EXERCISES = [q1, q2, q3]
