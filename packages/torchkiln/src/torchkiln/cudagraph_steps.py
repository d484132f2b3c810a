"""CUDA graphs under mode="reduce-overhead" for a training step's forward and backward graphs,
and for inference graphs that write their inputs.

``cudagraphs.py`` records a whole compiled call, which cannot hold a training graph: the
autograd.Function of aot-partition's runtime sits between its forward and its backward. Nor an
inference graph that writes its inputs (a cache, a running statistic): the runtime writes the
caller's tensors, which a replay of a whole call would not see. Here one compiled ATen graph
(loop-ir's ``CompiledGraph``, called inside the runtime) is wrapped, as a ``StepGraph``:

- **Observed calls.** The first ``OBSERVED_CALLS`` calls run the compiled graph as it is, and note
  each input's address and object. The next call records the graph (one warm-up on a side
  stream, the capture, then a replay for the call itself).
- **Borrowed and owned inputs.** An input the replay reads where it lies is *borrowed*: one that
  was the same live object at the same address in every observed call (parameters, buffers,
  folded constants, a cache), or a tensor another step graph returned without copying (a
  forward's saved activations, which its backward reads). Any other input is *owned*: copied
  into a static buffer before each replay (the batch, the incoming gradients). A borrowed input
  the graph writes in place is written by the replay, once a call: the warm-up writes a copy.
  A borrowed input at another address on a later call cannot be copied into (it is not ours):
  that call runs the graph without a replay. For a forward or inference graph (a parameter
  given new memory, another tensor where one was passed each time) the graph is recorded again
  after ``OBSERVED_CALLS`` more calls; a backward reading the activations of a forward that
  recorded again records again at once (at most ``MAX_RECORDINGS`` recordings, then never
  again); the activations of a forward that ran without its replay concern that call alone.
- **Outputs.** An output that is an input itself goes out as the caller's tensor, as the graph
  returned it (unless the graph writes that input into its copy), and a saved view of a copied
  input as that view of the caller's tensor: autograd then sees a write to it after the
  forward, and the backward refuses as eager's does. The other leading outputs (user outputs, new values of mutated inputs,
  the backward's gradients) are cloned, as in ``cudagraphs.py``: the caller may keep them. The
  forward's saved activations (its last ``saved`` outputs) go out without a copy, as new tensors
  on the static memory; the backward borrows them.
- **Liveness.** Before a forward replays, each storage it would write that it handed out is
  checked (``torch._C._storage_Use_Count``): if one is still held (a backward not yet run, a
  graph retained, a second forward before the first's backward), the replay would overwrite
  values in use, so this call runs without a replay, on fresh memory.

- **CPU scalars.** A 0-dim CPU tensor beside CUDA inputs reaches a kernel as the value it had
  when the graph was recorded: a call with another value runs without the replay. One the graph
  never reads (an attention's random state without dropout) is not checked.

A call that runs without a replay is correct and slower; each is counted by its reason
(``StepGraph.ungraphed``) and logged at INFO the first time. Recording is refused (the graph is
returned unchanged, with the reason) when inputs are not all on one CUDA device (0-dim CPU
tensors aside) or the shapes are symbolic.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_leaves
from torchkiln_loop_ir.backend import BufferRef, ExternCall, Free, KernelSpec, View

log = logging.getLogger("torchkiln.cudagraphs")

#: calls run as they are (their inputs' addresses noted) before the graph is recorded
OBSERVED_CALLS = 2
#: recordings of one graph, at most (the first and the re-recordings after an input moved)
MAX_RECORDINGS = 3

#: record step graphs on CUDA (off: training graphs and inference graphs that write their
#: inputs run without CUDA graphs there, "skipped"). Session 50 turned it off after an H100 run
#: found parameters off eager's; session 51 found both findings to be rounding noise in
#: gradients that are zero in exact arithmetic, compared too tightly, and the replays matching
#: the default mode on an H100 (tests/test_cudagraph_steps.py, benchmarks/step_graphs_models.py).
#: The CPU stand-in (``RecomputingRecorder``) records whatever this says.
CUDA_STEP_GRAPHS = True

#: data pointers of the storages step graphs hand out without a copy (their saved activations):
#: an input there is borrowed, not copied, by the graph that reads it (the backward)
_HANDED_OUT: dict[int, int] = {}


class _CudaRecorder:
    """How a ``StepGraph`` warms up, captures and replays on CUDA (tests use a stand-in)."""

    def supports(self, device: torch.device) -> bool:
        return device.type == "cuda"

    def warm_up(self, run: Callable[..., Any], inputs: list[Any]) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # its allocations stay out of the recorded pool
            run(*inputs)
        torch.cuda.current_stream().wait_stream(stream)

    def capture(self, run: Callable[..., Any], inputs: list[Any]) -> tuple[Any, Any]:
        """``(graph, outputs)``: ``run(*inputs)`` recorded; its outputs are the static ones."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = run(*inputs)
        return graph, outputs

    def replay(self, graph: Any, inputs: list[Any]) -> None:
        """Replay ``graph``; ``inputs`` are the tensors at the addresses it reads (a stand-in
        that recomputes needs them; a CUDA graph has the addresses)."""
        graph.replay()


