"""llm_algo.check.replacing: a check swaps a notebook name for its own object while the learner's code runs, and
the namespace is as it was afterwards, also when the check fails inside the block."""

import pytest

from llm_algo.check import CheckFailed, replacing
from llm_algo.check.api import Exercise


def test_the_learner_code_sees_the_replacement_then_the_original():
    namespace = {"helper": "theirs"}
    exec("def uses():\n    return helper\n", namespace)
    ex = Exercise(namespace, "lesson")
    with replacing(ex, "helper", "the checks'") as value:
        assert value == "the checks'" and ex.uses() == "the checks'"
    assert ex.uses() == "theirs"


def test_a_name_the_notebook_lacked_is_removed_again_even_after_a_failure():
    ex = Exercise({}, "lesson")
    with pytest.raises(CheckFailed), replacing(ex, "recorder", object()):
        raise CheckFailed("wrong")
    assert "recorder" not in ex._namespace
