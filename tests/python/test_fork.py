"""A process that saved and then forks (os.fork, multiprocessing's "fork"
start method, DataLoader workers, a launcher or test runner that forks): the
child saves to and loads from the parent's store, or stores of its own,
without hanging, whenever the parent is not saving at the fork (ckptdb closes
the parent's idle writers before a fork and reopens them when needed); a
child forked while the parent saves is refused that store at once, with an
error naming the parent, and the parent's save is unharmed. Runs under
PyTorch 1.13 and 2.x."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
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


def steps_of(path: str) -> list[int]:
    return [s.step for s in ckptdb.Store(path).steps()]


def test_os_fork_child_saves_to_the_store_its_parent_saved_to(tmp_path):
    path = str(tmp_path / "s.ckptdb")
    save_and_check(path, 0, 1)  # the parent's writer was open (cached per store) until the fork

    def child():
        # What the parent committed loads in the child, and the child saves.
        out = {"w": torch.zeros(128, 64), "step": None, "blob": b""}
        ckptdb.load(out, path, step=0)
        assert out["step"] == 1
        save_and_check(path, 1, 2)

    assert in_child(child) == 0
    save_and_check(path, 2, 3)  # the parent goes on (its writer opens again) ...
    assert steps_of(path) == [0, 1, 2]  # ... and sees the child's step
    out = {"w": torch.zeros(128, 64), "step": None, "blob": b""}
    assert ckptdb.load(out, path, step=1) == 1 and out["step"] == 2


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


def test_multiprocessing_fork_child_saves_to_the_store_its_parent_saved_to(tmp_path):
    path = str(tmp_path / "s.ckptdb")
    save_and_check(path, 0, 1)
    p = multiprocessing.get_context("fork").Process(target=_mp_child, args=(path, 1, 2))
    p.start()
    p.join(HANG_S)
    if p.is_alive():
        p.kill()
        p.join()
        pytest.fail("the forked child hung")
    assert p.exitcode == 0
    save_and_check(path, 2, 3)
    assert steps_of(path) == [0, 1, 2]


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


def slow_state() -> dict:
    """16 MiB that a Store(**SLOW) takes seconds to save (zstd at its
    slowest level on one thread): the parent's save is still in flight while
    a child is forked, runs and exits."""
    g = torch.Generator().manual_seed(7)
    return {"big": torch.randn(4 << 20, generator=g), "n": 7}


SLOW = dict(compression="zstd", zstd_level=19, threads=1)


def check_slow_step(path: str, step: int) -> None:
    out = {"big": torch.zeros(4 << 20), "n": None}
    assert ckptdb.load(out, path, step=step) == step
    assert torch.equal(out["big"], slow_state()["big"]) and out["n"] == 7


def refused_at_once(s: ckptdb.Store, parent: int) -> None:
    """In a child: a save to store `s` fails at once, naming the parent,
    and loading what the parent committed works."""
    t0 = time.monotonic()
    with pytest.raises(ckptdb.CheckpointError, match=rf"process {parent}\b.*forked from"):
        ckptdb.save(state(2), s, step=99)
    assert time.monotonic() - t0 < 10, "the refusal was not at once"
    out = {"w": torch.zeros(128, 64), "step": None, "blob": b""}
    ckptdb.load(out, s, step=0)
    assert out["step"] == 1


def test_a_child_forked_during_an_async_save_is_refused_and_the_save_completes(tmp_path):
    path = str(tmp_path / "s.ckptdb")
    s = ckptdb.Store(path, **SLOW)
    ckptdb.save(state(1), s, step=0)
    fut = ckptdb.async_save(slow_state(), s, step=1)
    parent = os.getpid()
    assert in_child(lambda: refused_at_once(s, parent)) == 0
    assert not fut.done(), "the async save finished before the child ran: the test proves nothing"
    fut.result(timeout=HANG_S)
    check_slow_step(path, 1)
    ckptdb.save(state(3), s, step=2)
    assert steps_of(path) == [0, 1, 2]


def test_a_child_forked_during_a_save_in_another_thread_is_refused_and_the_save_completes(tmp_path):
    path = str(tmp_path / "s.ckptdb")
    s = ckptdb.Store(path, **SLOW)
    ckptdb.save(state(1), s, step=0)
    errors = []

    def save():
        try:
            ckptdb.save(slow_state(), s, step=1)
        except BaseException as e:  # noqa: BLE001 - checked below
            errors.append(e)

    t = threading.Thread(target=save)
    t.start()
    time.sleep(0.5)  # the save is under way (it takes seconds)
    parent = os.getpid()
    assert in_child(lambda: refused_at_once(s, parent)) == 0
    assert t.is_alive(), "the save finished before the child ran: the test proves nothing"
    t.join(HANG_S)
    assert not t.is_alive() and not errors
    check_slow_step(path, 1)
    ckptdb.save(state(3), s, step=2)
    assert steps_of(path) == [0, 1, 2]


class _Pids(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([i, os.getpid()])


def test_dataloader_workers_forked_during_an_async_save(tmp_path):
    path = str(tmp_path / "s.ckptdb")
    s = ckptdb.Store(path, **SLOW)
    ckptdb.save(state(1), s, step=0)
    fut = ckptdb.async_save(slow_state(), s, step=1)
    loader = torch.utils.data.DataLoader(_Pids(), batch_size=2, num_workers=2, multiprocessing_context="fork")
    it = iter(loader)  # forks the workers
    assert not fut.done(), "the async save finished before the workers were forked: the test proves nothing"
    batches = list(it)
    del it
    got = torch.cat(batches)
    assert sorted(got[:, 0].tolist()) == list(range(8))
    assert os.getpid() not in got[:, 1].tolist() and len(set(got[:, 1].tolist())) == 2
    fut.result(timeout=HANG_S)
    check_slow_step(path, 1)
    ckptdb.async_save(state(3), s, step=2).result(timeout=HANG_S)  # async saves go on after the fork
    assert steps_of(path) == [0, 1, 2]
