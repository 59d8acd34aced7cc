// The save protocol (include/ckptdb/checkpoint.h has the contract).
#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>

#include "ckptdb.pb.h"
#include "ckptdb/checkpoint.h"
#include "device/device_staging.h"
#include "util/guarded_call.h"
#include "util/thread_fanout.h"
#include "checkpoint/planner.h"
#include "checkpoint/written_pieces.h"
#include "comm/resolve_communicator.h"
#include "comm/transfer.h"
#include "checkpoint/plan_cache.h"
#include "util/status_macros.h"
#include "format/metadata_codec.h"
#include "format/status_codec.h"

namespace ckptdb {

Status ValidateStep(int64_t step) {
  if (step < 0 || step > kMaxStep) {
    return Status::InvalidArgument("step " + std::to_string(step) + " is out of range [0, " +
                                   std::to_string(kMaxStep) + "]");
  }
  return Status::OK();
}

Status ResolveCommunicator(bool no_dist, Communicator* given, int coordinator_rank,
                           std::unique_ptr<Communicator>* local, Communicator** out) {
  if (no_dist) {
    if (coordinator_rank != 0) {
      return Status::InvalidArgument("no_dist runs in one process as rank 0; coordinator_rank " +
                                     std::to_string(coordinator_rank) + " is invalid");
    }
    *local = NewLocalCommunicator();
    *out = local->get();
    return Status::OK();
  }
  if (given == nullptr) {
    return Status::InvalidArgument("no communicator given: pass one in the options, or set no_dist");
  }
  if (coordinator_rank < 0 || coordinator_rank >= given->world_size()) {
    return Status::InvalidArgument("coordinator rank " + std::to_string(coordinator_rank) +
                                   " is not in the world of size " + std::to_string(given->world_size()));
  }
  *out = given;
  return Status::OK();
}

namespace {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status Save(const StateDict& state_dict, StorageWriter& writer, const SaveOptions& options) {
  RETURN_IF_ERROR(ValidateStep(options.step));
  std::unique_ptr<Communicator> local;
  Communicator* comm = nullptr;
  RETURN_IF_ERROR(ResolveCommunicator(options.no_dist, options.communicator, options.coordinator_rank, &local, &comm));
  const int rank = comm->rank();
  const int coordinator = options.coordinator_rank;
  const bool is_coordinator = rank == coordinator;
  PlanCache& cache = PlanCache::Of(*comm);

  // 1. Plan; the coordinator merges every rank's plan into the step's
  // metadata (only it needs the whole of it: parsing every plan on every
  // rank made a save's CPU grow with the square of the world size), and its
  // verdict reaches every rank with the prepare report, so that every rank
  // fails alike. CUDA tensors stay where they are: the store's workers copy
  // them off the device chunk by chunk while it writes, once the work queued
  // on their devices has finished (a device this process cannot use is this
  // rank's planning error, so every rank learns of it).
  StatusOr<LocalPlan> plan = Status::Internal("not planned");
  if (Status devices = CheckAndSynchronizeDevices(state_dict); devices.ok()) {
    plan = PlanLocal(state_dict, rank, coordinator);
  } else {
    plan = devices;
  }
  StepMetadata metadata;  // on the coordinator
  Status planned;
  {
    // (A gather: what a rank sends and receives does not grow with the world
    // size. A rank whose plan did not come (it died, or hung past the
    // timeout) is named in the coordinator's verdict, which every other rank
    // receives with the prepare report.)
    std::vector<std::string> plans;
    std::map<int, Status> missing;
    // With how this rank's files reach the coordinator (a field of its own,
    // appended: serialized protobuf messages merge), which every rank must
    // agree on before anything is written.
    proto::LocalPlan delivery;
    delivery.set_delivery(static_cast<int32_t>(writer.delivery()));
    // An unchanged plan goes as a fingerprint (plan_cache.h).
    RETURN_IF_ERROR(comm->Gather(cache.Outgoing(EncodeLocalPlan(plan) + delivery.SerializeAsString(), coordinator),
                                 coordinator, &plans, &missing)
                        .WithContext("save: sending this rank's plan"));
    // The plan's entries served only to encode it (the coordinator merges
    // the encoded plans): their pieces go now, not after the commit.
    if (plan.ok()) std::vector<EntryMetadata>().swap(plan->entries);
    std::map<int, Status> unresolved;
    std::optional<StepMetadata> reused;
    if (is_coordinator && missing.empty()) reused = cache.Resolve(&plans, coordinator, missing, &unresolved);
    if (is_coordinator && !missing.empty()) {
      planned = Status::CheckpointError("Failed to exchange plans", std::move(missing));
    } else if (is_coordinator && !unresolved.empty()) {
      planned = Status::CheckpointError("Failed to exchange plans", std::move(unresolved));
    } else if (is_coordinator) {
      StatusOr<StepMetadata> merged = Status::Internal("not merged");
      if (reused) {
        merged = std::move(*reused);
      } else {
        merged = MergePlans(plans, coordinator);  // (kept by the cache if the save succeeds)
      }
      if (merged.ok()) {
        metadata = std::move(merged).value();
        metadata.step = options.step;
        metadata.metrics = options.metrics;
        metadata.note = options.note;
        // (Checked here, so that every rank fails alike before storage is
        // touched.)
        planned = ValidateMetricsAndNote(options.metrics, options.note).WithContext("SaveOptions");
        metadata.annotations = options.annotations;
        for (const auto& [name, value] : metadata.annotations) {
          if (name.empty()) planned = Status::InvalidArgument("SaveOptions::annotations: an empty name");
        }
      } else {
        planned = merged.status();
      }
    }
  }

