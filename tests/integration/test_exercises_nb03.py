"""Exercises of notebook 03: each reference solution passes, typical wrong answers fail, ____ is not attempted."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")
import tensorflow as tf
import tf2onnx

from labsupport.exercises import CORRECT, INCORRECT, NOT_ATTEMPTED, ____, nb03
from labsupport.exercises.nb03 import exercise_model, q1, q2
from labsupport.models.digits_keras import build_digits_keras


def _convert(model, batch=None):
    signature = (tf.TensorSpec((batch, 8, 8, 1), tf.float32, name="image"),)
    return tf2onnx.convert.from_keras(model, input_signature=signature, opset=18)[0]


@pytest.fixture(scope="module")
def logits_model():
    return q1.reference_answer()


def test_q1_reference_passes_and_nchw_input_is_accepted(logits_model, tmp_path):
    assert q1.evaluate(logits_model).status == CORRECT
    assert q1.evaluate(____).status == NOT_ATTEMPTED
    nchw, _ = tf2onnx.convert.from_keras(
        exercise_model(),
        input_signature=(tf.TensorSpec((None, 8, 8, 1), tf.float32, name="image"),),
        opset=18,
        inputs_as_nchw=["image"],
        output_path=str(tmp_path / "nchw.onnx"),
    )
    assert q1.evaluate(str(tmp_path / "nchw.onnx")).status == CORRECT
    assert q1.evaluate(nchw).status == CORRECT


@pytest.mark.parametrize(
    ("wrong", "reason"),
    [
        (lambda: _convert(exercise_model(), batch=1), "batch dimension is fixed"),
        (lambda: _convert(build_digits_keras(seed=0)), "differ from TensorFlow"),
        (lambda: "missing.onnx", "does not exist"),
        (lambda: exercise_model(), "ModelProto"),
    ],
    ids=["fixed-batch", "other-weights", "missing-file", "keras-model-itself"],
)
def test_q1_wrong_answers_fail(wrong, reason):
    outcome = q1.evaluate(wrong())
    assert outcome.status == INCORRECT and reason in outcome.message


def test_q2_rejects_logits(logits_model):
    outcome = q2.evaluate(logits_model)  # logits, not probabilities
    assert outcome.status == INCORRECT and "differ from TensorFlow" in outcome.message
    assert "not probabilities that sum to 1" in outcome.message, outcome.message


def test_q1_rejects_probabilities_and_says_so():
    outcome = q1.evaluate(q2.reference_answer())  # the softmax of exercise 2, where exercise 1 wants the logits
    assert outcome.status == INCORRECT and "sum to 1, like probabilities" in outcome.message, outcome.message


def test_q2_names_a_softmax_over_the_wrong_axis_and_a_log_softmax():
    for body in (
        lambda model, image: tf.nn.softmax(model(image, training=False), axis=0),
        lambda model, image: tf.nn.log_softmax(model(image, training=False)),
    ):
        outcome = q2.evaluate(_probabilities_function(body))
        assert outcome.status == INCORRECT and "not probabilities that sum to 1" in outcome.message, outcome.message


def test_q2_fixed_batch_function_fails():
    model = exercise_model()
    signature = [tf.TensorSpec((1, 8, 8, 1), tf.float32, name="image")]

    @tf.function(input_signature=signature)
    def probabilities(image):
        return tf.nn.softmax(model(image, training=False))

    proto, _ = tf2onnx.convert.from_function(probabilities, input_signature=signature, opset=18)
    outcome = q2.evaluate(proto)
    assert outcome.status == INCORRECT and "fixed" in outcome.message


def _dict_function(outputs):
    model = exercise_model()
    signature = [tf.TensorSpec((None, 1, 8, 8), tf.float32, name="image")]

    @tf.function(input_signature=signature)
    def serve(image):
        logits = model(tf.transpose(image, [0, 2, 3, 1]), training=False)
        return outputs(logits)

    return tf2onnx.convert.from_function(serve, input_signature=signature, opset=18)[0]


def test_q2_accepts_the_dict_of_probabilities_and_label_that_the_notebook_shows():
    # tf2onnx orders dict outputs by key, so `label` comes first: the checker must pick the (batch, 10) output
    answer = _dict_function(lambda logits: {"probabilities": tf.nn.softmax(logits), "label": tf.argmax(logits, axis=-1)})
    assert [o.name for o in answer.graph.output] == ["label", "probabilities"]
    assert q2.evaluate(answer).status == CORRECT


@pytest.mark.parametrize(
    "outputs",
    [
        lambda logits: {"probabilities": tf.nn.softmax(logits), "logits": logits},
        lambda logits: {"a": tf.nn.softmax(logits), "b": logits},
    ],
    ids=["probabilities-and-logits", "unnamed-probabilities-and-logits"],
)
def test_q2_accepts_probabilities_beside_another_batch_by_10_output(outputs):
    # the exercise says other outputs are fine: the checker compares every (batch, 10) candidate
    outcome = q2.evaluate(_dict_function(outputs))
    assert outcome.status == CORRECT and "matches TensorFlow" in outcome.message


@pytest.mark.parametrize(
    ("outputs", "reason"),
    [
        (lambda logits: {"logits": logits, "label": tf.argmax(logits, axis=-1)}, "differ from TensorFlow"),
        (lambda logits: {"probabilities": logits, "logits": logits}, "no (batch, 10) output matches"),
        (lambda logits: {"a": tf.nn.softmax(logits / 2), "b": logits}, "no (batch, 10) output matches"),
        (lambda logits: {"label": tf.argmax(logits, axis=-1)}, "differ"),
        (lambda logits: {"probabilities": tf.nn.softmax(logits, axis=0), "label": tf.argmax(logits, axis=-1)}, "differ"),
    ],
    ids=["logits-and-label", "logits-twice", "tempered-softmax-and-logits", "label-only", "softmax-over-the-batch"],
)
def test_q2_rejects_wrong_dict_outputs(outputs, reason):
    outcome = q2.evaluate(_dict_function(outputs))
    assert outcome.status == INCORRECT and reason in outcome.message


def _probabilities_function(body):
    model = exercise_model()
    signature = [tf.TensorSpec((None, 8, 8, 1), tf.float32, name="image")]

    @tf.function(input_signature=signature)
    def probabilities(image):
        return body(model, image)

    return tf2onnx.convert.from_function(probabilities, input_signature=signature, opset=18)[0]


@pytest.mark.parametrize(
    "body",
    [
        lambda model, image: tf.nn.softmax(1.01 * model(image, training=False)),  # logits scaled by 1.01: nearly right
        lambda model, image: tf.nn.log_softmax(model(image, training=False)),
        lambda model, image: tf.nn.softmax(model(image, training=True)),  # batch statistics and dropout
        lambda model, image: tf.sigmoid(model(image, training=False)),
    ],
    ids=["temperature-1.01", "log-softmax", "training-mode", "sigmoid"],
)
def test_q2_rejects_near_probabilities(body):
    outcome = q2.evaluate(_probabilities_function(body))
    assert outcome.status == INCORRECT, outcome.message


def test_q2_blames_training_mode_for_the_random_op():
    # training=True leaves dropout's StatelessRandomUniformV2 in the graph: the learner reads about training mode,
    # not ORT's raw INVALID_GRAPH error
    outcome = q2.evaluate(_probabilities_function(lambda model, image: tf.nn.softmax(model(image, training=True))))
    assert outcome.status == INCORRECT and "training mode" in outcome.message, outcome.message
    assert "INVALID_GRAPH" not in outcome.message


def _trained_one_epoch(model):
    from labsupport.course.data import load_digits

    train = load_digits().train
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(train.images.transpose(0, 2, 3, 1), train.labels, epochs=1, verbose=0)
    return model


def test_training_the_learners_copy_does_not_change_the_reference():
    # exercise_model() hands out a copy: a learner who trains it for an epoch leaves the checker's reference unchanged
    trained = _trained_one_epoch(exercise_model())
    outcome = q1.evaluate(_convert(trained))
    assert outcome.status == INCORRECT and "differ from TensorFlow" in outcome.message, outcome.message
    outcome = q2.evaluate(_probabilities_function(lambda model, image: tf.nn.softmax(trained(image, training=False))))
    assert outcome.status == INCORRECT and "differ from TensorFlow" in outcome.message, outcome.message
    assert q1.evaluate(q1.reference_answer()).status == CORRECT
    assert q2.evaluate(q2.reference_answer()).status == CORRECT


def test_q1_accepts_keras_own_export_of_the_exercise_model(tmp_path):
    # the route section 7 recommends: Keras refuses to export a model that has never been called
    path = tmp_path / "exported.onnx"
    exercise_model().export(str(path), format="onnx", verbose=False)
    assert q1.evaluate(str(path)).status == CORRECT


# exercise 3 (transfer): a functional model with two inputs, image and features, each with a dynamic batch
def _two_specs(batch=None, image="image", features="features"):
    return (tf.TensorSpec((batch, 8, 8, 1), tf.float32, name=image), tf.TensorSpec((batch, 3), tf.float32, name=features))


def _convert_two(model, **spec_options):
    return tf2onnx.convert.from_keras(model, input_signature=_two_specs(**spec_options), opset=18)[0]


def test_q3_reference_passes_and_placeholder_is_not_attempted():
    assert nb03.q3.evaluate(nb03.q3.reference_answer()).status == CORRECT
    assert nb03.q3.evaluate(____).status == NOT_ATTEMPTED


def test_q3_accepts_a_tf_function_with_two_arguments_and_a_saved_path(tmp_path):
    model = nb03.exercise_two_input_model()

    @tf.function(input_signature=_two_specs())
    def logits(image, features):
        return model([image, features], training=False)

    proto, _ = tf2onnx.convert.from_function(logits, input_signature=_two_specs(), opset=18)
    path = tmp_path / "two.onnx"
    path.write_bytes(proto.SerializeToString())
    outcome = nb03.q3.evaluate(str(path))
    assert outcome.status == CORRECT, outcome.message


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: _convert_two(nb03.exercise_two_input_model(), batch=1), "fixed to 1"),
        (lambda: _convert_two(nb03.exercise_two_input_model(), image="pixels", features="extra"), 'named "image" and "features"'),
        (lambda: _convert_two(nb03._build_two_inputs(seed=5)), "differ from exercise_two_input_model()"),
        (lambda: _convert(exercise_model()), 'named "image" and "features"'),  # exercise 1's one-input model
    ],
    ids=["fixed batch", "other names", "other weights", "one-input model"],
)
def test_q3_wrong_answers_fail_with_the_reason(make, reason):
    outcome = nb03.q3.evaluate(make())
    assert outcome.status == INCORRECT and reason in outcome.message, outcome.message


def test_q3_blames_training_mode_for_the_random_op():
    model = nb03.exercise_two_input_model()

    @tf.function(input_signature=_two_specs())
    def logits(image, features):
        return model([image, features], training=True)

    proto, _ = tf2onnx.convert.from_function(logits, input_signature=_two_specs(), opset=18)
    outcome = nb03.q3.evaluate(proto)
    assert outcome.status == INCORRECT and "training mode" in outcome.message, outcome.message
