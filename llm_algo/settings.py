"""Settings, each resolved by one precedence rule: CLI flag, then environment variable, then the
pytest ini option, then the default. Every value is validated, and an invalid one names its source."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass


class SettingError(ValueError):
    pass


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    ini: str
    default: object
    parse: Callable[[str], object]
    help: str


def positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("must be a positive number of seconds")
    return value


def yes_or_no(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("1", "0", "true", "false", "yes", "no"):
        raise ValueError("must be 1 or 0 (true or false)")
    return value in ("1", "true", "yes")


def whole_number(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be 1 or more")
    return value


CHECK_TIMEOUT = Setting(
    name="check_timeout",
    env="LLM_ALGO_CHECK_TIMEOUT",
    ini="llm_algo_check_timeout",
    default=60.0,
    parse=positive_seconds,
    help="seconds a single check (or loading one notebook) may run before it is stopped",
)


GRADE_UNTOUCHED = Setting(
    name="grade_untouched",
    env="LLM_ALGO_GRADE_UNTOUCHED",
    ini="llm_algo_grade_untouched",
    default=False,
    parse=yes_or_no,
    help="grade exercise cells that still hold their skeleton (otherwise they are not attempted without running)",
)

GRADING_JOBS = Setting(
    name="grading_jobs",
    env="LLM_ALGO_GRADING_JOBS",
    ini="llm_algo_grading_jobs",
    default=min(2, os.cpu_count() or 1),
    parse=whole_number,
    help="how many lessons are graded at once, each in its own process",
)


WARM_GRADER = Setting(
    name="warm_grader",
    env="LLM_ALGO_WARM_GRADER",
    ini="llm_algo_warm_grader",
    default=sys.platform.startswith("linux"),
    parse=yes_or_no,
    help="fork grading processes from a warm one that has imported torch (Linux); 0: a fresh interpreter each",
)


def resolve(setting: Setting, *, cli: object = None, ini: object = None) -> object:
    for source, raw in (
        (f"--{setting.name.replace('_', '-')}", cli),
        (f"${setting.env}", os.environ.get(setting.env)),
        (f"ini option {setting.ini}", ini or None),
    ):
        if raw is None or raw == "":
            continue
        try:
            return setting.parse(str(raw))
        except ValueError as exc:
            raise SettingError(f"{source}={raw!r} is not valid: {exc}") from None
    return setting.default


MAX_PRINTED_CHARS = 2_000_000  # what graded code may print in one grader process; more is a runaway print