  // 2. The coordinator prepares storage (when the plans merged), and sends
  // each rank the report: the verdict, the save's id, and that rank's own
  // dedup candidates only.
  std::vector<std::string> reports_out;
  // The coordinator's own candidates stay as they are (one process saving
  // many pieces would otherwise encode, copy and parse each of them).
  std::vector<ReuseCandidate> own_candidates;
  if (is_coordinator) {
    proto::PrepareReport r;
    // Each rank's candidates, on an arena: a coordinator of thousands of
    // ranks encodes a candidate per piece of the step, and allocating and
    // freeing each message's parts one by one was most of that work.
    google::protobuf::Arena arena;
    std::vector<proto::PrepareReport*> candidates_of(comm->world_size());
    for (proto::PrepareReport*& c : candidates_of) {
      c = google::protobuf::Arena::CreateMessage<proto::PrepareReport>(&arena);
    }
    if (!planned.ok()) {
      StatusToProto(planned, r.mutable_plan_status());
    } else if (StatusOr<uint64_t> id = GuardedCall("prepare", [&] { return writer.Prepare(options.step); });
               !id.ok()) {
      StatusToProto(id.status(), r.mutable_status());
    } else {
      r.set_save_id(*id);
      // What of the store the ranks' pieces may share (deduplication).
      SaveContext prepared_ctx{options.step, *id, rank, comm->world_size(), coordinator};
      StatusOr<std::vector<ReuseCandidate>> reusable =
          GuardedCall("find_reusable", [&] { return writer.FindReusable(prepared_ctx, metadata); });
      if (reusable.ok()) {
        auto own = [&](const ReuseCandidate& c) { return c.key.rank == static_cast<uint32_t>(coordinator); };
        const size_t mine = static_cast<size_t>(std::count_if(reusable->begin(), reusable->end(), own));
        if (mine == reusable->size()) {
          own_candidates = std::move(*reusable);
        } else {
          own_candidates.reserve(mine);
          for (ReuseCandidate& c : *reusable) {
            if (own(c)) {
              own_candidates.push_back(std::move(c));
            } else if (c.key.rank < candidates_of.size()) {
              ToProto(c, candidates_of[c.key.rank]->add_candidates());
            }
          }
        }
      } else {
        writer.Abort(prepared_ctx);
        StatusToProto(reusable.status(), r.mutable_status());
      }
    }
    // (Serialized protobuf messages merge: the common part, then the rank's.)
    const std::string common = r.SerializeAsString();
    reports_out.resize(comm->world_size());
    for (int k = 0; k < comm->world_size(); ++k) reports_out[k] = common + candidates_of[k]->SerializeAsString();
  }
  std::string report;
  RETURN_IF_ERROR(comm->Scatter(reports_out, coordinator, &report).WithContext("save: sending the prepare report"));
  std::vector<std::string>().swap(reports_out);  // (every rank's candidates, encoded: sent now)
  proto::PrepareReport prepared;
  if (!prepared.ParseFromString(report)) return Status::Internal("save: the prepare report does not parse");
  if (prepared.has_plan_status() && prepared.plan_status().code() != 0) return StatusFromProto(prepared.plan_status());
  if (prepared.has_status() && prepared.status().code() != 0) {
    return Status::CheckpointError("failed to prepare storage", {{coordinator, StatusFromProto(prepared.status())}});
  }
  SaveContext ctx{options.step, prepared.save_id(), rank, comm->world_size(), coordinator, comm->timeout()};
  metadata.save_id = ctx.save_id;
  // This rank's pieces that may share stored chunks.
  std::vector<ReuseCandidate> candidates = std::move(own_candidates);
  candidates.reserve(candidates.size() + static_cast<size_t>(prepared.candidates_size()));
  for (const proto::ReuseCandidate& q : prepared.candidates()) candidates.push_back(FromProto(q));
  prepared.clear_candidates();
  if (!candidates.empty() && plan.ok()) {
    std::unordered_map<uint32_t, const ReuseCandidate*> by_item;
    for (const ReuseCandidate& c : candidates) by_item[c.key.item] = &c;
    for (WriteItem& item : plan->items) {
      auto c = by_item.find(item.key.item);
      if (c != by_item.end()) item.reuse = c->second;
    }
  }

