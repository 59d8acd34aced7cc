"""A process that saved and then forks (os.fork, multiprocessing's "fork"
start method, a launcher or test runner that forks): the child saves and
loads without hanging; a store the parent holds open for writing is refused
in the child with a clear error. Runs under PyTorch 1.13 and 2.x."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest
import torch

import ckptdb

HANG_S = 60


def state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(128, 64, generator=g), "step": seed, "blob": b"\x00loader\xff"}


def save_and_check(path: str, step: int, seed: int) -> None:
    ckptdb.save(state(seed), path, step=step)
    out = {"w": torch.zeros(128, 64), "step": None, "blob": b""}
    ckptdb.load(out, path, step=step)
    want = state(seed)
    assert torch.equal(out["w"], want["w"]) and out["step"] == seed and out["blob"] == want["blob"]


def wait_child(pid: int) -> int:
    """The child's exit code; a child still running after HANG_S is killed
    and the test fails (it hung)."""
    deadline = time.monotonic() + HANG_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child hung (killed after {HANG_S} s)")
        time.sleep(0.02)


def in_child(fn) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn()
            code = 0
        except BaseException as e:  # reported through the exit code, with the error on stderr
            os.write(2, f"child: {type(e).__name__}: {e}\n".encode())
        finally:
            os._exit(code)
    return wait_child(pid)


def test_os_fork_child_saves_to_its_own_store_while_the_parent_holds_its_own(tmp_path):
    parent = str(tmp_path / "parent.ckptdb")
    save_and_check(parent, 0, 1)  # the parent's writer stays open (cached per store)
    assert in_child(lambda: (save_and_check(str(tmp_path / "child.ckptdb"), 0, 2),
                             save_and_check(str(tmp_path / "child.ckptdb"), 1, 3))) == 0
    save_and_check(parent, 1, 4)  # the parent goes on
    assert [s.step for s in ckptdb.Store(str(tmp_path / "child.ckptdb")).steps()] == [0, 1]


def test_os_fork_child_is_refused_the_store_its_parent_holds(tmp_path):
    path = str(tmp_path / "s.ckptdb")
    save_and_check(path, 0, 1)

    def child():
        with pytest.raises(ckptdb.CheckpointError, match=r"fork|another process"):
            ckptdb.save(state(2), path, step=1)
        # Reading what the parent committed works in the child.
        out = {"w": torch.zeros(128, 64), "step": None, "blob": b""}
        ckptdb.load(out, path, step=0)
        assert out["step"] == 1

    assert in_child(child) == 0
    save_and_check(path, 1, 3)
    assert [s.step for s in ckptdb.Store(path).steps()] == [0, 1]


def test_os_fork_child_saves_to_the_store_its_parent_closed(tmp_path):
    path = str(tmp_path / "s.ckptdb")
    save_and_check(path, 0, 1)
    ckptdb.Store(path).close()
    assert in_child(lambda: save_and_check(path, 1, 2)) == 0
    save_and_check(path, 2, 3)
    assert [s.step for s in ckptdb.Store(path).steps()] == [0, 1, 2]


def _mp_child(path: str, step: int, seed: int) -> None:
    save_and_check(path, step, seed)


def test_multiprocessing_fork_children_save(tmp_path):
    save_and_check(str(tmp_path / "parent.ckptdb"), 0, 1)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_mp_child, args=(str(tmp_path / f"c{i}.ckptdb"), 0, 10 + i)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(HANG_S)
    hung = [p for p in procs if p.is_alive()]
    for p in hung:
        p.kill()
        p.join()
    assert not hung, "a forked child hung"
    assert [p.exitcode for p in procs] == [0, 0, 0]
    for i in range(3):
        assert [s.step for s in ckptdb.Store(str(tmp_path / f"c{i}.ckptdb")).steps()] == [0]


def test_async_save_in_a_forked_child(tmp_path):
    path = str(tmp_path / "parent.ckptdb")
    ckptdb.async_save(state(1), path, step=0).result()

    def child():
        # The parent's async saver is not the child's: the child's own store
        # saves in the background as usual.
        ckptdb.async_save(state(2), str(tmp_path / "child.ckptdb"), step=0).result(timeout=HANG_S)
        out = {"w": torch.zeros(128, 64), "step": None, "blob": b""}
        ckptdb.load(out, str(tmp_path / "child.ckptdb"), step=0)
        assert out["step"] == 2

    assert in_child(child) == 0
    ckptdb.async_save(state(3), path, step=1).result()
