"""One phase of tools/bench-s3.sh in a process of its own (so that every
load is cold: a fresh process, fresh target memory), printing one JSON line;
or, with --report DIR, the medians of every phase's JSON files there.

Systems, on the same state dict (--size bytes of fp32 in --tensors tensors of
--cols columns, deterministic values) in the same bucket:
  ckptdb      ckptdb.save / ckptdb.load into s3://BUCKET/ckptdb-rN; after each
              load, the step's own data objects GET whole by one curl into
              fresh memory (the same bytes: the load's second baseline)
  ckptdb_dcp  dcp.save / dcp.load through ckptdb.torch's StorageWriter/Reader
  s3tc        dcp.save / dcp.load through AWS's s3torchconnector
              S3StorageWriter/S3StorageReader (path style, --s3tc-threads)
  raw         the server's throughput: --raw-objects objects of the same bytes
              PUT, then GET, over as many parallel connections by one curl
              (and from as many threads by s3torchconnector's client)
  reshard     ckptdb: each tensor's left column half read from the ckptdb
              step (Store.read of a slice): its time and CPU seconds, then
              through a counting proxy the bytes the server sent / bytes
              needed; then a whole load: the same, and its GET and HEAD
              requests
The server's settings come from AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION (the script sets them).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

REGION = "us-east-1"


def shapes(size: int, tensors: int, cols: int) -> list[tuple[int, int]]:
    rows = max(1, size // (tensors * cols * 4))
    return [(rows, cols)] * tensors


def make_state(size: int, tensors: int, cols: int):
    import torch
    g = torch.Generator().manual_seed(1234)
    return {f"layers.{i}.weight": torch.randn(*s, generator=g) for i, s in enumerate(shapes(size, tensors, cols))}


def fresh_state(size: int, tensors: int, cols: int):
    import torch
    return {f"layers.{i}.weight": torch.empty(*s) for i, s in enumerate(shapes(size, tensors, cols))}


def digest(sd) -> int:
    import torch
    return int(sum(int(t.view(torch.int32).to(torch.int64).sum()) * (i + 1) for i, t in enumerate(sd.values())))


def endpoint() -> str:
    return os.environ["AWS_ENDPOINT_URL_S3"]


def s3tc_client():
    from s3torchconnector._s3client import S3Client, S3ClientConfig
    return S3Client(REGION, endpoint=endpoint(), s3client_config=S3ClientConfig(force_path_style=True))


def s3tc_fs(reader_constructor=None):
    from s3torchconnector.dcp import S3FileSystem
    # S3StorageWriter/Reader build their S3FileSystem without an endpoint:
    # the same file system, given a client that reaches this server.
    kw = {"reader_constructor": reader_constructor} if reader_constructor is not None else {}
    return S3FileSystem(REGION, s3_client=s3tc_client(), **kw)


def timed(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def server_cpu() -> float:
    """CPU seconds the server's process has used so far (user + system;
    --server-pid, else 0)."""
    pid = os.environ.get("BENCH_S3_SERVER_PID")
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(f, children: bool = False) -> dict:
    """f() timed, with the CPU seconds it cost this process (or, children:
    the processes it ran and waited for) and the server."""
    import resource
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    r0, s0 = resource.getrusage(who), server_cpu()
    seconds = timed(f)
    r1, s1 = resource.getrusage(who), server_cpu()
    return {"seconds": seconds, "client_cpu": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
            "server_cpu": s1 - s0}


def phase_save(a) -> dict:
    import torch.distributed.checkpoint as dcp
    sd = make_state(a.size, a.tensors, a.cols)
    out = {"digest": digest(sd)}
    url = f"s3://{a.bucket}/{a.system}-r{a.round}"
    if a.system == "ckptdb":
        import ckptdb
        out.update(measured(lambda: ckptdb.save(sd, url, step=1)))
    elif a.system == "ckptdb_dcp":
        import ckptdb.torch
        out.update(measured(lambda: dcp.save(sd, storage_writer=ckptdb.torch.StorageWriter(url, step=1))))
    elif a.system == "s3tc":
        from s3torchconnector.dcp import S3StorageWriter
        from s3torchconnector._s3client import S3ClientConfig

        def save():
            w = S3StorageWriter(REGION, url, s3client_config=S3ClientConfig(force_path_style=True),
                                thread_count=a.s3tc_threads)
            w.fs = s3tc_fs()
            w.path = w.fs.init_path(url)
            dcp.save(sd, storage_writer=w)
        out.update(measured(save))
    return out


def phase_load(a) -> dict:
    import torch.distributed.checkpoint as dcp
    sd = fresh_state(a.size, a.tensors, a.cols)
    url = f"s3://{a.bucket}/{a.system}-r{a.round}"
    out = {}
    if a.system == "ckptdb":
        import ckptdb
        out.update(measured(lambda: ckptdb.load(sd, url, step=1)))
        # The baseline of the same bytes: the step's own objects (the one
        # save under this URL), whole, by one curl into fresh memory, right
        # after the load, the loaded tensors freed first.
        out["digest"] = digest(sd)
        del sd
        keys = [i.key for page in s3tc_client().list_objects(a.bucket, f"{a.system}-r{a.round}/data/")
                for i in page.object_info]
        if not keys:
            raise SystemExit(f"bench-s3: no data objects under s3://{a.bucket}/{a.system}-r{a.round}/data/")
        out.update({f"own_get_fresh_{k}": v for k, v in curl_get_fresh(a, keys).items()})
        return out
    elif a.system == "ckptdb_dcp":
        import ckptdb.torch
        out.update(measured(lambda: dcp.load(sd, storage_reader=ckptdb.torch.StorageReader(url, step=1))))
    elif a.system == "s3tc":
        from s3torchconnector.dcp import S3StorageReader
        from s3torchconnector._s3client import S3ClientConfig

        def load():
            r = S3StorageReader(REGION, url, s3client_config=S3ClientConfig(force_path_style=True))
            r.fs = s3tc_fs(r._reader_constructor)
            r.path = r.fs.init_path(url)
            dcp.load(sd, storage_reader=r)
        out.update(measured(load))
    out["digest"] = digest(sd)
    return out


def phase_raw(a) -> dict:
    """PUT then GET of --raw-objects objects holding the same bytes as the
    state dict, one thread per object."""
    client = s3tc_client()
    n = a.raw_objects
    per = a.size // n
    block = os.urandom(1 << 20)
    body = memoryview(block * (per // len(block)) + block[:per % len(block)])
    keys = [f"raw-r{a.round}/{i}" for i in range(n)]

    def put(key):
        with client.put_object(a.bucket, key) as w:
            for off in range(0, per, 8 << 20):
                w.write(body[off:off + (8 << 20)])

    def get(key):
        r = client.get_object(a.bucket, key)
        got = 0
        buf = bytearray(8 << 20)
        while True:
            k = r.readinto(buf)
            if not k:
                break
            got += k
        assert got == per, (key, got, per)

    with ThreadPoolExecutor(n) as pool:
        t_put = timed(lambda: list(pool.map(put, keys)))
        t_get = timed(lambda: list(pool.map(get, keys)))
    out = {"s3tc_put_seconds": t_put, "s3tc_get_seconds": t_get, "bytes": per * n}
    out.update(raw_curl(a, body, keys))
    return out


def raw_curl(a, body: memoryview, keys: list[str]) -> dict:
    """The same objects PUT, then GET, by one curl over as many parallel
    connections (C, no Python in the data path): the server's rate. GET
    twice: into /dev/null (nothing kept: the server's rate), and into fresh
    files on /dev/shm (memory the kernel allocates as the bytes land, as a
    load into fresh tensors does), removed after."""
    import subprocess
    import tempfile
    base = curl_base(len(keys))
    urls = [f"{endpoint()}/{a.bucket}/curl-{k}" for k in keys]
    out = {}
    with tempfile.NamedTemporaryFile(dir=SHM) as f:
        f.write(body)
        f.flush()
        put = base + [x for u in urls for x in ("-T", f.name, u)]
        get = base + [x for u in urls for x in ("-o", "/dev/null", u)]
        quiet = {"check": True, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        for name, cmd in (("put", put), ("get", get)):
            m = measured(lambda: subprocess.run(cmd, **quiet), children=True)
            out.update({f"{name}_{k}": v for k, v in m.items()})
    out.update({f"get_fresh_{k}": v for k, v in curl_get_fresh(a, [f"curl-{k}" for k in keys]).items()})
    return out


SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None


def curl_base(connections: int) -> list[str]:
    """curl with SigV4 for the bench's server, `connections` transfers at once."""
    sign = ["--aws-sigv4", f"aws:amz:{REGION}:s3", "-u",
            f"{os.environ['AWS_ACCESS_KEY_ID']}:{os.environ['AWS_SECRET_ACCESS_KEY']}",
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
    return ["curl", "-sS", "-f", "-Z", "--parallel-max", str(connections), *sign]


def curl_get_fresh(a, keys: list[str]) -> dict:
    """The objects `keys` GET whole by one curl, a connection each (curl
    allows 300 at most), into fresh files on /dev/shm (removed after):
    measured()'s figures."""
    import shutil
    import subprocess
    import tempfile
    fresh = tempfile.mkdtemp(dir=SHM)
    try:
        get = curl_base(min(len(keys), 300)) + [x for i, k in enumerate(keys)
                                      for x in ("-o", os.path.join(fresh, str(i)), f"{endpoint()}/{a.bucket}/{k}")]
        return measured(lambda: subprocess.run(get, check=True, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL), children=True)
    finally:
        shutil.rmtree(fresh)


class CountingProxy:
    """A TCP forwarder on 127.0.0.1 to the server that counts the bytes the
    server sends back (the bodies of GETs, with their headers) and the
    requests sent to it of `methods` (GET and HEAD by default: reads send no
    bodies, so every request line is one; with methods that send bodies, a
    body holding "PUT /" would count too, which random bytes all but never
    do)."""

    def __init__(self, host: str, port: int, methods: tuple[str, ...] = ("GET", "HEAD")) -> None:
        self.target = (host, port)
        self.lines = [m.encode() + b" /" for m in methods]
        self.longest = max(len(x) for x in self.lines)
        self.received = 0
        self.requests = 0
        self._lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self.sock.accept()
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, src, dst, count: bool) -> None:
        tail = b""  # a request line may span two reads
        try:
            while True:
                data = src.recv(1 << 20)
                if not data:
                    break
                if count:
                    with self._lock:
                        self.received += len(data)
                else:
                    seen = tail + data
                    n = sum(seen.count(x) for x in self.lines)
                    tail = seen[-(self.longest - 1):]
                    n -= sum(tail.count(x) for x in self.lines)  # counted with the next read
                    with self._lock:
                        self.requests += n
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def phase_reshard(a) -> dict:
    """Reads the left column half of every tensor of round's ckptdb step,
    timed with its CPU seconds straight from the server, then through the
    counting proxy (Python threads in this process: not timed): bytes
    fetched over bytes needed, and the same for a whole load (the step's
    own sharding)."""
    import ckptdb
    url = f"s3://{a.bucket}/ckptdb-r{a.round}"
    half = a.cols // 2

    def halves(s):
        return [s.read(1, f"layers.{i}.weight", (slice(None), slice(0, half))) for i in range(a.tensors)]

    with ckptdb.Store(url) as s:
        s.entries(1)
        direct = measured(lambda: halves(s))
    from urllib.parse import urlparse
    u = urlparse(endpoint())
    proxy = CountingProxy(u.hostname, u.port)
    os.environ["AWS_ENDPOINT_URL_S3"] = os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{proxy.port}"
    with ckptdb.Store(url) as s:
        s.entries(1)  # the step's metadata: counted apart
        before = proxy.received
        halves(s)
        columns = proxy.received - before
    needed_half = sum(r * half * 4 for r, _ in shapes(a.size, a.tensors, a.cols))
    sd = fresh_state(a.size, a.tensors, a.cols)
    before, requests = proxy.received, proxy.requests
    ckptdb.load(sd, url, step=1)
    whole, requests = proxy.received - before, proxy.requests - requests
    needed = sum(r * c * 4 for r, c in shapes(a.size, a.tensors, a.cols))
    return {"column_half_fetched": columns, "column_half_needed": needed_half,
            "column_half_seconds": direct["seconds"], "column_half_client_cpu": direct["client_cpu"],
            "column_half_server_cpu": direct["server_cpu"],
            "load_fetched": whole, "load_needed": needed, "load_requests": requests}


def report(d: str) -> None:
    rows: dict[str, list[dict]] = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".json"):
            rows.setdefault(name.split(".")[0], []).append(json.load(open(os.path.join(d, name))))

    def med(key: str, field: str) -> tuple[float, float, float] | None:
        v = [r[field] for r in rows.get(key, []) if field in r]
        return (statistics.median(v), min(v), max(v)) if v else None

    def fmt(m) -> str:
        return f"{m[0]:.3f} ({m[1]:.3f}-{m[2]:.3f})" if m else "-"

    def cpu(key: str, prefix: str = "") -> str:
        c, v = med(key, prefix + "client_cpu"), med(key, prefix + "server_cpu")
        return f"  CPU s: client {c[0]:.2f}, server {v[0]:.2f}" if c and v else ""

    size = rows["raw"][0]["bytes"] if "raw" in rows else 0
    print(f"bench-s3: {len(rows.get('raw', []))} rounds; medians (min-max) in seconds; ratios > 1: ckptdb faster; "
          "CPU: medians of the CPU seconds the client's and the server's processes used")
    raw_put, raw_get = med("raw", "put_seconds"), med("raw", "get_seconds")
    raw_fresh = med("raw", "get_fresh_seconds")
    for label, m, prefix in (("raw PUT", raw_put, "put_"), ("raw GET into /dev/null", raw_get, "get_"),
                             ("raw GET into fresh memory (/dev/shm)", raw_fresh, "get_fresh_")):
        print(f"{label}  {fmt(m)}  {size / m[0] / 1e9:.2f} GB/s{cpu('raw', prefix)}" if m else f"{label} -")
    for kind in ("put", "get"):
        m = med("raw", f"s3tc_{kind}_seconds")
        if m:
            print(f"raw {kind.upper()} by s3torchconnector's client (a thread per object): {fmt(m)}  "
                  f"{size / m[0] / 1e9:.2f} GB/s")
    s3tc_save, s3tc_load = med("save-s3tc", "seconds"), med("load-s3tc", "seconds")
    for system in ("ckptdb", "ckptdb_dcp", "s3tc"):
        for kind, raw, peer in (("save", raw_put, s3tc_save), ("load", raw_get, s3tc_load)):
            m = med(f"{kind}-{system}", "seconds")
            if not m:
                continue
            line = f"{system:10s} {kind}  {fmt(m)}  {size / m[0] / 1e9:.2f} GB/s"
            if system != "s3tc" and peer:
                line += f"  vs s3torchconnector {peer[0] / m[0]:.2f}x"
            if raw:
                line += f"  vs raw {raw[0] / m[0]:.2f}x"
            if kind == "load" and raw_fresh:
                line += f" (into fresh memory {raw_fresh[0] / m[0]:.2f}x)"
            line += cpu(f"{kind}-{system}")
            # Cost per byte: CPU seconds against the raw transfer's (a save
            # against the raw PUT, a load against the raw GET into fresh memory).
            base = "put_" if kind == "save" else "get_fresh_"
            c, v = med(f"{kind}-{system}", "client_cpu"), med(f"{kind}-{system}", "server_cpu")
            rc, rv = med("raw", base + "client_cpu"), med("raw", base + "server_cpu")
            if c and v and rc and rv:
                line += f" = {c[0] / rc[0]:.2f}x / {v[0] / rv[0]:.2f}x raw"
            own = f"{kind}-{system}"
            oc, ov = med(own, "own_get_fresh_client_cpu"), med(own, "own_get_fresh_server_cpu")
            if c and v and oc and ov:
                # The same objects (the step's own), whole, into fresh
                # memory: the bytes the load needs, at the server's cost.
                line += (f"; vs a raw GET of the step's own objects into fresh memory (CPU s: client {oc[0]:.2f}, "
                         f"server {ov[0]:.2f}): {c[0] / oc[0]:.2f}x / {v[0] / ov[0]:.2f}x")
            print(line)
    for r in rows.get("reshard", []):
        print(f"reshard (column halves, Store.read): {r['column_half_seconds']:.3f} s, CPU s: client "
              f"{r['column_half_client_cpu']:.2f}, server {r['column_half_server_cpu']:.2f}; through a proxy: "
              f"fetched/needed {r['column_half_fetched'] / r['column_half_needed']:.3f}; "
              f"whole load fetched/needed {r['load_fetched'] / r['load_needed']:.3f} "
              f"in {r.get('load_requests', '?')} GET/HEAD requests")
    bad = [name for name, rs in rows.items() if name.startswith("load-") and
           any(r["digest"] != rows["save-" + name[5:]][0]["digest"] for r in rs)]
    if bad:
        print(f"bench-s3: LOADED VALUES DIFFER from the saved ones: {bad}")
        sys.exit(1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--phase", choices=["save", "load", "raw", "reshard"])
    p.add_argument("--system", choices=["ckptdb", "ckptdb_dcp", "s3tc"], default="ckptdb")
    p.add_argument("--bucket")
    p.add_argument("--round", type=int, default=1)
    p.add_argument("--size", type=int, default=512 << 20)
    p.add_argument("--tensors", type=int, default=8)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--raw-objects", type=int, default=16)
    p.add_argument("--s3tc-threads", type=int, default=8)
    p.add_argument("--report")
    a = p.parse_args()
    if a.report:
        report(a.report)
        return
    import warnings
    warnings.filterwarnings("ignore")
    out = {"save": phase_save, "load": phase_load, "raw": phase_raw, "reshard": phase_reshard}[a.phase](a)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
