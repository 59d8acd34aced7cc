// The device-independent half of device staging: walking state dicts and
// routing each CUDA tensor through CopyFromDevice / CopyToDevice.
#include "device_staging.h"

#include "status_macros.h"

namespace ckptdb {

namespace {

template <typename F>
Status ForEachTensor(const Entry& e, F&& f) {
  if (const Tensor* t = std::get_if<Tensor>(&e)) return f(*t);
  if (const ShardedTensor* st = std::get_if<ShardedTensor>(&e)) {
    for (const Shard& s : st->local_shards()) RETURN_IF_ERROR(f(s.tensor));
  }
  return Status::OK();
}

StatusOr<Tensor> ToHost(const std::string& fqn, const Tensor& t) {
  if (t.device().is_cpu()) return t;
  ASSIGN_OR_RETURN(Tensor host, Tensor::Zeros(t.dtype(), t.shape()));
  Status st = CopyFromDevice(t.device().index, t.data(), host.data(), t.nbytes());
  if (!st.ok()) return st.WithContext("entry '" + fqn + "' on " + t.device().ToString());
  return host;
}

StatusOr<Tensor> ProxyOf(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  return Tensor::Zeros(t.dtype(), t.shape());
}

}  // namespace

bool HasDeviceTensors(const StateDict& sd) {
  bool any = false;
  for (const auto& [fqn, e] : sd.entries()) {
    (void)ForEachTensor(e, [&](const Tensor& t) {
      any = any || !t.device().is_cpu();
      return Status::OK();
    });
  }
  return any;
}

StatusOr<StateDict> CopyDeviceTensorsToHost(const StateDict& sd) {
  StateDict out;
  for (const auto& [fqn, e] : sd.entries()) {
    if (const Tensor* t = std::get_if<Tensor>(&e)) {
      ASSIGN_OR_RETURN(Tensor h, ToHost(fqn, *t));
      RETURN_IF_ERROR(out.Add(fqn, std::move(h)));
    } else if (const ShardedTensor* st = std::get_if<ShardedTensor>(&e)) {
      std::vector<Shard> shards;
      for (const Shard& s : st->local_shards()) {
        ASSIGN_OR_RETURN(Tensor h, ToHost(fqn, s.tensor));
        shards.push_back(Shard{s.offsets, std::move(h)});
      }
      ASSIGN_OR_RETURN(ShardedTensor hs, ShardedTensor::Create(st->dtype(), st->global_shape(), std::move(shards)));
      RETURN_IF_ERROR(out.Add(fqn, std::move(hs)));
    } else {
      RETURN_IF_ERROR(out.AddEntry(fqn, e));
    }
  }
  return out;
}

StatusOr<StateDict> HostProxyFor(const StateDict& target) {
  StateDict out;
  for (const auto& [fqn, e] : target.entries()) {
    if (const Tensor* t = std::get_if<Tensor>(&e)) {
      ASSIGN_OR_RETURN(Tensor p, ProxyOf(*t));
      RETURN_IF_ERROR(out.Add(fqn, std::move(p)));
    } else if (const ShardedTensor* st = std::get_if<ShardedTensor>(&e)) {
      std::vector<Shard> shards;
      for (const Shard& s : st->local_shards()) {
        ASSIGN_OR_RETURN(Tensor p, ProxyOf(s.tensor));
        shards.push_back(Shard{s.offsets, std::move(p)});
      }
      ASSIGN_OR_RETURN(ShardedTensor ps, ShardedTensor::Create(st->dtype(), st->global_shape(), std::move(shards)));
      RETURN_IF_ERROR(out.Add(fqn, std::move(ps)));
    } else {
      RETURN_IF_ERROR(out.AddEntry(fqn, e));
    }
  }
  return out;
}

Status CopyHostToDeviceTargets(const StateDict& host, StateDict& target) {
  for (auto& [fqn, e] : target.mutable_entries()) {
    const Entry* h = host.Find(fqn);
    if (h == nullptr) continue;
    auto copy = [&](const Tensor& dst, const Tensor& src) -> Status {
      if (dst.device().is_cpu()) return Status::OK();  // loaded in place
      Status st = CopyToDevice(dst.device().index, src.data(), dst.data(), dst.nbytes());
      return st.ok() ? st : st.WithContext("entry '" + fqn + "' on " + dst.device().ToString());
    };
    if (Tensor* t = std::get_if<Tensor>(&e)) {
      RETURN_IF_ERROR(copy(*t, std::get<Tensor>(*h)));
    } else if (ShardedTensor* st = std::get_if<ShardedTensor>(&e)) {
      const auto& hs = std::get<ShardedTensor>(*h).local_shards();
      for (size_t i = 0; i < st->local_shards().size(); ++i) RETURN_IF_ERROR(copy(st->local_shards()[i].tensor, hs[i].tensor));
    } else {
      std::get<Bytes>(e) = std::get<Bytes>(*h);
    }
  }
  return Status::OK();
}

}  // namespace ckptdb
