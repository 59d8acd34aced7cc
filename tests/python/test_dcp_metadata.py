"""A DCP step is as complete as a FileSystemWriter checkpoint: what DCP's
Metadata carries (planner_data, tensor properties, version) is stored with
the step, so PyTorch's own tools that rebuild a state dict from the metadata
alone work with ckptdb.torch's StorageWriter/StorageReader in place of
FileSystemWriter/FileSystemReader.

Written after PyTorch's test/distributed/checkpoint/test_format_utils.py
(dcp_to_torch_save gives what torch.save of the state dict gives;
torch_save_to_dcp then dcp.load) and the partial-load test of
test_e2e_save_and_load.py (_load_state_dict_from_keys), with the same
asserts, in one process; each runs on both backends, FileSystemWriter being
the reference. Needs torch >= 2.4 (DCP's helpers).
"""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
from conftest import torch_version  # noqa: E402

if torch_version() < (2, 4):
    pytest.skip(f"DCP's format helpers need torch >= 2.4 (this is {torch.__version__})", allow_module_level=True)

import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.checkpoint import format_utils  # noqa: E402
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner, _EmptyStateDictLoadPlanner  # noqa: E402
from torch.distributed.checkpoint.state_dict_loader import (_load_state_dict,  # noqa: E402
                                                            _load_state_dict_from_keys)

import ckptdb  # noqa: E402
import ckptdb.torch  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is:UserWarning")


