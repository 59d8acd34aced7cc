#include "format/step_records.h"

#include <algorithm>
#include <cstring>

#include "format/chunk_codec.h"
#include "ckptdb/checkpoint.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

void PutLE(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

Status ValidateTagName(const std::string& name) {
  if (name.empty()) return Status::InvalidArgument("empty tag name");
  if (name.size() > 128) {
    return Status::InvalidArgument("tag name '" + name.substr(0, 32) + "...' is longer than 128 characters");
  }
  if (name == "latest") return Status::InvalidArgument("'latest' is reserved and cannot be a tag name");
  const unsigned char first = static_cast<unsigned char>(name[0]);
  if (!((first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z'))) {
    return Status::InvalidArgument("tag name '" + name + "' must start with a letter");
  }
  for (unsigned char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-';
    if (!ok) {
      return Status::InvalidArgument("tag name '" + name + "' may hold only letters, digits, '.', '_' and '-'");
    }
  }
  return Status::OK();
}

StepSummary SummarizeStep(const StepMetadata& m) {
  StepSummary s;
  s.created_unix_ms = m.created_unix_ms;
  s.world_size = m.world_size;
  s.entries = m.entries.size();
  s.logical_bytes = m.logical_bytes();
  s.stored_bytes = m.stored_bytes();
  s.save_id = m.save_id;
  s.metrics = m.metrics;
  s.note = m.note;
  return s;
}

std::string EncodeSummaryValue(const StepSummary& s) {
  std::string raw;
  const bool labelled = !s.metrics.empty() || !s.note.empty();
  raw.push_back(static_cast<char>(labelled ? kSummaryVersionWithMetrics : kSummaryVersion));
  PutLE(&raw, static_cast<uint64_t>(s.created_unix_ms), 8);
  PutLE(&raw, static_cast<uint32_t>(s.world_size), 4);
  PutLE(&raw, s.entries, 8);
  PutLE(&raw, s.logical_bytes, 8);
  PutLE(&raw, s.stored_bytes, 8);
  PutLE(&raw, s.save_id, 8);
  if (labelled) {
    PutLE(&raw, s.metrics.size(), 4);
    for (const auto& [name, value] : s.metrics) {
      PutLE(&raw, name.size(), 2);
      raw += name;
      uint64_t bits;
      std::memcpy(&bits, &value, 8);
      PutLE(&raw, bits, 8);
    }
    PutLE(&raw, s.note.size(), 4);
    raw += s.note;
  }
  std::string out;
  EncodeChunk(raw.data(), raw.size(), Compression::kNone, 1, &out);
  return out;
}

StatusOr<StepSummary> DecodeSummaryValue(std::string_view value) {
  std::string raw;
  {
    auto decoded = DecodeChunkToString(value);
    if (!decoded.ok()) return Status::DataLoss("summary record: " + decoded.status().message());
    raw = std::move(decoded).value();
  }
  const uint8_t version = raw.empty() ? 0 : static_cast<uint8_t>(raw[0]);
  if (version != kSummaryVersion && version != kSummaryVersionWithMetrics) {
    return Status::DataLoss("summary record has unknown version " + std::to_string(version));
  }
  if (version == kSummaryVersion ? raw.size() != kSummaryRawSize : raw.size() < kSummaryRawSize + 8) {
    return Status::DataLoss("summary record has " + std::to_string(raw.size()) + " bytes, expected " +
                            std::string(version == kSummaryVersion ? "" : "at least ") +
                            std::to_string(kSummaryRawSize + (version == kSummaryVersion ? 0 : 8)));
  }
  const char* p = raw.data() + 1;
  StepSummary s;
  s.created_unix_ms = static_cast<int64_t>(GetLE(p, 8));
  s.world_size = static_cast<int32_t>(GetLE(p + 8, 4));
  s.entries = GetLE(p + 12, 8);
  s.logical_bytes = GetLE(p + 20, 8);
  s.stored_bytes = GetLE(p + 28, 8);
  s.save_id = GetLE(p + 36, 8);
  if (s.world_size < 1) return Status::DataLoss("summary record has world size " + std::to_string(s.world_size));
  if (version == kSummaryVersionWithMetrics) {
    // The metrics and the note; every length is checked against what is left.
    std::string_view rest(raw.data() + kSummaryRawSize, raw.size() - kSummaryRawSize);
    auto take = [&rest](size_t n, std::string_view* out) {
      if (rest.size() < n) return false;
      *out = rest.substr(0, n);
      rest.remove_prefix(n);
      return true;
    };
    const Status truncated = Status::DataLoss("summary record's metrics are truncated");
    std::string_view f;
    if (!take(4, &f)) return truncated;
    const uint64_t count = GetLE(f.data(), 4);
    for (uint64_t i = 0; i < count; ++i) {
      std::string_view name, bits_le;
      if (!take(2, &f) || !take(GetLE(f.data(), 2), &name) || !take(8, &bits_le)) return truncated;
      uint64_t bits = GetLE(bits_le.data(), 8);
      double v;
      std::memcpy(&v, &bits, 8);
      s.metrics[std::string(name)] = v;
    }
    std::string_view note;
    if (!take(4, &f) || !take(GetLE(f.data(), 4), &note)) return truncated;
    s.note = std::string(note);
    if (!rest.empty()) return Status::DataLoss("summary record has " + std::to_string(rest.size()) + " bytes too many");
    if (Status st = ValidateMetricsAndNote(s.metrics, s.note); !st.ok()) {
      return Status::DataLoss("summary record: " + st.message());
    }
  }
  return s;
}

std::vector<SaveRef> ReferencedSaves(const StepMetadata& m) {
  std::vector<SaveRef> out;
  for (const EntryMetadata& e : m.entries) {
    for (const StoredPiece& p : e.pieces) {
      for (const ChunkReference& r : p.references) out.push_back(SaveRef{r.step, r.save_id});
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string EncodeReferencesValue(const std::vector<SaveRef>& saves) {
  std::string raw;
  raw.push_back(static_cast<char>(1));
  PutLE(&raw, saves.size(), 4);
  for (const SaveRef& s : saves) {
    PutLE(&raw, static_cast<uint64_t>(s.step), 8);
    PutLE(&raw, s.save_id, 8);
  }
  std::string out;
  EncodeChunk(raw.data(), raw.size(), Compression::kNone, 1, &out);
  return out;
}

StatusOr<std::vector<SaveRef>> DecodeReferencesValue(std::string_view value) {
  auto raw = DecodeChunkToString(value);
  if (!raw.ok()) return Status::DataLoss("references record: " + raw.status().message());
  if (raw->size() < 5 || static_cast<uint8_t>((*raw)[0]) != 1) {
    return Status::DataLoss("references record has an unknown version or is truncated");
  }
  const uint64_t n = GetLE(raw->data() + 1, 4);
  if (raw->size() != 5 + 16 * n) {
    return Status::DataLoss("references record has " + std::to_string(raw->size()) + " bytes for " +
                            std::to_string(n) + " saves");
  }
  std::vector<SaveRef> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    out[i].step = static_cast<int64_t>(GetLE(raw->data() + 5 + 16 * i, 8));
    out[i].save_id = GetLE(raw->data() + 13 + 16 * i, 8);
    if (out[i].step < 0 || out[i].step > kMaxStep) {
      return Status::DataLoss("references record names step " + std::to_string(out[i].step));
    }
  }
  return out;
}

std::string EncodeTagValue(int64_t step) {
  std::string raw;
  PutLE(&raw, static_cast<uint64_t>(step), 8);
  std::string out;
  EncodeChunk(raw.data(), raw.size(), Compression::kNone, 1, &out);
  return out;
}

StatusOr<int64_t> DecodeTagValue(std::string_view value) {
  auto raw = DecodeChunkToString(value);
  if (!raw.ok()) return Status::DataLoss("tag value: " + raw.status().message());
  if (raw->size() != 8) return Status::DataLoss("tag value has " + std::to_string(raw->size()) + " bytes, expected 8");
  const int64_t step = static_cast<int64_t>(GetLE(raw->data(), 8));
  if (step < 0 || step > kMaxStep) return Status::DataLoss("tag value names step " + std::to_string(step));
  return step;
}

}  // namespace ckptdb
