#!/usr/bin/env python3
"""Prints ckptdb-bench's phases beside the PyTorch baselines, as ratios (>1: ckptdb faster).

usage: bench_report.py DIR

DIR holds one ckptdb.N.json (ckptdb-bench --json), torch.N.json and
torch113.N.json (bench_torch.py) per round N: tools/bench-peers.sh runs the
three systems in turn, round after round, so that the machine's drift (disk
write-back, burst credits) falls on all of them alike. Figures are medians
over the rounds; the baselines show their min-max.
"""
import glob
import json
import os
import statistics
import sys


def merge_rounds(paths):
    """The rounds' JSON objects as one: each phase's median, and every value."""
    runs = [json.load(open(p)) for p in sorted(paths)]
    if not runs:
        sys.exit(f"bench_report: no results among {paths}")
    merged = dict(runs[0])
    if "results" in merged:  # ckptdb-bench
        values = {}
        for run in runs:
            for r in run["results"]:
                values.setdefault((r["data"], r["phase"]), []).append(r)
        merged["results"] = [dict(rs[0], seconds=statistics.median(x["seconds"] for x in rs),
                                  all=[x["seconds"] for x in rs]) for rs in values.values()]
        merged["repeat"] = len(runs)
    else:  # bench_torch.py
        values = {}
        for run in runs:
            for k, v in run["phases"].items():
                values.setdefault(k, []).append(v)
        merged["phases"] = {k: statistics.median(v) for k, v in values.items()}
        merged["all"] = values
    return merged


