"""save, load and async_save: state dicts in and out of a store, on every
rank of a job (SPMD: every rank calls them with the same arguments)."""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Iterable

from . import _ckptdb, _dist, _flatten, _state
from .store import Store, StepRef, open_store


def _store(store: Any) -> Store:
    if isinstance(store, Store):
        return store
    if isinstance(store, (str, os.PathLike)):
        return open_store(os.fspath(store))
    raise TypeError(f"store must be a path or a ckptdb.Store, not {type(store).__name__}")


def _comm(communicator: Any) -> Any:
    return _dist.default_communicator() if communicator is None else communicator


def _check_step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"step must be an int, not {type(step).__name__}")
    if step < 0:
        raise ValueError(f"step {step} is negative")
    return step


def _check_coordinator(coordinator: Any) -> int:
    if isinstance(coordinator, bool) or not isinstance(coordinator, int):
        raise TypeError(f"coordinator must be an int, not {type(coordinator).__name__}")
    return coordinator


def _check_metrics(metrics: Any, note: Any) -> tuple[dict[str, float], str]:
    """metrics as {str: float} (any real number: int, float, a 0-d tensor or
    numpy scalar) and note as str; TypeError naming what is wrong. Names and
    values are checked by the library (ValueError on every rank)."""
    out: dict[str, float] = {}
    if metrics is not None:
        if not isinstance(metrics, dict):
            raise TypeError(f"metrics must be a dict of name -> number, not {type(metrics).__name__}")
        for name, value in metrics.items():
            if not isinstance(name, str):
                raise TypeError(f"metric names must be str, not {type(name).__name__} ({name!r})")
            if isinstance(value, bool):
                raise TypeError(f"metric '{name}' is a bool; give a number")
            try:
                out[name] = float(value)
            except (TypeError, ValueError):
                raise TypeError(f"metric '{name}' must be a number, not {type(value).__name__}") from None
    if note is not None and not isinstance(note, str):
        raise TypeError(f"note must be a str, not {type(note).__name__}")
    return out, note or ""


def save(state_dict: dict, store: Any, step: int, *, coordinator: int = 0,
         communicator: Any = None, metrics: dict[str, float] | None = None, note: str | None = None) -> None:
    """Saves `state_dict` as step `step` of `store`, atomically, on every rank.

    Args:
        state_dict: nested dicts and lists of tensors (torch, CPU or CUDA,
            any layout), numpy arrays, DTensors, ShardedTensors and other
            objects (pickled); flattened to dotted FQNs.
        store: a path (the store is created when missing), a bucket URL
            "s3://BUCKET/PREFIX" (see ckptdb.Store) or a ckptdb.Store.
        step: the step number to commit (>= 0; an existing step is an
            AlreadyExistsError).
        coordinator: the rank that commits.
        communicator: ckptdb's connection to the other ranks (default: found
            as ckptdb._dist describes; None in a single process).
        metrics: numbers to commit with the step ({"val_loss": 2.31}), which
            Store(keep_best=..., best_metric=...) keeps the best steps by,
            and Store.steps(), Store.best(), step="best" and `ckptdb ls`
            read. Names: 1-128 characters without whitespace; values finite.
        note: free-form text committed with the step (a config as JSON, a
            commit id; at most 64 KiB).
        (Only the coordinator's metrics and note are stored.)

    The tensors must not change until save returns (no other thread may
    write them): their bytes are read where they lie, a bucket's upload
    sending them from there. One changed during the save fails it (the
    server refuses a part whose checksum its bytes no longer match) or, on
    a server that checks no part checksum, commits a chunk that a load
    refuses as damaged (DataLoss); ckptdb.async_save copies them first.

    Raises CheckpointError (the same on every rank) when any rank failed;
    nothing is committed then. TypeError/ValueError for a bad argument.
    """
    step = _check_step(step)
    coordinator = _check_coordinator(coordinator)
    metrics, note = _check_metrics(metrics, note)
    s = _store(store)
    comm = _comm(communicator)
    prepared = _prepared_everywhere(comm, state_dict, for_load=False, coordinator=coordinator)
    with s._writing() as writer:
        _ckptdb.save(prepared.engine, writer, step, comm, coordinator, metrics=metrics, note=note)


