// Binds PyStateDict: tensors, sharded tensors and bytes entries added by
// the Python side, bytes entries read back after a load.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "py_common.h"
#include "py_state_dict.h"

namespace ckptdb::py {

namespace {

// (offsets, shape, data pointer, bytes, device): one local shard.
using ShardSpec = std::tuple<std::vector<int64_t>, std::vector<int64_t>, uintptr_t, size_t, int>;

Device DeviceOf(int device) { return device < 0 ? Device::CPU() : Device::CUDA(device); }

Tensor ViewOf(const std::string& fqn, DType dtype, const Shape& shape, uintptr_t data, size_t nbytes, int device) {
  StatusOr<Tensor> t = Tensor::View(dtype, shape, reinterpret_cast<void*>(data), nbytes, DeviceOf(device));
  if (!t.ok()) Raise(t.status().WithContext("entry '" + fqn + "'"));
  return std::move(t).value();
}

DType DTypeOf(const std::string& fqn, const std::string& name) {
  StatusOr<DType> d = ParseDType(name);
  if (!d.ok()) Raise(d.status().WithContext("entry '" + fqn + "'"));
  return *d;
}

BytesEncoding EncodingOf(const std::string& fqn, const std::string& name) {
  for (BytesEncoding e :
       {BytesEncoding::kUnrecorded, BytesEncoding::kRaw, BytesEncoding::kPickle, BytesEncoding::kTorchSave}) {
    if (name == BytesEncodingName(e)) return e;
  }
  throw nb::value_error(
      ("entry '" + fqn + "': unknown bytes encoding '" + name + "' (known: raw, pickle, torch_save, unrecorded)")
          .c_str());
}

}  // namespace

void BindStateDict(nb::module_& m) {
  nb::class_<PyStateDict>(m, "StateDict", "A state dict handed to the engine (entries in order)")
      .def(nb::init<>())
      .def(
          "add_tensor",
          [](PyStateDict& self, const std::string& fqn, const std::string& dtype, const std::vector<int64_t>& shape,
             uintptr_t data, size_t nbytes,
             int device) { Check(self.state.Add(fqn, ViewOf(fqn, DTypeOf(fqn, dtype), shape, data, nbytes, device))); },
          nb::arg("fqn"), nb::arg("dtype"), nb::arg("shape"), nb::arg("data"), nb::arg("nbytes"),
          nb::arg("device") = -1,
          "A replicated tensor: a view of `nbytes` bytes at address `data` (device -1: CPU, else a CUDA "
          "ordinal)")
      .def(
          "add_sharded",
          [](PyStateDict& self, const std::string& fqn, const std::string& dtype,
             const std::vector<int64_t>& global_shape, const std::vector<ShardSpec>& shards) {
            const DType d = DTypeOf(fqn, dtype);
            std::vector<Shard> local;
            for (const auto& [offsets, shape, data, nbytes, device] : shards) {
              local.push_back(Shard{offsets, ViewOf(fqn, d, shape, data, nbytes, device)});
            }
            StatusOr<ShardedTensor> st = ShardedTensor::Create(d, global_shape, std::move(local));
            if (!st.ok()) Raise(st.status().WithContext("entry '" + fqn + "'"));
            Check(self.state.Add(fqn, std::move(st).value()));
          },
          nb::arg("fqn"), nb::arg("dtype"), nb::arg("global_shape"), nb::arg("shards"),
          "A sharded tensor: this rank's shards as (offsets, shape, data, nbytes, device)")
      .def(
          "add_bytes",
          [](PyStateDict& self, const std::string& fqn, nb::bytes data, const std::string& encoding) {
            Check(self.state.AddBytes(fqn, std::string(data.c_str(), data.size()), EncodingOf(fqn, encoding)));
          },
          nb::arg("fqn"), nb::arg("data"), nb::arg("encoding") = "raw",
          "A bytes entry; `encoding` says how the bytes encode the value: \"raw\", \"pickle\", \"torch_save\" "
          "(or \"unrecorded\", as stores written before encodings were recorded)")
      .def(
          "get_bytes",
          [](const PyStateDict& self, const std::string& fqn) {
            const Entry* e = self.state.Find(fqn);
            if (e == nullptr || !std::holds_alternative<Bytes>(*e)) {
              throw nb::key_error(("no bytes entry '" + fqn + "'").c_str());
            }
            const std::string& data = std::get<Bytes>(*e).data;
            return nb::bytes(data.data(), data.size());
          },
          nb::arg("fqn"))
      .def(
          "bytes_encoding",
          [](const PyStateDict& self, const std::string& fqn) {
            const Entry* e = self.state.Find(fqn);
            if (e == nullptr || !std::holds_alternative<Bytes>(*e)) {
              throw nb::key_error(("no bytes entry '" + fqn + "'").c_str());
            }
            return std::string(BytesEncodingName(std::get<Bytes>(*e).encoding));
          },
          nb::arg("fqn"), "How a bytes entry's bytes encode its value (after a load: what the step recorded)")
      .def("__len__", [](const PyStateDict& self) { return self.state.size(); });
}

}  // namespace ckptdb::py
