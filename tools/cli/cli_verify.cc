// verify: read every chunk of the chosen steps and check it.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>

#include "cli_commands.h"
#include "cli_entries.h"
#include "cli_output.h"
#include "value_format.h"

namespace ckptdb::cli {

namespace {

// Bytes read per Read call: bounds memory for shards of any size.
constexpr uint64_t kReadWindow = 64ull << 20;

struct StepReport {
  int64_t step = 0;
  uint64_t entries = 0;
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  uint64_t stored_bytes = 0;
  uint64_t shared_chunks = 0;  // chunks verified already for another step of this run
  std::vector<std::string> errors;  // one per damaged entry (or the metadata)
};

// A one-line bar redrawn at most every 100 ms; only drawn when asked for
// (stderr is a terminal).
class Progress {
 public:
  Progress(bool enabled, std::ostream& out, uint64_t total) : enabled_(enabled), out_(out), total_(total) {}
  void Advance(uint64_t n, int64_t step) {
    done_ += n;
    if (!enabled_) return;
    auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_ < std::chrono::milliseconds(100) && done_ < total_) return;
    last_ = now;
    drawn_ = true;
    const double f = total_ ? std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_)) : 1.0;
    const int width = 30, fill = static_cast<int>(f * width);
    out_ << "\r[" << std::string(fill, '#') << std::string(width - fill, '.') << "] " << static_cast<int>(f * 100)
         << "%  " << HumanBytes(done_) << " / " << HumanBytes(total_) << "  step " << step << "   " << std::flush;
  }
  ~Progress() {
    if (enabled_ && drawn_) out_ << "\r" << std::string(80, ' ') << "\r" << std::flush;
  }

 private:
  bool enabled_;
  std::ostream& out_;
  uint64_t total_;
  uint64_t done_ = 0;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_;
};

// What this run found of the chunks that several of its steps share
// (deduplication): each is read and verified once, and its outcome counted
// for every step using it. Only shared chunks are kept (memory grows with
// the chunks steps share, not with the chunks read).
struct Verdicts {
  std::set<ChunkLocation> shared;  // every chunk some step refers to
  std::map<ChunkLocation, Status> found;
};

// Adds to `shared` every chunk the steps' references name, reading one
// entry's pieces at a time.
void FindSharedChunks(StoreReader& reader, const std::vector<int64_t>& steps, std::set<ChunkLocation>* shared) {
  for (int64_t step : steps) {
    auto md = reader.ReadStepSummary(step);
    if (!md.ok()) continue;  // reported by VerifyStep
    for (size_t i = 0; i < md->entries.size(); ++i) {
      Status st = WithPieces(reader, &*md, i, [&](const EntryMetadata& e) {
        for (const StoredPiece& p : e.pieces) {
          for (const ChunkReference& r : p.references) {
            for (uint32_t k = 0; k < r.count; ++k) shared->insert(ChunkLocation{r.step, r.save_id, r.key, r.chunk + k});
          }
        }
        return Status::OK();
      });
      (void)st;  // reported by VerifyStep
    }
  }
}