def _check_coordinator_in(comm: Any, coordinator: int) -> None:
    """ValueError, the same on every rank, for a coordinator outside the job."""
    if comm is not None and not 0 <= coordinator < comm.world_size:
        from ._errors import InvalidArgumentError
        raise InvalidArgumentError(f"coordinator rank {coordinator} is not in the world of size {comm.world_size}",
                                   code="InvalidArgument")


def _prepared_everywhere(comm: Any, state_dict: Any, for_load: bool, coordinator: int) -> _state.Prepared:
    """Flattens and hands over the state dict on this rank; the ranks then
    agree that every rank managed, so that a bad value on one rank (an
    unpicklable object, a read-only target, a tensor on an unsupported
    device) raises the same error on every rank at once instead of leaving
    the others waiting in the save or load until the timeout. Each rank
    tells the coordinator alone, which tells every rank which ranks failed
    (a gather and a broadcast of nothing when none did: what a rank receives
    does not grow with the world size, as it did with an all-gather). Alone,
    the local error is raised as it is."""
    try:
        prepared = _state.prepare(_flatten.flatten(state_dict), for_load=for_load)
        error = None
    except Exception as e:  # noqa: BLE001 - reported to every rank below
        if comm is None:
            raise
        prepared, error = None, e
    if comm is None:
        return prepared
    _check_coordinator_in(comm, coordinator)
    mine = b"" if error is None else f"{type(error).__name__}: {error}".encode()

    def decide(parts: list, missing: dict) -> bytes:
        told = {r: f"its state dict's check did not reach the coordinator: {missing[r]}" if m is None else m.decode()
                for r, m in enumerate(parts) if m is None or m}
        return json.dumps(sorted(told.items())).encode() if told else b""

    verdict = _dist.decided_by(comm, mine, coordinator, decide)
    failed = {int(r): m for r, m in json.loads(verdict)} if verdict else {}
    if not failed:
        return prepared
    from ._errors import CheckpointError, InvalidArgumentError
    text = (f"Failed to prepare the state dict (failed ranks: {', '.join(map(str, failed))})" +
            "".join(f"\n  rank {r}: {m}" for r, m in failed.items()))
    argument = all(m.startswith(("TypeError", "ValueError", "InvalidArgumentError")) for m in failed.values())
    cls = InvalidArgumentError if argument else CheckpointError
    raise cls(text, code="InvalidArgument" if argument else "Aborted", message=text,
              rank_failures=failed) from error


def _resolve_step(s: Store, step: StepRef, comm: Any, coordinator: int) -> int:
    """The step number `step` names, the same on every rank: "latest" and
    tags are resolved by the coordinator and broadcast."""
    if isinstance(step, int) and not isinstance(step, bool):
        return _check_step(step)
    if not isinstance(step, str):
        raise TypeError(f"step must be an int, 'latest', 'best' or a tag name, not {type(step).__name__}")
    if comm is None:
        return s.resolve(step, refresh=False)
    answer = b""
    if comm.rank == coordinator:
        try:
            answer = b"ok" + struct.pack("<q", s.resolve(step, refresh=False))
        except Exception as e:  # noqa: BLE001 - every rank raises it below
            answer = b"er" + f"{type(e).__name__}: {e}".encode()
    answer = comm.broadcast(answer, coordinator)
    if answer[:2] == b"ok":
        return struct.unpack("<q", answer[2:])[0]
    from ._errors import NotFoundError
    raise NotFoundError(f"rank {coordinator} cannot resolve step '{step}': {answer[2:].decode()}",
                        code="NotFound")