class RecomputingRecorder:
    """A stand-in for CUDA graphs where there are none, for tests on the CPU (install it as
    ``RECORDER``): a capture runs the graph once for its outputs, the static ones, and puts back
    what it wrote of its inputs (a capture runs nothing); a replay runs it again on the tensors
    at the recorded addresses and copies the results into those outputs.
    What it checks is the bookkeeping around a recording, not CUDA's. ``captures`` and
    ``replays`` count."""

    def __init__(self) -> None:
        self.captures = 0
        self.replays = 0

    def supports(self, device: torch.device) -> bool:
        return True

    def warm_up(self, run: Callable[..., Any], inputs: list[Any]) -> None:
        run(*inputs)

    def capture(self, run: Callable[..., Any], inputs: list[Any]) -> tuple[Any, Any]:
        """Run the graph for its static outputs. A capture computes nothing, so the inputs it
        wrote in place get their values back."""
        self.captures += 1
        before = [(t, t.clone()) for t in inputs if isinstance(t, torch.Tensor)]
        outputs = run(*inputs)
        with torch.no_grad():
            for tensor, value in before:  # only what changed (a copy bumps the version)
                if not ((tensor == value) | (tensor.isnan() & value.isnan())).all():
                    tensor.copy_(value)
        return (run, list(outputs)), outputs

    def replay(self, graph: Any, inputs: list[Any]) -> None:
        run, outputs = graph
        self.replays += 1
        for static, new in zip(outputs, run(*inputs), strict=True):
            if isinstance(static, torch.Tensor) and static is not new and static.numel():
                # an expanded output: its memory once, not each element it repeats
                for dim in range(static.dim()):
                    if static.stride(dim) == 0:
                        static, new = static.narrow(dim, 0, 1), new.narrow(dim, 0, 1)
                static.copy_(self.result(new))

    def result(self, value: torch.Tensor) -> torch.Tensor:
        """What a replay writes for a result ``value`` (tests make it wrong on purpose)."""
        return value


RECORDER: Any = _CudaRecorder()


def _use_count(storage: Any) -> int:
    """How many tensors (and storage objects) hold ``storage`` (an ``UntypedStorage``)."""
    return torch._C._storage_Use_Count(storage._cdata)


def _host_scalar(value: Any) -> bool:
    """A 0-dim tensor on the CPU (in a graph on another device, a kernel reads its value when
    it launches: a recording holds the value it had then)."""
    return isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dim() == 0


def _host_scalars(args: Sequence[Any]) -> set[int]:
    """Positions of the 0-dim CPU tensors among ``args`` when the others lie on a GPU."""
    if not any(isinstance(v, torch.Tensor) and v.device.type != "cpu" for v in args):
        return set()
    return {i for i, v in enumerate(args) if _host_scalar(v)}


