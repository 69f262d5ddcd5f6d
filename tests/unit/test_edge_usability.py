"""labsupport.topics.mobile.parse_usability_report: the numbers of ONNX Runtime's mobile usability checker."""

from __future__ import annotations

import pytest

from labsupport.topics.mobile import Usability, parse_usability_report

# the lines that matter of `python -m onnxruntime.tools.check_onnx_model_mobile_usability digits_cnn_int8.onnx`
# (onnxruntime 1.31.1, the dynamic-batch INT8 model of notebook 06), caveat lines left out
REPORT = """\
INFO:  Checking artifacts/digits_cnn_int8.onnx for usability with ORT Mobile.
INFO:  Checking NNAPI
INFO:  1 partitions with a total of 6/23 nodes can be handled by the NNAPI EP.
INFO:  Unsupported nodes due to input having a dynamic shape=17
INFO:  Model should perform well with NNAPI as is: NO
INFO:  Checking if model will perform better if the dynamic shapes are fixed...
INFO:  Partition information if the model was updated to make the shapes fixed:
INFO:  1 partitions with a total of 23/23 nodes can be handled by the NNAPI EP.
INFO:  Model should perform well with NNAPI if modified to have fixed input shapes: YES
INFO:  Checking CoreML NeuralNetwork
INFO:  0 partitions with a total of 0/23 nodes can be handled by the CoreML NeuralNetwork EP.
INFO:  Unsupported nodes due to input having a dynamic shape=17
INFO:  Model should perform well with CoreML NeuralNetwork as is: NO
INFO:  Checking if model will perform better if the dynamic shapes are fixed...
INFO:  Partition information if the model was updated to make the shapes fixed:
INFO:  5 partitions with a total of 5/23 nodes can be handled by the CoreML NeuralNetwork EP.
INFO:  Model should perform well with CoreML NeuralNetwork if modified to have fixed input shapes: NO
INFO:  Checking CoreML MLProgram
INFO:  0 partitions with a total of 0/23 nodes can be handled by the CoreML MLProgram EP.
INFO:  Unsupported nodes due to input having a dynamic shape=17
INFO:  Model should perform well with CoreML MLProgram as is: NO
INFO:  Checking if model will perform better if the dynamic shapes are fixed...
INFO:  Partition information if the model was updated to make the shapes fixed:
INFO:  5 partitions with a total of 5/23 nodes can be handled by the CoreML MLProgram EP.
INFO:  Model should perform well with CoreML MLProgram if modified to have fixed input shapes: NO
"""

# the same lines for `digits_cnn_batch1.onnx` (the FP32 model with the batch fixed to 1): no dynamic shape, so
# the checker prints no "if fixed" lines
FIXED_SHAPE_REPORT = """\
INFO:  Checking artifacts/mobile/batch1/digits_cnn_batch1.onnx for usability with ORT Mobile.
INFO:  Checking NNAPI
INFO:  1 partitions with a total of 7/7 nodes can be handled by the NNAPI EP.
INFO:  Model should perform well with NNAPI as is: YES
INFO:  Checking CoreML NeuralNetwork
INFO:  1 partitions with a total of 7/7 nodes can be handled by the CoreML NeuralNetwork EP.
INFO:  Model should perform well with CoreML NeuralNetwork as is: YES
INFO:  Checking CoreML MLProgram
INFO:  1 partitions with a total of 7/7 nodes can be handled by the CoreML MLProgram EP.
INFO:  Model should perform well with CoreML MLProgram as is: YES
"""


def test_parses_as_is_and_fixed_shape_numbers_per_provider():
    nnapi, neural_network, ml_program = parse_usability_report(REPORT.splitlines())
    assert nnapi == Usability("NNAPI", nodes=6, total=23, partitions=1, works_as_is=False, fixed_nodes=23, works_if_fixed=True)
    assert neural_network == Usability("CoreML NeuralNetwork", 0, 23, 0, False, fixed_nodes=5, works_if_fixed=False)
    assert ml_program == Usability("CoreML MLProgram", 0, 23, 0, False, fixed_nodes=5, works_if_fixed=False)


def test_a_model_with_fixed_shapes_has_no_if_fixed_numbers():
    for row in parse_usability_report(FIXED_SHAPE_REPORT.splitlines()):
        assert row == Usability(row.provider, 7, 7, 1, True, fixed_nodes=None, works_if_fixed=None)


def test_the_fixed_shape_lines_never_overwrite_the_as_is_numbers():
    nnapi = parse_usability_report(REPORT.splitlines())[0]
    assert (nnapi.nodes, nnapi.fixed_nodes) == (6, 23)


def test_a_report_in_an_unknown_format_is_an_error_not_zeros():
    truncated = REPORT.split("INFO:  Checking CoreML MLProgram")[0]
    with pytest.raises(ValueError, match=r"no complete section for \['CoreML MLProgram'\]"):
        parse_usability_report(truncated.splitlines())
    with pytest.raises(ValueError, match="no complete section"):
        parse_usability_report(["INFO:  Checking NNAPI", "INFO:  something else"])
