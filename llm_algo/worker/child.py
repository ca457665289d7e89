"""The parent's side of grading a lesson in a child process, so that a notebook that loops forever, exits the
interpreter or prints megabytes costs only its own lesson.

The parent (`grade_in_subprocess`) writes a request file and reads events back from a JSON-lines
file (the child runs llm_algo.worker.grader); its stdout and stderr (the learner's prints) go to a log, capped.
When the child dies or runs past its deadline, the unit in flight gets a one-line error naming the
cell or check, and a new child grades what is left. On Linux the child is forked from a warm zygote
(llm_algo.worker.zygote) that has imported torch already; elsewhere it is a fresh interpreter.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

from ..outcome import CheckResult, Unit
from ..settings import MAX_PRINTED_CHARS, WARM_GRADER, resolve
from .zygote import ForkedChild, Zygote, ZygoteGone, fingerprint

# How a unit's one-line error begins when its grading process died or hung on it (see `died_on_it`)
EXITED, STALLED = "the Python process exited", "made no progress for"
STARTUP_SECONDS = 60  # importing torch on a slow, busy machine
QUIET_GRACE_SECONDS = 15  # beyond the per-check time limit, which the child enforces itself
LOG_TAIL_BYTES = 2000


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - LOG_TAIL_BYTES))
            return handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _read_events(path: Path) -> list[dict]:
    events = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a child killed mid-write leaves half a line
                events.append(json.loads(line))
    return events


class ColdChild:
    """A child that is a fresh interpreter (where there is no zygote)."""

    def __init__(self, request: Path, events: Path, log: Path):
        with open(log, "wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "llm_algo.worker.grader", str(request), str(events)],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def poll(self) -> int | None:
        return self.process.poll()

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()
_cancelled = threading.Event()  # set while an interrupted session stops its children


def cancel_children(cancel: bool = True) -> None:
    """Stop every child that is grading now (and each one started until `cancel_children(False)`)."""
    if cancel:
        _cancelled.set()
    else:
        _cancelled.clear()


def start_zygote(*, extra: bool = False) -> Zygote | None:
    """The warm zygote, started now if there is none (it preloads while the caller goes on); None where children
    are fresh interpreters. `extra` preloads transformers' reference models too (worth it for several lessons)."""
    global _zygote
    if not resolve(WARM_GRADER):
        return None
    with _zygote_lock:
        if _zygote is not None and (_zygote.fingerprint != fingerprint() or _zygote.process.poll() is not None):
            _zygote.close()
            _zygote = None
        if _zygote is None:
            _zygote = Zygote(extra=extra)
        elif extra:
            _zygote.preload_extra()
        return _zygote


def stop_zygote() -> None:
    global _zygote
    with _zygote_lock:
        if _zygote is not None:
            _zygote.close()
            _zygote = None


atexit.register(stop_zygote)


def _start_child(request: Path, events: Path, log: Path):
    zygote = start_zygote()
    if zygote is not None:
        log.write_bytes(b"")
        exit_file = log.with_name("exit_code")
        exit_file.unlink(missing_ok=True)
        try:
            return ForkedChild(zygote.spawn([str(request), str(events)], log=log, exit_file=exit_file), exit_file)
        except ZygoteGone:
            stop_zygote()  # the next lesson starts a new one; this one is graded by a fresh interpreter
    return ColdChild(request, events, log)


