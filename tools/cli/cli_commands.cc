// ls, cat and info: the commands that show what a store holds.
#include "cli_commands.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "ckptdb/checkpoint.h"
#include "cli_entries.h"
#include "cli_output.h"
#include "cli_slice.h"
#include "value_format.h"

namespace ckptdb::cli {

namespace {

bool AllDigits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

std::string JsonTags(const std::vector<std::string>& tags) {
  std::string out = "[";
  for (size_t i = 0; i < tags.size(); ++i) out += (i ? ", " : "") + JsonString(tags[i]);
  return out + "]";
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

}  // namespace

StatusOr<int64_t> ResolveStep(StoreReader& reader, const std::string& arg) {
  if (arg == "latest") return reader.LatestStep();
  if (arg.rfind("best:", 0) == 0) {
    std::string metric = arg.substr(5);
    MetricMode mode = MetricMode::kMin;
    const size_t colon = metric.rfind(':');
    if (colon != std::string::npos) {
      const std::string m = metric.substr(colon + 1);
      if (m != "min" && m != "max") {
        return Status::InvalidArgument("invalid step '" + arg + "': expected best:METRIC, best:METRIC:min or best:METRIC:max");
      }
      mode = m == "max" ? MetricMode::kMax : MetricMode::kMin;
      metric.resize(colon);
    }
    if (Status st = ValidateMetricName(metric); !st.ok()) return st.WithContext("step '" + arg + "'");
    return reader.BestStep(metric, mode);
  }
  if (AllDigits(arg)) {
    errno = 0;
    unsigned long long v = std::strtoull(arg.c_str(), nullptr, 10);
    if (errno == ERANGE || v > static_cast<unsigned long long>(kMaxStep)) {
      return Status::InvalidArgument("step " + arg + " is out of range [0, " + std::to_string(kMaxStep) + "]");
    }
    return static_cast<int64_t>(v);
  }
  if (arg.size() > 1 && arg[0] == '-' && AllDigits(arg.substr(1))) {
    return Status::InvalidArgument("step " + arg + " is out of range [0, " + std::to_string(kMaxStep) + "]");
  }
  if (!ValidateTagName(arg).ok()) {
    return Status::InvalidArgument("invalid step '" + arg +
                                   "': expected a number, 'latest', a tag name or best:METRIC[:min|max]");
  }
  return reader.ResolveTag(arg);
}

namespace {

// {"name": value, ...} with every digit (values round-trip).
std::string JsonMetrics(const std::map<std::string, double>& metrics) {
  std::string out = "{";
  for (const auto& [name, value] : metrics) {
    out += (out.size() > 1 ? ", " : "") + JsonString(name) + ": " + ExactDouble(value);
  }
  return out + "}";
}

}  // namespace

Status ListSteps(StoreReader& reader, const LsOptions& options, std::ostream& out) {
  auto listed = reader.ListSteps();
  if (!listed.ok()) return listed.status();
  std::vector<StepInfo> steps = std::move(listed).value();
  if (!options.sort.empty()) {
    if (Status st = ValidateMetricName(options.sort); !st.ok()) return st.WithContext("--sort");
    // By the metric, steps without it last in either direction; equal
    // values by step.
    const std::string& m = options.sort;
    std::stable_sort(steps.begin(), steps.end(), [&](const StepInfo& a, const StepInfo& b) {
      auto ia = a.metrics.find(m), ib = b.metrics.find(m);
      const bool ha = ia != a.metrics.end(), hb = ib != b.metrics.end();
      if (ha != hb) return ha;
      if (!ha || ia->second == ib->second) return false;
      return options.reverse ? ia->second > ib->second : ia->second < ib->second;
    });
  } else if (options.reverse) {
    std::reverse(steps.begin(), steps.end());
  }
  if (options.json) {
    std::string buf = "[";
    for (size_t i = 0; i < steps.size(); ++i) {
      const StepInfo& s = steps[i];
      buf += (i ? ",\n " : "\n ");
      buf += "{\"step\": " + std::to_string(s.step) + ", \"created\": " + JsonString(IsoTime(s.created_unix_ms)) +
             ", \"created_unix_ms\": " + std::to_string(s.created_unix_ms) +
             ", \"world_size\": " + std::to_string(s.world_size) + ", \"entries\": " + std::to_string(s.entries) +
             ", \"bytes\": " + std::to_string(s.logical_bytes) + ", \"stored_bytes\": " +
             std::to_string(s.stored_bytes) + ", \"tags\": " + JsonTags(s.tags) +
             ", \"metrics\": " + JsonMetrics(s.metrics) + ", \"note\": " + JsonString(s.note) +
             (s.damaged ? ", \"damaged\": true}" : "}");
    }
    buf += steps.empty() ? "]\n" : "\n]\n";
    out << buf;
    return Status::OK();
  }
  // A column per metric when there are few (else `info STEP` shows them).
  std::set<std::string> names;
  for (const StepInfo& s : steps) {
    for (const auto& kv : s.metrics) names.insert(kv.first);
  }
  if (names.size() > kMaxMetricColumns) {
    names.clear();
    if (!options.sort.empty()) names.insert(options.sort);
  }
  std::vector<std::string> header = {"STEP", "CREATED", "WORLD", "ENTRIES", "BYTES", "ADDED"};
  header.insert(header.end(), names.begin(), names.end());
  header.push_back("TAGS");
  std::vector<std::vector<std::string>> rows = {header};
  rows.reserve(steps.size() + 1);
  for (const StepInfo& s : steps) {
    std::vector<std::string> row;
    if (s.damaged) {
      row = {std::to_string(s.step), "DAMAGED (see ckptdb verify)", "", "", "", ""};
      row.resize(row.size() + names.size());
    } else {
      row = {std::to_string(s.step),   IsoTime(s.created_unix_ms),  std::to_string(s.world_size),
             std::to_string(s.entries), HumanBytes(s.logical_bytes), HumanBytes(s.stored_bytes)};
      for (const std::string& n : names) {
        auto it = s.metrics.find(n);
        row.push_back(it == s.metrics.end() ? "-" : FormatDouble(it->second, 6));
      }
    }
    row.push_back(Join(s.tags, ","));
    rows.push_back(std::move(row));
  }
  std::ostringstream table;
  PrintTable(rows, table);
  out << table.str();
  if (steps.empty()) out << "(no committed steps)\n";
  return Status::OK();
}

Status InfoStep(StoreReader& reader, int64_t step, bool json, std::ostream& out) {
  auto steps = reader.ListSteps();
  if (!steps.ok()) return steps.status();
  auto it = std::find_if(steps->begin(), steps->end(), [step](const StepInfo& s) { return s.step == step; });
  if (it == steps->end()) {
    return Status::NotFound("step " + std::to_string(step) + " not found in store '" + reader.path() + "'");
  }
  const StepInfo& s = *it;
  if (s.damaged) {
    return Status::DataLoss("the records of step " + std::to_string(step) + " are damaged (see ckptdb verify)");
  }
  if (json) {
    out << "{\"step\": " << s.step << ", \"created\": " << JsonString(IsoTime(s.created_unix_ms))
        << ", \"created_unix_ms\": " << s.created_unix_ms << ", \"world_size\": " << s.world_size
        << ", \"entries\": " << s.entries << ", \"bytes\": " << s.logical_bytes
        << ", \"stored_bytes\": " << s.stored_bytes << ", \"tags\": " << JsonTags(s.tags)
        << ", \"metrics\": " << JsonMetrics(s.metrics) << ", \"note\": " << JsonString(s.note) << "}\n";
    return Status::OK();
  }
  std::vector<std::vector<std::string>> rows = {
      {"step", std::to_string(s.step)},
      {"created", IsoTime(s.created_unix_ms)},
      {"world", std::to_string(s.world_size)},
      {"entries", std::to_string(s.entries)},
      {"bytes", HumanBytes(s.logical_bytes)},
      {"added", HumanBytes(s.stored_bytes)},
      {"tags", s.tags.empty() ? "-" : Join(s.tags, ", ")},
  };
  for (const auto& [name, value] : s.metrics) rows.push_back({"metric " + name, ExactDouble(value)});
  std::ostringstream table;
  PrintTable(rows, table);
  out << table.str();
  if (!s.note.empty()) out << "note\n" << s.note << (s.note.back() == '\n' ? "" : "\n");
  return Status::OK();
}

Status ListEntries(StoreReader& reader, int64_t step, bool shards, bool json, std::ostream& out) {
  // The step's summary, and an entry's pieces only where a figure shown
  // needs them: every piece with --shards; without, none when the step
  // records each entry's piece count and stored bytes (else they are read
  // entry by entry).
  auto md = reader.ReadStepSummary(step);
  if (!md.ok()) return md.status();
  std::vector<std::vector<std::string>> rows;
  if (json) {
    out << "[";
  } else if (shards) {
    rows.push_back({"FQN", "SHARD", "OFFSETS", "SIZES", "RANK", "ITEM", "CHUNKS", "SHARED", "BYTES", "ADDED"});
  } else {
    rows.push_back({"FQN", "KIND", "DTYPE", "SHAPE", "SHARDS", "BYTES"});
  }
  for (size_t i = 0; i < md->entries.size(); ++i) {
    if (shards) {
      Status st = WithPieces(reader, &*md, i, [&](const EntryMetadata& e) {
        if (!json) {
          for (size_t k = 0; k < e.pieces.size(); ++k) {
            const StoredPiece& p = e.pieces[k];
            rows.push_back({e.fqn, std::to_string(k), ShapeToString(p.offsets), ShapeToString(p.sizes),
                            std::to_string(p.key.rank), std::to_string(p.key.item), std::to_string(p.num_chunks),
                            std::to_string(p.referenced_chunks()), HumanBytes(p.nbytes), HumanBytes(p.stored_bytes)});
          }
          return Status::OK();
        }
        out << (i ? ",\n " : "\n ") << "{\"fqn\": " << JsonString(e.fqn) << ", \"kind\": "
            << JsonString(EntryKindName(e.kind)) << ", \"dtype\": " << JsonString(DTypeName(e.dtype))
            << ", \"shape\": " << JsonShape(e.shape) << ", \"shards\": " << e.pieces.size()
            << ", \"bytes\": " << e.logical_bytes() << ", \"stored_bytes\": " << e.stored_bytes() << ", \"pieces\": [";
        for (size_t k = 0; k < e.pieces.size(); ++k) {
          const StoredPiece& p = e.pieces[k];
          out << (k ? ", " : "") << "{\"offsets\": " << JsonShape(p.offsets) << ", \"sizes\": " << JsonShape(p.sizes)
              << ", \"rank\": " << p.key.rank << ", \"item\": " << p.key.item << ", \"chunks\": " << p.num_chunks
              << ", \"chunk_bytes\": " << p.chunk_bytes << ", \"chunk_shape\": " << JsonShape(p.chunk_shape)
              << ", \"bytes\": " << p.nbytes << ", \"stored_bytes\": " << p.stored_bytes
              << ", \"shared_chunks\": " << p.referenced_chunks() << "}";
        }
        out << "]}";
        return Status::OK();
      });
      if (!st.ok()) return st;
      continue;
    }
    auto totals = EntryTotals(reader, &*md, i);
    if (!totals.ok()) return totals.status();
    const EntryMetadata& e = md->entries[i];
    if (json) {
      out << (i ? ",\n " : "\n ") << "{\"fqn\": " << JsonString(e.fqn) << ", \"kind\": "
          << JsonString(EntryKindName(e.kind)) << ", \"dtype\": " << JsonString(DTypeName(e.dtype))
          << ", \"shape\": " << JsonShape(e.shape) << ", \"shards\": " << totals->pieces
          << ", \"bytes\": " << e.logical_bytes() << ", \"stored_bytes\": " << totals->stored_bytes << "}";
    } else {
      rows.push_back({e.fqn, EntryKindName(e.kind), e.kind == EntryKind::kBytes ? "-" : DTypeName(e.dtype),
                      e.kind == EntryKind::kBytes ? "-" : ShapeToString(e.shape), std::to_string(totals->pieces),
                      HumanBytes(e.logical_bytes())});
    }
  }
  if (json) {
    out << (md->entries.empty() ? "]\n" : "\n]\n");
  } else {
    PrintTable(rows, out);
  }
  return Status::OK();
}

Status InfoEntry(StoreReader& reader, int64_t step, const std::string& fqn, bool json, std::ostream& out) {
  // Only this entry's pieces are read.
  auto md = reader.ReadMetadataOf(step, {fqn});
  if (!md.ok()) return md.status();
  const EntryMetadata* e = md->Find(fqn);
  if (e == nullptr) return Status::NotFound("entry '" + fqn + "' is not in step " + std::to_string(step));
  uint64_t chunks = 0, shared = 0;
  std::set<uint32_t> ranks;
  for (const StoredPiece& p : e->pieces) {
    chunks += p.num_chunks;
    shared += p.referenced_chunks();
    ranks.insert(p.key.rank);
  }
  const bool bytes = e->kind == EntryKind::kBytes;
  if (json) {
    out << "{\"step\": " << step << ", \"fqn\": " << JsonString(e->fqn) << ", \"kind\": "
        << JsonString(EntryKindName(e->kind)) << ", \"dtype\": " << JsonString(DTypeName(e->dtype))
        << ", \"shape\": " << JsonShape(e->shape);
    if (bytes) out << ", \"bytes_encoding\": " << JsonString(BytesEncodingName(e->bytes_encoding));
    out << ", \"shards\": " << e->pieces.size() << ", \"ranks\": " << ranks.size() << ", \"chunks\": " << chunks
        << ", \"shared_chunks\": " << shared << ", \"bytes\": " << e->logical_bytes()
        << ", \"stored_bytes\": " << e->stored_bytes() << "}\n";
    return Status::OK();
  }
  std::vector<std::vector<std::string>> rows = {
      {"step", std::to_string(step)},
      {"entry", e->fqn},
      {"kind", EntryKindName(e->kind)},
  };
  if (bytes) {
    rows.push_back({"encoding", BytesEncodingName(e->bytes_encoding)});
  } else {
    rows.push_back({"dtype", DTypeName(e->dtype)});
    rows.push_back({"shape", ShapeToString(e->shape)});
  }
  rows.push_back({"shards", std::to_string(e->pieces.size()) + " (written by " + std::to_string(ranks.size()) +
                                (ranks.size() == 1 ? " rank)" : " ranks)")});
  rows.push_back({"chunks", std::to_string(chunks) + (shared > 0 ? " (" + std::to_string(shared) +
                                                                       " shared with earlier steps)"
                                                                 : "")});
  rows.push_back({"bytes", HumanBytes(e->logical_bytes())});
  rows.push_back({"added", HumanBytes(e->stored_bytes())});
  PrintTable(rows, out);
  return Status::OK();
}

Status CatEntry(StoreReader& reader, int64_t step, const std::string& fqn, const CatOptions& options,
                std::ostream& out) {
  // Only this entry's pieces are read (store format 6: a step of many
  // entries and ranks costs what the one entry does).
  auto md = reader.ReadMetadataOf(step, {fqn});
  if (!md.ok()) return md.status();
  const EntryMetadata* e = md->Find(fqn);
  if (e == nullptr) return Status::NotFound("entry '" + fqn + "' is not in step " + std::to_string(step));
  if (e->kind == EntryKind::kBytes) {
    if (options.slice != nullptr) {
      return Status::InvalidArgument("--slice applies to tensors; entry '" + fqn + "' is a bytes entry");
    }
    auto sd = LoadWhole(reader, step, {fqn});
    if (!sd.ok()) return sd.status();
    const std::string& data = std::get<Bytes>(sd->entries().front().second).data;
    if (options.raw) {
      out.write(data.data(), static_cast<std::streamsize>(data.size()));
    } else if (options.json) {
      const bool text = IsValidUtf8(data);
      out << "{\"fqn\": " << JsonString(fqn) << ", \"kind\": \"bytes\", \"length\": " << data.size() << ", "
          << (text ? "\"text\": " + JsonString(data) : "\"base64\": " + JsonString(Base64Encode(data))) << "}\n";
    } else {
      out << fqn << ": bytes, " << data.size() << " bytes\n" << EscapeBytes(data) << "\n";
    }
    return Status::OK();
  }
  if (options.raw && options.slice == nullptr) {
    // Streamed in blocks of rows: memory stays bounded for any tensor.
    return ForEachRowBlock(reader, *md, *e, 64u << 20, [&](const Tensor& block) {
      out.write(static_cast<const char*>(block.data()), static_cast<std::streamsize>(block.nbytes()));
      return out ? Status::OK() : Status::IOError("cannot write the tensor's bytes to the output");
    });
  }
  Tensor t;
  std::string label = fqn;
  if (options.slice != nullptr) {
    auto ranges = ResolveSlice(*options.slice, e->shape, fqn);
    if (!ranges.ok()) return ranges.status();
    auto sliced = ReadSlice(reader, *md, *e, *ranges);
    if (!sliced.ok()) return sliced.status();
    t = std::move(sliced).value();
    label += "[" + options.slice->text + "]";
  } else {
    auto sd = LoadWhole(reader, step, {fqn});
    if (!sd.ok()) return sd.status();
    t = std::get<Tensor>(sd->entries().front().second);
  }
  if (options.raw) {
    out.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
  } else if (options.json) {
    out << "{\"fqn\": " << JsonString(fqn) << ", \"kind\": " << JsonString(EntryKindName(e->kind))
        << ", \"dtype\": " << JsonString(DTypeName(t.dtype())) << ", \"shape\": " << JsonShape(t.shape());
    if (options.slice != nullptr) out << ", \"slice\": " << JsonString(options.slice->text);
    out << ", \"values\": " << FormatTensorJson(t) << "}\n";
  } else {
    out << label << ": " << DTypeName(t.dtype()) << " " << ShapeToString(t.shape()) << "\n" << FormatTensor(t) << "\n";
  }
  return Status::OK();
}

Status Info(StoreReader& reader, bool json, std::ostream& out) {
  auto steps = reader.ListSteps();
  if (!steps.ok()) return steps.status();
  auto tags = reader.ListTags();
  if (!tags.ok()) return tags.status();
  auto stats = reader.GetStoreStats();
  if (!stats.ok()) return stats.status();
  uint64_t logical = 0, stored = 0;
  for (const StepInfo& s : *steps) {
    logical += s.logical_bytes;
    stored += s.stored_bytes;
  }
  // The raw bytes of the distinct chunks the steps use: their own chunks,
  // and once each, the chunks they share (counted apart, and at the end only
  // where no listed step owns them: chunks of steps deleted since). One step's
  // metadata at a time.
  uint64_t own_raw = 0;
  std::map<ChunkLocation, uint64_t> shared;  // chunk -> its raw bytes
  std::set<std::pair<int64_t, uint64_t>> owners;  // (step, save id) of the listed steps
  for (const StepInfo& s : *steps) {
    if (s.damaged) continue;
    auto md = reader.ReadStepSummary(s.step);
    if (!md.ok()) continue;
    owners.emplace(md->step, md->save_id);
    for (size_t k = 0; k < md->entries.size(); ++k) {  // one entry's pieces at a time
      Status st = WithPieces(reader, &*md, k, [&](const EntryMetadata& e) {
        for (const StoredPiece& p : e.pieces) {
          uint64_t shared_raw = 0;
          for (const ChunkReference& r : p.references) {
            for (uint32_t i = 0; i < r.count; ++i) {
              shared_raw += p.chunk_raw_bytes(r.first + i);
              shared.emplace(ChunkLocation{r.step, r.save_id, r.key, r.chunk + i}, p.chunk_raw_bytes(r.first + i));
            }
          }
          own_raw += p.nbytes - shared_raw;
        }
        return Status::OK();
      });
      (void)st;  // an unreadable entry counts nothing (verify names it)
    }
  }
  uint64_t distinct = own_raw;
  for (const auto& [at, raw] : shared) {
    if (owners.count({at.step, at.save_id}) == 0) distinct += raw;
  }
  auto format_ratio = [](uint64_t a, uint64_t b) {
    char buf[32] = "-";
    if (b > 0) std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(a) / static_cast<double>(b));
    return std::string(buf);
  };
  const std::string ratio = format_ratio(own_raw, stored);
  const std::string dedup = format_ratio(logical, distinct);
  const StoreStats& st = *stats;
  if (json) {
    out << "{\"store\": " << JsonString(reader.path()) << ", \"steps\": " << steps->size();
    if (!steps->empty()) {
      out << ", \"first_step\": " << steps->front().step << ", \"latest_step\": " << steps->back().step;
    }
    out << ", \"tags\": {";
    size_t i = 0;
    for (const auto& [name, step] : *tags) out << (i++ ? ", " : "") << JsonString(name) << ": " << step;
    out << "}, \"bytes\": " << logical << ", \"distinct_bytes\": " << distinct
        << ", \"dedup_ratio\": " << (distinct > 0 ? dedup : "null") << ", \"stored_bytes\": " << stored
        << ", \"compression_ratio\": " << (stored > 0 ? ratio : "null") << ", \"disk_bytes\": " << st.disk_bytes
        << ", \"sst_files\": " << st.sst_files << ", \"sst_bytes\": " << st.sst_bytes
        << ", \"sst_files_per_level\": [";
    for (size_t l = 0; l < st.files_per_level.size(); ++l) out << (l ? ", " : "") << st.files_per_level[l];
    out << "], \"live_data_bytes\": " << st.live_data_bytes << ", \"estimated_keys\": " << st.estimated_keys
        << ", \"wal_files\": " << st.wal_files << ", \"wal_bytes\": " << st.wal_bytes
        << ", \"staging_dirs\": " << st.staging_dirs << "}\n";
    return Status::OK();
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"store", reader.path()});
  std::string steps_line = std::to_string(steps->size());
  if (!steps->empty()) {
    steps_line += " (first " + std::to_string(steps->front().step) + ", latest " +
                  std::to_string(steps->back().step) + ")";
  }
  rows.push_back({"steps", steps_line});
  std::vector<std::string> tag_list;
  for (const auto& [name, step] : *tags) tag_list.push_back(name + "=" + std::to_string(step));
  rows.push_back({"tags", tag_list.empty() ? "-" : Join(tag_list, ", ")});
  rows.push_back({"bytes", HumanBytes(logical) + " (tensor and bytes entries of every step)"});
  rows.push_back({"distinct", HumanBytes(distinct) + " (raw bytes of the distinct chunks the steps use)"});
  rows.push_back({"dedup", dedup + (distinct > 0 ? "x (bytes / distinct: shared between steps)" : "")});
  rows.push_back({"stored", HumanBytes(stored) + " (chunk values the steps added, as stored)"});
  rows.push_back({"compression", ratio + (stored > 0 ? "x (the steps' own raw chunks / stored)" : "")});
  if (reader.path().rfind("s3://", 0) == 0) {
    // A bucket store (StoreStats as bucket/bucket_store.cc fills them).
    rows.push_back({"bucket", HumanBytes(st.disk_bytes) + " (every object under the store's prefix)"});
    rows.push_back({"data objects", std::to_string(st.sst_files) + ", " + HumanBytes(st.sst_bytes)});
    rows.push_back({"pending", std::to_string(st.staging_dirs) + " save(s) in flight, or left by failed ones (gc)"});
    PrintTable(rows, out);
    return Status::OK();
  }
  rows.push_back({"disk", HumanBytes(st.disk_bytes) + " (every file under STORE/db)"});
  std::string levels;
  for (size_t l = 0; l < st.files_per_level.size(); ++l) {
    if (st.files_per_level[l] == 0) continue;
    levels += (levels.empty() ? "" : ", ") + std::string("L") + std::to_string(l) + ": " +
              std::to_string(st.files_per_level[l]);
  }
  rows.push_back({"sst files", std::to_string(st.sst_files) + ", " + HumanBytes(st.sst_bytes) +
                                   (levels.empty() ? "" : " (" + levels + ")")});
  rows.push_back({"live data", HumanBytes(st.live_data_bytes) + " (RocksDB's estimate)"});
  rows.push_back({"keys", "~" + std::to_string(st.estimated_keys) + " (RocksDB's estimate)"});
  rows.push_back({"wal", std::to_string(st.wal_files) + " files, " + HumanBytes(st.wal_bytes)});
  rows.push_back(
      {"staging", std::to_string(st.staging_dirs) + " directories (saves in flight, or left by failed ones)"});
  PrintTable(rows, out);
  return Status::OK();
}

}  // namespace ckptdb::cli
