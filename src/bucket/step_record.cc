#include "bucket/step_record.h"

#include "format/chunk_codec.h"
#include "format/metadata_codec.h"
#include "util/le_bytes.h"
#include "util/status_macros.h"

namespace ckptdb {
namespace bucket {

namespace {

constexpr char kRecordMagic[] = "ckptdb-bucket-step";  // 18 bytes, then the version byte
constexpr size_t kMagicSize = sizeof(kRecordMagic) - 1;
constexpr uint8_t kVersion1 = 1, kVersion2 = 2, kVersion3 = 3;
constexpr size_t kPrefixSize = kMagicSize + 1 + 8;  // magic, version, H

std::string Magic(uint8_t version) {
  std::string m(kRecordMagic, kMagicSize);
  m.push_back(static_cast<char>(version));
  return m;
}

void AppendObjects(std::string* raw, const std::vector<SstObject>& objects) {
  AppendLE32(raw, static_cast<uint32_t>(objects.size()));
  for (const SstObject& o : objects) {
    AppendLEString(raw, o.key);
    AppendLE64(raw, o.size);
    AppendLEString(raw, o.smallest_key);
    AppendLEString(raw, o.largest_key);
  }
}

bool ReadObjects(LECursor* c, std::vector<SstObject>* objects) {
  uint32_t n = 0;
  if (!c->U32(&n)) return false;
  for (uint32_t i = 0; i < n; ++i) {
    SstObject o;
    if (!(c->String(&o.key) && c->U64(&o.size) && c->String(&o.smallest_key) && c->String(&o.largest_key))) {
      return false;
    }
    objects->push_back(std::move(o));
  }
  return true;
}

}  // namespace

std::string EncodeStepRecord(const StepRecord& record) {
  std::string raw = Magic(kVersion1);
  AppendLEString(&raw, record.metadata_value);
  AppendObjects(&raw, record.objects);
  std::string value;
  EncodeChunk(raw.data(), raw.size(), Compression::kNone, 1, &value);
  return value;
}

StatusOr<StepRecord> DecodeStepRecord(std::string_view value) {
  ASSIGN_OR_RETURN(std::string raw, DecodeChunkToString(value));
  LECursor c(raw);
  const std::string expected = Magic(kVersion1);
  std::string_view magic;
  if (!c.Bytes(expected.size(), &magic) || magic != expected) {
    return Status::DataLoss("not a step record of version 1");
  }
  StepRecord r;
  if (!(c.String(&r.metadata_value) && ReadObjects(&c, &r.objects)) || !c.empty()) {
    return Status::DataLoss("the step record's layout is wrong (truncated or trailing bytes)");
  }
  return r;
}

std::string EncodeHeadedStepRecord(const StepMetadata& m, const std::vector<SstObject>& objects, int version) {
  const bool v3 = version != 2;
  // Per entry, its pieces value, or one per page (PagesOf), in order.
  std::vector<std::vector<std::string>> values(m.entries.size());
  for (size_t i = 0; i < m.entries.size(); ++i) {
    const size_t pages = v3 ? PagesOf(m.entries[i]).size() : 0;
    if (pages == 0) values[i].push_back(EncodeEntryPiecesValue(m, i));
    for (uint32_t p = 0; p < pages; ++p) values[i].push_back(EncodeEntryPiecesPage(m, i, p));
  }
  std::string raw;
  AppendLEString(&raw, EncodeMetadataRecord(m, /*paged=*/v3));
  AppendObjects(&raw, objects);
  // The offsets depend on the head's size, which depends on nothing they
  // hold: the table has a fixed size per value.
  AppendLE32(&raw, static_cast<uint32_t>(values.size()));
  std::vector<size_t> slots;  // where each value's (offset, size) goes, in order
  for (const std::vector<std::string>& v : values) {
    if (v3) AppendLE32(&raw, static_cast<uint32_t>(v.size()));
    for (size_t k = 0; k < v.size(); ++k) {
      slots.push_back(raw.size());
      AppendLE64(&raw, 0);
      AppendLE64(&raw, 0);
    }
  }
  const uint64_t head_size = kChunkHeaderSize + raw.size();  // a raw chunk value
  uint64_t at = kPrefixSize + head_size;
  size_t slot = 0;
  for (const std::vector<std::string>& v : values) {
    for (const std::string& value : v) {
      PutLE64(raw.data() + slots[slot], at);
      PutLE64(raw.data() + slots[slot] + 8, value.size());
      ++slot;
      at += value.size();
    }
  }
  std::string head;
  EncodeChunk(raw.data(), raw.size(), Compression::kNone, 1, &head);
  std::string out = Magic(v3 ? kVersion3 : kVersion2);
  AppendLE64(&out, head.size());
  out.reserve(at);
  out += head;
  for (const std::vector<std::string>& v : values) {
    for (const std::string& value : v) out += value;
  }
  return out;
}

StatusOr<uint64_t> StepRecordHeadEnd(std::string_view first) {
  for (uint8_t version : {kVersion2, kVersion3}) {
    const std::string magic = Magic(version);
    if (first.size() >= magic.size() && first.substr(0, magic.size()) == magic) {
      if (first.size() < kPrefixSize) return Status::DataLoss("the step record ends inside its prefix");
      return kPrefixSize + GetLE64(first.data() + magic.size());
    }
  }
  if (!first.empty() && static_cast<uint8_t>(first[0]) == kChunkVersion) return 0;  // version 1: a chunk value
  return Status::DataLoss("not a step record (of version 1, 2 or 3)");
}

StatusOr<StepRecordHead> DecodeStepRecordHead(std::string_view region) {
  ASSIGN_OR_RETURN(uint64_t end, StepRecordHeadEnd(region));
  if (end == 0) return Status::DataLoss("a version-1 step record has no head to read apart");
  if (region.size() < end) return Status::DataLoss("the step record ends inside its head");
  StatusOr<std::string> raw = DecodeChunkToString(region.substr(kPrefixSize, end - kPrefixSize));
  if (!raw.ok()) return Status::DataLoss("the step record's head is damaged: " + raw.status().message());
  const bool v3 = region[kMagicSize] == static_cast<char>(kVersion3);
  LECursor c(*raw);
  std::string record;
  StepRecordHead head;
  uint32_t n = 0;
  if (!(c.String(&record) && ReadObjects(&c, &head.objects) && c.U32(&n))) {
    return Status::DataLoss("the step record's head is truncated");
  }
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t values = 1;  // (version 2: one per entry)
    if (v3 && !c.U32(&values)) return Status::DataLoss("the step record's head is truncated");
    if (values == 0 || values > (uint32_t{1} << 24)) {
      return Status::DataLoss("the step record's head gives entry " + std::to_string(i) + " " +
                              std::to_string(values) + " pieces values");
    }
    std::vector<ByteRange> ranges;
    for (uint32_t k = 0; k < values; ++k) {
      ByteRange r;
      if (!(c.U64(&r.offset) && c.U64(&r.size))) return Status::DataLoss("the step record's head is truncated");
      if (r.offset < end || r.size > (uint64_t{1} << 40)) {
        return Status::DataLoss("the step record's head places entry " + std::to_string(i) + " outside the record");
      }
      ranges.push_back(r);
    }
    head.pieces.push_back(std::move(ranges));
  }
  if (!c.empty()) return Status::DataLoss("the step record's head has trailing bytes");
  StatusOr<MetadataRecord> md = DecodeMetadataRecord(record);
  if (!md.ok()) return Status::DataLoss("the metadata in the step record's head is damaged: " + md.status().message());
  if (!md->pieces_apart || md->metadata.entries.size() != head.pieces.size()) {
    return Status::DataLoss("the step record's head lists " + std::to_string(head.pieces.size()) +
                            " pieces values for " + std::to_string(md->metadata.entries.size()) + " entries");
  }
  for (size_t i = 0; i < head.pieces.size(); ++i) {
    if (i < md->grids.size() && !md->grids[i].empty()) {  // (only a directory store's records keep grids)
      return Status::DataLoss("the step record's head gives entry '" + md->metadata.entries[i].fqn + "' a grid");
    }
    const size_t expected = md->pages[i].empty() ? 1 : md->pages[i].size();
    if (head.pieces[i].size() != expected) {
      return Status::DataLoss("the step record's head gives entry '" + md->metadata.entries[i].fqn + "' " +
                              std::to_string(head.pieces[i].size()) + " pieces values for " +
                              std::to_string(md->pages[i].size()) + " pages");
    }
  }
  head.summary = std::move(md->metadata);
  head.pages = std::move(md->pages);
  return head;
}

StatusOr<WholeStepRecord> DecodeWholeStepRecord(std::string_view value) {
  ASSIGN_OR_RETURN(uint64_t end, StepRecordHeadEnd(value));
  WholeStepRecord whole;
  if (end == 0) {
    ASSIGN_OR_RETURN(StepRecord v1, DecodeStepRecord(value));
    StatusOr<StepMetadata> md = DecodeMetadataValue(v1.metadata_value);
    if (!md.ok()) return Status::DataLoss("the metadata in the step record is damaged: " + md.status().message());
    whole.metadata = std::move(*md);
    whole.objects = std::move(v1.objects);
    return whole;
  }
  ASSIGN_OR_RETURN(StepRecordHead head, DecodeStepRecordHead(value));
  for (size_t i = 0; i < head.pieces.size(); ++i) {
    EntryMetadata& e = head.summary.entries[i];
    std::vector<StoredPiece> pieces;
    for (uint32_t k = 0; k < head.pieces[i].size(); ++k) {
      const ByteRange& r = head.pieces[i][k];
      if (r.offset + r.size > value.size()) {
        return Status::DataLoss("the step record ends before the pieces of entry '" + e.fqn + "'");
      }
      const std::string_view v = value.substr(r.offset, r.size);
      if (head.pages[i].empty()) {
        RETURN_IF_ERROR(DecodeEntryPiecesValue(v, head.summary, &e));
      } else {
        RETURN_IF_ERROR(DecodeEntryPiecesPage(v, head.summary, e, k, &head.pages[i][k], &pieces));
      }
    }
    if (!head.pages[i].empty()) RETURN_IF_ERROR(AdoptEntryPieces(std::move(pieces), head.summary, &e));
  }
  Status v = ValidateStepMetadata(head.summary);
  if (!v.ok()) return Status::DataLoss("the metadata in the step record is inconsistent: " + v.message());
  whole.metadata = std::move(head.summary);
  whole.objects = std::move(head.objects);
  return whole;
}

}  // namespace bucket
}  // namespace ckptdb
