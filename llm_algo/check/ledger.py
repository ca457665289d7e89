"""Measured, never self-reported: ledgers that watch, while the learner's code runs, which tensors it keeps alive.

A check never trusts a figure the learner's code reports about itself (a peak of activations, bytes gathered). It
runs the code under a ledger and reads the ledger:

    with SavedTensorLedger(exclude=(stage, microbatches, targets)) as ledger:
        result = ex.run_pipeline_stage(stage, ops, microbatches, targets, ...)
    ledger.peak      # the most tensors autograd saved (and that were still alive) at once
    ledger.alive()   # how many are alive now

- `LiveTensors` holds weak references to tensors: how many (and how many bytes) are alive now, and the peak, sampled
  each time one is added. A tensor is alive while anything references it: the autograd graph that saved it, or the
  learner's own lists and dicts (PyTorch keeps a tensor's Python object as long as its C++ tensor lives, so the weak
  reference dies exactly when the tensor does).
- `SavedTensorLedger` puts every tensor that autograd saves for backward (`torch.autograd.graph.saved_tensors_hooks`)
  into a `LiveTensors`, except those sharing storage with the tensors named in `exclude` (parameters, which linear
  layers save as transposed views, and the caller's own inputs, which stay alive whatever the learner does). So its
  count rises with each forward and falls when a backward has run *and* the learner has dropped its references:
  code that keeps every activation until the end shows m micro-batches' worth, whatever peak it reports.
- `CommLedger` (a `TorchDispatchMode`) sees every c10d operation of a rank: it counts them by kind, and keeps the
  all-gather outputs in a `LiveTensors` to measure the gathered bytes alive at each collective (p02.fsdp).

All of them work inside a rank of `llm_algo.distributed.run_ranks`: they are plain context managers of that process.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["CommLedger", "LiveTensors", "SavedTensorLedger", "tensors_in"]


def tensors_in(value) -> Iterator[torch.Tensor]:
    """Every tensor in `value`: a tensor, an nn.Module's parameters and buffers, or lists, tuples, dicts of them."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, torch.nn.Module):
        yield from value.parameters()
        yield from value.buffers()
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)


def _storage_key(tensor: torch.Tensor) -> int | None:
    try:
        return tensor.untyped_storage().data_ptr() or None
    except (RuntimeError, NotImplementedError):  # sparse or meta tensors have no plain storage
        return None


class LiveTensors:
    """Weak references to tensors: how many are alive (`alive()`), their bytes (`alive_bytes()`), how many of the
    groups they were added under still have one alive (`alive_groups()`), and the most of each at any `sample()`
    (`peak`, `peak_bytes`, `peak_groups`; `add` samples). A tensor added twice counts once, in its first group."""

    def __init__(self):
        self._refs: dict[int, tuple[tuple[weakref.ref, ...], int, object]] = {}  # serial number -> entry
        self._serial_of: dict[int, int] = {}  # id of a tracked tensor -> its serial number (check the ref: ids recur)
        self.peak = 0
        self.peak_bytes = 0
        self.peak_groups = 0
        self.added = 0

    def _prune(self) -> None:
        self._refs = {key: entry for key, entry in self._refs.items() if any(ref() is not None for ref in entry[0])}
        if len(self._serial_of) > 2 * len(self._refs) + 64:
            self._serial_of = {i: serial for i, serial in self._serial_of.items() if serial in self._refs}

    def add(
        self, tensor: torch.Tensor, size: int | None = None, group: object = None, also=None, sample: bool = True
    ) -> None:
        """Track `tensor` (`size` bytes, its own by default) in `group`; with `also` (another tensor, e.g. the
        original of an alias), the entry stays alive while either is."""
        key = tensor if also is None else also  # an alias of a tensor already tracked counts once
        known = self._refs.get(self._serial_of.get(id(key), -1))
        if known is None or known[0][-1]() is not key:  # new, or a dead tensor's id reused
            nbytes = tensor.numel() * tensor.element_size() if size is None else size
            refs = (weakref.ref(tensor),) if also is None else (weakref.ref(tensor), weakref.ref(also))
            self._refs[self.added] = (refs, nbytes, group)
            self._serial_of[id(key)] = self.added
            self.added += 1
        if sample:
            self.sample()

    def sample(self) -> None:
        """Update the peaks with what is alive now."""
        self._prune()
        self.peak = max(self.peak, len(self._refs))
        self.peak_bytes = max(self.peak_bytes, self.alive_bytes())
        self.peak_groups = max(self.peak_groups, self.alive_groups())

    def alive(self) -> int:
        self._prune()
        return len(self._refs)

    def alive_bytes(self) -> int:
        self._prune()
        return sum(size for _, size, _ in self._refs.values())

    def alive_groups(self) -> int:
        self._prune()
        return len({group for _, _, group in self._refs.values()})


