"""What was saved comes back as it was: a bytes value as bytes, any other
object as that object, whatever the target holds in its place (None, a fresh
dict, bytes), through ckptdb.load, async saves, Store.read and in another
process. Steps written before the encoding was recorded load as they did.
Runs under PyTorch 1.13 and 2.x."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import ckptdb
from ckptdb import _ckptdb
from conftest import _child_env

BLOB = b"\x00loader\xff"                      # not a pickle
LOOKS_PICKLED = pickle.dumps({"not": "this"})  # bytes that happen to be a valid pickle


def values() -> dict:
    return {"blob": BLOB, "looks_pickled": LOOKS_PICKLED, "empty": b"", "array": bytearray(b"ab"),
            "text": "run-7", "count": 3, "ratio": 0.5, "pair": (1, "a"), "list": [0.9, 0.999], "none": None,
            "flag": True}


def expect_same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for k, v in want.items():
        assert type(got[k]) is type(v), (k, got[k])
        assert got[k] == v, k


PLACEHOLDERS = [None, {}, b"", bytearray(), 0, "x"]


def test_the_issue_repro_bytes_into_none(store):
    ckptdb.save({"extra": {"blob": BLOB}}, store, 0)
    target = {"extra": {"blob": None}}
    ckptdb.load(target, store)
    assert target == {"extra": {"blob": BLOB}}


@pytest.mark.parametrize("placeholder", PLACEHOLDERS, ids=repr)
def test_every_value_comes_back_as_its_own_type_whatever_the_placeholder(store, placeholder):
    ckptdb.save({"extra": values(), "w": torch.ones(2)}, store, 1)
    target = {"extra": {k: placeholder for k in values()}, "w": torch.zeros(2)}
    ckptdb.load(target, store, 1)
    expect_same(target["extra"], values())
    # A valid pickle saved as bytes stays bytes (it is not unpickled).
    assert target["extra"]["looks_pickled"] == LOOKS_PICKLED


def test_objects_of_types_ckptdb_does_not_store_natively_come_back_whole(store):
    sd = {"complex": torch.tensor([1 + 2j]), "hp": {"betas": (0.9, 0.95)}, "u32": np.arange(3, dtype=np.uint32)}
    ckptdb.save(sd, store, 2)
    target = {"complex": None, "hp": {"betas": None}, "u32": b""}
    ckptdb.load(target, store, 2)
    assert torch.equal(target["complex"], sd["complex"]) and target["hp"] == {"betas": (0.9, 0.95)}
    assert (target["u32"] == sd["u32"]).all() and target["u32"].dtype == np.uint32


def test_async_saves_record_the_same(store):
    ckptdb.async_save({"extra": values()}, store, 3).result()
    target = {"extra": {k: None for k in values()}}
    ckptdb.load(target, store, 3)
    expect_same(target["extra"], values())
    ckptdb.Store(store).close()


def test_store_read_gives_the_saved_values_and_read_bytes_the_stored_bytes(store):
    ckptdb.save({"extra": values(), "w": torch.ones(2)}, store, 4)
    s = ckptdb.Store(store)
    encodings = {e.fqn: e.bytes_encoding for e in s.entries(4)}
    assert encodings["w"] == "" and encodings["extra.blob"] == "raw" and encodings["extra.looks_pickled"] == "raw"
    assert encodings["extra.array"] == "pickle" and encodings["extra.text"] == "pickle"
    got = {k: s.read(4, f"extra.{k}") for k in values()}
    expect_same(got, values())
    assert s.read_object(4, "extra.blob") == BLOB and s.read_object(4, "extra.count") == 3
    assert s.read_bytes(4, "extra.blob") == BLOB
    assert pickle.loads(s.read_bytes(4, "extra.text")) == "run-7"
    with pytest.raises(ValueError, match="'w' of step 4 is a tensor"):
        s.read_bytes(4, "w")
    s.close()


def test_another_process_gets_the_same_values(store):
    ckptdb.save({"extra": values()}, store, 5)
    script = textwrap.dedent(f"""
        import ckptdb
        target = {{"extra": {{k: None for k in {sorted(values())!r}}}}}
        ckptdb.load(target, {store!r}, 5)
        print(repr(sorted((k, type(v).__name__, v) for k, v in target["extra"].items())))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_child_env(),
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    want = sorted((k, type(v).__name__, v) for k, v in values().items())
    assert out.stdout.strip().splitlines()[-1] == repr(want)


def test_raw_entries_as_the_cpp_api_writes_them_load_as_bytes(store):
    # StateDict::AddBytes records the bytes as raw (tests/save_load_test.cc);
    # the binding's add_bytes has the same default.
    sd = _ckptdb.StateDict()
    sd.add_bytes("rng", LOOKS_PICKLED)
    s = ckptdb.Store(store)
    _ckptdb.save(sd, s._writer(), 6, None, 0)
    target = {"rng": None}
    ckptdb.load(target, s, 6)
    assert target == {"rng": LOOKS_PICKLED}
    s.close()


def test_steps_written_before_encodings_were_recorded_load_as_then(store):
    # What a ckptdb before the encodings wrote: the bytes, no encoding.
    sd = _ckptdb.StateDict()
    sd.add_bytes("obj", pickle.dumps(5), "unrecorded")
    sd.add_bytes("blob", BLOB, "unrecorded")
    s = ckptdb.Store(store)
    _ckptdb.save(sd, s._writer(), 7, None, 0)
    assert {e.fqn: e.bytes_encoding for e in s.entries(7)} == {"obj": "unrecorded", "blob": "unrecorded"}
    # Decoded by the target's kind, as then: bytes into bytes, else unpickled.
    target = {"obj": None, "blob": b""}
    ckptdb.load(target, s, 7)
    assert target == {"obj": 5, "blob": BLOB}
    target = {"obj": b"", "blob": bytearray()}
    ckptdb.load(target, s, 7)
    assert target == {"obj": pickle.dumps(5), "blob": bytearray(BLOB)} and type(target["blob"]) is bytearray
    with pytest.raises(ValueError, match="entry 'blob': the saved bytes are not a pickled object"):
        ckptdb.load({"blob": None}, s, 7)
    assert s.read(7, "obj") == pickle.dumps(5) and s.read_object(7, "obj") == 5
    s.close()


def test_an_unknown_encoding_is_refused_naming_the_entry(store):
    sd = _ckptdb.StateDict()
    with pytest.raises(ValueError, match="entry 'x': unknown bytes encoding 'json'"):
        sd.add_bytes("x", b"{}", "json")
