"""ckptdb.Store: a store's history from Python (what the `ckptdb` command
does), and the handle save/load keep per store.

A Store opens its reader and writer lazily; every Store object of one path
in a process shares them. Only one process may hold a store's writer
(RocksDB's lock): tag, delete and gc take it, and so does a save on the
coordinator; close() gives it back, and so does a fork while no save uses it
(see _before_fork).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Union

from . import _ckptdb

StepRef = Union[int, str]


_NEW = object()


class _Handles:
    """One store's open reader, writer and async savers in this process,
    shared by every Store object of that path (RocksDB lets one writer per
    process hold a database)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.reader_options: dict = {}
        self.lock = threading.RLock()
        self.writer: Any = None
        self.writer_options: dict | None = None
        self.writer_pid = 0  # the process that opened the writer
        self.reader: Any = None
        self.savers: dict[tuple[int, int], Any] = {}
        # Each async saver's connection to the ranks, kept when a fork closes
        # the saver: every rank makes a connection together, so one rank's
        # saver made again must use the same one.
        self.saver_comms: dict[tuple[int, int], Any] = {}
        # Calls using the writer or an async saver outside self.lock (saves,
        # async saves being queued), and the handles of async saves queued:
        # a fork closes neither while any is running.
        self.in_use = 0
        self.queued: list[Any] = []

    def get_writer(self, options: dict) -> Any:
        with self.lock:
            if self.writer is not None and self.writer_options != options:
                if self.savers:
                    raise ValueError(f"store '{self.path}' has async saves open with other options "
                                     "(chunk_bytes, compression, ...): close() it first")
                self.writer = None  # reopened with these options below
            if self.writer is None:
                self.writer = _ckptdb.Writer(self.path, **options)
                self.writer_options = dict(options)
                self.writer_pid = os.getpid()
            return self.writer

    def get_saver(self, options: dict, coordinator: int, max_in_flight: int) -> Any:
        from . import _dist
        with self.lock:
            key = (coordinator, max_in_flight)
            if key not in self.savers:
                writer = self.get_writer(options)
                comm = self.saver_comms.get(key, _NEW)
                if comm is _NEW:
                    comm = self.saver_comms[key] = _dist.connect()
                self.savers[key] = _ckptdb.AsyncSaver(writer, comm, coordinator, max_in_flight)
            return self.savers[key]

    @contextlib.contextmanager
    def using(self, get: Any) -> Any:
        """get() (the writer or an async saver), counted in use for the
        block: a fork leaves it open meanwhile."""
        with self.lock:
            handle = get()
            self.in_use += 1
        try:
            yield handle
        finally:
            with self.lock:
                self.in_use -= 1

    def get_reader(self, refresh: bool) -> Any:
        with self.lock:
            if self.reader is None:
                self.reader = _ckptdb.Reader(self.path, **self.reader_options)
            elif refresh:
                self.reader.refresh()
            return self.reader

    def close(self) -> None:
        with self.lock:
            for saver in self.savers.values():
                saver.close()
            self.savers.clear()
            self.saver_comms.clear()
            self.queued.clear()
            self.writer = None
            self.writer_options = None
            self.reader = None

    def close_idle_writer(self) -> None:
        """Closes the writer (giving back the database's lock) and the async
        savers holding it, when nothing uses them: no save running, no async
        save queued, no other reference. Never waits: a lock held by another
        thread leaves them open. A writer this process inherited from its
        parent stays as it is (it refuses work here, naming the parent).
        For _before_fork."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            if self.writer is None or self.writer_pid != os.getpid():
                return
            if self.in_use or any(not q.done() for q in self.queued):
                return
            # Held by nothing else, so that dropping them closes the database
            # now, not when a reference left somewhere goes (a writer opened
            # again would find it still locked). The references counted:
            # here, `saver` and getrefcount's argument; each saver's on its
            # writer.
            for saver in self.savers.values():
                if sys.getrefcount(saver) > 3:
                    return
            if sys.getrefcount(self.writer) > 2 + len(self.savers):
                return
            for saver in self.savers.values():
                saver.close()  # idle: its thread ends at once
            self.savers.clear()
            self.queued.clear()
            self.writer = None
            self.writer_options = None
        finally:
            self.lock.release()


_handles_lock = threading.Lock()
_handles: dict[str, _Handles] = {}


def _handles_for(path: str) -> _Handles:
    with _handles_lock:
        h = _handles.get(path)
        if h is None:
            h = _handles[path] = _Handles(path)
        return h


def _before_fork() -> None:
    """Before os.fork (multiprocessing's "fork", DataLoader workers, ...), in
    the forking thread: closes every writer no save is using, so that the
    child may write those stores (once it has, the parent's next save opens
    its writer again). A writer in use stays open: the child is refused it,
    naming the parent (one process writes a store at a time). Never waits."""
    for h in list(_handles.values()):
        try:
            h.close_idle_writer()
        except Exception:  # noqa: BLE001 - a fork must not fail for this
            pass


_inherited: list[Any] = []


def _after_fork_in_child() -> None:
    """A forked child gets fresh locks: one that another thread of the
    parent held at the fork would stay held here forever. A writer or async
    saver still open (in use by the parent at the fork) stays: it refuses
    work here, naming the parent. Readers are the child's own, opened when
    needed: the parent's are left untouched (another thread may have been in
    one at the fork)."""
    global _handles_lock
    _handles_lock = threading.Lock()
    for h in _handles.values():
        h.lock = threading.RLock()
        if h.reader is not None:
            _inherited.append(h.reader)
            h.reader = None


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def _is_bucket_url(path: str) -> bool:
    return path.startswith("s3://")


def store_path(path: str | os.PathLike) -> str:
    """The path a Store is known by: a bucket URL (s3://BUCKET/PREFIX) as it
    is, a local path made absolute. ValueError for a bucket URL that a
    pathlib.Path has collapsed ("s3:/BUCKET/PREFIX"): give it as a str."""
    if isinstance(path, os.PathLike) and not isinstance(path, str):
        p = os.fspath(path)
        if isinstance(p, str) and p.startswith("s3:/") and not _is_bucket_url(p):
            raise ValueError(f"'{p}' looks like a bucket URL that a Path collapsed ('//' became '/'): "
                             "give s3://BUCKET/PREFIX as a str")
    else:
        p = os.fspath(path)
    if not isinstance(p, str):
        raise TypeError(f"a store path must be a str, not {type(p).__name__}")
    return p if _is_bucket_url(p) else os.path.abspath(p)


def open_store(path: str) -> "Store":
    """A Store for `path` with the default options."""
    return Store(path)


@dataclass(frozen=True)
class StepInfo:
    step: int
    created_unix_ms: int
    world_size: int
    entries: int
    logical_bytes: int
    stored_bytes: int
    tags: list[str] = field(default_factory=list)
    damaged: bool = False
    # What the step's save recorded about it: ckptdb.save(..., metrics=...,
    # note=...).
    metrics: dict[str, float] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class EntryInfo:
    fqn: str
    kind: str          # "tensor", "sharded_tensor" or "bytes"
    dtype: str         # ckptdb's name ("f32", "bf16", ...); "" for bytes
    shape: tuple[int, ...]
    logical_bytes: int
    stored_bytes: int
    # Bytes entries: how the bytes encode the saved value ("raw", "pickle",
    # "torch_save"; "unrecorded" in steps written before it was recorded).
    # "" for tensors.
    bytes_encoding: str = ""


_TORCH_NAMES = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16",
                "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2", "i64": "int64", "i32": "int32",
                "i16": "int16", "i8": "int8", "u8": "uint8", "bool": "bool"}
_NUMPY_NAMES = {"f64": "float64", "f32": "float32", "f16": "float16", "i64": "int64", "i32": "int32",
                "i16": "int16", "i8": "int8", "u8": "uint8", "bool": "bool"}


class Store:
    """A ckptdb store: a directory, or a bucket.

    Args:
        path: the store's directory (created by the first save), or
            "s3://BUCKET/PREFIX": a store kept as objects under PREFIX in an
            S3 bucket (which must exist), reached with AWS's settings
            (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
            AWS_SECRET_ACCESS_KEY, AWS_REGION, ...).
        chunk_bytes, compression ("none", "zstd", "auto"), zstd_level,
        threads: how saves write (see StoreOptions in
            include/ckptdb/rocksdb_store.h).
        keep_last, keep_every, keep_tagged: a retention policy applied by
            every commit (0 and 0: keep everything).
        keep_best, best_metric, best_mode: keep the `keep_best` steps with
            the best value of metric `best_metric` (ckptdb.save(...,
            metrics=...)), the smallest with best_mode="min", the largest
            with "max", inside the same atomic commit (RetentionPolicy). Steps
            without the metric are never among the best; of equal values the
            newer step ranks first; the newest step is always kept.
            best_metric is also what step="best" means (Store.best).
        deduplicate: store a chunk that is unchanged since the store's latest
            step once, shared by both steps (StoreOptions.deduplicate; on by
            default). Off writes every chunk anew, e.g. to write a fresh copy
            of data whose stored copy `ckptdb verify` found damaged.
        chunk_layout: "boxes" (the default) cuts tensors of two or more
            dimensions into n-d boxes, so that a load in another sharding
            (rows saved, columns loaded) reads about what it needs; "rows"
            cuts every tensor into runs of its bytes, as stores before
            format 4 (StoreOptions.chunk_layout).
        access: "shared" (the default) for a store every rank sees (a
            shared file system); "coordinator_only" for a store on the
            coordinator's host only: in ckptdb.save and async_save every
            other rank writes its files under `local_staging_dir` (default
            $TMPDIR or /tmp) and sends them to the coordinator, and in
            ckptdb.load it gets its chunks from the coordinator; those ranks
            never touch `path` (StoreOptions.access, StoreAccess). Every rank
            must give the same value. Other methods (steps, read, ...) read
            the store where they run: on the coordinator's host.
        s3_stall_timeout: buckets only: seconds a request may go without a
            byte moving before it is abandoned; a second silent try ends the
            save, load or listing with an error naming the object and the
            server ("no answer for N s"), on every rank alike. None (the
            default): CKPTDB_S3_STALL_TIMEOUT, else 10. The first Store of
            a path in a process sets it for the reader they share.
    """

    def __init__(self, path: str | os.PathLike, *, chunk_bytes: int = 4 << 20, compression: str = "none",
                 zstd_level: int = 1, threads: int = 0, keep_last: int = 0, keep_every: int = 0,
                 keep_tagged: bool = True, deduplicate: bool = True, chunk_layout: str = "boxes",
                 access: str = "shared", local_staging_dir: str | os.PathLike | None = None,
                 keep_best: int = 0, best_metric: str | None = None, best_mode: str = "min",
                 s3_stall_timeout: int | None = None) -> None:
        self.path = store_path(path)
        if s3_stall_timeout is not None and (isinstance(s3_stall_timeout, bool) or not isinstance(s3_stall_timeout, int)
                                             or not 1 <= s3_stall_timeout <= 86400):
            raise ValueError(f"s3_stall_timeout {s3_stall_timeout!r} is not a whole number of seconds in "
                             "[1, 86400] (None: CKPTDB_S3_STALL_TIMEOUT, else 10)")
        if access not in ("shared", "coordinator_only"):
            raise ValueError(f"access '{access}' is not one of 'shared', 'coordinator_only'")
        if access == "coordinator_only" and _is_bucket_url(self.path):
            raise ValueError(f"store '{self.path}' is a bucket, which every rank reaches itself: "
                             "access='coordinator_only' is for a directory on the coordinator's host only")
        self.access = access
        self._options = dict(chunk_bytes=chunk_bytes, compression=compression, zstd_level=zstd_level,
                             threads=threads, keep_last=keep_last, keep_every=keep_every,
                             keep_tagged=keep_tagged, deduplicate=deduplicate, chunk_layout=chunk_layout,
                             access=access,
                             local_staging_dir="" if local_staging_dir is None else os.fspath(local_staging_dir))
        if compression not in ("none", "zstd", "auto"):
            raise ValueError(f"compression '{compression}' is not one of 'none', 'zstd', 'auto'")
        if chunk_layout not in ("boxes", "rows"):
            raise ValueError(f"chunk_layout '{chunk_layout}' is not one of 'boxes', 'rows'")
        if best_mode not in ("min", "max"):
            raise ValueError(f"best_mode '{best_mode}' is not one of 'min', 'max'")
        if keep_best and not best_metric:
            raise ValueError(f"keep_best={keep_best} needs best_metric, the metric to rank steps by")
        self.best_metric = best_metric
        self.best_mode = best_mode
        self._options.update(keep_best=keep_best, best_metric=best_metric or "", best_mode=best_mode)
        stall = dict(s3_stall_timeout_seconds=s3_stall_timeout or 0)
        self._options.update(stall)
        self._h = _handles_for(self.path)
        if s3_stall_timeout is not None:
            self._h.reader_options = stall

    def __repr__(self) -> str:
        return f"ckptdb.Store({self.path!r})"

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- handles (shared by every Store of this path in this process) --------------
    # A writer or async saver is used inside `with` (a fork leaves it open
    # meanwhile); _writer() is for a call made at once.
    def _writer(self) -> Any:
        return self._h.get_writer(self._options)

    def _writing(self) -> Any:
        """`with s._writing() as w:` the writer, for the block."""
        return self._h.using(self._writer)

    def _reader(self, refresh: bool = False) -> Any:
        return self._h.get_reader(refresh)

    @contextlib.contextmanager
    def _async_saver(self, coordinator: int, max_in_flight: int) -> Any:
        """`with s._async_saver(c, n) as queue:` queue(state_dict, step,
        metrics=, note=) queues a save on the async saver for (c, n) (made on
        first use) and returns its handle, kept until the save is done: a
        fork leaves the saver open while one is queued."""
        h = self._h
        with h.using(lambda: h.get_saver(self._options, coordinator, max_in_flight)) as saver:
            def queue(state_dict: Any, step: int, **kwargs: Any) -> Any:
                handle = saver.save_async(state_dict, step, **kwargs)
                with h.lock:
                    h.queued = [q for q in h.queued if not q.done()] + [handle]
                return handle
            yield queue

    def close(self) -> None:
        """Waits for async saves in flight and closes this process's reader
        and writer of the store (giving back the database lock); they are
        opened again when needed."""
        self._h.close()

    # --- history ---------------------------------------------------------------
    def steps(self) -> list[StepInfo]:
        """Every committed step, oldest first."""
        return [StepInfo(**s) for s in self._reader(refresh=True).steps()]

    def latest(self) -> int | None:
        """The newest committed step, None when there is none."""
        from ._errors import NotFoundError
        try:
            return self._reader(refresh=True).latest()
        except NotFoundError:
            return None

    def tags(self) -> dict[str, int]:
        return dict(self._reader(refresh=True).tags())

    def resolve(self, step: StepRef, refresh: bool = True) -> int:
        """The number of a step given as a number, "latest" or a tag name
        (NotFoundError when there is no such step), as of now (as of the
        reader's last refresh with refresh=False)."""
        r = self._reader(refresh=refresh)
        if isinstance(step, int) and not isinstance(step, bool):
            return step
        if step == "latest":
            return r.latest()
        # "best" is the best step by the store's best_metric when it has one,
        # else (as before metrics) the tag named "best".
        if isinstance(step, str) and ((step == "best" and self.best_metric) or step.startswith("best:")):
            name, mode = self._best_ref(step)
            return r.best(name, mode)
        if isinstance(step, str):
            if step.isdigit():
                return int(step)
            return r.resolve_tag(step)
        raise TypeError(f"step must be an int, 'latest', 'best' or a tag name, not {type(step).__name__}")

    def _best_ref(self, step: str) -> tuple[str, str]:
        """The metric and mode "best" ("best:NAME", "best:NAME:max") names."""
        if step == "best":
            return self.best_metric, self.best_mode
        name, _, mode = step[len("best:"):].partition(":")
        if not name or mode not in ("", "min", "max"):
            raise ValueError(f"step '{step}' is not 'best', 'best:NAME', 'best:NAME:min' or 'best:NAME:max'")
        return name, mode or "min"

    def best(self, name: str | None = None, mode: str | None = None) -> int | None:
        """The step with the best value of metric `name` (default: the
        store's best_metric): the smallest with mode "min", the largest with
        "max" (default: the store's best_mode); of equal values the newest.
        None when no step has that metric."""
        from ._errors import NotFoundError
        if name is None:
            if not self.best_metric:
                raise ValueError("Store.best() needs a metric name, or a Store made with best_metric=NAME")
            name = self.best_metric
        mode = mode or (self.best_mode if name == self.best_metric else "min")
        if mode not in ("min", "max"):
            raise ValueError(f"mode '{mode}' is not one of 'min', 'max'")
        try:
            return self._reader(refresh=True).best(name, mode)
        except NotFoundError:
            return None

    def entries(self, step: StepRef = "latest") -> list[EntryInfo]:
        """What a step holds, in the order it was saved."""
        n = self.resolve(step)
        return [EntryInfo(e["fqn"], e["kind"], e["dtype"], tuple(e["shape"]), e["logical_bytes"],
                          e["stored_bytes"], e["bytes_encoding"]) for e in self._reader().entries(n, pieces=False)]

    def read(self, step: StepRef, fqn: str, slice: Any = None, *, like: str | None = None) -> Any:
        """One entry of a step as a new CPU tensor (`like="torch"`, the
        default when torch is imported) or numpy array (`like="numpy"`);
        a bytes entry as the value that was saved (bytes as bytes, any other
        object unpickled; bytes as they are in steps written before the
        step recorded which). `slice`: an index of ints and slices with
        step 1 (e.g. `(slice(0, 10), 3)`), reading only the chunks it
        touches."""
        n = self.resolve(step)
        info = self._entry_info(n, fqn)
        if info["kind"] == "bytes":
            if slice is not None:
                raise ValueError(f"entry '{fqn}' is a bytes entry: it cannot be sliced")
            from ._state import UNRECORDED, decode_object
            data = self._read_bytes(n, fqn)
            if info["bytes_encoding"] == UNRECORDED:
                return data
            return decode_object(fqn, data, info["bytes_encoding"], None)
        shape = list(info["shape"])
        offsets, sizes, keep = _region(fqn, shape, slice)
        out = _empty(fqn, info["dtype"], sizes, like)
        from ._state import region
        r = region(fqn, out, for_load=True)
        sd = _ckptdb.StateDict()
        sd.add_sharded(fqn, info["dtype"], shape, [(offsets, sizes, r.data, r.nbytes, -1)])
        _ckptdb.load(sd, self._reader(), n, None, 0, [], False, False)
        return out.reshape([s for s, k in zip(sizes, keep) if k])

    def read_bytes(self, step: StepRef, fqn: str) -> bytes:
        """A bytes entry's stored bytes as they are (a pickle, torch.save's
        bytes, ...: `entries()` gives each one's bytes_encoding)."""
        n = self.resolve(step)
        if self._entry_info(n, fqn)["kind"] != "bytes":
            raise ValueError(f"entry '{fqn}' of step {n} is a tensor, not a bytes entry")
        return self._read_bytes(n, fqn)

    def read_object(self, step: StepRef, fqn: str) -> Any:
        """A bytes entry holding an object (what save makes of any value that
        is not a tensor or array), decoded: as `read`, except that in steps
        written before encodings were recorded the bytes are unpickled."""
        n = self.resolve(step)
        info = self._entry_info(n, fqn)
        if info["kind"] != "bytes":
            raise ValueError(f"entry '{fqn}' of step {n} is a tensor, not a bytes entry")
        from ._state import decode_object
        return decode_object(fqn, self._read_bytes(n, fqn), info["bytes_encoding"], None)

    def _entry_info(self, n: int, fqn: str) -> dict:
        info = self._reader().entry(n, fqn)  # (that entry's records only)
        if info is None:
            from ._errors import NotFoundError
            raise NotFoundError(f"entry '{fqn}' is not in step {n}", code="NotFound")
        return info

    def _read_bytes(self, n: int, fqn: str) -> bytes:
        sd = _ckptdb.StateDict()
        sd.add_bytes(fqn, b"")
        _ckptdb.load(sd, self._reader(), n, None, 0, [], False, False)
        return sd.get_bytes(fqn)

    # --- changes (take the writer) ------------------------------------------------
    def tag(self, step: StepRef, name: str) -> int | None:
        """Points tag `name` at a committed step; returns the step it named
        before, if any."""
        n = self.resolve(step)
        with self._writing() as w:
            return w.tag(n, name)

    def untag(self, name: str) -> None:
        with self._writing() as w:
            w.delete_tag(name)

    def delete(self, *steps: StepRef) -> None:
        """Deletes the steps (and their tags) in one atomic write."""
        numbers = [self.resolve(s) for s in steps]
        with self._writing() as w:
            w.delete_steps(numbers)

    def gc(self, keep_last: int = 0, keep_every: int = 0, keep_tagged: bool = True,
           dry_run: bool = False, min_unused: float = 0.05, keep_best: int = 0,
           best_metric: str | None = None, best_mode: str | None = None) -> dict:
        """Applies a retention policy (when keep_last, keep_every or
        keep_best is set; keep_best ranks by best_metric and best_mode,
        default: the store's),
        sweeps what failed saves left, and rewrites each file that still
        holds chunks kept steps share once at least `min_unused` of it is
        chunks no step uses (as `ckptdb gc`). Returns {"pruned": [steps],
        "orphan_saves", "staging_dirs", "unaccounted_saves", "replaced_objects",
        "rewritten_files", "rewritten_bytes_before", "rewritten_bytes_after",
        "files_left", "unused_bytes_left", "saves_running"} (saves_running:
        a bucket rewrites nothing while saves run)."""
        best_metric = best_metric or (self.best_metric if keep_best else None) or ""
        if keep_best and not best_metric:
            raise ValueError(f"keep_best={keep_best} needs best_metric, the metric to rank steps by")
        best_mode = best_mode or (self.best_mode if best_metric == self.best_metric else "min")
        with self._writing() as w:
            pruned = w.prune(keep_last, keep_every, keep_tagged, dry_run, keep_best, best_metric, best_mode)
            swept = w.find_leftovers() if dry_run else w.sweep()
            reclaimed = w.reclaim_space(min_unused, dry_run)
        return {"pruned": list(pruned), **swept, **reclaimed}


def _region(fqn: str, shape: list[int], index: Any) -> tuple[list[int], list[int], list[bool]]:
    """Offsets, sizes and which dimensions stay, for an index of ints and
    slices."""
    if index is None:
        return [0] * len(shape), list(shape), [True] * len(shape)
    if not isinstance(index, tuple):
        index = (index,)
    if len(index) > len(shape):
        raise IndexError(f"entry '{fqn}': {len(index)} indices for a {len(shape)}-d tensor")
    offsets, sizes, keep = [], [], []
    for d, n in enumerate(shape):
        i = index[d] if d < len(index) else builtins_slice(None)
        if isinstance(i, builtins_slice):
            start, stop, stride = i.indices(n)
            if stride != 1:
                raise ValueError(f"entry '{fqn}': slices must have step 1")
            offsets.append(start)
            sizes.append(max(0, stop - start))
            keep.append(True)
        elif isinstance(i, int) and not isinstance(i, bool):
            j = i + n if i < 0 else i
            if not 0 <= j < n:
                raise IndexError(f"entry '{fqn}': index {i} is out of range for dimension {d} of size {n}")
            offsets.append(j)
            sizes.append(1)
            keep.append(False)
        else:
            raise TypeError(f"entry '{fqn}': an index must be an int or a slice, not {type(i).__name__}")
    return offsets, sizes, keep


builtins_slice = slice


def _empty(fqn: str, dtype: str, sizes: list[int], like: str | None) -> Any:
    if like is None:
        like = "torch" if "torch" in sys.modules else "numpy"
    if like == "torch":
        import torch
        return torch.empty(sizes, dtype=getattr(torch, _TORCH_NAMES[dtype]))
    if like == "numpy":
        import numpy as np
        if dtype not in _NUMPY_NAMES:
            raise TypeError(f"entry '{fqn}': numpy has no dtype for {dtype}: read it with like='torch'")
        return np.empty(sizes, dtype=_NUMPY_NAMES[dtype])
    raise ValueError(f"like must be 'torch' or 'numpy', not {like!r}")


def copy(src: str | os.PathLike, dst: str | os.PathLike, steps: "list[int] | None" = None, *,
         tags: bool = False, dry_run: bool = False) -> list[dict]:
    """Copies committed steps from store `src` to store `dst` (each a
    directory or s3://BUCKET/PREFIX; `dst` is made when missing), as
    `ckptdb cp` does: oldest first (so that `dst` stores unchanged chunks
    once), each read with every checksum verified and committed at `dst`
    whole or not at all under its own number, with its entries, metrics,
    note and annotations. `steps`: the step numbers (default: every step).
    `tags`: point `src`'s tags on the copied steps at them in `dst` too.
    A step `dst` already holds with the same entries, byte for byte, is left
    as it is; one with other content raises AlreadyExistsError naming it
    (the steps before it are copied). Returns one dict per step: step,
    outcome ("copied", "present", or "would_copy" with dry_run),
    logical_bytes, stored_bytes (what it added to `dst`), tags."""
    return _ckptdb.copy_steps(store_path(src), store_path(dst), [int(s) for s in (steps or [])], bool(tags),
                              bool(dry_run))