def skip_reason(example_inputs: Sequence[Any]) -> str | None:
    """Why a training graph with these (fake) inputs cannot be recorded, or None. Scalars on
    the CPU beside tensors on one device are allowed (see ``StepGraph``)."""
    tensors = [v for v in example_inputs if isinstance(v, torch.Tensor)]
    placed = [t for t in tensors if not _host_scalar(t)] or tensors
    devices = {t.device for t in placed}
    if not placed or len(devices) != 1 or not RECORDER.supports(next(iter(devices))):
        odd = [
            f"input {i} on {v.device} of shape {tuple(v.shape)}"
            for i, v in enumerate(example_inputs)
            if isinstance(v, torch.Tensor) and not _host_scalar(v) and v.device.type != "cuda"
        ]
        return "inputs are not all on one CUDA device" + (f" ({odd[0]})" if odd else "")
    if isinstance(RECORDER, _CudaRecorder) and not CUDA_STEP_GRAPHS:
        return "step graphs are off on CUDA (cudagraph_steps.CUDA_STEP_GRAPHS)"
    if any(isinstance(v, torch.SymInt) for v in example_inputs) or any(
        isinstance(s, torch.SymInt) for t in tensors for s in (*t.shape, *t.stride())
    ):
        return "shapes are dynamic"
    return None


def wrap_step_graph(
    compiled: Any, part: str, saved: int, example_inputs: Sequence[Any]
) -> tuple[Any, str]:
    """``(callable, status)``: a compiled graph (``part``: a training "forward", whose last
    ``saved`` outputs go to the backward; its "backward"; an "inference" graph that writes its
    inputs) as a ``StepGraph`` ("on"), or unchanged with the reason ("skipped: ...")."""
    reason = skip_reason(example_inputs)
    if reason is not None:
        log.info("torchkiln: CUDA graphs skipped for a %s graph: %s", part, reason)
        return compiled, f"skipped: {reason}"
    return StepGraph(compiled, part, saved), "on"


def _same(old: tuple[int, Any], new: tuple[int, Any]) -> bool:
    """Two observations of an input: the same live object at the same address. (A batch made
    afresh each call may land at one address, from the caching allocator's same block, but it
    is another object: copied, never borrowed. A weak reference, not ``id``: a dead object's id
    may be a new one's.)"""
    return old[0] == new[0] and old[1]() is not None and old[1]() is new[1]()


def _written_inputs(compiled: Any) -> frozenset[int]:
    """Positions of the inputs the compiled graph writes in place (loop-ir's in_place.py)."""
    scheduled = getattr(compiled, "scheduled", None)
    if scheduled is None:
        return frozenset()
    names = list(scheduled.inputs)
    return frozenset(names.index(old) for old in scheduled.reuse.values() if old in names)


def _unread_inputs(compiled: Any) -> frozenset[int]:
    """Positions of the inputs the compiled graph never reads: none of its kernels loads them,
    no view or output is them, and an extern call gets them only as the random state of an
    attention backward without dropout (flash and memory-efficient attention return their
    ``philox_seed``/``philox_offset`` on the CPU, uninitialised when ``dropout_p`` is 0, and
    their backward reads them only with dropout)."""
    scheduled = getattr(compiled, "scheduled", None)
    if scheduled is None:
        return frozenset()
    read = {o for o in scheduled.outputs if isinstance(o, str)} | set(scheduled.reuse.values())
    for step in scheduled.steps:
        if isinstance(step, KernelSpec):
            read.update(step.inputs)
        elif isinstance(step, View):
            read.add(step.base)
        elif isinstance(step, ExternCall):
            read.update(_extern_reads(step))
        elif not isinstance(step, Free):  # a step of a kind not known here: it may read any
            return frozenset()
    return frozenset(i for i, name in enumerate(scheduled.inputs) if name not in read)


