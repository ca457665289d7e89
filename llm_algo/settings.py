"""Settings, each resolved by one precedence rule: CLI flag, then environment variable, then the
pytest ini option, then the default. Every value is validated, and an invalid one names its source."""

from __future__ import annotations

import os
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


CHECK_TIMEOUT = Setting(
    name="check_timeout",
    env="LLM_ALGO_CHECK_TIMEOUT",
    ini="llm_algo_check_timeout",
    default=60.0,
    parse=positive_seconds,
    help="seconds a single check (or loading one notebook) may run before it is stopped",
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
