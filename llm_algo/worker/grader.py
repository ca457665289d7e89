"""The child's side: read a grading request, grade the lesson (llm_algo.grading.lesson), write one JSON line per
event, with what the learner's code prints capped so that a runaway print ends as a clear error.

`python -m llm_algo.worker.grader REQUEST EVENTS` in a fresh interpreter, or `main(REQUEST, EVENTS)` in a child
forked from the warm zygote (llm_algo.worker.zygote).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..grading.cache import GRADE_UNTOUCHED_NOW
from ..grading.lesson import grade
from ..heartbeat import on_beat
from ..notebook import NotebookError
from ..outcome import Unit
from ..settings import MAX_PRINTED_CHARS


class TooMuchOutput(Exception):
    """Raised by print() in the grader process once the learner's code has printed MAX_PRINTED_CHARS."""


class CappedStream:
    """The grader process's stdout or stderr: writes go through up to a limit, then each one raises."""

    def __init__(self, stream, limit: int):
        self.stream, self.limit, self.written = stream, limit, 0

    def write(self, text: str) -> int:
        self.written += len(text)
        if self.written > self.limit:
            raise TooMuchOutput(
                f"printed more than {self.limit:,} characters; print shapes or a few values, not whole tensors in a loop"
            )
        return self.stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def main(request_path: str, events_path: str) -> int:
    request = json.loads(Path(request_path).read_text())
    sys.stdout = CappedStream(sys.stdout, MAX_PRINTED_CHARS)
    sys.stderr = CappedStream(sys.stderr, MAX_PRINTED_CHARS)
    with open(events_path, "a", encoding="utf-8") as events:

        def emit(event: dict) -> None:
            events.write(json.dumps(event) + "\n")
            events.flush()

        on_beat(lambda: emit({"type": "alive"}))  # during an nvcc build (llm_algo.heartbeat)

        if request.get("grade_untouched") is not None:
            GRADE_UNTOUCHED_NOW.set(request["grade_untouched"])
        if request.get("threads"):
            import torch

            torch.set_num_threads(request["threads"])
        try:
            grade(request["notebook"], [Unit(**u) for u in request["units"]], timeout=request["timeout"], emit=emit)
        except (NotebookError, FileNotFoundError, TypeError) as exc:
            emit({"type": "error", "message": str(exc)})
            return 1
        emit({"type": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
