"""Turning a flat state dict's leaves into the engine's entries.

Tensors and arrays are handed over by address (no copy): the engine reads
them during a save and writes into them during a load. A tensor or array
that is not contiguous goes through a contiguous copy (saves) or is filled
through one and copied back (loads). Everything that is not a tensor or
array of a dtype ckptdb has becomes a bytes entry: ``bytes`` as they are, any
other object (a bytearray, a complex tensor, a uint32 array, an int, a dict
of hyper-parameters) pickled. The step records which (the entry's bytes
encoding), so a load puts back what was saved, whatever the target held
there (None, a fresh dict, bytes): bytes as bytes, an object as that object.
"""

from __future__ import annotations

import io
import pickle
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from . import _ckptdb

# ckptdb dtype names by torch dtype name and numpy dtype name.
_TORCH_DTYPES = {
    "float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16",
    "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2",
    "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool",
}
_NUMPY_DTYPES = {
    "float64": "f64", "float32": "f32", "float16": "f16",
    "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool",
}


def _torch():
    """torch when it is imported (never imports it)."""
    return sys.modules.get("torch")


def _numpy():
    return sys.modules.get("numpy")


def is_tensor(value: Any) -> bool:
    t = _torch()
    return t is not None and isinstance(value, t.Tensor)


def is_ndarray(value: Any) -> bool:
    np = _numpy()
    return np is not None and isinstance(value, np.ndarray)


def is_array(value: Any) -> bool:
    """A tensor or array of a dtype ckptdb stores natively (others, such as
    complex or uint32 ones, are pickled like any other object)."""
    if is_tensor(value):
        return str(value.dtype).removeprefix("torch.") in _TORCH_DTYPES
    if is_ndarray(value):
        return value.dtype.name in _NUMPY_DTYPES
    return False


def dtype_name(fqn: str, value: Any) -> str:
    """The engine's dtype name for a tensor or array."""
    if is_tensor(value):
        name = str(value.dtype).removeprefix("torch.")
        table = _TORCH_DTYPES
    else:
        name = value.dtype.name
        table = _NUMPY_DTYPES
    if name not in table:
        raise TypeError(f"entry '{fqn}': dtype {name} is not supported by ckptdb "
                        f"(supported: {', '.join(sorted(table))})")
    return table[name]


def _device_index(fqn: str, tensor: Any) -> int:
    dev = tensor.device
    if dev.type == "cpu":
        return -1
    if dev.type == "cuda":
        return dev.index if dev.index is not None else _torch().cuda.current_device()
    raise ValueError(f"entry '{fqn}': tensors on device '{dev}' are not supported (cpu and cuda are)")


@dataclass
class _Region:
    """A dense buffer the engine reads or fills: its address, and what to do
    after a load (copy a contiguous stand-in back into the caller's)."""
    shape: list[int]
    data: int
    nbytes: int
    device: int
    keep: Any = None                      # the object owning the memory
    copy_back: Callable[[], None] | None = None


def region(fqn: str, value: Any, for_load: bool) -> _Region:
    """The dense memory of a tensor or array (a contiguous stand-in when it
    is not contiguous)."""
    if is_tensor(value):
        if value.is_sparse or value.layout != _torch().strided:
            raise TypeError(f"entry '{fqn}': only dense (strided) tensors are supported")
        if value.device.type == "meta":
            raise ValueError(f"entry '{fqn}': a meta tensor has no data")
        dense = value if value.is_contiguous() else value.contiguous()
        copy_back = None
        if dense is not value and for_load:
            copy_back = lambda: value.copy_(dense)  # noqa: E731
        return _Region(list(value.shape), dense.data_ptr(), dense.numel() * dense.element_size(),
                       _device_index(fqn, value), dense, copy_back)
    np = _numpy()
    if for_load and not value.flags.writeable:
        raise ValueError(f"entry '{fqn}': the target array is read-only")
    dense = value if value.flags.c_contiguous else np.ascontiguousarray(value)
    copy_back = None
    if dense is not value and for_load:
        def copy_back():
            value[...] = dense
    return _Region(list(value.shape), dense.ctypes.data, dense.nbytes, -1, dense, copy_back)


@dataclass
class Prepared:
    """A state dict handed to the engine, with what keeps its memory alive
    and what completes a load."""
    engine: Any                                        # _ckptdb.StateDict
    keep: list = field(default_factory=list)
    copy_backs: list = field(default_factory=list)
    objects: dict = field(default_factory=dict)       # fqn -> (setter, target leaf)


