import pytest

from labsupport.course import display, paths


def test_expect_error_prints_scrubbed_message(capsys):
    with display.expect_error(ValueError, match="bad shape") as caught:
        raise ValueError(f"bad shape in {paths.repo_root()}/x.onnx at 0x7ffdeadbeef0")
    printed = capsys.readouterr().out
    assert printed.startswith("ValueError: bad shape in <repo>/x.onnx at 0x...")
    assert isinstance(caught.error, ValueError)


def test_expect_error_fails_when_nothing_is_raised():
    with pytest.raises(AssertionError, match="completed without error"), display.expect_error(ValueError):
        pass


def test_expect_error_lets_other_errors_through_and_checks_match():
    with pytest.raises(KeyError), display.expect_error(ValueError):
        raise KeyError("other")
    with pytest.raises(AssertionError, match="did not mention"), display.expect_error(ValueError, match="needle"):
        raise ValueError("haystack")


def test_long_messages_are_shortened(capsys):
    with display.expect_error(RuntimeError, max_lines=2):
        raise RuntimeError("one\ntwo\nthree\nfour")
    assert capsys.readouterr().out == "RuntimeError: one\ntwo\n... (2 more lines)\n"


def test_long_messages_are_shown_around_the_matching_line(capsys):
    with display.expect_error(RuntimeError, max_lines=2, match="needle"):
        raise RuntimeError("one\ntwo\nthe needle\nafter\nlast")
    assert capsys.readouterr().out == "RuntimeError: ... (2 lines)\nthe needle\nafter\n... (1 more lines)\n"


def test_colour_codes_are_removed(capsys):
    with display.expect_error(ValueError):
        raise ValueError("\x1b[96mstep 3/3\x1b[0m failed")
    assert capsys.readouterr().out == "ValueError: step 3/3 failed\n"


def test_table():
    frame = display.table([{"a": 1, "b": 2}, {"a": 3, "b": 4}], index="a")
    assert list(frame.index) == [1, 3]
    with pytest.raises(ValueError, match="at least one row"):
        display.table([])


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 * 1024**2, "5.0 MiB"), (3 * 1024**3, "3.0 GiB")],
)
def test_format_bytes_picks_the_unit(size, text):
    assert display.format_bytes(size) == text


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_format_bytes_rejects_what_is_not_a_byte_count(bad):
    with pytest.raises(ValueError, match="whole number of bytes"):
        display.format_bytes(bad)
