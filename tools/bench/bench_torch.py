#!/usr/bin/env python3
"""PyTorch's checkpoints on the shapes ckptdb-bench uses, for tools/bench-peers.sh.

Runs --world ranks (gloo over 127.0.0.1) that each hold --size/world bytes: tensors
of 64 MiB ([rows, --cols], default 1024 columns) sharded by rows, of the --data kind. Phases, each timed
from a barrier to a barrier (the job's time is the slowest rank's), median of
--repeat runs, printed as one JSON object:

  torch 2.x:  dcp_save / dcp_load     torch.distributed.checkpoint.save / load with
                                      FileSystemWriter(sync_files=True) / FileSystemReader,
                                      tensors as DTensors (Shard(0)) on a CPU device mesh
              dcp_async_blocked       how long torch.distributed.checkpoint.async_save blocks
              dcp_async_durable       ... and until its future completes (data on disk)
              torch_save / torch_load torch.save of each rank's local tensors to its own
                                      file, fsync'd; torch.load back
              py_save / py_load       ckptdb from Python (when it imports): ckptdb.save /
              py_async_blocked        ckptdb.load / ckptdb.async_save of the same DTensors
              dcpck_save/dcpck_load   dcp.save / dcp.load through ckptdb.torch's
                                      StorageWriter / StorageReader
  torch 1.13: st_save / st_load       torch.distributed._shard.checkpoint.save_state_dict /
                                      load_state_dict with ShardedTensors (the API ckptdb's
                                      protocol comes from), FileSystemWriter syncing files
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch113_compat import patch_torch113_dataclass  # noqa: E402


def make_local(torch, kind, size, rank, world, cols=1024):
    """This rank's row shards: name -> (local tensor, global rows, row offset)."""
    dtype = {"fp32": torch.float32, "adam": torch.float32, "bf16": torch.bfloat16, "bytes": torch.uint8}[kind]
    es = torch.tensor([], dtype=dtype).element_size()
    left, out, i = size, {}, 0
    g = torch.Generator().manual_seed(rank)
    while left > 0:
        nbytes = min(left, 64 << 20)
        rows = max(world, nbytes // (cols * es) // world * world)
        left -= rows * cols * es
        local_rows = rows // world
        if kind == "bytes":
            t = torch.randint(0, 256, (local_rows, cols), dtype=torch.uint8, generator=g)
        elif kind == "bf16":
            t = (torch.randn(local_rows, cols, generator=g) * 0.02).to(torch.bfloat16)
        elif kind == "adam":
            t = torch.randn(local_rows, cols, generator=g) * 1e-3
            t[1::2] = t[1::2] ** 2
        else:
            t = torch.randn(local_rows, cols, generator=g)
        out[f"t{i}"] = (t, rows, rank * local_rows)
        i += 1
    return out


def run_rank(rank, args, port, result_path):
    if args.legacy:
        patch_torch113_dataclass()
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.world)
    world = args.world
    local = make_local(torch, args.data, args.size, rank, world, args.cols)
    ckpt = os.path.join(args.dir, "ckpt")
    times = {}

    def settle():
        """Writes back what earlier phases left dirty (rank 0 syncs, every rank
        waits), so that each save starts from the same state of the page
        cache and pays for its own writes only, as ckptdb-bench's saves do
        (each of its trials syncs before its cold load)."""
        if rank == 0:
            os.sync()
        dist.barrier()

    def timed(name, fn):
        if name.endswith("save"):
            settle()
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        mine = time.perf_counter() - t0
        allt = [None] * world
        dist.all_gather_object(allt, mine)
        times.setdefault(name, []).append(max(allt))

    def drop_caches():
        """Empties the page cache (rank 0, as root), so the next phase reads from
        the disk; False on every rank where it cannot."""
        ok = [True]
        if rank == 0:
            try:
                os.sync()
                with open("/proc/sys/vm/drop_caches", "w") as f:
                    f.write("3\n")
            except OSError:
                ok = [False]
        dist.broadcast_object_list(ok, src=0)
        return ok[0]

    def clean():
        dist.barrier()
        if rank == 0:
            shutil.rmtree(ckpt, ignore_errors=True)
        dist.barrier()

    if args.legacy:
        from torch.distributed._shard.checkpoint import FileSystemReader, FileSystemWriter, load_state_dict, save_state_dict
        from torch.distributed._shard.metadata import ShardMetadata
        from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards

        def sharded(src, zeros):
            sd = {}
            for name, (t, rows, off) in src.items():
                tt = torch.zeros_like(t) if zeros else t
                md = ShardMetadata(shard_offsets=[off, 0], shard_sizes=list(tt.shape), placement=f"rank:{rank}/cpu")
                sd[name] = init_from_local_shards([Shard(tt, md)], [rows, tt.shape[1]])
            return sd

        state, target = sharded(local, False), sharded(local, True)
        for _ in range(args.repeat):
            clean()
            os.makedirs(ckpt, exist_ok=True)
            timed("st_save", lambda: save_state_dict(state, FileSystemWriter(ckpt)))
            timed("st_load", lambda: load_state_dict(target, FileSystemReader(ckpt)))
            if drop_caches():
                fresh = sharded(local, True)
                timed("st_load_cold", lambda: load_state_dict(fresh, FileSystemReader(ckpt)))
    else:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard

        mesh = init_device_mesh("cpu", (world,))
        async_pg = dist.new_group(backend="gloo")

        def dtensors(zeros):
            sd = {}
            for name, (t, rows, off) in local.items():
                tt = torch.zeros_like(t) if zeros else t
                sd[name] = DTensor.from_local(tt, mesh, [Shard(0)], run_check=False)
            return sd

        state, target = dtensors(False), dtensors(True)
        plain = {name: t for name, (t, rows, off) in local.items()}
        own = os.path.join(args.dir, f"rank{rank}.pt")
        ckptdb = None
        try:
            import ckptdb
        except ImportError:
            pass

        engine = {}
        if ckptdb is not None:
            from ckptdb import _ckptdb

            def engine_timed(name, fn):
                def run(*a, **k):
                    t0 = time.perf_counter()
                    try:
                        return fn(*a, **k)
                    finally:
                        engine[name] = time.perf_counter() - t0
                return run
            ckptdb._checkpoint._ckptdb = type("EngineTimed", (), {
                "save": staticmethod(engine_timed("save", _ckptdb.save)),
                "load": staticmethod(engine_timed("load", _ckptdb.load))})

        if ckptdb is not None:
            # Connect once before any timing, as ckptdb-bench does (a job
            # connects once and saves many times).
            warm = os.path.join(args.dir, "warm.ckptdb")
            ckptdb.save({"w": torch.zeros(1)}, warm, 0)
            ckptdb.load({"w": torch.zeros(1)}, warm, 0)
            try:
                import ckptdb.torch as ckt
                dcp.save({"w": torch.zeros(1)}, storage_writer=ckt.StorageWriter(warm, step=1))
            except ImportError:
                pass

        def ckptdb_phases(trial):
            """ckptdb from Python on the same DTensors: ckptdb.save/load and
            async_save, and DCP through ckptdb's StorageWriter/Reader. One
            store for every trial (steps 10 * trial + k), kept open as a
            training job keeps it, like the C++ benchmark's. Deduplication
            is off: every trial saves the same bytes again, and each save must
            write all of them, as DCP's does."""
            store = ckptdb.Store(os.path.join(args.dir, "py.ckptdb"), deduplicate=False)
            step = 10 * trial
            engine.clear()
            timed("py_save", lambda: ckptdb.save(state, store, step + 1))
            timed("py_load", lambda: ckptdb.load(target, store, step + 1))
            # The Python layer's own time (flattening, handing tensors over,
            # the ranks' agreement), apart from the engine's C++ save/load.
            for name, total in (("save", times["py_save"][-1]), ("load", times["py_load"][-1])):
                allt = [None] * world
                dist.all_gather_object(allt, engine[name])
                times.setdefault(f"py_{name}_engine", []).append(max(allt))
            settle()
            t0 = time.perf_counter()
            fut = ckptdb.async_save(state, store, step + 2)
            blocked = time.perf_counter() - t0
            fut.result()
            durable = time.perf_counter() - t0
            for name, mine in (("py_async_blocked", blocked), ("py_async_durable", durable)):
                allt = [None] * world
                dist.all_gather_object(allt, mine)
                times.setdefault(name, []).append(max(allt))
            try:
                import ckptdb.torch as ckt
            except ImportError:
                return
            timed("dcpck_save", lambda: dcp.save(state, storage_writer=ckt.StorageWriter(store, step=step + 3)))
            timed("dcpck_load", lambda: dcp.load(target, storage_reader=ckt.StorageReader(store, step=step + 3)))

        for trial in range(args.repeat):
            # Half the trials run ckptdb's phases before DCP's, half after.
            if ckptdb is not None and (trial + args.round) % 2 == 1:
                ckptdb_phases(trial)
            clean()
            timed("dcp_save", lambda: dcp.save(state, storage_writer=dcp.FileSystemWriter(ckpt, sync_files=True)))
            timed("dcp_load", lambda: dcp.load(target, storage_reader=dcp.FileSystemReader(ckpt)))
            if drop_caches():
                # From the disk into fresh tensors, as a restarting job loads.
                fresh = dtensors(True)
                timed("dcp_load_cold", lambda: dcp.load(fresh, storage_reader=dcp.FileSystemReader(ckpt)))
            clean()
            # async_save: its own process group for the background collectives,
            # as PyTorch recommends, so they never interleave with training's.
            box = {}

            def start():
                box["f"] = dcp.async_save(state, storage_writer=dcp.FileSystemWriter(ckpt, sync_files=True),
                                          process_group=async_pg)

            settle()
            t0 = time.perf_counter()
            start()
            blocked = time.perf_counter() - t0
            f = box["f"]
            (f.result() if hasattr(f, "result") else f.upload_completion.result())
            durable = time.perf_counter() - t0
            for name, mine in (("dcp_async_blocked", blocked), ("dcp_async_durable", durable)):
                allt = [None] * world
                dist.all_gather_object(allt, mine)
                times.setdefault(name, []).append(max(allt))

            if ckptdb is not None and (trial + args.round) % 2 == 0:
                ckptdb_phases(trial)

            def tsave():
                with open(own, "wb") as f:
                    torch.save(plain, f)
                    f.flush()
                    os.fsync(f.fileno())

            timed("torch_save", tsave)
            timed("torch_load", lambda: torch.load(own, weights_only=True))
            if drop_caches():
                timed("torch_load_cold", lambda: torch.load(own, weights_only=True))
            os.remove(own)
    clean()
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump({"torch": torch.__version__, "size": args.size, "world": world, "data": args.data,
                       "phases": {k: statistics.median(v) for k, v in times.items()}}, f)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=1 << 30, help="total logical bytes (default 1 GiB)")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--data", default="fp32", choices=["fp32", "bf16", "adam", "bytes"])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cols", type=int, default=1024, help="columns of every tensor (default 1024)")
    p.add_argument("--round", type=int, default=0,
                   help="bench-peers' round number: odd rounds run ckptdb's phases first")
    p.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    p.add_argument("--legacy", action="store_true", help="torch 1.13: ShardedTensor save_state_dict/load_state_dict")
    args = p.parse_args()
    tmp = None
    if args.dir is None:
        tmp = args.dir = tempfile.mkdtemp(prefix="bench-torch-", dir=".")
    if args.legacy:
        patch_torch113_dataclass()
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = os.path.join(args.dir, "result.json")
    mp.spawn(run_rank, args=(args, port, result), nprocs=args.world, join=True)
    with open(result) as f:
        print(f.read())
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