# How a bytes entry's bytes encode its value, as the step records it
# (BytesEncoding in include/ckptdb/metadata.h).
RAW, PICKLE, TORCH_SAVE, UNRECORDED = "raw", "pickle", "torch_save", "unrecorded"


def encode_object(value: Any) -> tuple[bytes, str]:
    """The bytes a value is saved as, and their encoding. Only ``bytes``
    itself is stored as it is; everything else, bytearray and subclasses of
    bytes included, is pickled so that it comes back as its own type."""
    if type(value) is bytes:
        return value, RAW
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), PICKLE


def decode_object(fqn: str, data: bytes, encoding: str, target: Any) -> Any:
    """The value a bytes entry was saved from. `encoding` is what the step
    recorded; steps written before encodings were recorded ("unrecorded")
    are decoded by the target's kind, as then: bytes for a bytes or
    bytearray target, otherwise unpickled."""
    if encoding == RAW:
        return data
    if encoding == PICKLE:
        try:
            return pickle.loads(data)
        except Exception as e:  # noqa: BLE001 - reported with the entry's name
            raise ValueError(f"entry '{fqn}': the saved object does not unpickle here "
                             f"({type(e).__name__}: {e})") from e
    if encoding == TORCH_SAVE:
        torch = _torch()
        if torch is None:
            try:
                import torch
            except ImportError as e:
                raise ValueError(f"entry '{fqn}' holds an object saved with torch.save (a DCP save): "
                                 "loading it needs torch") from e
        return torch.load(io.BytesIO(data), weights_only=False)
    if encoding != UNRECORDED:
        raise ValueError(f"entry '{fqn}': its bytes encoding is '{encoding}', which this version of ckptdb "
                         "does not know (Store.read_bytes gives the bytes as they are)")
    if isinstance(target, bytes):
        return data
    if isinstance(target, bytearray):
        return bytearray(data)
    try:
        return pickle.loads(data)
    except Exception as e:  # noqa: BLE001 - reported with the entry's name
        raise ValueError(f"entry '{fqn}': the saved bytes are not a pickled object ({e}); "
                         "load it into a bytes target to get them as they are") from e


def prepare(flat, for_load: bool) -> Prepared:
    """Builds the engine's state dict from flatten()'s (fqn, leaf, setter)."""
    from . import _sharded
    p = Prepared(_ckptdb.StateDict())
    for fqn, value, setter in flat:
        sharded = _sharded.local_shards(fqn, value, for_load)
        if sharded is not None:
            dtype, global_shape, shards = sharded
            specs = []
            for offsets, local in shards:
                r = region(fqn, local, for_load)
                p.keep.append(r.keep)
                if r.copy_back:
                    p.copy_backs.append(r.copy_back)
                specs.append((offsets, r.shape, r.data, r.nbytes, r.device))
            p.engine.add_sharded(fqn, dtype, global_shape, specs)
        elif is_array(value):
            r = region(fqn, value, for_load)
            p.keep.append(r.keep)
            if r.copy_back:
                p.copy_backs.append(r.copy_back)
            p.engine.add_tensor(fqn, dtype_name(fqn, value), r.shape, r.data, r.nbytes, r.device)
        else:
            if for_load:
                if setter is None:
                    raise TypeError(f"entry '{fqn}': cannot load an object into a tuple (use a list)")
                p.objects[fqn] = (setter, value)
                p.engine.add_bytes(fqn, b"")
            else:
                try:
                    data, encoding = encode_object(value)
                except Exception as e:  # noqa: BLE001 - pickle raises many kinds
                    raise TypeError(f"entry '{fqn}': a {type(value).__name__} value cannot be saved: it does not "
                                    f"pickle ({type(e).__name__}: {e})") from e
                p.engine.add_bytes(fqn, data, encoding)
    return p


def finish_load(p: Prepared, missing: list[str], keys: list[str] | None) -> None:
    """Copies stand-ins back and puts loaded objects into their containers
    (those the load read: in `keys` when given, and not missing)."""
    for copy_back in p.copy_backs:
        copy_back()
    skip = set(missing)
    only = set(keys) if keys else None
    for fqn, (setter, target) in p.objects.items():
        if fqn not in skip and (only is None or fqn in only):
            setter(decode_object(fqn, p.engine.get_bytes(fqn), p.engine.bytes_encoding(fqn), target))
