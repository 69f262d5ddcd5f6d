"""The scaffold's edits of an exercise module (labsupport/maintain/new.py); tests/integration/test_scaffold.py runs it whole."""

from __future__ import annotations

import pytest

from labsupport.maintain.new import _add_to_exercise_list

PLAIN = "q1 = Exercise(1)\nq2 = Exercise(2)\nEXERCISES = [q1, q2]\n"


@pytest.mark.parametrize("listing", ["EXERCISES = [q1, q2]", "EXERCISES: list[Exercise] = [q1, q2]"], ids=["plain", "annotated"])
def test_the_next_exercise_joins_the_list_as_it_is_written(listing):
    module = PLAIN.replace("EXERCISES = [q1, q2]", listing)
    added = _add_to_exercise_list(module, 3)
    assert added.endswith(listing.replace("q2]", "q2, q3]") + "\n")
    assert added.index("q3 = Exercise(") < added.index("EXERCISES"), "the exercise is defined before the list"


def test_a_module_without_the_list_is_refused_with_the_line_it_needs():
    with pytest.raises(ValueError, match="EXERCISES = "):
        _add_to_exercise_list("q1 = Exercise(1)\n", 2)
