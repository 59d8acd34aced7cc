// Binds the communicator: gloo over TCP, joined through ckptdb's own
// rendezvous (CKPTDB_RENDEZVOUS) or through a store the Python side brings
// (PyTorch's c10d store under torchrun: ckptdb/_dist.py adapts it), plus the
// collectives the Python side needs to agree across ranks (small control
// messages only).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckptdb/distributed.h"
#include "py_common.h"
#include "py_communicator.h"

namespace ckptdb::py {

namespace {

// RendezvousStore over a Python object with create_key(key: str, value:
// bytes) -> bool and get(key: str) -> bytes | None. Called from
// ConnectGloo's thread: takes the GIL for each call; a Python exception
// becomes Unavailable naming it.
class PythonRendezvousStore final : public RendezvousStore {
 public:
  explicit PythonRendezvousStore(nb::object store) : store_(std::move(store)) {}
  ~PythonRendezvousStore() override {
    nb::gil_scoped_acquire acquire;
    store_.reset();
  }

  StatusOr<bool> CreateKey(const std::string& key, const std::string& value) override {
    nb::gil_scoped_acquire acquire;
    try {
      return nb::cast<bool>(store_.attr("create_key")(key, nb::bytes(value.data(), value.size())));
    } catch (const std::exception& e) {
      return Status::Unavailable("rendezvous store: creating key '" + key + "': " + e.what());
    }
  }

  StatusOr<std::optional<std::string>> Get(const std::string& key) override {
    nb::gil_scoped_acquire acquire;
    try {
      nb::object v = store_.attr("get")(key);
      if (v.is_none()) return std::optional<std::string>();
      nb::bytes b = nb::cast<nb::bytes>(v);
      return std::optional<std::string>(std::string(b.c_str(), b.size()));
    } catch (const std::exception& e) {
      return Status::Unavailable("rendezvous store: reading key '" + key + "': " + e.what());
    }
  }

 private:
  nb::object store_;
};

// Runs `connect` off the GIL (interruptible) and wraps what it made.
PyCommunicator* Connected(const std::function<StatusOr<std::unique_ptr<Communicator>>()>& connect) {
  auto c = std::make_unique<PyCommunicator>();
  Check(RunInterruptible([&](const std::atomic<bool>&) {
    StatusOr<std::unique_ptr<Communicator>> comm = connect();
    if (!comm.ok()) return comm.status();
    c->comm = std::move(comm).value();
    return Status::OK();
  }));
  return c.release();
}

}  // namespace

void BindCommunicator(nb::module_& m) {
  nb::class_<PyCommunicator>(m, "Communicator", "ckptdb's own gloo connection between the ranks of a job")
      .def_static(
          "from_environment",
          [](const std::string& job_id) {
            DistributedConfig config = Take(DistributedConfig::FromEnvironment());
            config.job_id = job_id;
            Check(config.Validate());
            return Connected([&] { return ConnectGloo(config); });
          },
          nb::arg("job_id"), nb::rv_policy::take_ownership,
          "Joins through the CKPTDB_* (and torchrun-style) variables, as job `job_id` (one per connection)")
      .def_static(
          "through_store",
          [](nb::object store, const std::string& name, int rank, int world_size, int local_rank,
             const std::string& job_id, const std::string& launch_id, const std::string& bind_address,
             int64_t timeout_ms, const std::string& socket_ifname, const std::string& route_host) {
            DistributedConfig config;
            config.rank = rank;
            config.world_size = world_size;
            config.local_rank = local_rank;
            config.rendezvous = name;
            config.job_id = job_id;
            config.launch_id = launch_id;
            config.bind_address = bind_address;
            config.socket_ifname = socket_ifname;
            config.route_host = route_host;
            config.timeout = std::chrono::milliseconds(timeout_ms);
            PythonRendezvousStore adapter(std::move(store));
            return Connected([&] { return ConnectGloo(config, adapter); });
          },
          nb::arg("store"), nb::arg("name"), nb::arg("rank"), nb::arg("world_size"), nb::arg("local_rank"),
          nb::arg("job_id"), nb::arg("launch_id"), nb::arg("bind_address"), nb::arg("timeout_ms"),
          nb::arg("socket_ifname") = "", nb::arg("route_host") = "", nb::rv_policy::take_ownership,
          "Joins through `store` (create_key(key, value) -> bool, get(key) -> bytes | None)")
      .def_prop_ro("rank", [](PyCommunicator& c) { return c.comm->rank(); })
      .def_prop_ro("world_size", [](PyCommunicator& c) { return c.comm->world_size(); })
      .def(
          "all_gather",
          [](PyCommunicator& c, nb::bytes mine) {
            std::string data(mine.c_str(), mine.size());
            std::vector<std::string> out;
            Status st;
            {
              nb::gil_scoped_release release;
              std::lock_guard<std::mutex> l(c.mu);
              st = c.comm->AllGather(data, &out);
            }
            Check(st);
            nb::list result;
            for (const std::string& s : out) result.append(nb::bytes(s.data(), s.size()));
            return result;
          },
          nb::arg("mine"), "Every rank's bytes, indexed by rank")
      .def(
          "broadcast",
          [](PyCommunicator& c, nb::bytes data, int root) {
            std::string s(data.c_str(), data.size());
            Status st;
            {
              nb::gil_scoped_release release;
              std::lock_guard<std::mutex> l(c.mu);
              st = c.comm->Broadcast(&s, root);
            }
            Check(st);
            return nb::bytes(s.data(), s.size());
          },
          nb::arg("data"), nb::arg("root"), "The root's bytes on every rank")
      .def(
          "gather",
          [](PyCommunicator& c, nb::bytes mine, int root) {
            std::string data(mine.c_str(), mine.size());
            std::vector<std::string> out;
            std::map<int, Status> missing;
            Status st;
            {
              nb::gil_scoped_release release;
              std::lock_guard<std::mutex> l(c.mu);
              st = c.comm->Gather(data, root, &out, &missing);
            }
            Check(st);
            nb::list parts;
            for (size_t r = 0; r < out.size(); ++r) {
              if (missing.count(static_cast<int>(r)) != 0) {
                parts.append(nb::none());
              } else {
                parts.append(nb::bytes(out[r].data(), out[r].size()));
              }
            }
            nb::dict why;
            for (const auto& [r, status] : missing) why[nb::int_(r)] = status.ToString();
            return nb::make_tuple(parts, why);
          },
          nb::arg("mine"), nb::arg("root"),
          "Every rank's bytes at the root: (parts indexed by rank, None for a rank whose part did not come; "
          "{rank: why} for those). Other ranks get ([], {}): what they receive does not grow with the world size")
      .def(
          "stats",
          [](PyCommunicator& c) {
            std::lock_guard<std::mutex> l(c.mu);
            const CollectiveStats s = c.comm->stats();
            nb::dict d;
            d["calls"] = s.calls;
            d["bytes_sent"] = s.bytes_sent;
            d["bytes_received"] = s.bytes_received;
            d["messages_sent"] = s.messages_sent;
            d["messages_received"] = s.messages_received;
            d["peers"] = s.peers;
            return d;
          },
          "What this rank moved through the connection so far (CollectiveStats): bytes and messages sent and "
          "received, peers");
}

}  // namespace ckptdb::py