def span(values):
    return f"{min(values):.3f}-{max(values):.3f}" if values else ""


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    ck = merge_rounds(glob.glob(os.path.join(d, "ckptdb.*.json")))
    t2 = merge_rounds(glob.glob(os.path.join(d, "torch.*.json")))
    t1 = merge_rounds(glob.glob(os.path.join(d, "torch113.*.json")))
    phases = {(r["data"], r["phase"]): r for r in ck["results"]}
    data = t2["data"]
    ckp = {ph: phases[(data, ph)]["seconds"] for (d, ph) in phases if d == data}
    gib = ck["size"] / (1 << 30)
    print(f"{gib:.2f} GiB of {data} over {ck['world']} ranks, ckptdb compression {ck['compression']}; "
          f"medians of {ck['repeat']} interleaved rounds; ratios > 1 mean ckptdb is faster\n")
    rows = [("raw write+fsync", ckp["raw write"]), ("raw read", ckp["raw read"]),
            (f"torch {t2['torch']} dcp.save", t2["phases"]["dcp_save"]),
            (f"torch {t2['torch']} dcp.load", t2["phases"]["dcp_load"]),
            (f"torch {t2['torch']} dcp.async_save blocked", t2["phases"]["dcp_async_blocked"]),
            (f"torch {t2['torch']} dcp.async_save durable", t2["phases"]["dcp_async_durable"]),
            (f"torch {t2['torch']} torch.save/rank", t2["phases"]["torch_save"]),
            (f"torch {t2['torch']} torch.load/rank", t2["phases"]["torch_load"]),
            (f"torch {t1['torch']} save_state_dict", t1["phases"]["st_save"]),
            (f"torch {t1['torch']} load_state_dict", t1["phases"]["st_load"])]
    print(f"{'baseline':40} {'seconds':>8} {'GB/s':>7}  min-max")
    for key, label in (("dcp_load_cold", f"torch {t2['torch']} dcp.load cold"),
                       ("torch_load_cold", f"torch {t2['torch']} torch.load/rank cold")):
        if key in t2["phases"]:
            rows.append((label, t2["phases"][key]))
    if "st_load_cold" in t1["phases"]:
        rows.append((f"torch {t1['torch']} load_state_dict cold", t1["phases"]["st_load_cold"]))
    if "raw read cold" in ckp:
        rows.insert(2, ("raw read cold", ckp["raw read cold"]))
    every = {v: k for k, v in t2["phases"].items()}
    every1 = {v: k for k, v in t1["phases"].items()}
    for name, s in rows:
        key = every.get(s) if name.startswith(f"torch {t2['torch']}") else every1.get(s)
        values = (t2["all"] if name.startswith(f"torch {t2['torch']}") else t1["all"]).get(key, [])
        print(f"{name:40} {s:8.3f} {ck['size'] / s / 1e9:7.3f}  {span(values)}")
    stored = phases[(data, "save")].get("stored_bytes", 0)
    ck_all = {ph: phases[(d2, ph)]["all"] for (d2, ph) in phases if d2 == data}
    print(f"\n{'ckptdb phase':14} {'seconds':>8} {'GB/s':>7} {'min-max':>12}   ratios")
    save_like = {"raw": ckp["raw write"], "dcp.save": t2["phases"]["dcp_save"],
                 "torch.save": t2["phases"]["torch_save"], "1.13 save": t1["phases"]["st_save"]}
    load_like = {"raw": ckp["raw read"], "dcp.load": t2["phases"]["dcp_load"],
                 "torch.load": t2["phases"]["torch_load"], "1.13 load": t1["phases"]["st_load"]}
    cold_like = {n: b for n, b in (("raw", ckp.get("raw read cold")), ("dcp.load", t2["phases"].get("dcp_load_cold")),
                                   ("torch.load", t2["phases"].get("torch_load_cold")),
                                   ("1.13 load", t1["phases"].get("st_load_cold"))) if b}
    for ph in ["save", "load", "load fresh", "load cold", "reshard", "async total", "async blocked"]:
        if ph not in ckp or (ph == "load cold" and not cold_like):
            continue
        s = ckp[ph]
        base = save_like if ph in ("save", "async total", "async blocked") else load_like
        if ph == "load cold":
            base = cold_like
        if ph == "async blocked":
            base = {"dcp.async_save blocked": t2["phases"]["dcp_async_blocked"], **save_like}
        elif ph == "async total":
            base = {"dcp.async_save durable": t2["phases"]["dcp_async_durable"], **save_like}
        ratios = "  ".join(f"{b / s:5.2f}x {n}" for n, b in base.items())
        print(f"{ph:14} {s:8.3f} {ck['size'] / s / 1e9:7.3f} {span(ck_all[ph]):>12}   {ratios}")
    ph2 = t2["phases"]
    if "py_save" in ph2:
        print(f"\n{'ckptdb from Python':26} {'seconds':>8} {'min-max':>12}   ratios (>1: the left one is faster)")
        py_rows = [("ckptdb.save", ph2["py_save"], {"C++ save": ckp["save"], "dcp.save": ph2["dcp_save"]}),
                   ("ckptdb.load", ph2["py_load"], {"C++ load": ckp["load"], "dcp.load": ph2["dcp_load"]}),
                   ("ckptdb.async_save blocked", ph2["py_async_blocked"],
                    {"C++ async blocked": ckp.get("async blocked", 0), "dcp.async_save": ph2["dcp_async_blocked"]})]
        if "dcpck_save" in ph2:
            py_rows += [("dcp.save -> ckptdb", ph2["dcpck_save"], {"dcp.save FileSystem": ph2["dcp_save"]}),
                        ("dcp.load <- ckptdb", ph2["dcpck_load"], {"dcp.load FileSystem": ph2["dcp_load"]})]
        keys = {"ckptdb.save": "py_save", "ckptdb.load": "py_load", "ckptdb.async_save blocked": "py_async_blocked",
                "dcp.save -> ckptdb": "dcpck_save", "dcp.load <- ckptdb": "dcpck_load"}
        for name, s, base in py_rows:
            ratios = "  ".join(f"{b / s:5.2f}x {n}" for n, b in base.items() if b)
            print(f"{name:26} {s:8.3f} {span(t2['all'].get(keys[name], [])):>12}   {ratios}")
        for op in ("save", "load"):
            totals, engines = t2["all"].get(f"py_{op}", []), t2["all"].get(f"py_{op}_engine", [])
            if totals and engines:
                layer = [t - e for t, e in zip(totals, engines)]
                share = [x / t for x, t in zip(layer, totals)]
                print(f"Python layer of ckptdb.{op}: {statistics.median(layer) * 1e3:.1f} ms "
                      f"({statistics.median(share):.1%} of it; {min(share):.1%}-{max(share):.1%}), the rest is "
                      f"the C++ engine's {op}")
    amp = phases[(data, "reshard")].get("amplification")
    print(f"\nstored/logical {stored / ck['size']:.3f}; async blocked / save {ckp['async blocked'] / ckp['save']:.1%}; "
          f"reshard/load {ckp['load'] / ckp['reshard']:.2f}"
          + (f"; reshard read amplification {amp:.2f} (chunk bytes read / bytes loaded)" if amp else ""))


if __name__ == "__main__":
    main()
