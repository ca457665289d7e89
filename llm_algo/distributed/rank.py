"""One rank of a grader's world: a fresh interpreter that joins the process group, then runs tasks until told to stop.

Started by `llm_algo.distributed.world.World` as `python -c "from llm_algo.distributed.rank import main; main()"`
(so that no code of ours runs as `__main__`, which is how a notebook's own functions are recognised). It reads its
place from the environment, connects back to the parent over a local authenticated socket, and then loops:

    parent -> rank: cloudpickle of Task(fn, args, kwargs, forbid, instead, lines)
    rank -> parent: cloudpickle of ("ok", value) | ("error", type name, message, traceback text, forbidden use)

Values come back with every tensor moved to the CPU. A watchdog thread ends the process as soon as the parent is
gone (killed by a time limit, a crash), so no rank outlives its grader even when the learner's code hangs in a
`recv` that nobody will ever answer.
"""

from __future__ import annotations

import datetime
import functools
import importlib
import linecache
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

PRELOAD_ENV = "LLM_ALGO_WORLD_PRELOAD"  # modules each rank imports before it reports ready
ENV = "LLM_ALGO_WORLD"  # "host:port:authkey-hex:rank:world_size:backend:store_port:deadline_s:parent_pid"


class ForbiddenCall(Exception):
    """Raised into the learner's code when it calls what the exercise asks it to build."""


@dataclass
class Task:
    fn: object
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    forbid: tuple[
        str, ...
    ] = ()  # dotted names: "torch.distributed.all_reduce", "torch.nn.parallel.DistributedDataParallel"
    instead: str = ""
    lines: dict = field(default_factory=dict)  # linecache entries of the notebook cells, for readable tracebacks
    places: list = field(default_factory=list)  # (function name, first line, last line, file name) of their code


def is_learner_frame(frame) -> bool:
    """The learner's code: a notebook cell run by the grader (module `__lesson_*`) or a live kernel (`__main__`)."""
    name = frame.f_globals.get("__name__", "")
    return name == "__main__" or name.startswith("__lesson_")


def _is_library_frame(frame) -> bool:
    filename = frame.f_code.co_filename
    return "site-packages" in filename or filename.startswith("<frozen") or "/lib/python3" in filename


def _caller_is_learner() -> bool:
    """Walk out from the forbidden call to the first frame that is not a library's: is it the learner's?"""
    frame = sys._getframe(2)
    while frame is not None:
        if is_learner_frame(frame):
            return True
        if not _is_library_frame(frame):
            return False  # the checks' own code (a reference) or ours
        frame = frame.f_back
    return False


def _resolve(dotted: str):
    """("torch.distributed", "all_reduce") for "torch.distributed.all_reduce": the longest importable prefix."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:-1]:
            owner = getattr(owner, attr)
        return owner, parts[-1]
    raise ValueError(f"cannot resolve {dotted!r}")


class Forbid:
    """Patch the forbidden names for one task; a call from the learner's code raises and is recorded."""

    def __init__(self, names: tuple[str, ...], instead: str):
        self.names, self.instead, self.used = names, instead, []
        self._patched: list[tuple[object, str, object]] = []

    def __enter__(self) -> Forbid:
        for dotted in self.names:
            owner, attr = _resolve(dotted)
            original = getattr(owner, attr, None)
            if original is None:  # not in this torch version (collectives were renamed in 2.13): nothing to forbid
                continue
            self._patched.append((owner, attr, original))
            setattr(owner, attr, self._guard(dotted, original))
        return self

    def __exit__(self, *exc) -> None:
        for owner, attr, original in reversed(self._patched):
            setattr(owner, attr, original)
        self._patched.clear()

    def _guard(self, dotted: str, original):
        short = dotted.replace("torch.distributed.", "dist.").replace("torch.nn.parallel.", "")
        used, instead = self.used, self.instead

        def refuse():
            used.append(short)
            raise ForbiddenCall(f"{short} is what this exercise asks you to build{': ' + instead if instead else ''}")

        if isinstance(original, type):

            class Guarded(original):  # a subclass keeps isinstance() working for the checks' references
                def __new__(cls, *args, **kwargs):
                    if _caller_is_learner():
                        refuse()
                    return super().__new__(cls)

            Guarded.__name__ = Guarded.__qualname__ = original.__name__
            return Guarded

        @functools.wraps(original)
        def guarded(*args, **kwargs):
            if _caller_is_learner():
                refuse()
            return original(*args, **kwargs)

        return guarded