  // 3. Every rank writes its own pieces. Files that go to the coordinator
  // (FileDelivery::kSent) travel as soon as their rank has written them, all
  // ranks at once, while the coordinator writes its own: a thread of the
  // coordinator's receives each rank's (or the error that stopped it).
  const bool sent = writer.delivery() == FileDelivery::kSent;
  std::vector<WriteResult> results(comm->world_size());
  std::vector<Status> received(comm->world_size());
  // (A thread per rank, as many as can be started: util/thread_fanout.h.)
  std::optional<ThreadFanout> receivers;
  if (sent && is_coordinator) {
    const size_t others = static_cast<size_t>(comm->world_size() - 1);
    receivers.emplace(others, others, [&](size_t i) {
      const int r = static_cast<int>(i) < coordinator ? static_cast<int>(i) : static_cast<int>(i) + 1;
      received[r] = ReceiveFiles(
          *comm, r, [&](const std::string& name) { return writer.ReceivedFilePath(ctx, r, name); },
          &results[r].files);
    });
  }
  proto::WriteReport wr;
  // The coordinator's own written items stay as they are: its report to
  // itself carries only its status and files (a rank saving many pieces
  // would otherwise encode, copy and parse each of them once more).
  std::vector<WrittenItem> own_items;
  {
    Status st = GuardedCall("prepare_storage", [&] { return writer.PrepareStorage(ctx, plan->items); });
    std::vector<std::string> files;
    if (st.ok()) {
      StatusOr<WriteResult> written = GuardedCall("write", [&] { return writer.Write(ctx, plan->items); });
      if (written.ok()) {
        for (const std::string& f : written->files) wr.add_files(f);
        if (is_coordinator) {
          own_items = std::move(written->items);
        } else {
          for (const WrittenItem& w : written->items) ToProto(w, wr.add_items());
        }
        files = std::move(written->files);
      } else {
        st = written.status();
      }
    }
    if (!st.ok()) StatusToProto(st, wr.mutable_status());
    if (sent && !is_coordinator) {
      // (A failure to send is reported by the coordinator, which sees it.)
      if (st.ok()) {
        (void)SendFiles(*comm, coordinator, files);
      } else {
        SendErrorFrame(*comm, coordinator, st);
      }
      writer.DiscardLocalFiles(ctx);
    }
  }
  // What only the write needed goes before the reports are gathered and the
  // step is committed: the pieces' plan (the bytes' addresses) and the
  // chunks they may share, each as large as the rank's pieces.
  if (plan.ok()) std::vector<WriteItem>().swap(plan->items);
  std::vector<ReuseCandidate>().swap(candidates);
  if (receivers) receivers->Join();
  // The ranks whose files did not arrive (kSent), each with why.
  auto not_received = [&](size_t r) { return received[r].WithContext("sending its files to the coordinator"); };
  std::vector<std::string> reports;
  std::map<int, Status> missing;  // ranks whose report did not reach the coordinator
  Status gathered = comm->Gather(wr.SerializeAsString(), coordinator, &reports, &missing);
  if (!gathered.ok()) {
    if (is_coordinator) {
      writer.Abort(ctx);
      // A rank that died while sending its files cannot report either: the
      // coordinator names the ranks whose files did not arrive.
      std::map<int, Status> lost;
      for (size_t r = 0; r < received.size(); ++r) {
        if (!received[r].ok()) lost[static_cast<int>(r)] = not_received(r);
      }
      if (!lost.empty()) return Status::CheckpointError("Failed to write data", std::move(lost));
    }
    return gathered.WithContext("save: gathering write results");
  }

