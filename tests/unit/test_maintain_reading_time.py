"""The reading-time rule: words, code lines and exercises, and the Going deeper parts a first reading skips."""

import nbformat
import pytest

from labsupport.maintain.reading_time import going_deeper, reading_time


def _notebook(*cells):
    return nbformat.v4.new_notebook(cells=list(cells))


def _words(count):
    return " ".join(["word"] * count)


def _code(lines):
    return "\n".join(f"x{i} = {i}" for i in range(lines))


def test_words_code_lines_and_exercises_add_up_and_round_up_to_five_minutes():
    notebook = _notebook(
        nbformat.v4.new_markdown_cell(f"# 99 · Title\n\n{_words(400)}"),  # 2 minutes (the heading adds 3 words)
        nbformat.v4.new_code_cell(_code(16) + "\n\n\n"),  # 2 minutes: blank lines do not count
        nbformat.v4.new_code_cell("q1.check(answer)"),  # 6 minutes and one line
    )
    time = reading_time(notebook)
    assert (time.first, time.full) == (15, 15)  # 2.015 + 2.125 + 6 = 10.1, rounded up


def test_a_going_deeper_part_counts_only_in_everything():
    notebook = _notebook(
        nbformat.v4.new_markdown_cell("# 99 · Title"),
        nbformat.v4.new_markdown_cell(f"## 1 · Main\n{_words(990)}"),
        nbformat.v4.new_markdown_cell(f"### Going deeper: internals\n{_words(1000)}"),
        nbformat.v4.new_code_cell(_code(80)),
        nbformat.v4.new_markdown_cell("## 2 · Back on the path"),
    )
    assert going_deeper(notebook.cells) == [False, False, True, True, False]
    time = reading_time(notebook)
    assert (time.first, time.full) == (5, 25)  # 5 min of words; + 5 min of words and 10 of code


def test_a_going_deeper_part_ends_at_a_heading_of_its_level_or_higher_only():
    cells = [
        nbformat.v4.new_markdown_cell("## Going deeper: one"),
        nbformat.v4.new_markdown_cell("### a sub-heading inside it"),
        nbformat.v4.new_markdown_cell("## the next section"),
        nbformat.v4.new_markdown_cell("not a heading"),
    ]
    assert going_deeper(cells) == [True, True, False, False]


@pytest.mark.parametrize("tag", ["navigation", "course-map"])
def test_generated_cells_and_the_time_line_are_not_counted(tag):
    plain = _notebook(nbformat.v4.new_markdown_cell(_words(1000)))
    with_generated = _notebook(
        nbformat.v4.new_markdown_cell(_words(1000) + "\n**Time:** " + _words(500)),
        nbformat.v4.new_markdown_cell(_words(5000), metadata={"tags": [tag]}),
    )
    assert reading_time(plain) == reading_time(with_generated)
