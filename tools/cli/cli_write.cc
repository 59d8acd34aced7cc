// rm, gc and tag: the commands that change a store. Each opens the store for
// writing (taking RocksDB's lock, so it fails cleanly while a training job
// has the store open), resolves its arguments against the store as it is
// under the lock, and changes nothing unless every argument is valid.
#include <algorithm>
#include <set>

#include "cli_commands.h"
#include "cli_output.h"
#include "value_format.h"

namespace ckptdb::cli {

namespace {

struct OpenForWrite {
  std::unique_ptr<StoreWriter> writer;
  std::unique_ptr<StoreReader> reader;
};

// The store must already exist (a write command never creates one). The
// sweep is left to the command (gc reports it; the others do not sweep).
StatusOr<OpenForWrite> OpenStoreForWrite(const std::string& store, const std::string& command,
                                         int64_t abandoned_save_seconds = 3600) {
  OpenForWrite o;
  ReaderOptions lazy;
  lazy.open_all_files = false;  // only steps and tags are read, right away
  {
    auto r = OpenStoreReader(store, lazy);
    if (!r.ok()) return r.status();
  }
  StoreOptions so;
  so.sweep_on_open = false;
  so.abandoned_save_seconds = abandoned_save_seconds;
  auto w = OpenStoreWriter(store, so);
  if (!w.ok()) return w.status();
  o.writer = std::move(w).value();
  Status st = o.writer->OpenDatabase();
  if (st.code() == StatusCode::kUnavailable) {
    return Status::Unavailable("'ckptdb " + command + "' needs to open store '" + store +
                               "' for writing, but another process (a training job?) has it open; nothing was "
                               "changed; try again when it has finished (" +
                               st.message() + ")");
  }
  if (!st.ok()) return st;
  // Opened after the lock is ours: nothing changes under it but what we do.
  auto r = OpenStoreReader(store, lazy);
  if (!r.ok()) return r.status();
  o.reader = std::move(r).value();
  return o;
}

std::map<int64_t, std::vector<std::string>> TagsByStep(const std::map<std::string, int64_t>& tags) {
  std::map<int64_t, std::vector<std::string>> out;
  for (const auto& [name, step] : tags) out[step].push_back(name);
  return out;
}

}  // namespace

Status RemoveSteps(const std::string& store, const std::vector<std::string>& step_args, std::ostream& out) {
  auto o = OpenStoreForWrite(store, "rm");
  if (!o.ok()) return o.status();
  std::vector<int64_t> steps;
  for (const std::string& arg : step_args) {
    auto step = ResolveStep(*o->reader, arg);
    if (!step.ok()) return step.status().WithContext("nothing was removed");
    auto has = o->reader->HasStep(*step);
    if (!has.ok()) return has.status();
    if (!*has) {
      return Status::NotFound("step " + std::to_string(*step) + " not found in store '" + store +
                              "'; nothing was removed");
    }
    if (std::find(steps.begin(), steps.end(), *step) == steps.end()) steps.push_back(*step);
  }
  auto tags = o->reader->ListTags();
  if (!tags.ok()) return tags.status();
  auto by_step = TagsByStep(*tags);
  Status st = o->writer->DeleteSteps(steps);
  if (!st.ok()) return st;
  std::sort(steps.begin(), steps.end());
  for (int64_t step : steps) {
    out << "removed step " << step;
    auto t = by_step.find(step);
    if (t != by_step.end()) {
      out << " (and its tag" << (t->second.size() > 1 ? "s " : " ");
      for (size_t i = 0; i < t->second.size(); ++i) out << (i ? ", " : "") << "'" << t->second[i] << "'";
      out << ")";
    }
    out << "\n";
  }
  return Status::OK();
}

Status CollectGarbage(const std::string& store, const GcOptions& options, std::ostream& out) {
  auto o = OpenStoreForWrite(store, "gc", options.abandoned_save_seconds);
  if (!o.ok()) return o.status();
  auto listed = o->reader->ListSteps();
  if (!listed.ok()) return listed.status();
  auto swept = options.dry_run ? o->writer->FindLeftovers() : o->writer->Sweep();
  if (!swept.ok()) return swept.status();
  RetentionPolicy policy = options.policy;
  policy.keep_tagged = true;
  auto pruned = o->writer->Prune(policy, options.dry_run);
  if (!pruned.ok()) return pruned.status();
  ReclaimOptions ro = options.reclaim;
  ro.dry_run = options.dry_run;
  auto reclaimed = o->writer->ReclaimSpace(ro);
  if (!reclaimed.ok()) return reclaimed.status();
  uint64_t freed = 0;
  std::vector<int64_t> kept;
  for (const StepInfo& s : *listed) {
    if (std::binary_search(pruned->begin(), pruned->end(), s.step)) {
      freed += s.stored_bytes;
    } else {
      kept.push_back(s.step);
    }
  }
  if (options.json) {
    out << "{\"dry_run\": " << (options.dry_run ? "true" : "false")
        << ", \"failed_saves\": " << swept->orphan_saves << ", \"staging_dirs\": " << swept->staging_dirs
        << ", \"unaccounted_saves\": " << swept->unaccounted_saves
        << ", \"deleted_saves_reclaimed\": " << swept->deleted_saves_reclaimed
        << ", \"replaced_objects\": " << swept->replaced_objects
        << ", \"removed_steps\": " << JsonIntList(*pruned) << ", \"removed_stored_bytes\": " << freed
        << ", \"kept_steps\": " << JsonIntList(kept) << ", \"rewritten_files\": " << reclaimed->files_rewritten
        << ", \"rewritten_bytes_before\": " << reclaimed->bytes_before
        << ", \"rewritten_bytes_after\": " << reclaimed->bytes_after << ", \"files_left\": " << reclaimed->files_left
        << ", \"unused_bytes_left\": " << reclaimed->unused_bytes_left
        << ", \"saves_running\": " << reclaimed->saves_running << "}\n";
    return Status::OK();
  }
  const char* verb = options.dry_run ? "would " : "";
  out << (options.dry_run ? "would sweep " : "swept ") << swept->orphan_saves << " failed save(s) and "
      << swept->staging_dirs << " staging dir(s)\n";
  if (swept->deleted_saves_reclaimed > 0) {
    out << (options.dry_run ? "would give back " : "gave back ") << "the files of "
        << swept->deleted_saves_reclaimed << " deleted save(s) still on disk\n";
  }
  if (swept->replaced_objects > 0) {
    out << (options.dry_run ? "would delete " : "deleted ") << swept->replaced_objects
        << " object(s) that earlier rewrites replaced\n";
  }
  if (swept->unaccounted_saves > 0) {
    out << "kept " << swept->unaccounted_saves
        << " save(s) whose data has neither a commit nor a pending record (a commit whose log was lost, or a "
           "failed save of a format-1 store): never deleted by a sweep\n";
  }
  if (!policy.enabled()) {
    out << "no retention rule given (--keep-last, --keep-every, --keep-best): every step is kept\n";
  } else if (pruned->empty()) {
    out << "every step is kept\n";
  } else {
    out << verb << (options.dry_run ? "remove " : "removed ") << pruned->size()
        << (pruned->size() == 1 ? " step (it added " : " steps (they added ") << HumanBytes(freed)
        << "): " << JoinSteps(*pruned) << "\n";
  }
  out << (options.dry_run ? "would keep " : "kept ") << kept.size() << (kept.size() == 1 ? " step" : " steps")
      << (kept.empty() ? "" : ": " + JoinSteps(kept)) << "\n";
  if (reclaimed->files_rewritten > 0) {
    out << (options.dry_run ? "would rewrite " : "rewrote ") << reclaimed->files_rewritten
        << " file(s) holding chunks kept steps share, without their unused chunks: "
        << HumanBytes(reclaimed->bytes_before) << " -> " << HumanBytes(reclaimed->bytes_after)
        << (options.dry_run ? " (estimated)" : "") << "\n";
    if (o->writer->path().rfind("s3://", 0) == 0 && !options.dry_run && options.abandoned_save_seconds > 0) {
      out << "the objects they replace stay " << options.abandoned_save_seconds
          << " s more (--abandoned-after) for readers that read the store before; a gc after that deletes them\n";
    }
  }
  if (reclaimed->saves_running > 0) {
    out << "rewrote no object: " << reclaimed->saves_running
        << " save(s) running, which may share the chunks a rewrite moves; run gc again between saves\n";
  }
  if (reclaimed->files_left > 0) {
    out << (options.dry_run ? "would leave " : "left ") << HumanBytes(reclaimed->unused_bytes_left)
        << " of unused chunks in " << reclaimed->files_left
        << " file(s), below --min-unused of each (rewriting costs their used bytes)\n";
  }
  return Status::OK();
}

Status TagStep(const std::string& store, const std::string& step_arg, const std::string& name, std::ostream& out) {
  Status valid = ValidateTagName(name);
  if (!valid.ok()) return valid;
  auto o = OpenStoreForWrite(store, "tag");
  if (!o.ok()) return o.status();
  auto step = ResolveStep(*o->reader, step_arg);
  if (!step.ok()) return step.status();
  auto previous = o->writer->Tag(*step, name);
  if (!previous.ok()) return previous.status();
  if (previous->has_value() && **previous != *step) {
    out << "moved tag '" << name << "' from step " << **previous << " to step " << *step << "\n";
  } else {
    out << "tagged step " << *step << " as '" << name << "'\n";
  }
  return Status::OK();
}

Status Untag(const std::string& store, const std::string& name, std::ostream& out) {
  Status valid = ValidateTagName(name);
  if (!valid.ok()) return valid;
  auto o = OpenStoreForWrite(store, "tag --delete");
  if (!o.ok()) return o.status();
  auto tags = o->reader->ListTags();
  if (!tags.ok()) return tags.status();
  Status st = o->writer->DeleteTag(name);
  if (!st.ok()) return st;
  auto it = tags->find(name);
  out << "deleted tag '" << name << "'";
  if (it != tags->end()) out << " (it named step " << it->second << ")";
  out << "\n";
  return Status::OK();
}

}  // namespace ckptdb::cli
