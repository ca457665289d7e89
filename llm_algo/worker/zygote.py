"""A warm process that imports torch and the grader once, then forks one grading child per lesson.

`python -m llm_algo.worker.zygote [--extra]` is started by the grader's parent (see `Zygote`). It preloads the modules
every lesson needs (torch, numpy, matplotlib, the grading engine; with --extra also transformers' reference models,
in the idle time between requests) and then waits for requests on stdin, one JSON line each: {"argv": [request, events], "log", "exit_file", "env",
"cwd"}. For each it forks a child, answers {"pid": ...} and, when the child ends, writes its exit code to
`exit_file`. The child starts a session of its own (so that the parent can stop it and everything it started),
sends its output to the log, takes the environment and working folder of the request, and runs
`llm_algo.worker.grader.main`.

CUDA must not be initialised in a process that forks. The zygote never initialises it: on a machine whose torch
has no CUDA (or with LLM_ALGO_FORCE_CPU=1) it decides the device policy (which switches Triton's interpreter on)
and imports Triton too; elsewhere each child decides the policy itself, after the fork.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

CORE_PRELOAD = (
    "torch",
    "numpy",
    "matplotlib.pyplot",
    "IPython.core.inputtransformer2",
    "llm_algo.grading.lesson",
    "llm_algo.grading.cache",
    "llm_algo.worker.grader",
    "llm_algo.session",
    "llm_algo.references.kernels",
    "llm_algo.bench",
)
# Worth it when several lessons are graded, or the one graded builds Hugging Face models (see `serve`): the
# reference models, about two seconds. Dynamo (about one: the first optimizer, non-reentrant checkpoint or
# TorchDispatchMode of a process imports it) follows in idle time, once the first child is on its way.
EXTRA_PRELOAD = (
    "llm_algo.references.hf",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "transformers.models.mixtral.modeling_mixtral",
    "transformers.models.deepseek_v3.modeling_deepseek_v3",
)
TRITON_PRELOAD = ("triton", "triton.language")
IDLE_PRELOAD = ("torch._dynamo",)  # with the extras, but after the first child is on its way: not every lesson needs it
# The environment a zygote was started with and that its preloads depend on; when one differs, a new zygote.
READY_SECONDS = 120  # importing torch and the rest on a slow, busy machine; longer means something is wrong
FINGERPRINT_ENV = ("PYTHONPATH", "LLM_ALGO_FORCE_CPU", "CUDA_VISIBLE_DEVICES", "MPLBACKEND")


# ----------------------------------------------------------------------------- the zygote process


def _cpu_only() -> bool:
    """Known without initialising CUDA: this torch has no CUDA, or the CPU is forced."""
    import torch

    return os.environ.get("LLM_ALGO_FORCE_CPU") == "1" or not torch.backends.cuda.is_built()


def _import(name: str) -> None:
    import warnings

    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        __import__(name)


def _preload() -> bool:
    """Import what every child needs; True when the device policy was decided here (CPU only). The policy comes
    before the other preloads, as in a notebook, where `setup_lesson` runs before the lesson imports Triton."""
    decided = False
    with contextlib.suppress(Exception):
        if _cpu_only():
            from llm_algo import device

            device.policy()  # sets TRITON_INTERPRET=1 before Triton is imported
            decided = True
    for name in CORE_PRELOAD + (TRITON_PRELOAD if decided else ()):
        _import(name)
    return decided


def _child(request: dict, decided: bool) -> None:
    """Runs in the forked child; never returns."""
    code = 1
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(devnull)
        os.close(log)
        interpret = os.environ.get("TRITON_INTERPRET")
        os.environ.clear()
        os.environ.update(request["env"])
        if decided and interpret:
            os.environ["TRITON_INTERPRET"] = interpret  # Triton was imported under it
        os.chdir(request["cwd"])
        random.seed()
        _forget_parent_state()
        from llm_algo.worker.grader import main

        code = main(*request["argv"])
    except SystemExit as exc:  # sys.exit() in graded code ends the child as it would end a Python process
        if isinstance(exc.code, int):
            code = exc.code
        elif exc.code is None:
            code = 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _forget_parent_state() -> None:
    """Caches that depend on the environment or the checkout: the request may name another root."""
    from llm_algo import paths
    from llm_algo.grading import cache

    paths.repo_root.cache_clear()
    cache._lesson_index.cache_clear()
    cache.clear()


def _write_exit(path: str, code: int) -> None:
    temporary = f"{path}.tmp"
    Path(temporary).write_text(str(code))
    os.replace(temporary, path)  # the parent never reads half a number


def serve(extra: bool) -> int:
    decided = _preload()
    out = sys.stdout.buffer

    def reply(message: dict) -> None:
        out.write((json.dumps(message) + "\n").encode())
        out.flush()

    # transformers' models import Triton: preloaded only where the policy was decided here. Asked for at the start
    # (the lessons to grade are known to build them), they are loaded before the first child, which would otherwise
    # import them itself; asked for later, they load one module whenever no request waits.
    if extra and decided:
        for name in EXTRA_PRELOAD:
            _import(name)
    reply({"ready": True, "policy_decided": decided})
    extras: list[str] = list(IDLE_PRELOAD) if extra and decided else []
    children: dict[int, str] = {}  # pid -> exit file
    buffer, stdin = b"", sys.stdin.fileno()
    while True:
        readable, _, _ = select.select([stdin], [], [], 0 if extras else 0.05)
        if not readable and extras:
            _import(extras.pop(0))
        if readable:
            chunk = os.read(stdin, 65536)
            if not chunk:  # the parent has gone: stop what is left and leave
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                if request.get("preload"):  # several lessons are coming after all
                    extras = list(EXTRA_PRELOAD + IDLE_PRELOAD) if decided and not extra else []
                    extra = True
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(request, decided)
                children[pid] = request["exit_file"]
                reply({"pid": pid})
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            if pid in children:
                _write_exit(children.pop(pid), os.waitstatus_to_exitcode(status))
    for pid in children:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    return 0


# ----------------------------------------------------------------------------- the parent's side


class ZygoteGone(Exception):
    """The zygote could not be started or stopped answering; the caller grades in a fresh interpreter instead."""


class Zygote:
    """The parent's handle on one zygote process."""

    def __init__(self, *, extra: bool):
        self.extra = extra
        self.fingerprint = fingerprint()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llm_algo.worker.zygote", *(["--extra"] if extra else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.lock = threading.Lock()
        self.ready = False

    def _read(self, timeout: float) -> dict:
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not readable:
            raise ZygoteGone(f"the zygote did not answer within {timeout:g} s")
        line = self.process.stdout.readline()
        if not line:
            raise ZygoteGone(f"the zygote exited (code {self.process.poll()})")
        return json.loads(line)

    def spawn(self, argv: list[str], *, log: Path, exit_file: Path) -> int:
        """Fork a child that runs `llm_algo.worker.grader.main(*argv)`; returns its pid."""
        request = {
            "argv": argv,
            "log": str(log),
            "exit_file": str(exit_file),
            "env": dict(os.environ),
            "cwd": os.getcwd(),
        }
        with self.lock:
            try:
                if not self.ready:
                    self._read(READY_SECONDS)  # {"ready": true}: the preloads are done
                    self.ready = True
                self.process.stdin.write((json.dumps(request) + "\n").encode())
                self.process.stdin.flush()
                return int(self._read(READY_SECONDS)["pid"])
            except (OSError, ValueError, KeyError) as exc:
                raise ZygoteGone(f"the zygote stopped answering ({exc})") from None

    def preload_extra(self) -> None:
        """Ask a zygote started without --extra to preload the extra modules too (in its idle time)."""
        if self.extra:
            return
        with self.lock, contextlib.suppress(OSError):
            self.process.stdin.write(b'{"preload": true}\n')
            self.process.stdin.flush()
            self.extra = True

    def close(self) -> None:
        """End of input: the zygote stops its children and leaves; one still preloading (or never used) is stopped
        at once."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=1 if self.ready else 0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ForkedChild:
    """A child forked by the zygote, as the watchdog sees it: poll() for its exit code, kill() to stop it."""

    def __init__(self, pid: int, exit_file: Path):
        self.pid, self.exit_file = pid, exit_file

    def poll(self) -> int | None:
        try:
            return int(self.exit_file.read_text())
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # not yet in a session of its own, or already gone
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)


def fingerprint() -> tuple:
    return (sys.executable, *(os.environ.get(name) for name in FINGERPRINT_ENV))


if __name__ == "__main__":
    sys.exit(serve(extra="--extra" in sys.argv[1:]))