class SimpleModelUneven(nn.Module):
    """test_format_utils.py's model."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net1 = nn.Linear(5, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 15)
        self.net3 = nn.Linear(15, 30)
        self.net4 = nn.Linear(30, 5)

    def forward(self, x):
        x = F.relu(self.net1(x))
        x = F.relu(self.net2(x))
        x = F.relu(self.net3(x))
        return self.net4(x)


class Backend:
    """Where a DCP checkpoint goes: a FileSystemWriter directory (the
    reference) or step 0 of a ckptdb store."""

    def __init__(self, kind: str, path: str) -> None:
        self.kind, self.path = kind, path

    def writer(self):
        if self.kind == "filesystem":
            return dcp.FileSystemWriter(self.path)
        return ckptdb.torch.StorageWriter(self.path, step=0)

    def reader(self):
        if self.kind == "filesystem":
            return dcp.FileSystemReader(self.path)
        return ckptdb.torch.StorageReader(self.path)


@pytest.fixture(params=["filesystem", "ckptdb"])
def backend(request, tmp_path):
    b = Backend(request.param, str(tmp_path / "ckpt"))
    yield b
    if b.kind == "ckptdb":
        ckptdb.Store(b.path).close()


def test_the_issue_repro_empty_planner_gets_the_nested_structure(backend):
    dcp.save({"model": {"w": torch.ones(2)}}, storage_writer=backend.writer(), no_dist=True)
    sd: dict = {}
    _load_state_dict(sd, storage_reader=backend.reader(), planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    assert list(sd) == ["model"] and list(sd["model"]) == ["w"]
    assert torch.equal(sd["model"]["w"], torch.ones(2))


def test_dcp_to_torch_save(backend, tmp_path, monkeypatch):
    model = SimpleModelUneven()
    dcp.save({"model": model}, storage_writer=backend.writer())
    # dcp_to_torch_save opens the checkpoint with FileSystemReader: ckptdb's
    # reader in its place.
    monkeypatch.setattr(format_utils, "FileSystemReader", lambda path: backend.reader())
    torch_path = str(tmp_path / "model.pt")
    format_utils.dcp_to_torch_save(backend.path, torch_path)
    loaded_sd = torch.load(torch_path)
    expected = {"model": model.state_dict()}
    assert loaded_sd.keys() == expected.keys() and loaded_sd["model"].keys() == expected["model"].keys()
    for k, v in expected["model"].items():
        assert torch.equal(loaded_sd["model"][k], v), k


def test_torch_save_to_dcp(backend, tmp_path, monkeypatch):
    model = SimpleModelUneven()
    sd = {"model": model.state_dict()}
    torch_path = str(tmp_path / "model.pt")
    torch.save(sd, torch_path)
    monkeypatch.setattr(format_utils, "FileSystemWriter", lambda path: backend.writer())
    format_utils.torch_save_to_dcp(torch_path, backend.path)
    model = SimpleModelUneven()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    dcp.load({"model": model}, storage_reader=backend.reader())
    for k, v in sd["model"].items():
        assert torch.equal(model.state_dict()[k], v), k


def _train(model: nn.Module, optim: torch.optim.Optimizer, steps: int) -> None:
    torch.manual_seed(1)
    for _ in range(steps):
        model(torch.rand(8, 5)).sum().backward()
        optim.step()
        optim.zero_grad()


def test_partial_load(backend):
    model = SimpleModelUneven()
    optim = torch.optim.Adam(model.parameters(), lr=0.1)
    _train(model, optim, 2)
    dcp.save({"model": model, "optimizer": optim}, storage_writer=backend.writer())

    fresh = SimpleModelUneven()
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    dcp.load({"model": fresh}, storage_reader=backend.reader())
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k

    # another way
    loaded_model_sd = _load_state_dict_from_keys("model", storage_reader=backend.reader())["model"]
    assert loaded_model_sd.keys() == model.state_dict().keys()
    for k, v in model.state_dict().items():
        assert torch.equal(loaded_model_sd[k], v), k

    loaded_optim_state = _load_state_dict_from_keys("optimizer.state", storage_reader=backend.reader())
    assert list(loaded_optim_state) == ["optimizer"] and list(loaded_optim_state["optimizer"]) == ["state"]
    loaded_optim_state = loaded_optim_state["optimizer"]["state"]
    assert "param_groups" not in loaded_optim_state
    for k, v in optim.state_dict()["state"].items():
        for optim_key in ["exp_avg", "exp_avg_sq", "step"]:
            # DCP flattens the optimizer's int keys as text.
            assert torch.equal(loaded_optim_state[str(k)][optim_key], v[optim_key]), (k, optim_key)

    # Non-tensor values come back as the objects saved.
    groups = _load_state_dict_from_keys("optimizer.param_groups", storage_reader=backend.reader())
    assert groups["optimizer"]["param_groups"] == optim.state_dict()["param_groups"]


def test_the_metadata_equals_filesystem_writers(tmp_path):
    """Both backends give DCP the same Metadata for the same save:
    state_dict_metadata (sizes, chunks, TensorProperties), planner_data and
    version."""
    model = SimpleModelUneven()
    optim = torch.optim.Adam(model.parameters(), lr=0.1)
    _train(model, optim, 1)
    sd = {"model": model, "optimizer": optim,
          "extra": {"layers": [torch.ones(2), 3], "name": "run", "leaf": torch.ones(3, requires_grad=True)}}
    fs, db = Backend("filesystem", str(tmp_path / "fs")), Backend("ckptdb", str(tmp_path / "db"))
    for b in (fs, db):
        dcp.save(sd, storage_writer=b.writer())
    want, got = fs.reader().read_metadata(), db.reader().read_metadata()
    assert got.planner_data == want.planner_data
    assert got.planner_data["extra.layers.0"] == ("extra", "layers", 0)
    assert got.state_dict_metadata == want.state_dict_metadata
    assert got.state_dict_metadata["extra.leaf"].properties.requires_grad
    assert getattr(got, "version", None) == getattr(want, "version", None)
    ckptdb.Store(db.path).close()


class _ForgetfulPlanner(DefaultSavePlanner):
    """A planner that keeps no `metadata` attribute: the writer then takes
    DCP's planner_data and properties from the ranks' plans."""

    def create_global_plan(self, all_plans):
        plans, metadata = super().create_global_plan(all_plans)
        del self.metadata
        return plans, metadata


class _OddPlanner(DefaultSavePlanner):
    """A planner whose planner_data is not a map of paths (stored pickled)."""

    def create_global_plan(self, all_plans):
        plans, metadata = super().create_global_plan(all_plans)
        self.metadata = dataclasses.replace(metadata, planner_data=["custom", {"k": (1, 2)}])
        return plans, self.metadata


@pytest.mark.parametrize("planner", [_ForgetfulPlanner, _OddPlanner])
def test_other_planners_metadata_equals_filesystem_writers(tmp_path, planner):
    sd = {"model": SimpleModelUneven(), "extra": {"leaf": torch.ones(3, requires_grad=True), "n": 4}}
    fs, db = Backend("filesystem", str(tmp_path / "fs")), Backend("ckptdb", str(tmp_path / "db"))
    for b in (fs, db):
        dcp.save(sd, storage_writer=b.writer(), planner=planner())
    want, got = fs.reader().read_metadata(), db.reader().read_metadata()
    assert got.planner_data == want.planner_data
    assert got.state_dict_metadata == want.state_dict_metadata
    ckptdb.Store(db.path).close()


def test_steps_without_dcp_metadata_load_flat_as_before(tmp_path):
    """A step saved by ckptdb.save (or by a DCP save before ckptdb kept DCP's
    metadata) has none: every FQN is a top-level key, and its objects load
    through DCP as before."""
    store = str(tmp_path / "store")
    ckptdb.save({"model": {"w": torch.ones(2)}, "meta": {"epoch": 3}}, store, 0)
    sd: dict = {}
    _load_state_dict(sd, storage_reader=ckptdb.torch.StorageReader(store), planner=_EmptyStateDictLoadPlanner(),
                     no_dist=True)
    assert sorted(sd) == ["meta.epoch", "model.w"] and sd["meta.epoch"] == 3
    target = {"model": {"w": torch.zeros(2)}, "meta": {"epoch": None}}
    dcp.load(target, storage_reader=ckptdb.torch.StorageReader(store))
    assert torch.equal(target["model"]["w"], torch.ones(2)) and target["meta"] == {"epoch": 3}
    ckptdb.Store(store).close()
