"""Which ranks a save or load runs on, and ckptdb's own connection to them.

ckptdb's collectives run on a gloo connection of its own, never on the
job's process group, so they never interleave with the job's collectives.
The ranks meet (exchange addresses) through, in this order:

1. ``CKPTDB_RENDEZVOUS`` (``file:///dir`` or ``redis://host:port``) with
   ``CKPTDB_RANK``/``RANK`` and ``CKPTDB_WORLD_SIZE``/``WORLD_SIZE``: ckptdb's
   own rendezvous, no torch needed;
2. the job's c10d store when ``torch.distributed`` is initialized;
3. torchrun's agent store (``MASTER_ADDR``/``MASTER_PORT`` with
   ``TORCHELASTIC_USE_AGENT_STORE=True``, as torchrun sets) before
   ``init_process_group``;
4. nothing: a process with no ``WORLD_SIZE`` (or ``WORLD_SIZE=1``) saves and
   loads alone.

Each connection gets its own job id (``ckptdb-py-N``, N counting the
connections this process made, in the same order on every rank), so the
connection of async saves and that of synchronous ones never meet. Under
torchrun the launch id is the run id and restart count: a restarted worker
group never meets keys of the one before.
"""

from __future__ import annotations

import os
import sys
import threading
from datetime import timedelta
from typing import Any, Callable

from . import _ckptdb

_lock = threading.Lock()
_connections = 0
_default: Any = None
_default_made = False


def _env(name: str) -> str | None:
    v = os.environ.get(name)
    return v if v else None


def _timeout_ms() -> int:
    v = _env("CKPTDB_TIMEOUT_MS")
    if v is None:
        return 60000
    try:
        ms = int(v)
    except ValueError:
        raise ValueError(f"CKPTDB_TIMEOUT_MS='{v}' is not an integer") from None
    if ms <= 0:
        raise ValueError("CKPTDB_TIMEOUT_MS must be positive")
    return ms


def _launch_id() -> str:
    if _env("CKPTDB_LAUNCH_ID"):
        return os.environ["CKPTDB_LAUNCH_ID"]
    run = _env("TORCHELASTIC_RUN_ID")
    if run and run != "none":
        return f"torchelastic-{run}-restart-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return "c10d"


class C10dRendezvous:
    """ckptdb's rendezvous store over a c10d store (TCPStore, PrefixStore):
    create_key claims the key with an atomic add, then sets it."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def create_key(self, key: str, value: bytes) -> bool:
        if self._store.add(key + "/claim", 1) != 1:
            return False
        self._store.set(key, value)
        return True

    def get(self, key: str) -> bytes | None:
        if hasattr(self._store, "check"):
            if not self._store.check([key]):
                return None
        else:
            # PyTorch 1.13's PrefixStore has no check(): the claim counter
            # says whether the key was created, and a short wait covers the
            # moment between the claim and the value.
            if self._store.add(key + "/claim", 0) < 1:
                return None
            try:
                self._store.wait([key], timedelta(seconds=1))
            except Exception:  # noqa: BLE001 - not set yet: the caller polls again
                return None
        return bytes(self._store.get(key))


def _torch_dist():
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() else None


def _job_id() -> str:
    global _connections
    n = _connections
    _connections += 1
    return f"ckptdb-py-{n}"


def connect(job_id: str | None = None) -> Any:
    """A new connection to every rank (a _ckptdb.Communicator), or None when
    this process runs alone. ValueError when the ranks cannot be found.

    `job_id`: a fixed job id for a connection every rank makes once, instead
    of the next ``ckptdb-py-N``: a connection made on another thread then
    cannot swap numbers with one of the main thread. Under CKPTDB_RENDEZVOUS
    it follows CKPTDB_JOB_ID (``<CKPTDB_JOB_ID>-ckptdb-py-N``), so that two
    connections of one process never share keys."""
    world = _env("CKPTDB_WORLD_SIZE") or _env("WORLD_SIZE")
    dist = _torch_dist()
    initialized = dist is not None and dist.is_initialized()
    if _env("CKPTDB_RENDEZVOUS"):
        if world is None or int(world) == 1:
            return None
        base = _env("CKPTDB_JOB_ID") or "ckptdb"
        return _ckptdb.Communicator.from_environment(f"{base}-{job_id or _job_id()}")
    if initialized:
        if dist.get_world_size() == 1:
            return None
        from torch.distributed.distributed_c10d import _get_default_store
        store = dist.PrefixStore("ckptdb/", _get_default_store())
        return _through(store, "the job's torch.distributed store", dist.get_rank(), dist.get_world_size(),
                        job_id)
    if world is None or int(world) == 1:
        return None
    master, port = _env("MASTER_ADDR"), _env("MASTER_PORT")
    rank = _env("CKPTDB_RANK") or _env("RANK")
    if master and port and rank is not None and _env("TORCHELASTIC_USE_AGENT_STORE") == "True" and dist:
        agent = dist.TCPStore(master, int(port), is_master=False,
                              timeout=timedelta(milliseconds=_timeout_ms()))
        store = dist.PrefixStore("ckptdb/", agent)
        return _through(store, f"torchrun's store at {master}:{port}", int(rank), int(world), job_id)
    raise ValueError(
        f"WORLD_SIZE={world} but ckptdb cannot find the other ranks: call "
        "torch.distributed.init_process_group first, run under torchrun, or set "
        "CKPTDB_RENDEZVOUS=file:///shared/dir (or redis://host:port)")


def _through(store: Any, name: str, rank: int, world: int, job_id: str | None = None) -> Any:
    local = _env("LOCAL_RANK")
    # The listen address: CKPTDB_BIND_ADDRESS, CKPTDB_SOCKET_IFNAME, else the
    # library's default, which starts with the route to the store's host
    # (include/ckptdb/distributed.h).
    return _ckptdb.Communicator.through_store(
        C10dRendezvous(store), name, rank, world, int(local) if local else -1,
        job_id or _job_id(), _launch_id(), _env("CKPTDB_BIND_ADDRESS") or "", _timeout_ms(),
        socket_ifname=_env("CKPTDB_SOCKET_IFNAME") or "", route_host=_env("MASTER_ADDR") or "")


def default_communicator() -> Any:
    """The connection synchronous saves and loads share, made on first use."""
    global _default, _default_made
    with _lock:
        if not _default_made:
            _default = connect()
            _default_made = True
        return _default


def rank_and_world() -> tuple[int, int]:
    c = default_communicator()
    return (0, 1) if c is None else (c.rank, c.world_size)


def decided_by(comm: Any, mine: bytes, coordinator: int,
               decide: Callable[[list[bytes | None], dict[int, str]], bytes]) -> bytes:
    """Every rank sends `mine` to the coordinator alone, which calls
    decide(parts, missing) (parts indexed by rank, None for a rank whose part
    did not come and its reason in missing) and sends what it returns to
    every rank; returns that on every rank. What a rank other than the
    coordinator receives is the decision only, whatever the world size."""
    parts, missing = comm.gather(mine, coordinator)
    verdict = decide(parts, missing) if comm.rank == coordinator else b""
    return comm.broadcast(verdict, coordinator)