// Verifies the step entry by entry: its summary first, then each entry's
// pieces and chunks, holding one entry's pieces at a time. An entry whose
// pieces record is unreadable is reported by name, and the others are
// still verified.
void VerifyStep(StoreReader& reader, int64_t step, Progress& progress, Verdicts& verdicts, StepReport* r) {
  r->step = step;
  auto summary = reader.ReadStepSummary(step);
  if (!summary.ok()) {
    r->errors.push_back("metadata: " + summary.status().ToString());
    return;
  }
  StepMetadata* md = &*summary;
  std::unique_ptr<char[]> buf;
  uint64_t buf_size = 0;
  for (size_t index = 0; index < md->entries.size(); ++index) {
    r->entries++;
    r->bytes += md->entries[index].logical_bytes();
    Status bad;
    Status pieces = WithPieces(reader, md, index, [&](const EntryMetadata& e) {
      r->stored_bytes += e.stored_bytes();
      for (const StoredPiece& p : e.pieces) {
        if (p.nbytes == 0 || !bad.ok()) continue;
        // Whole chunks per window, so that every chunk is read once.
        const uint64_t per_window = std::max<uint64_t>(1, kReadWindow / p.chunk_bytes);
        const uint64_t want = std::min<uint64_t>(per_window * p.chunk_bytes, p.nbytes);
        if (buf_size < want) {
          buf.reset(new char[want]);
          buf_size = want;
        }
        // Reads chunks [first, last) in one call; OK when all verify.
        auto read = [&](uint32_t first, uint32_t last) -> Status {
          std::vector<ReadItem> items;
          if (p.chunk_shape.empty()) {
            const uint64_t off = uint64_t{first} * p.chunk_bytes;
            const uint64_t end = std::min<uint64_t>(uint64_t{last} * p.chunk_bytes, p.nbytes);
            items.push_back(ReadItem{e.fqn, p, off, end - off, buf.get(), {}});
          } else {
            // Chunks cut as boxes: each one's region, verified and dropped.
            for (uint32_t c = first; c < last; ++c) {
              ReadItem item{e.fqn, p, 0, 0, nullptr, {}};
              p.chunk_region(c, &item.region_offsets, &item.region_sizes);
              item.box_sink = [](const std::vector<int64_t>&, const std::vector<int64_t>&, uint64_t, const char*,
                                 uint64_t) { return Status::OK(); };
              items.push_back(std::move(item));
            }
          }
          auto rs = reader.Read(*md, items);
          if (!rs.ok()) return rs.status();
          r->chunks += rs->chunks_read;
          progress.Advance(rs->stored_bytes_read, step);
          return Status::OK();
        };
        auto at = [&](uint32_t c) { return p.LocateChunk(md->step, md->save_id, c); };
        auto seen_before = [&](uint32_t c) { return verdicts.found.count(at(c)) > 0; };
        auto record = [&](uint32_t c, const Status& st) {
          if (verdicts.shared.count(at(c)) > 0) verdicts.found.emplace(at(c), st);
        };
        for (uint32_t c = 0; c < p.num_chunks && bad.ok();) {
          auto seen = verdicts.found.find(at(c));
          if (seen != verdicts.found.end()) {  // shared with a step verified before
            r->chunks++;
            r->shared_chunks++;
            if (!seen->second.ok()) {
              bad = Status::DataLoss("entry '" + e.fqn + "' chunk " + std::to_string(c) +
                                     " (shared with another step): " + seen->second.message());
            }
            ++c;
            continue;
          }
          uint32_t last = c + 1;  // the window: chunks not seen yet
          while (last < p.num_chunks && last - c < per_window && !seen_before(last)) ++last;
          Status st = read(c, last);
          if (st.ok()) {
            for (uint32_t k = c; k < last; ++k) record(k, Status::OK());
          } else {
            // Chunk by chunk, so that each shared chunk's verdict is its own.
            for (uint32_t k = c; k < last; ++k) {
              Status one = read(k, k + 1);
              record(k, one);
              if (!one.ok() && bad.ok()) bad = one;
            }
          }
          c = last;
        }
      }
      return Status::OK();
    });
    if (!pieces.ok()) {
      if (std::optional<PieceTotals> totals = md->entries[index].totals()) r->stored_bytes += totals->stored_bytes;
      bad = pieces;
    }
    if (!bad.ok()) r->errors.push_back(bad.ToString());
  }
}

}  // namespace

