"""Steps that know how good they are: metrics and notes committed with the
step, keep-best retention in the commit, the best step by a metric, from
Python and from the `ckptdb` command. Runs under PyTorch 1.13 and 2.x."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch

import ckptdb

LOSS = [2.5, 2.1, 1.9, 2.0, 1.7, 1.8, 1.75, 1.95, 1.72, 1.9]


def model(step: int) -> dict:
    g = torch.Generator().manual_seed(step)
    return {"w": torch.randn(64, 16, generator=g), "step": step}


def test_a_training_loop_keeps_the_three_best_and_the_newest(tmp_path):
    store = ckptdb.Store(tmp_path / "run.ckptdb", keep_best=3, best_metric="val_loss")
    for step, loss in enumerate(LOSS):
        ckptdb.save(model(step), store, step=step, metrics={"val_loss": loss, "lr": 1e-3 / (step + 1)},
                    note=json.dumps({"commit": f"abc{step}"}))
    steps = store.steps()
    assert [s.step for s in steps] == [4, 6, 8, 9]
    assert steps[0].metrics == {"val_loss": 1.7, "lr": 1e-3 / 5}
    assert json.loads(steps[0].note) == {"commit": "abc4"}
    assert store.best() == 4
    assert store.best("val_loss", "max") == 9
    assert store.best("accuracy") is None
    out = {"w": torch.zeros(64, 16), "step": None}
    assert ckptdb.load(out, store, step="best") == 4
    assert torch.equal(out["w"], model(4)["w"]) and out["step"] == 4
    # A store given by path has no best metric: the step names it instead.
    assert ckptdb.load(out, str(tmp_path / "run.ckptdb"), step="best:val_loss") == 4
    assert ckptdb.load(out, str(tmp_path / "run.ckptdb"), step="best:lr:max") == 4
    # Without a best metric, "best" is a tag name, as before metrics existed.
    with pytest.raises(ckptdb.NotFoundError, match="best"):
        ckptdb.load(out, str(tmp_path / "run.ckptdb"), step="best")
    ckptdb.Store(tmp_path / "run.ckptdb").tag(8, "best")
    assert ckptdb.load(out, str(tmp_path / "run.ckptdb"), step="best") == 8
    assert ckptdb.load(out, store, step="best") == 4  # the store's best_metric wins


def test_max_mode_and_steps_without_the_metric(tmp_path):
    store = ckptdb.Store(tmp_path / "s.ckptdb", keep_best=2, best_metric="acc", best_mode="max")
    ckptdb.save(model(0), store, step=0, metrics={"acc": 0.5})
    ckptdb.save(model(1), store, step=1)  # no metric: kept while it is the newest
    ckptdb.save(model(2), store, step=2, metrics={"acc": 0.9})
    ckptdb.save(model(3), store, step=3, metrics={"acc": 0.7})
    ckptdb.save(model(4), store, step=4, metrics={"acc": 0.8})
    assert [s.step for s in store.steps()] == [2, 4]
    assert store.best() == 2
    # Ties: of equal values the newer step ranks first.
    ckptdb.save(model(5), store, step=5, metrics={"acc": 0.9})
    assert store.best() == 5
    assert [s.step for s in store.steps()] == [2, 5]


def test_async_save_and_gc_keep_best(tmp_path):
    path = tmp_path / "s.ckptdb"
    for step, loss in enumerate([3.0, 1.0, 2.0, 4.0]):
        ckptdb.async_save(model(step), path, step=step, metrics={"loss": loss}, note=f"n{step}").result()
    store = ckptdb.Store(path)
    assert [(s.step, s.metrics["loss"], s.note) for s in store.steps()] == [
        (0, 3.0, "n0"), (1, 1.0, "n1"), (2, 2.0, "n2"), (3, 4.0, "n3")]
    dry = store.gc(keep_best=1, best_metric="loss", dry_run=True)
    assert dry["pruned"] == [0, 2]
    assert [s.step for s in store.steps()] == [0, 1, 2, 3]
    assert store.gc(keep_best=1, best_metric="loss")["pruned"] == [0, 2]
    assert [s.step for s in store.steps()] == [1, 3]
    with pytest.raises(ValueError, match="best_metric"):
        store.gc(keep_best=1)


def test_bad_metrics_are_refused_and_commit_nothing(tmp_path):
    path = str(tmp_path / "s.ckptdb")
    ckptdb.save(model(0), path, step=0, metrics={"loss": 1.0})
    with pytest.raises(TypeError, match="metric 'loss' must be a number"):
        ckptdb.save(model(1), path, step=1, metrics={"loss": "low"})
    with pytest.raises(TypeError, match="metrics must be a dict"):
        ckptdb.save(model(1), path, step=1, metrics=[("loss", 1.0)])
    with pytest.raises(ValueError, match="metric 'loss' is nan"):
        ckptdb.save(model(1), path, step=1, metrics={"loss": float("nan")})
    with pytest.raises(ValueError, match="whitespace"):
        ckptdb.save(model(1), path, step=1, metrics={"val loss": 1.0})
    with pytest.raises(ValueError, match="keep_best=2 needs best_metric"):
        ckptdb.Store(path, keep_best=2)
    # Tensors and numpy scalars are numbers.
    ckptdb.save(model(1), path, step=1, metrics={"loss": torch.tensor(0.5), "n": 3})
    assert ckptdb.Store(path).steps()[-1].metrics == {"loss": 0.5, "n": 3.0}
    assert [s.step for s in ckptdb.Store(path).steps()] == [0, 1]


def test_ckptdb_ls_sorts_by_a_metric_and_prints_json(tmp_path):
    cli = os.environ.get("CKPTDB_CLI")
    if not cli:
        pytest.skip("CKPTDB_CLI is not set (ctest sets it)")
    path = str(tmp_path / "s.ckptdb")
    for step, loss in enumerate([2.0, 1.0, 3.0]):
        ckptdb.save(model(step), path, step=step, metrics={"val_loss": loss}, note=f"run {step}")
    out = subprocess.run([cli, "ls", path, "--sort", "val_loss"], capture_output=True, text=True, check=True).stdout
    rows = out.splitlines()
    assert rows[0].split() == ["STEP", "CREATED", "WORLD", "ENTRIES", "BYTES", "ADDED", "val_loss", "TAGS"]
    assert [r.split()[0] for r in rows[1:]] == ["1", "0", "2"]
    rows = json.loads(subprocess.run([cli, "ls", path, "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    assert [(r["step"], r["metrics"], r["note"]) for r in rows] == [
        (0, {"val_loss": 2.0}, "run 0"), (1, {"val_loss": 1.0}, "run 1"), (2, {"val_loss": 3.0}, "run 2")]
    info = json.loads(subprocess.run([cli, "info", path, "best:val_loss", "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    assert (info["step"], info["metrics"], info["note"]) == (1, {"val_loss": 1.0}, "run 1")


def _torch_version() -> tuple[int, int]:
    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


@pytest.mark.skipif(_torch_version() < (2, 2), reason="ckptdb.torch needs torch >= 2.2")
def test_the_dcp_writer_commits_metrics(tmp_path):
    import torch.distributed.checkpoint as dcp
    import ckptdb.torch
    path = str(tmp_path / "s.ckptdb")
    writer = ckptdb.torch.StorageWriter(path, step=0, metrics={"val_loss": 0.5}, note="dcp")
    dcp.save({"model": {"w": torch.ones(4)}}, storage_writer=writer, no_dist=True)
    writer.step, writer.metrics = 1, {"val_loss": 0.25}
    dcp.save({"model": {"w": torch.zeros(4)}}, storage_writer=writer, no_dist=True)
    steps = ckptdb.Store(path).steps()
    assert [(s.step, s.metrics, s.note) for s in steps] == [(0, {"val_loss": 0.5}, "dcp"),
                                                             (1, {"val_loss": 0.25}, "dcp")]
    assert ckptdb.Store(path).best("val_loss") == 1
