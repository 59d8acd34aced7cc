"""Debian's PyTorch 1.13 on Python 3.11 cannot import its ShardedTensor
module (a dataclass field with a mutable default, which Python 3.11
refuses). Used by tools/bench/bench_torch.py --legacy and by the Python
package's tests (tests/python) to run the 1.13 ShardedTensor API."""

import importlib.abc
import importlib.util
import sys


def patch_torch113_dataclass():
    """Debian's torch 1.13 on Python 3.11: ShardedTensorMetadata has a dataclass
    field with a mutable default, which Python 3.11 refuses. Load that one module
    with the default turned into a default_factory."""
    target = "torch.distributed._shard.sharded_tensor.metadata"

    class Loader(importlib.abc.SourceLoader):
        def __init__(self, path):
            self.path = path

        def get_filename(self, fullname):
            return self.path

        def get_data(self, path):
            with open(path, "rb") as f:
                src = f.read().decode()
            src = src.replace("field(default=TensorProperties())", "field(default_factory=TensorProperties)")
            return src.encode()

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target_module=None):
            if fullname != target:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target_module)
                if spec is not None and spec.origin:
                    return importlib.util.spec_from_file_location(fullname, spec.origin, loader=Loader(spec.origin))
            return None

    sys.meta_path.insert(0, Finder())
