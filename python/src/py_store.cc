// Binds the RocksDB store: a writer (saves, tags, deletes, pruning, sweeps)
// and a reader (steps, tags, a step's entries). Every call that touches the
// database runs with the GIL released.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "ckptdb/checkpoint.h"
#include "ckptdb/copy.h"
#include "py_common.h"
#include "py_store.h"

namespace ckptdb::py {

namespace {

// Runs f() (returning Status or StatusOr) with the GIL released and raises
// its error.
template <typename F>
auto Released(F&& f) {
  auto result = [&] {
    nb::gil_scoped_release release;
    return f();
  }();
  if constexpr (std::is_same_v<decltype(result), Status>) {
    Check(result);
  } else {
    return Take(std::move(result));
  }
}

// The value named `name` among `choices` of the option `option`; ValueError
// listing them otherwise ("compression 'lz4' is not one of 'none', ...").
template <typename E>
E ParseChoice(const char* option, const std::string& name,
              std::initializer_list<std::pair<const char*, E>> choices) {
  std::string listed;
  for (const auto& [text, value] : choices) {
    if (name == text) return value;
    listed += std::string(listed.empty() ? "'" : ", '") + text + "'";
  }
  throw nb::value_error((std::string(option) + " '" + name + "' is not one of " + listed).c_str());
}

Compression ParseCompression(const std::string& name) {
  return ParseChoice<Compression>("compression", name,
                     {{"none", Compression::kNone}, {"zstd", Compression::kZstd}, {"auto", Compression::kAuto}});
}

nb::dict StepDict(const StepInfo& s) {
  nb::dict d;
  d["step"] = s.step;
  d["created_unix_ms"] = s.created_unix_ms;
  d["world_size"] = s.world_size;
  d["entries"] = s.entries;
  d["logical_bytes"] = s.logical_bytes;
  d["stored_bytes"] = s.stored_bytes;
  d["tags"] = s.tags;
  d["damaged"] = s.damaged;
  d["metrics"] = s.metrics;
  d["note"] = s.note;
  return d;
}

// Python's cyclic garbage collector off while it lives (as it was after).
class CollectorPaused {
 public:
  CollectorPaused() : was_enabled_(PyGC_Disable() != 0) {}
  ~CollectorPaused() {
    if (was_enabled_) PyGC_Enable();
  }
  CollectorPaused(const CollectorPaused&) = delete;
  CollectorPaused& operator=(const CollectorPaused&) = delete;