def _to_cpu(value):
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda v: v.detach().cpu() if isinstance(v, torch.Tensor) else v, value)


def _format(error: BaseException, places: list) -> str:
    """The traceback, with the notebook cell and line where cloudpickle left only `<dynamic-code>`."""
    walked = list(traceback.walk_tb(error.__traceback__.tb_next))[-8:]
    frames = traceback.extract_tb(error.__traceback__.tb_next)[-8:]
    for i, (frame, (live, _)) in enumerate(zip(frames, walked, strict=True)):
        if frame.filename != "<dynamic-code>":
            continue
        first_line = live.f_code.co_firstlineno  # two cells may define a `forward` over overlapping lines
        found = [f for name, first, last, f in places if name == frame.name and first == first_line]
        if len(set(found)) != 1:
            found = [f for name, first, last, f in places if name == frame.name and first <= frame.lineno <= last]
        if len(set(found)) == 1:
            line = linecache.getline(found[0], frame.lineno).strip()
            frames[i] = traceback.FrameSummary(found[0], frame.lineno, frame.name, line=line)
    head = "Traceback (most recent call last):\n"
    return head + "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(error))


def _raised_in_learner_code(error: BaseException) -> bool:
    """The skeleton's `raise NotImplementedError`: the innermost frame is a notebook cell's."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and is_learner_frame(tb.tb_frame)


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(70)
        time.sleep(0.2)


def _run(task: Task):
    """The task's reply, with the options the learner's functions were called with appended
    (llm_algo.check.calls: the grading process adds them to its record)."""
    from ..check.calls import take_options

    linecache.cache.update(task.lines)
    take_options()  # whatever an earlier task left
    with Forbid(task.forbid, task.instead) as forbid:
        try:
            value = task.fn(*task.args, **task.kwargs)
            return ("ok", _to_cpu(value), take_options())
        except BaseException as error:  # noqa: BLE001 (reported to the parent, which fails the check)
            text = _format(error, task.places)
            skeleton = isinstance(error, NotImplementedError) and _raised_in_learner_code(error)
            error_reply = (type(error).__name__, str(error)[:600], text[-3000:], list(forbid.used), skeleton)
            return ("error", *error_reply, take_options())


def main() -> None:
    host, port, key, rank, size, backend, store_port, deadline, parent = os.environ[ENV].split(":")
    rank, size, parent = int(rank), int(size), int(parent)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()

    from multiprocessing.connection import Client

    import cloudpickle
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    for module in filter(None, os.environ.get(PRELOAD_ENV, "").split(",")):
        importlib.import_module(module)  # before the first task's deadline starts (torch._dynamo: seconds)
    conn = Client((host, int(port)), authkey=bytes.fromhex(key))
    conn.send_bytes(cloudpickle.dumps(("hello", rank)))
    if backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    store = dist.TCPStore(host, int(store_port), size, is_master=False, timeout=datetime.timedelta(seconds=60))
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=size, timeout=datetime.timedelta(seconds=float(deadline))
    )
    conn.send_bytes(cloudpickle.dumps(("ready", rank)))
    try:
        while True:
            try:
                message = conn.recv_bytes()
            except (EOFError, OSError):
                break
            task = cloudpickle.loads(message)
            if task is None:
                break
            reply = _run(task)
            try:
                payload = cloudpickle.dumps(reply)
            except Exception as error:  # noqa: BLE001 (an unpicklable return value)
                payload = cloudpickle.dumps(
                    ("error", "TypeError", f"cannot send the result back: {error}", "", [], False, {})
                )
            conn.send_bytes(payload)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        os._exit(0)  # no interpreter teardown: gloo's threads and the store are gone with the process
