"""The exception a check raises when the learner's code is wrong: which input, expected, got, the likely mistake."""

from __future__ import annotations


class CheckFailed(AssertionError):
    """Raised by a check: which input, what was expected, what came back, the likely mistake."""

    def __init__(self, summary: str, *, input: str = "", expected: str = "", got: str = "", hint: str = ""):
        super().__init__(summary)
        self.summary, self.input, self.expected, self.got, self.hint = summary, input, expected, got, hint


class NotAttempted(NotImplementedError):
    """The learner's skeleton raised NotImplementedError where the grader cannot see its frame (in another process,
    such as a rank of llm_algo.distributed): the check reads *not attempted*, as it would in this process."""
