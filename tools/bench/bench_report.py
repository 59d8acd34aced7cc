#!/usr/bin/env python3
"""Prints ckptdb-bench's phases beside the PyTorch baselines, as ratios (>1: ckptdb faster).

usage: bench_report.py CKPTDB_JSON TORCH_JSON TORCH113_JSON
"""
import json
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    ck = json.load(open(sys.argv[1]))
    t2 = json.load(open(sys.argv[2]))
    t1 = json.load(open(sys.argv[3]))
    phases = {(r["data"], r["phase"]): r for r in ck["results"]}
    data = t2["data"]
    ckp = {ph: phases[(data, ph)]["seconds"] for (d, ph) in phases if d == data}
    gib = ck["size"] / (1 << 30)
    print(f"{gib:.2f} GiB of {data} over {ck['world']} ranks, ckptdb compression {ck['compression']}; "
          f"medians of {ck['repeat']} runs; ratios > 1 mean ckptdb is faster\n")
    rows = [("raw write+fsync", ckp["raw write"]), ("raw read", ckp["raw read"]),
            (f"torch {t2['torch']} dcp.save", t2["phases"]["dcp_save"]),
            (f"torch {t2['torch']} dcp.load", t2["phases"]["dcp_load"]),
            (f"torch {t2['torch']} dcp.async_save blocked", t2["phases"]["dcp_async_blocked"]),
            (f"torch {t2['torch']} dcp.async_save durable", t2["phases"]["dcp_async_durable"]),
            (f"torch {t2['torch']} torch.save/rank", t2["phases"]["torch_save"]),
            (f"torch {t2['torch']} torch.load/rank", t2["phases"]["torch_load"]),
            (f"torch {t1['torch']} save_state_dict", t1["phases"]["st_save"]),
            (f"torch {t1['torch']} load_state_dict", t1["phases"]["st_load"])]
    print(f"{'baseline':40} {'seconds':>8} {'GB/s':>7}")
    for key, label in (("dcp_load_cold", f"torch {t2['torch']} dcp.load cold"),
                       ("torch_load_cold", f"torch {t2['torch']} torch.load/rank cold")):
        if key in t2["phases"]:
            rows.append((label, t2["phases"][key]))
    if "st_load_cold" in t1["phases"]:
        rows.append((f"torch {t1['torch']} load_state_dict cold", t1["phases"]["st_load_cold"]))
    if "raw read cold" in ckp:
        rows.insert(2, ("raw read cold", ckp["raw read cold"]))
    for name, s in rows:
        print(f"{name:40} {s:8.3f} {ck['size'] / s / 1e9:7.3f}")
    stored = phases[(data, "save")].get("stored_bytes", 0)
    print(f"\n{'ckptdb phase':14} {'seconds':>8} {'GB/s':>7}   ratios")
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
        print(f"{ph:14} {s:8.3f} {ck['size'] / s / 1e9:7.3f}   {ratios}")
    ph2 = t2["phases"]
    if "py_save" in ph2:
        print(f"\n{'ckptdb from Python':26} {'seconds':>8}   ratios (>1: the left one is faster)")
        py_rows = [("ckptdb.save", ph2["py_save"], {"C++ save": ckp["save"], "dcp.save": ph2["dcp_save"]}),
                   ("ckptdb.load", ph2["py_load"], {"C++ load": ckp["load"], "dcp.load": ph2["dcp_load"]}),
                   ("ckptdb.async_save blocked", ph2["py_async_blocked"],
                    {"C++ async blocked": ckp.get("async blocked", 0), "dcp.async_save": ph2["dcp_async_blocked"]})]
        if "dcpck_save" in ph2:
            py_rows += [("dcp.save -> ckptdb", ph2["dcpck_save"], {"dcp.save FileSystem": ph2["dcp_save"]}),
                        ("dcp.load <- ckptdb", ph2["dcpck_load"], {"dcp.load FileSystem": ph2["dcp_load"]})]
        for name, s, base in py_rows:
            ratios = "  ".join(f"{b / s:5.2f}x {n}" for n, b in base.items() if b)
            print(f"{name:26} {s:8.3f}   {ratios}")
    print(f"\nstored/logical {stored / ck['size']:.3f}; async blocked / save {ckp['async blocked'] / ckp['save']:.1%}; "
          f"reshard/load {ckp['load'] / ckp['reshard']:.2f}")


if __name__ == "__main__":
    main()