  // 4. The coordinator finishes, or discards.
  std::string outcome;
  if (is_coordinator) {
    std::map<int, Status> failures;
    // Each rank's report completes its pieces as it is read.
    WrittenPieces written(&metadata, comm->world_size());
    for (size_t r = 0; r < reports.size(); ++r) {
      if (auto m = missing.find(static_cast<int>(r)); m != missing.end()) {
        // (A rank that died while sending its files: why they did not come.)
        failures[static_cast<int>(r)] =
            received[r].ok() ? m->second.WithContext("its write report did not reach the coordinator") : not_received(r);
        continue;
      }
      // (Parsed on an arena, freed whole: a report has a message per piece
      // its rank wrote, each with parts of its own.)
      google::protobuf::Arena arena;
      proto::WriteReport& p = *google::protobuf::Arena::CreateMessage<proto::WriteReport>(&arena);
      if (!p.ParseFromString(reports[r])) {
        failures[static_cast<int>(r)] = Status::Internal("write report does not parse");
        continue;
      }
      if (p.has_status() && p.status().code() != 0) {
        failures[static_cast<int>(r)] = StatusFromProto(p.status());
        continue;
      }
      if (!received[r].ok()) {
        failures[static_cast<int>(r)] = not_received(r);
        continue;
      }
      results[r].rank = static_cast<int>(r);
      if (!sent || static_cast<int>(r) == coordinator) results[r].files.assign(p.files().begin(), p.files().end());
      // (Its items go into the step's pieces now; the results carry files.)
      Status filled = static_cast<int>(r) == coordinator ? written.Fill(coordinator, std::move(own_items))
                                                         : written.Fill(static_cast<int>(r), p.items());
      if (filled.ok()) filled = written.Complete(static_cast<int>(r));
      if (!filled.ok()) failures[static_cast<int>(r)] = filled;
      std::string().swap(reports[r]);
    }
    Status result;
    if (!failures.empty()) {
      writer.Abort(ctx);
      result = Status::CheckpointError("Failed to write data", std::move(failures));
    } else {
      metadata.created_unix_ms = NowUnixMs();
      Status st = GuardedCall("finish", [&] { return writer.Finish(ctx, metadata, results); });
      if (!st.ok()) {
        writer.Abort(ctx);
        result = Status::CheckpointError("Failed to finish checkpoint", {{coordinator, st}});
      }
    }
    outcome = EncodeStatus(result);
  }

  // 5. Every rank returns the same outcome.
  if (is_coordinator) std::vector<WriteResult>().swap(results);  // what the ranks wrote: in the commit now
  if (is_coordinator && DecodeStatus(outcome).ok()) cache.Succeeded(std::move(metadata));  // (not used after)
  Status told = comm->Broadcast(&outcome, coordinator);
  if (!told.ok()) {
    // The coordinator knows why the save failed (a rank that died while
    // sending its files, say) even when it cannot tell the others (a root's
    // message is never changed by its broadcast).
    if (is_coordinator && !DecodeStatus(outcome).ok()) return DecodeStatus(outcome);
    return told.WithContext("save: broadcasting the outcome");
  }
  Status result = DecodeStatus(outcome);
  if (result.ok() && !is_coordinator) cache.Succeeded();
  return result;
}

}  // namespace ckptdb