class SavedTensorLedger:
    """While active, every tensor autograd saves for backward enters a `LiveTensors` (see the module docstring);
    tensors sharing storage with `exclude` (modules, tensors, lists of them) and empty tensors are left out.

    - `peak` / `peak_bytes`: the most saved tensors (bytes) alive at once, sampled whenever autograd saves or uses
      one; `alive()`: how many are alive now; `saved`: how many distinct tensors were saved in all.
    - `peak_forwards`, with `forwards_of=module`: the tensors saved from one call of `module` until the next form
      one group (a micro-batch's activations, the loss after it included); `peak_forwards` is the most groups
      alive at once, sampled whenever a backward uses a saved tensor. At that moment code that frees what it
      should has just taken back the tensors of the micro-batch it differentiates (its local variables no longer
      hold an older one's), and the most micro-batches in flight always come right before a backward, so a correct
      schedule shows exactly its textbook peak and code that keeps every activation shows all of them.
    - `forwards`: how many times `module` was called while the ledger was active.

    Autograd gets back a detached alias of each saved tensor (see `_pack`), so a double backward
    (`create_graph=True`) through the saved tensors is not supported under the ledger.
    """

    def __init__(self, exclude=(), forwards_of: torch.nn.Module | None = None):
        self.live = LiveTensors()
        self._excluded = {key for t in tensors_in(exclude) if (key := _storage_key(t)) is not None}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._module = forwards_of
        self._handle = None
        self.forwards = 0
        self.peak_forwards = 0

    def _new_forward(self, *_) -> None:
        self.forwards += 1

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        # The graph keeps an alias, not the tensor itself: a saved output kept by its own graph would be a reference
        # cycle through C++ that the garbage collector cannot break (a graph dropped without backward would leak).
        # The entry stays alive while the graph holds the alias or anything else holds the tensor.
        alias = tensor.detach()
        if tensor.numel() and _storage_key(tensor) not in self._excluded:
            self.live.add(alias, size=tensor.numel() * tensor.element_size(), group=self.forwards, also=tensor)
        return alias

    def _unpack(self, tensor: torch.Tensor) -> torch.Tensor:
        self.live.sample()
        self.peak_forwards = max(self.peak_forwards, self.live.alive_groups())
        return tensor

    def __enter__(self) -> SavedTensorLedger:
        if self._module is not None:
            self._handle = self._module.register_forward_pre_hook(self._new_forward)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    @property
    def peak(self) -> int:
        return self.live.peak

    @property
    def peak_bytes(self) -> int:
        return self.live.peak_bytes

    @property
    def saved(self) -> int:
        return self.live.added

    def alive(self) -> int:
        return self.live.alive()


class CommLedger(TorchDispatchMode):
    """Every c10d operation in this rank: counts by kind, the dtype and size of each all-gather output and
    reduce-scatter input, and at each collective the bytes of all-gather outputs still alive (weak references)."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, int, str]] = []
        self.gathered = LiveTensors()

    @property
    def peak(self) -> int:
        """The most bytes of all-gather outputs alive at one collective."""
        return self.gathered.peak_bytes

    @staticmethod
    def kind(name: str) -> str:
        for kind in ("allgather", "reduce_scatter", "allreduce", "gather", "broadcast", "scatter"):
            if kind in name:
                return kind
        return name

    def alive(self) -> int:
        """Bytes of all-gather outputs alive now."""
        return self.gathered.alive_bytes()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace == "c10d":
            kind = self.kind(func.__name__.split(".")[0])
            touched = args[1] if kind == "reduce_scatter" else args[0]
            tensors = list(tensors_in(touched))
            if kind in ("allgather", "gather"):
                for t in tensors:
                    self.gathered.add(t)
            self.gathered.sample()
            dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in tensors})
            self.events.append((kind, sum(t.numel() for t in tensors), ",".join(dtypes)))
        return out

    def count(self, kind: str) -> int:
        return sum(1 for k, _, _ in self.events if k == kind)