def load(state_dict: dict, store: Any, step: StepRef = "latest", keys: Iterable[str] | None = None,
         strict: bool = True, convert_dtype: bool = False, *, coordinator: int = 0,
         communicator: Any = None) -> int:
    """Loads a step into `state_dict` in place, on every rank; returns the
    step number loaded.

    Tensors, arrays, DTensors and ShardedTensors are filled in place from
    whatever sharding and world size the step was saved with; other objects
    are replaced in their containers. `step` is a number, "latest", a tag,
    "best" (the best step by the Store's best_metric; without one, the tag
    "best") or "best:NAME[:max]".
    `keys`: load only these FQNs. `strict=False`: entries the step lacks are
    left as they are. `convert_dtype=True`: values are converted to the
    target's dtype. The whole target is checked on every rank before
    anything is read: a mismatch (shape, dtype, kind, missing entry) raises
    the same CheckpointError on every rank and changes nothing.
    """
    coordinator = _check_coordinator(coordinator)
    s = _store(store)
    comm = _comm(communicator)
    _check_coordinator_in(comm, coordinator)
    # With other ranks, only the coordinator opens the store: it names each
    # rank the few files (a directory on a shared file system) or objects (a
    # bucket) its chunks lie in, so that no rank replays a MANIFEST that
    # lists every rank's file of every step, or GETs a step record that
    # lists every rank's object; on the coordinator's host only, it serves them.
    coordinator_only = s.access == "coordinator_only" and comm is not None
    remote = comm is not None
    reader = None
    if not remote or comm.rank == coordinator:
        reader = s._reader(refresh=True)  # the store as of now, for resolving the step and reading it
    number = _resolve_step(s, step, comm, coordinator)
    key_list = list(keys) if keys is not None else []
    for k in key_list:
        if not isinstance(k, str):
            raise TypeError(f"keys must be FQN strings, got {type(k).__name__}")
    prepared = _prepared_everywhere(comm, state_dict, for_load=True, coordinator=coordinator)
    stats = _ckptdb.load(prepared.engine, None if remote else reader, number, comm, coordinator, key_list,
                         not strict, convert_dtype, s.path if remote else "", not coordinator_only,
                         s._options.get("s3_stall_timeout_seconds", 0))
    _state.finish_load(prepared, stats["missing"], key_list)
    return number


class SaveFuture:
    """The outcome of ckptdb.async_save: like concurrent.futures.Future."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    @property
    def step(self) -> int:
        return self._handle.step

    @property
    def blocked_seconds(self) -> float:
        """How long async_save blocked the caller (waiting and copying)."""
        return self._handle.blocked_seconds

    def done(self) -> bool:
        return self._handle.done()

    def result(self, timeout: float | None = None) -> None:
        """Waits for the save to commit; raises its CheckpointError (the same
        on every rank), or TimeoutError_ when `timeout` seconds passed."""
        self._handle.wait(-1.0 if timeout is None else max(0.0, float(timeout)))

    wait = result


def async_save(state_dict: dict, store: Any, step: int, *, coordinator: int = 0,
               max_in_flight: int = 1, metrics: dict[str, float] | None = None,
               note: str | None = None) -> SaveFuture:
    """Saves like ckptdb.save, in the background: returns once the state is
    copied into staging memory (the caller may change its tensors at once);
    the save commits later. Runs on a connection of its own (made on the
    first call), never the one synchronous saves use. At most
    `max_in_flight` saves are in flight (each holds a copy of the state);
    a call waits while all are busy. `metrics` and `note` as in ckptdb.save."""
    step = _check_step(step)
    coordinator = _check_coordinator(coordinator)
    metrics, note = _check_metrics(metrics, note)
    s = _store(store)
    with s._async_saver(coordinator, max_in_flight) as queue:
        # Agreed on the synchronous connection: the saver's belongs to its
        # background thread.
        prepared = _prepared_everywhere(_dist.default_communicator(), state_dict, for_load=False,
                                        coordinator=coordinator)
        return SaveFuture(queue(prepared.engine, step, metrics=metrics, note=note))
