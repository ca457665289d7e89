"""Real multi-process worlds for checks: start N ranks, run a function in each, collect every rank's outcome.

    results = run_ranks(train_steps, 2, args=(ex.DDP, batch), forbid=("torch.distributed.all_reduce",))
    values = expect_ranks_ok(results, input="2 ranks, 5 steps", hint="average the gradients")

Each rank is a fresh interpreter (`llm_algo.distributed.rank`), not a fork: CUDA cannot be used in a forked child,
and a fresh process is what `torchrun` gives a real job. The function and its arguments travel with cloudpickle,
which sends the notebook's own functions and classes by value (they live in a module no other process can import).
A world is started once per grading process and size, and reused by the next checks while it stays healthy; any
error, hang or death stops it, and the next call starts a new one.

The guarantees a check relies on:
- a deadline per call: a rank still running after it (a `recv` nobody answers) is reported as hung, then killed;
- once one rank has failed, the others get `GRACE_S` to finish before the world is stopped (they are usually
  blocked in a collective with the failed rank);
- every rank's traceback comes back, with the notebook cell's lines;
- no rank outlives its parent: each watches its parent and exits when it is gone, and `close_worlds()` (called when
  a lesson's grading ends and at exit) kills what is left;
- the backend is gloo on CPUs; NCCL when CUDA is asked for and there is one GPU per rank.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import subprocess
import sys
import threading
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Listener, wait

from ..check.calls import merge_options
from ..check.failure import CheckFailed, NotAttempted
from .rank import ENV, PRELOAD_ENV, Task

DEADLINE_S = 30.0  # one call, all ranks
START_S = 60.0  # start-up: each rank imports torch (about 2 s of CPU each on a laptop core)
GRACE_S = 3.0  # after the first failure, how long the others may take to finish


@dataclass
class RankResult:
    rank: int
    status: str  # "ok", "error" (raised), "hung" (past the deadline), "died" (the process ended)
    value: object = None
    error_type: str = ""
    message: str = ""
    traceback: str = ""
    forbidden: list[str] = field(default_factory=list)
    exitcode: int | None = None
    not_attempted: bool = False  # the learner's skeleton raised NotImplementedError in this rank

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        if self.status == "ok":
            return f"rank {self.rank}: finished"
        if self.status == "error":
            return f"rank {self.rank} raised {self.error_type}: {self.message}"
        if self.status == "hung":
            return f"rank {self.rank} was still running at the deadline (waiting for a message nobody sends?)"
        return f"rank {self.rank} died (exit code {self.exitcode})"


class WorldStartError(RuntimeError):
    pass


def _backend(device: str, size: int) -> str:
    if device == "cuda":
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() >= size:
            return "nccl"
    return "gloo"


def _register_by_value() -> None:
    """The notebook's module and the checks modules cannot be imported by a rank: send their code by value."""
    import cloudpickle

    for name, module in list(sys.modules.items()):
        if name.startswith(("__lesson_", "llm_algo_checks.", "llm_algo_mutants.")) and module is not None:
            with contextlib.suppress(ValueError):
                cloudpickle.register_pickle_by_value(module)


def _code_places() -> list[tuple[str, int, int, str]]:
    """Where each function of the notebook and checks modules is defined (cloudpickle drops file names)."""
    places, seen = [], set()

    def visit(code: types.CodeType) -> None:
        if id(code) in seen:
            return
        seen.add(id(code))
        lines = [line for _, _, line in code.co_lines() if line is not None] or [code.co_firstlineno]
        places.append((code.co_name, code.co_firstlineno, max(lines), code.co_filename))
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                visit(const)

    for name, module in list(sys.modules.items()):
        if not (name == "__main__" or name.startswith(("__lesson_", "llm_algo_checks."))) or module is None:
            continue
        for value in list(vars(module).values()):
            members = vars(value).values() if isinstance(value, type) else (value,)
            for member in members:
                member = getattr(member, "__func__", member)
                code = getattr(member, "__code__", None)
                if isinstance(code, types.CodeType):
                    visit(code)
    return places


def _notebook_lines() -> dict:
    import linecache

    return {k: v for k, v in linecache.cache.items() if isinstance(k, str) and k.startswith("<notebook")}