def _extern_reads(step: Any) -> set[str]:
    """The buffers an extern call reads (the random state of an attention backward without
    dropout left out)."""
    schema = getattr(step.op, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    named = [(names[i] if i < len(names) else "", v) for i, v in enumerate(step.args)]
    named += step.kwargs.items()
    dropout = dict(named).get("dropout_p")
    unread = set()
    if isinstance(dropout, int | float) and dropout == 0:
        unread = {"philox_seed", "philox_offset"}
    return {
        leaf.name
        for name, value in named
        if name not in unread
        for leaf in tree_leaves(value)
        if isinstance(leaf, BufferRef)
    }


#: ``StepGraph._blocked``'s answer when the activations it reads were recorded again
_RECORD_AGAIN = "record again"


class StepGraph:
    """One compiled graph (a training forward or backward, or an inference graph that writes its
    inputs) replayed as a CUDA graph, inside aot-partition's runtime (see the module)."""

    def __init__(self, compiled: Any, part: str, saved: int) -> None:
        self.compiled = compiled
        self.part = part
        self.saved = saved if part == "forward" else 0
        self.written = _written_inputs(compiled)
        self.unread = _unread_inputs(compiled)
        self.recordings = 0
        self.replays = 0
        #: calls run without a replay, by reason
        self.ungraphed: Counter[str] = Counter()
        self._observed = 0
        #: per input, while observed: (address, weak reference) of a tensor that was the same
        #: live object at the same address in every observed call, else None
        self._seen: list[tuple[int, Any] | None] = []
        #: per input, once recorded: the address a borrowed one is read at
        self._addresses: list[int | None] = []
        self._graph: Any = None
        self._inputs: list[Any] = []
        self._borrowed: list[bool] = []
        #: input position -> the value a 0-dim CPU input had at the recording, which the CUDA
        #: graph holds (None: the graph never reads that input)
        self._scalars: dict[int, Any] = {}
        #: output position -> the input position it is (the graph returned that input)
        self._passed: dict[int, int] = {}
        #: saved output position -> (copied input position, storage offset from that input's):
        #: a view of the input, handed out as that view of the caller's tensor
        self._viewed: dict[int, tuple[int, int]] = {}
        self._outputs: list[Any] = []
        #: (storage, its use count when nothing handed out holds it) per storage the replay
        #: writes and this graph hands out
        self._handed: list[tuple[Any, int]] = []
        self._finalizer: Any = None
        #: the last call's borrowed input was elsewhere, a backward's input not handed out
        self._missed = False

    # the compiled graph's two calling conventions (CompiledGraph.__call__ / call_boxed)
    def __call__(self, *args: Any) -> list[Any]:
        return self._run(list(args), boxed=False)

    def call_boxed(self, args: list[Any]) -> list[Any]:
        return self._run(args, boxed=True)

    def _as_is(self, args: list[Any], boxed: bool) -> list[Any]:
        if boxed:
            return list(self.compiled.call_boxed(args))
        return list(self.compiled(*args))

    def _without_replay(self, args: list[Any], boxed: bool, reason: str) -> list[Any]:
        if not self.ungraphed[reason]:
            log.info("torchkiln: a %s graph ran without its CUDA graph: %s", self.part, reason)
        self.ungraphed[reason] += 1
        return self._as_is(args, boxed)

    def _run(self, args: list[Any], boxed: bool) -> list[Any]:
        if self._graph is None:
            if self.recordings >= MAX_RECORDINGS:
                return self._without_replay(args, boxed, "recorded too often (inputs moved)")
            if self._observed < OBSERVED_CALLS:
                self._observe(args)
                return self._as_is(args, boxed)
            if not self._try_record(args):
                return self._without_replay(args, boxed, "recording failed")
        blocked = self._blocked(args)
        if blocked is _RECORD_AGAIN:
            # it read a forward's activations, and that forward recorded again: they lie at new
            # addresses, the same on every replay, so no observed call is needed (what was
            # borrowed besides them stays borrowed, what was copied stays copied)
            self._seen = [
                (a.data_ptr(), weakref.ref(a)) if b and isinstance(a, torch.Tensor) else None
                for a, b in zip(args, self._borrowed)
            ]
            if not self._try_record(args):
                return self._without_replay(args, boxed, "recording failed")
            blocked = self._blocked(args)
        if blocked is not None:
            return self._without_replay(args, boxed, blocked)
        current = []
        for static, value, borrowed in zip(self._inputs, args, self._borrowed):
            if borrowed or not isinstance(static, torch.Tensor):  # (a CPU scalar's is None)
                current.append(value)
                continue
            if value.data_ptr() != static.data_ptr():
                static.copy_(value)
            current.append(static)
        given = list(args) if self._passed or self._viewed else []
        if boxed:
            args.clear()  # the caller's references go (a backward's saved activations)
        RECORDER.replay(self._graph, current)
        del current
        self.replays += 1
        return self._results(given)

    def _observe(self, args: list[Any]) -> None:
        """Note each tensor input's address and object: an input borrowed at the recording is
        the same live object at the same address in every observed call."""
        seen = [
            (a.data_ptr(), weakref.ref(a)) if isinstance(a, torch.Tensor) else None for a in args
        ]
        if self._observed:
            seen = [
                new if old is not None and new is not None and _same(old, new) else None
                for old, new in zip(self._seen, seen)
            ]
        self._seen = seen
        self._observed += 1

    def _try_record(self, args: list[Any]) -> bool:
        """Record; on a failure, say so once and never record this graph again (nothing of the
        caller's was written: the warm-up writes copies, and a capture runs nothing)."""
        try:
            self._record(args)
        except Exception as error:  # noqa: BLE001 - the graph still runs, without a replay
            self._forget()
            self.recordings = MAX_RECORDINGS
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            warnings.warn(
                f"torchkiln: recording a {self.part} graph as a CUDA graph failed "
                f"({type(error).__name__}: {first_line}); it runs without CUDA graphs",
                stacklevel=4,
            )
            return False
        return True

    def _record(self, args: list[Any]) -> None:
        self.recordings += 1
        self._forget()
        borrowed, inputs = [], []
        scalars = _host_scalars(args)
        self._scalars = {i: None if i in self.unread else args[i].item() for i in sorted(scalars)}
        for i, (value, seen) in enumerate(zip(args, self._seen)):
            if not isinstance(value, torch.Tensor) or i in scalars:
                borrowed.append(False)
                inputs.append(value)
                continue
            address = value.data_ptr()
            stable = seen is not None and seen[0] == address and seen[1]() is value
            borrow = stable or address in _HANDED_OUT
            borrowed.append(borrow)
            if borrow:
                inputs.append(value)
            else:
                static = torch.empty_strided(
                    value.size(), value.stride(), dtype=value.dtype, device=value.device
                )
                static.copy_(value)
                inputs.append(static)
        # the warm-up runs the graph: a borrowed input it writes (a running statistic, a cache)
        # is a copy there, so the caller's tensor is written once a call, by the replay
        warm = [
            v.clone() if b and i in self.written else v
            for i, (v, b) in enumerate(zip(inputs, borrowed))
        ]
        RECORDER.warm_up(self.compiled, warm)
        del warm
        self._graph, outputs = RECORDER.capture(self.compiled, inputs)
        self._outputs = list(outputs)
        self._borrowed = borrowed
        # An output that is an input itself goes out as the caller's tensor, as the graph
        # returned it (a weight saved for the backward; an input written in place, borrowed),
        # and a saved view of a copied input as that view of the caller's tensor: autograd then
        # sees the caller's writes to it after the forward, as it would without a replay. Not
        # for a copied input the graph writes: its new value is the copy, cloned.
        self._passed = {}
        self._viewed = {}
        n = len(self._outputs) - self.saved
        for k, out in enumerate(self._outputs):
            if not isinstance(out, torch.Tensor):
                continue
            for j, value in enumerate(inputs):
                if not isinstance(value, torch.Tensor) or (not borrowed[j] and j in self.written):
                    continue
                if out is value:
                    self._passed[k] = j
                    break
                if (
                    k >= n
                    and not borrowed[j]
                    and out.numel() > 0  # (storages of no byte all lie at address 0)
                    and out.untyped_storage()._cdata == value.untyped_storage()._cdata
                ):
                    self._viewed[k] = (j, int(out.storage_offset() - value.storage_offset()))
                    break
        # a borrowed input is kept as its address alone: a reference to a forward's saved
        # activation would keep it "held" for the forward's liveness check
        self._addresses = [v.data_ptr() if b else None for v, b in zip(inputs, borrowed)]
        # (nor a CPU scalar: a forward's random state, handed out, is the backward's)
        self._inputs = [
            None if b or i in scalars else v for i, (v, b) in enumerate(zip(inputs, borrowed))
        ]
        # what goes out uncopied: the saved outputs, but for those on a borrowed input's storage
        # (a view of a parameter), which the replay does not write, and those above
        not_written = {v.untyped_storage().data_ptr() for v, b in zip(inputs, borrowed) if b}
        del inputs
        saved = [
            o
            for k, o in enumerate(self._outputs)
            if k >= n
            and k not in self._passed
            and k not in self._viewed
            and isinstance(o, torch.Tensor)
            and o.untyped_storage().data_ptr() not in not_written
        ]
        storages: dict[int, Any] = {}
        for out in saved:
            storages.setdefault(out.untyped_storage().data_ptr(), out.untyped_storage())
        # each storage object is kept (one more use, in the count too): a check is one call each
        self._handed = [(s, _use_count(s)) for s in storages.values()]
        pointers = tuple({o.data_ptr() for o in saved})
        for ptr in pointers:
            _HANDED_OUT[ptr] = _HANDED_OUT.get(ptr, 0) + 1
        self._finalizer = weakref.finalize(self, _release, pointers)
        self._observed = 0

    def _forget(self) -> None:
        """Drop the last recording (its memory is freed once nothing it handed out is held)."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._graph, self._inputs, self._outputs, self._handed = None, [], [], []

    def _blocked(self, args: list[Any]) -> str | None:
        """Why this call cannot replay, or None."""
        recorded_again = False
        for i, recorded in self._scalars.items():
            value = args[i]
            if recorded is not None and not (_host_scalar(value) and value.item() == recorded):
                return f"input {i}, a CPU scalar, is another value than the recorded one"
        for i, (static, value) in enumerate(zip(self._inputs, args)):
            if self._borrowed[i]:
                if value.data_ptr() == self._addresses[i]:
                    continue
                if value.data_ptr() in _HANDED_OUT:
                    recorded_again = True  # the activations of a forward that recorded again
                    continue
                if self.part == "backward" and not self._missed:
                    # the activations of a forward that ran without its replay: this call only
                    # (twice in a row: an input that moved for good, recorded again below)
                    self._missed = True
                    return f"input {i} comes from a forward that ran without its replay"
                # a parameter or buffer given new memory, or another tensor where one was
                # passed each time: record again after more observed calls, copying it then
                self._forget()
                self._observed = 0
                return f"input {i} is not where the recording read it"
            elif (
                not isinstance(static, torch.Tensor)
                and static is not value
                and i not in self._scalars
                and static != value
            ):
                return f"input {i} is another value than the recorded one"
        self._missed = False
        if recorded_again:
            if self.recordings >= MAX_RECORDINGS:
                self._forget()
                return "recorded too often (inputs moved)"
            return _RECORD_AGAIN
        for storage, count in self._handed:
            if _use_count(storage) != count:
                return "a saved activation of the last replay is still held (its backward not run)"
        return None

    def _results(self, given: list[Any]) -> list[Any]:
        """The outputs of a replay; ``given``: the call's arguments (the caller's tensors)."""
        n = len(self._outputs) - self.saved
        results = []
        for k, o in enumerate(self._outputs):
            if k in self._passed:
                results.append(given[self._passed[k]])
            elif k in self._viewed:
                j, offset = self._viewed[k]
                base = given[j]
                results.append(
                    base.as_strided(o.size(), o.stride(), base.storage_offset() + offset)
                )
            elif not isinstance(o, torch.Tensor):
                results.append(o)
            else:
                results.append(o.clone() if k < n else o.detach())
        return results


def _release(pointers: tuple[int, ...]) -> None:
    for ptr in pointers:
        left = _HANDED_OUT.get(ptr, 0) - 1
        if left > 0:
            _HANDED_OUT[ptr] = left
        else:
            _HANDED_OUT.pop(ptr, None)
