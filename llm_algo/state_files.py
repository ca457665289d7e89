"""Files the package keeps under .llm_algo/: written atomically (a temporary file, then `os.replace`), updated under
an exclusive lock so that two processes merge instead of overwriting each other, and a corrupt one kept aside with a
warning instead of being read as empty."""

from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never half of one (a kill mid-write leaves the old file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (through a `.lock` file beside it) for a read-modify-write: `flock` on Linux and
    macOS, `msvcrt.locking` on Windows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a+") as handle:
        try:
            import fcntl
        except ImportError:  # Windows
            import msvcrt

            handle.seek(0)
            msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)
            try:
                yield
            finally:
                handle.seek(0)
                msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_json(path: Path, *, default, rebuild: str) -> object:
    """The JSON in `path`; `default` when there is none. A file that is not valid JSON is renamed aside (it may hold
    what someone wants back) with a warning that says so and how to rebuild it (`rebuild`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return default
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        with contextlib.suppress(OSError):
            os.replace(path, aside)
        warnings.warn(
            f"{path} was not valid JSON ({exc}); it was kept as {aside.name} and a new one is started: {rebuild}",
            stacklevel=2,
        )
        return default


def update_json(path: Path, change: Callable[[object], object], *, default, rebuild: str) -> object:
    """Read, change and write back under the lock: two processes that update the same file both keep their part."""
    with locked(path):
        value = change(read_json(path, default=default, rebuild=rebuild))
        write_atomically(path, json.dumps(value, indent=1, sort_keys=True))
    return value