class World:
    """`size` rank processes in one process group; `run()` calls a function in all of them."""

    def __init__(self, size: int, *, device: str = "cpu", preload: tuple[str, ...] = (), start_s: float = START_S):
        if size < 1:
            raise ValueError(f"a world needs at least one rank, not {size}")
        self.size, self.device, self.backend = size, device, _backend(device, size)
        self.preload = tuple(preload)
        self.processes: list[subprocess.Popen] = []
        self.conns: dict[int, Connection] = {}
        self.healthy = False
        self._start(start_s)

    # -- lifetime
    def _start(self, start_s: float) -> None:
        import torch.distributed as dist

        key = secrets.token_bytes(16)
        self._listener = Listener(("127.0.0.1", 0), authkey=key)
        self._store = dist.TCPStore("127.0.0.1", 0, self.size, is_master=True, wait_for_workers=False)
        host, port = self._listener.address
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        env.setdefault("OMP_NUM_THREADS", "1")
        env[PRELOAD_ENV] = ",".join(self.preload)
        deadline = max(DEADLINE_S, 1.0)
        for rank in range(self.size):
            env[ENV] = (
                f"{host}:{port}:{key.hex()}:{rank}:{self.size}:{self.backend}:{self._store.port}:{deadline}:{os.getpid()}"
            )
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, "-c", "from llm_algo.distributed.rank import main; main()"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # a Ctrl-C in the terminal reaches the grader, which stops the world
                )
            )
        _LIVE.add(self)
        try:
            self._accept(time.monotonic() + start_s)
        except BaseException:
            self.close()
            raise
        self.healthy = True

    def _accept(self, deadline: float) -> None:
        accepted: list[Connection] = []

        def accept_all():
            try:
                while len(accepted) < self.size:
                    accepted.append(self._listener.accept())
            except OSError:
                pass

        thread = threading.Thread(target=accept_all, daemon=True)
        thread.start()
        while thread.is_alive() and time.monotonic() < deadline:
            dead = [r for r, p in enumerate(self.processes) if p.poll() is not None]
            if dead:
                break
            thread.join(0.05)
        if len(accepted) < self.size:
            self._listener.close()
            raise WorldStartError(self._start_failure("connect back"))
        import cloudpickle

        for conn in accepted:
            _, rank = cloudpickle.loads(conn.recv_bytes())
            self.conns[rank] = conn
        ready = set()
        while len(ready) < self.size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorldStartError(self._start_failure("join the process group"))
            for conn in wait(list(self.conns.values()), timeout=min(left, 0.5)):
                try:
                    _, rank = cloudpickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    raise WorldStartError(self._start_failure("join the process group")) from None
                ready.add(rank)
        self._listener.close()

    def _start_failure(self, step: str) -> str:
        codes = [p.poll() for p in self.processes]
        return (
            f"the {self.size}-rank {self.backend} world did not start: not every rank managed to {step} "
            f"(exit codes {codes}; None = still running)"
        )

    def close(self) -> None:
        self.healthy = False
        for conn in self.conns.values():
            with contextlib.suppress(OSError):
                conn.send_bytes(_stop_payload())
        until = time.monotonic() + 1.0
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, until - time.monotonic()))
        self.kill()

    def kill(self) -> None:
        self.healthy = False
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5.0)
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
        _LIVE.discard(self)

    @property
    def alive(self) -> list[int]:
        return [p.pid for p in self.processes if p.poll() is None]

    # -- work
    def run(
        self,
        fn,
        *,
        args: tuple = (),
        kwargs: dict | None = None,
        rank_args: Sequence[tuple] | None = None,
        forbid: Sequence[str] = (),
        instead: str = "",
        deadline: float = DEADLINE_S,
    ) -> list[RankResult]:
        """Call `fn(*args, *rank_args[rank], **kwargs)` in every rank; one RankResult per rank, in rank order."""
        import cloudpickle

        if not self.healthy:
            raise RuntimeError("this world was stopped; start a new one")
        if rank_args is not None and len(rank_args) != self.size:
            raise ValueError(f"rank_args has {len(rank_args)} entries for {self.size} ranks")
        _register_by_value()
        lines, places = _notebook_lines(), _code_places()
        for rank, conn in self.conns.items():
            extra = tuple(rank_args[rank]) if rank_args is not None else ()
            task = Task(fn, (*args, *extra), dict(kwargs or {}), tuple(forbid), instead, lines, places)
            conn.send_bytes(cloudpickle.dumps(task))
        results: dict[int, RankResult] = {}
        waiting = {conn: rank for rank, conn in self.conns.items()}
        end = time.monotonic() + deadline
        finished = False
        try:
            while waiting:
                left = end - time.monotonic()
                if left <= 0:
                    break
                for conn in wait(list(waiting), timeout=min(left, 0.5)):
                    rank = waiting.pop(conn)
                    results[rank] = self._receive(rank, conn)
                    if not results[rank].ok:
                        end = min(end, time.monotonic() + GRACE_S)
            for rank in waiting.values():
                code = self.processes[rank].poll()
                results[rank] = RankResult(rank, "hung" if code is None else "died", exitcode=code)
            finished = True
        finally:
            if not finished or any(r.status in ("hung", "died") for r in results.values()):
                self.kill()  # also when the grader's own time limit interrupts the wait
            elif any(not r.ok for r in results.values()) and not self._probe():
                self.kill()
        return [results[rank] for rank in range(self.size)]

    def _probe(self) -> bool:
        """After ranks raised (and returned): is the process group still usable? A small all-reduce must work."""
        import cloudpickle

        for conn in self.conns.values():
            conn.send_bytes(cloudpickle.dumps(Task(_probe_sum)))
        end = time.monotonic() + 5.0
        waiting = dict(self.conns)
        while waiting and time.monotonic() < end:
            for conn in wait(list(waiting.values()), timeout=0.5):
                rank = next(r for r, c in waiting.items() if c is conn)
                del waiting[rank]
                reply = self._receive(rank, conn)
                if not reply.ok or reply.value != self.size:
                    return False
        return not waiting

    def _receive(self, rank: int, conn: Connection) -> RankResult:
        import cloudpickle

        try:
            reply = cloudpickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            process = self.processes[rank]
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=1.0)
            return RankResult(rank, "died", exitcode=process.poll())
        if isinstance(reply[-1], dict):
            merge_options(reply[-1])  # the options the learner's functions were called with in that rank
        if reply[0] == "ok":
            return RankResult(rank, "ok", value=reply[1])
        _, error_type, message, text, used, skeleton, _ = reply
        return RankResult(
            rank,
            "error",
            error_type=error_type,
            message=message,
            traceback=text,
            forbidden=used,
            not_attempted=skeleton,
        )