 private:
  const bool was_enabled_;
};

nb::dict EntryDict(const EntryMetadata& e) {
  nb::dict d;
  d["fqn"] = e.fqn;
  d["kind"] = EntryKindName(e.kind);
  d["dtype"] = e.kind == EntryKind::kBytes ? std::string() : std::string(DTypeName(e.dtype));
  d["shape"] = e.shape;
  d["logical_bytes"] = e.logical_bytes();
  // (An entry read without its pieces: the totals the step recorded.)
  const std::optional<PieceTotals> totals = e.totals();
  d["stored_bytes"] = totals.has_value() ? totals->stored_bytes : e.stored_bytes();
  nb::list pieces;
  for (const StoredPiece& p : e.pieces) pieces.append(nb::make_tuple(p.offsets, p.sizes));
  d["pieces"] = pieces;
  d["bytes_encoding"] = e.kind == EntryKind::kBytes ? std::string(BytesEncodingName(e.bytes_encoding)) : std::string();
  return d;
}

nb::dict SweepDict(const SweepStats& s) {
  nb::dict d;
  d["orphan_saves"] = s.orphan_saves;
  d["staging_dirs"] = s.staging_dirs;
  d["unaccounted_saves"] = s.unaccounted_saves;
  d["replaced_objects"] = s.replaced_objects;
  return d;
}

nb::dict ReclaimDict(const ReclaimStats& s) {
  nb::dict d;
  d["rewritten_files"] = s.files_rewritten;
  d["rewritten_bytes_before"] = s.bytes_before;
  d["rewritten_bytes_after"] = s.bytes_after;
  d["files_left"] = s.files_left;
  d["unused_bytes_left"] = s.unused_bytes_left;
  d["saves_running"] = s.saves_running;
  return d;
}

MetricMode ParseMode(const std::string& mode) {
  return ParseChoice<MetricMode>("best_mode", mode, {{"min", MetricMode::kMin}, {"max", MetricMode::kMax}});
}

RetentionPolicy Policy(int64_t keep_last, int64_t keep_every, bool keep_tagged, int64_t keep_best,
                       const std::string& best_metric, const std::string& best_mode) {
  RetentionPolicy p;
  p.keep_last = keep_last;
  p.keep_every = keep_every;
  p.keep_tagged = keep_tagged;
  p.keep_best = keep_best;
  p.best_metric = best_metric;
  p.best_mode = ParseMode(best_mode);
  return p;
}

}  // namespace

void BindStore(nb::module_& m) {
  nb::class_<PyWriter>(m, "Writer", "A store writer (only the coordinator's opens the database)")
      .def(
          "__init__",
          [](PyWriter* self, const std::string& path, uint64_t chunk_bytes, const std::string& compression,
             int zstd_level, int threads, int64_t keep_last, int64_t keep_every, bool keep_tagged,
             bool deduplicate, const std::string& chunk_layout, const std::string& access,
             const std::string& local_staging_dir, int64_t keep_best, const std::string& best_metric,
             const std::string& best_mode, int64_t s3_stall_timeout_seconds) {
            StoreOptions o;
            o.s3_stall_timeout_seconds = s3_stall_timeout_seconds;
            o.access = ParseChoice<StoreAccess>(
                "access", access, {{"shared", StoreAccess::kShared}, {"coordinator_only", StoreAccess::kCoordinatorOnly}});
            o.local_staging_dir = local_staging_dir;
            o.deduplicate = deduplicate;
            o.chunk_layout = ParseChoice<ChunkLayout>(
                "chunk_layout", chunk_layout, {{"boxes", ChunkLayout::kBoxes}, {"rows", ChunkLayout::kRows}});
            o.chunk_bytes = chunk_bytes;
            o.compression = ParseCompression(compression);
            o.zstd_level = zstd_level;
            o.threads = threads;
            o.retention = Policy(keep_last, keep_every, keep_tagged, keep_best, best_metric, best_mode);
            new (self) PyWriter{Released([&] { return OpenStoreWriter(path, o); })};
          },
          nb::arg("path"), nb::arg("chunk_bytes") = 4u << 20, nb::arg("compression") = "none",
          nb::arg("zstd_level") = 1, nb::arg("threads") = 0, nb::arg("keep_last") = 0, nb::arg("keep_every") = 0,
          nb::arg("keep_tagged") = true, nb::arg("deduplicate") = true, nb::arg("chunk_layout") = "boxes",
          nb::arg("access") = "shared", nb::arg("local_staging_dir") = "", nb::arg("keep_best") = 0,
          nb::arg("best_metric") = "", nb::arg("best_mode") = "min", nb::arg("s3_stall_timeout_seconds") = 0)
      .def_prop_ro("path", [](PyWriter& w) { return w.writer->path(); })
      .def("open_database", [](PyWriter& w) { Released([&] { return w.writer->OpenDatabase(); }); })
      .def(
          "tag",
          [](PyWriter& w, int64_t step, const std::string& name) {
            return Released([&] { return w.writer->Tag(step, name); });
          },
          nb::arg("step"), nb::arg("name"))
      .def(
          "delete_tag", [](PyWriter& w, const std::string& name) { Released([&] { return w.writer->DeleteTag(name); }); },
          nb::arg("name"))
      .def(
          "delete_steps",
          [](PyWriter& w, const std::vector<int64_t>& steps) { Released([&] { return w.writer->DeleteSteps(steps); }); },
          nb::arg("steps"))
      .def(
          "prune",
          [](PyWriter& w, int64_t keep_last, int64_t keep_every, bool keep_tagged, bool dry_run, int64_t keep_best,
             const std::string& best_metric, const std::string& best_mode) {
            RetentionPolicy p = Policy(keep_last, keep_every, keep_tagged, keep_best, best_metric, best_mode);
            return Released([&] { return w.writer->Prune(p, dry_run); });
          },
          nb::arg("keep_last"), nb::arg("keep_every"), nb::arg("keep_tagged"), nb::arg("dry_run"),
          nb::arg("keep_best") = 0, nb::arg("best_metric") = "", nb::arg("best_mode") = "min")
      .def("sweep", [](PyWriter& w) { return SweepDict(Released([&] { return w.writer->Sweep(); })); })
      .def("find_leftovers", [](PyWriter& w) { return SweepDict(Released([&] { return w.writer->FindLeftovers(); })); })
      .def(
          "reclaim_space",
          [](PyWriter& w, double min_unused_fraction, bool dry_run) {
            ReclaimOptions o;
            o.min_unused_fraction = min_unused_fraction;
            o.dry_run = dry_run;
            return ReclaimDict(Released([&] { return w.writer->ReclaimSpace(o); }));
          },
          nb::arg("min_unused_fraction"), nb::arg("dry_run"));

  nb::class_<PyReader>(m, "Reader", "A read-only view of a store as of opening or the last refresh()")
      .def(
          "__init__",
          [](PyReader* self, const std::string& path, int64_t s3_stall_timeout_seconds) {
            ReaderOptions o;
            o.s3_stall_timeout_seconds = s3_stall_timeout_seconds;
            new (self) PyReader{Released([&] { return OpenStoreReader(path, o); }), {}};
          },
          nb::arg("path"), nb::arg("s3_stall_timeout_seconds") = 0)
      .def("refresh",
           [](PyReader& r) {
             Released([&] {
               std::lock_guard<std::mutex> l(r.mu);
               return r.reader->Refresh();
             });
           })
      .def("steps",
           [](PyReader& r) {
             std::vector<StepInfo> steps = Released([&] {
               std::lock_guard<std::mutex> l(r.mu);
               return r.reader->ListSteps();
             });
             nb::list out;
             for (const StepInfo& s : steps) out.append(StepDict(s));
             return out;
           })
      .def("latest",
           [](PyReader& r) {
             return Released([&] {
               std::lock_guard<std::mutex> l(r.mu);
               return r.reader->LatestStep();
             });
           })
      .def(
          "latest_at_or_before",
          [](PyReader& r, int64_t step) {
            return Released([&] {
              std::lock_guard<std::mutex> l(r.mu);
              return r.reader->LatestStepAtOrBefore(step);
            });
          },
          nb::arg("step"))
      .def("tags",
           [](PyReader& r) {
             return Released([&] {
               std::lock_guard<std::mutex> l(r.mu);
               return r.reader->ListTags();
             });
           })
      .def(
          "best",
          [](PyReader& r, const std::string& name, const std::string& mode) {
            MetricMode parsed = ParseMode(mode);
            return Released([&] {
              std::lock_guard<std::mutex> l(r.mu);
              return r.reader->BestStep(name, parsed);
            });
          },
          nb::arg("name"), nb::arg("mode") = "min")
      .def(
          "resolve_tag",
          [](PyReader& r, const std::string& name) {
            return Released([&] {
              std::lock_guard<std::mutex> l(r.mu);
              return r.reader->ResolveTag(name);
            });
          },
          nb::arg("name"))
      .def(
          "entries",
          [](PyReader& r, int64_t step, bool pieces) {
            StepMetadata md = Released([&]() -> StatusOr<StepMetadata> {
              std::lock_guard<std::mutex> l(r.mu);
              if (pieces) return r.reader->ReadMetadata(step);
              // The step's summary; the pieces of an entry only where the
              // step recorded no totals for it (steps saved before it did).
              StatusOr<StepMetadata> summary = r.reader->ReadStepSummary(step);
              if (!summary.ok()) return summary;
              std::vector<std::string> untotalled;
              for (const EntryMetadata& e : summary->entries) {
                if (!e.totals().has_value()) untotalled.push_back(e.fqn);
              }
              if (untotalled.empty()) return summary;
              if (Status st = r.reader->ReadEntryPieces(&*summary, untotalled); !st.ok()) return st;
              return summary;
            });
            // A step of many ranks makes millions of Python containers here
            // (a tuple and two lists a piece), and Python's cyclic collector,
            // run every few hundred allocations, went through all of them
            // again and again: two thirds of the time for 600k pieces. None
            // of them can be part of a cycle.
            const CollectorPaused paused;
            nb::list out;
            for (const EntryMetadata& e : md.entries) out.append(EntryDict(e));
            return out;
          },
          nb::arg("step"), nb::arg("pieces") = true,
          "Every entry of the step, with its pieces (offsets, sizes) unless pieces=False: then a step of "
          "many ranks is listed from its summary")
      .def(
          "entry",
          [](PyReader& r, int64_t step, const std::string& fqn) -> std::optional<nb::dict> {
            StepMetadata md = Released([&] {
              std::lock_guard<std::mutex> l(r.mu);
              return r.reader->ReadMetadataOf(step, {fqn});
            });
            const EntryMetadata* e = md.Find(fqn);
            if (e == nullptr) return std::nullopt;
            return EntryDict(*e);
          },
          nb::arg("step"), nb::arg("fqn"),
          "One entry of the step with its pieces, reading only its records; None when the step lacks it")
      .def(
          "annotations",
          [](PyReader& r, int64_t step) {
            StepMetadata md = Released([&] {
              std::lock_guard<std::mutex> l(r.mu);
              return r.reader->ReadStepSummary(step);  // (the step's record: no pieces)
            });
            nb::dict out;
            for (const auto& [name, value] : md.annotations)
              out[nb::str(name.data(), name.size())] = nb::bytes(value.data(), value.size());
            return out;
          },
          nb::arg("step"), "The records the step's save attached, by name (SaveOptions::annotations)");

  m.def(
      "copy_steps",
      [](const std::string& from, const std::string& to, const std::vector<int64_t>& steps, bool tags, bool dry_run) {
        CopyOptions o;
        o.steps = steps;
        o.tags = tags;
        o.dry_run = dry_run;
        std::vector<CopiedStep> copied = Released([&] { return CopySteps(from, to, o); });
        nb::list out;
        for (const CopiedStep& c : copied) {
          nb::dict d;
          d["step"] = c.step;
          d["outcome"] = c.outcome == CopiedStep::Outcome::kCopied    ? "copied"
                         : c.outcome == CopiedStep::Outcome::kPresent ? "present"
                                                                      : "would_copy";
          d["logical_bytes"] = c.logical_bytes;
          d["stored_bytes"] = c.stored_bytes;
          nb::list t;
          for (const std::string& name : c.tags) t.append(nb::str(name.data(), name.size()));
          d["tags"] = t;
          out.append(d);
        }
        return out;
      },
      nb::arg("src"), nb::arg("dst"), nb::arg("steps"), nb::arg("tags"), nb::arg("dry_run"),
      "CopySteps (ckptdb/copy.h)");
}

}  // namespace ckptdb::py