def _run_child(
    notebook: Path, units: list[Unit], timeout: float, workdir: Path, options: dict
) -> tuple[list[dict], str]:
    """One child process; returns its events and, when it did not finish cleanly, why."""
    request, events, log = workdir / "request.json", workdir / "events.jsonl", workdir / "output.log"
    events.unlink(missing_ok=True)
    request.write_text(
        json.dumps({"notebook": str(notebook), "units": [asdict(u) for u in units], "timeout": timeout, **options})
    )
    child = _start_child(request, events, log)
    # A watchdog, not a total deadline: the child reports an event per cell and per check, and is stopped
    # only when it goes quiet for longer than one check may take (plus start-up before its first event).
    quiet_limit, last_size, last_change = STARTUP_SECONDS + timeout, -1, time.monotonic()
    while (code := child.poll()) is None:
        if _cancelled.is_set():
            return _stop(child, events, "grading was interrupted")
        size = events.stat().st_size if events.exists() else 0
        if size != last_size:
            last_size, last_change = size, time.monotonic()
            quiet_limit = timeout + QUIET_GRACE_SECONDS if size else quiet_limit
        elif time.monotonic() - last_change > quiet_limit:
            return _stop(
                child,
                events,
                f"{STALLED} {quiet_limit:g} s and was stopped "
                "(an infinite loop in compiled code, a deadlock, or memory corrupted by an out-of-bounds write?)",
            )
        if log.stat().st_size > 2 * MAX_PRINTED_CHARS:  # output that bypassed sys.stdout: os.write, C code
            return _stop(
                child,
                events,
                f"printed more than {2 * MAX_PRINTED_CHARS:,} bytes and was stopped (printing in a loop?)",
            )
        time.sleep(0.05)
    found = _read_events(events)
    if found and found[-1].get("type") == "done":
        return found, ""
    if found and found[-1].get("type") == "error":
        return found, found[-1]["message"]
    tail = _tail(log).splitlines()
    last = f"; it last printed: {tail[-1][:200]}" if tail else ""
    return (
        found,
        f"{EXITED} (code {code}) — does the code call exit(), os._exit() or crash the interpreter?{last}",
    )


def died_on_it(message: str) -> bool:
    """Was this unit's error its grading process dying or hanging while it ran (not a lesson that cannot load)?"""
    where = message.split(": ", 1)[1] if message.startswith("while running ") and ": " in message else message
    return where.startswith((EXITED, STALLED))


def _stop(child, events: Path, why: str) -> tuple[list[dict], str]:
    child.kill()
    return _read_events(events), why


def grade_in_subprocess(
    notebook: Path,
    units: list[Unit],
    *,
    timeout: float,
    grade_untouched: bool | None = None,
    threads: int | None = None,
) -> dict[Unit, CheckResult | str]:
    """Results by unit: a CheckResult, or a one-line error string for units that could not run.
    `grade_untouched` is passed on to `use(...)` in the child (see llm_algo.grading.cache); `threads` caps torch's
    threads in the child when several lessons are graded at once."""
    results: dict[Unit, CheckResult | str] = {}
    pending = list(units)
    options = {"grade_untouched": grade_untouched, "threads": threads}
    with tempfile.TemporaryDirectory(prefix="llm_algo_") as tmp:
        while pending:
            events, problem = _run_child(notebook, pending, timeout, Path(tmp), options)
            for event in events:
                if event["type"] == "result":
                    result = CheckResult.from_json(event["result"])
                    results[Unit(result.key, event["mode"])] = result
            pending = [u for u in pending if u not in results]
            if not pending:
                break
            if not problem:
                problem = "the grader process ended without grading it"
            failed, message = (pending, problem) if _cancelled.is_set() else _casualties(events, pending, problem)
            for unit in failed:
                results[unit] = message
            pending = [u for u in pending if u not in results]
    return results


def _casualties(events: list[dict], pending: list[Unit], problem: str) -> tuple[list[Unit], str]:
    """Which pending units a failed child takes down with it, and the one-line reason."""
    if events and events[-1]["type"] == "error":  # the lesson itself cannot be graded
        return pending, problem
    unit, cell, loading = None, None, pending[0].mode
    for event in events:
        if event["type"] == "load":
            loading = event["mode"]
        elif event["type"] == "start":
            unit, cell = Unit(event["key"], event["mode"]), None
        elif event["type"] == "cell":
            cell = event["cell"]
        elif event["type"] == "loaded":
            cell = None
        elif event["type"] == "result" and Unit(event["result"]["key"], event["mode"]) == unit:
            unit, cell = None, None
    where = f"while running {cell}: " if cell else ""
    if unit:
        return [u for u in pending if u == unit], where + problem
    if cell:  # loading the notebook for the plain checks of one mode
        return [u for u in pending if not u.is_mutant and u.mode == loading] or pending[:1], where + problem
    return pending, problem