_LIVE: set[World] = set()
_WORLDS: dict[tuple[int, str, tuple[str, ...]], World] = {}


def _probe_sum() -> int:
    import torch
    import torch.distributed as dist

    one = torch.ones(1)
    dist.all_reduce(one)
    return int(one.item())


def _stop_payload() -> bytes:
    import cloudpickle

    return cloudpickle.dumps(None)


def world(size: int, device: str = "cpu", preload: tuple[str, ...] = ()) -> World:
    """The grading process's world of `size` ranks on `device`, started on first use and after a failure. `preload`:
    modules each rank imports before it is ready (`"torch._dynamo"`, which the first `torch.optim` optimizer imports:
    seconds that would otherwise count against a check's deadline)."""
    key = (size, device, tuple(preload))
    current = _WORLDS.get(key)
    if current is None or not current.healthy or len(current.alive) != size:
        if current is not None:
            current.kill()
        current = _WORLDS[key] = World(size, device=device, preload=tuple(preload))
    return current


def run_ranks(fn, size: int, *, device: str = "cpu", preload: tuple[str, ...] = (), **options) -> list[RankResult]:
    """`World.run` in the shared world of this size (see `World.run` for the options)."""
    return world(size, device, preload).run(fn, **options)


def close_worlds() -> None:
    """Stop every world this process started (a lesson's grading ends; the interpreter exits)."""
    for live in list(_LIVE):
        live.close()
    _WORLDS.clear()


atexit.register(close_worlds)


# -- what a check asserts about a call


def attempted(call) -> None:
    """In the grader, before starting ranks: run `call()` (the exercise on input it refuses, or that needs a process
    group); an untouched skeleton's NotImplementedError goes through, so the check reads *not attempted* without
    starting a world; any other exception (the exercise's refusal, no process group here) is left to the ranks."""
    try:
        call()
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001 (a refusal, or no process group in the grader: the ranks will tell)
        pass


def expect_ranks_ok(results: list[RankResult], *, input: str, hint: str = "") -> list:
    """Every rank finished without error and used nothing forbidden: their return values, in rank order. A skeleton
    that still raises NotImplementedError in a rank makes the check *not attempted*, as in one process."""
    skeleton = next((r for r in results if r.not_attempted), None)
    if skeleton is not None:
        raise NotAttempted(f"rank {skeleton.rank}: {skeleton.message or 'NotImplementedError'}")
    for result in results:
        if result.forbidden:
            raise CheckFailed(
                f"rank {result.rank} called {', '.join(sorted(set(result.forbidden)))}, which this exercise forbids",
                input=input,
                expected="the collective built from your own code",
                got=result.message,
                hint=hint,
            )
    failed = [r for r in results if not r.ok]
    if failed:
        first = next((r for r in failed if r.status == "error"), failed[0])
        raise CheckFailed(
            "not every rank finished: " + "; ".join(r.describe() for r in failed),
            input=input,
            expected=f"all {len(results)} ranks return within the deadline",
            got=_last_frames(first.traceback) or first.describe(),
            hint=hint,
        )
    return [r.value for r in results]


def expect_ranks_refuse(
    results: list[RankResult], errors: tuple[type[BaseException], ...] = (ValueError,), *, input: str, hint: str = ""
) -> None:
    """Bad input: every rank raised one of `errors` (a clear error, within the deadline), none hung. A skeleton that
    still raises NotImplementedError makes the check *not attempted*, as in expect_ranks_ok."""
    skeleton = next((r for r in results if r.not_attempted), None)
    if skeleton is not None:
        raise NotAttempted(f"rank {skeleton.rank}: {skeleton.message or 'NotImplementedError'}")
    names = {e.__name__ for e in errors}
    wrong = [r for r in results if not (r.status == "error" and r.error_type in names)]
    if wrong:
        raise CheckFailed(
            "bad input was not refused on every rank",
            input=input,
            expected=f"every rank raises {' or '.join(sorted(names))} before communicating",
            got="; ".join(r.describe() for r in wrong),
            hint=hint,
        )


def _last_frames(text: str, keep: int = 8) -> str:
    lines = [line for line in text.rstrip().splitlines() if line.strip()]
    return "\n".join(lines[-keep:])