Status Verify(StoreReader& reader, const VerifyOptions& options, std::ostream& out, std::ostream& progress_out) {
  auto listed = reader.ListSteps();
  if (!listed.ok()) return listed.status();
  std::vector<int64_t> steps = options.steps;
  uint64_t total = 0;
  if (steps.empty()) {
    for (const StepInfo& s : *listed) steps.push_back(s.step);
  }
  for (int64_t step : steps) {
    auto it = std::lower_bound(listed->begin(), listed->end(), step,
                               [](const StepInfo& a, int64_t s) { return a.step < s; });
    if (it == listed->end() || it->step != step) {
      return Status::NotFound("step " + std::to_string(step) + " not found in store '" + reader.path() + "'");
    }
    total += it->stored_bytes;
  }
  std::vector<StepReport> reports(steps.size());
  {
    Progress progress(options.progress, progress_out, total);
    Verdicts verdicts;
    // (Chunks are shared between steps only: with one step, there is
    // nothing to find.)
    if (steps.size() > 1) FindSharedChunks(reader, steps, &verdicts.shared);
    for (size_t i = 0; i < steps.size(); ++i) VerifyStep(reader, steps[i], progress, verdicts, &reports[i]);
  }
  std::vector<RecordDamage> records;
  if (options.steps.empty()) {
    auto found = reader.FindDamagedRecords();
    if (!found.ok()) return found.status();
    records = std::move(found).value();
  }
  size_t damaged = 0;
  uint64_t chunks = 0, stored = 0;
  for (const StepReport& r : reports) {
    damaged += r.errors.empty() ? 0 : 1;
    chunks += r.chunks;
    stored += r.stored_bytes;
  }
  if (options.json) {
    out << "{\"ok\": " << (damaged == 0 && records.empty() ? "true" : "false") << ", \"steps\": [";
    for (size_t i = 0; i < reports.size(); ++i) {
      const StepReport& r = reports[i];
      out << (i ? ",\n " : "\n ") << "{\"step\": " << r.step << ", \"ok\": " << (r.errors.empty() ? "true" : "false")
          << ", \"entries\": " << r.entries << ", \"chunks\": " << r.chunks << ", \"bytes\": " << r.bytes
          << ", \"stored_bytes\": " << r.stored_bytes << ", \"shared_chunks\": " << r.shared_chunks
          << ", \"errors\": [";
      for (size_t k = 0; k < r.errors.size(); ++k) out << (k ? ", " : "") << JsonString(r.errors[k]);
      out << "]}";
    }
    out << (reports.empty() ? "]" : "\n]");
    if (!records.empty()) {
      out << ", \"damaged_records\": [";
      for (size_t i = 0; i < records.size(); ++i) {
        out << (i ? ",\n " : "\n ") << "{\"record\": " << JsonString(records[i].record)
            << ", \"error\": " << JsonString(records[i].error.ToString()) << "}";
      }
      out << "\n]";
    }
    out << "}\n";
  } else {
    for (const StepReport& r : reports) {
      if (r.errors.empty()) {
        out << "step " << r.step << ": ok (" << r.entries << " entries, " << r.chunks << " chunks, "
            << HumanBytes(r.stored_bytes);
        if (r.shared_chunks > 0) out << ", " << r.shared_chunks << " chunks shared with steps verified before";
        out << ")\n";
      } else {
        out << "step " << r.step << ": DAMAGED\n";
        for (const std::string& e : r.errors) out << "  " << e << "\n";
      }
    }
    for (const RecordDamage& d : records) out << d.record << ": DAMAGED\n  " << d.error.ToString() << "\n";
    if (!records.empty()) out << records.size() << (records.size() == 1 ? " record" : " records") << " damaged\n";
    if (damaged == 0 && records.empty()) {
      out << "intact: " << reports.size() << (reports.size() == 1 ? " step, " : " steps, ") << chunks << " chunks, "
          << HumanBytes(stored) << " verified\n";
    } else if (damaged > 0) {
      out << damaged << " of " << reports.size() << " steps damaged\n";
    }
  }
  if (damaged > 0) {
    return Status::DataLoss(std::to_string(damaged) + " of " + std::to_string(reports.size()) + " steps damaged");
  }
  if (!records.empty()) {
    return Status::DataLoss(std::to_string(records.size()) + " record(s) damaged: " + records[0].record +
                            (records.size() > 1 ? ", ..." : ""));
  }
  return Status::OK();
}

}  // namespace ckptdb::cli
