"""LLM Algo Lab: lessons as notebooks, graded by checks that pytest and the notebook share.

`from llm_algo import setup_lesson` is what a lesson's setup cell runs; it is imported on first use, so that
`import llm_algo` (the CLI's `progress`, the pytest plugin's start-up) does not import torch.

The package reads as a pipeline, lowest layer first (imports only go down):
- `paths`, `settings`, `outcome`, `notebook`, `device`: where things are, settings, what a graded unit comes to,
  the notebook model, the device policy;
- `check`: the check author's API (`Checks`, `expect_close`, restrictions, bounds checks, tolerances);
- `references`: reference builders that checks use (Hugging Face modules, Llama and MoE pieces, kernel guards);
- `mutation.mutants`: known-wrong variants of a solution;
- `grading`: executing a notebook's cells into a namespace, running checks, grading a lesson, lessons loaded once;
- `session`, `session_report`: what a notebook's setup and check cells call, and the report a check cell shows;
- `worker`: grading children forked from a warm process, and the scheduler that runs them ahead of pytest;
- `pytest_plugin`, `headless`, `progress`, `bench`, `doctor`, `authoring`, `mutation`, `__main__`: the front ends.
"""

from __future__ import annotations

__all__ = ["setup_lesson"]


def __getattr__(name: str):
    if name == "setup_lesson":
        from .session import setup_lesson

        return setup_lesson
    raise AttributeError(f"module 'llm_algo' has no attribute {name!r}")
