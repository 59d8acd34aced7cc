#include "format/metadata_codec.h"

#include <gtest/gtest.h>

#include "format/keys.h"

namespace ckptdb {
namespace {

StepMetadata Sample() {
  StepMetadata m;
  m.step = 42;
  m.created_unix_ms = 1700000000000;
  m.world_size = 2;
  m.coordinator_rank = 1;
  m.save_id = 0xdeadbeefcafef00dull;
  EntryMetadata t{"w", EntryKind::kShardedTensor, DType::kBF16, {10, 4}, {}};
  t.pieces.push_back(StoredPiece{{0, 0}, {6, 4}, {0, 0}, 48, 32, 2, 60, std::string(2 * kChunkHashBytes, 'h'), {}, 0});
  t.pieces.push_back(StoredPiece{{6, 0}, {4, 4}, {1, 3}, 32, 32, 1, 40, {}, {}, 0});
  m.entries.push_back(t);
  m.entries.push_back(EntryMetadata{"s", EntryKind::kTensor, DType::kI64, {}, {StoredPiece{{}, {}, {1, 0}, 8, 4096, 1, 24, {}, {}, 0}}});
  m.entries.push_back(EntryMetadata{"b", EntryKind::kBytes, DType::kU8, {3}, {StoredPiece{{0}, {3}, {1, 1}, 3, 4096, 1, 19, {}, {}, 0}}});
  m.entries.push_back(EntryMetadata{"z", EntryKind::kTensor, DType::kF32, {0, 5}, {StoredPiece{{0, 0}, {0, 5}, {1, 2}, 0, 4096, 0, 0, {}, {}, 0}}});
  return m;
}

TEST(MetadataCodec, RoundTrip) {
  StepMetadata m = Sample();
  ASSERT_TRUE(ValidateStepMetadata(m).ok()) << ValidateStepMetadata(m);
  auto back = DecodeMetadataValue(EncodeMetadataValue(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step, 42);
  EXPECT_EQ(back->save_id, m.save_id);
  EXPECT_EQ(back->coordinator_rank, 1);
  ASSERT_EQ(back->entries.size(), 4u);
  EXPECT_EQ(back->entries[0].fqn, "w");
  EXPECT_EQ(back->entries[0].pieces[1].key.item, 3u);
  EXPECT_EQ(back->entries[0].pieces[0].chunk_hashes, std::string(2 * kChunkHashBytes, 'h'));
  EXPECT_EQ(back->entries[0].pieces[1].chunk_hashes, "");
  EXPECT_EQ(back->entries[1].shape, Shape{});
  EXPECT_EQ(back->entries[2].kind, EntryKind::kBytes);
  EXPECT_EQ(back->logical_bytes(), 48u + 32 + 8 + 3);
}

TEST(MetadataCodec, FlippedByteIsDataLoss) {
  std::string v = EncodeMetadataValue(Sample());
  for (size_t pos : {size_t{0}, size_t{9}, v.size() / 2, v.size() - 1}) {
    std::string bad = v;
    bad[pos] ^= 0x20;
    auto m = DecodeMetadataValue(bad);
    ASSERT_FALSE(m.ok()) << pos;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << m.status();
  }
  auto garbage = DecodeMetadataValue("not metadata at all");
  EXPECT_EQ(garbage.status().code(), StatusCode::kDataLoss);
}

void ExpectInvalid(StepMetadata m, const std::string& fragment) {
  Status st = ValidateStepMetadata(m);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find(fragment), std::string::npos) << st;
  // Stored, the same inconsistency is corruption.
  auto decoded = DecodeMetadataValue(EncodeMetadataValue(m));
  EXPECT_EQ(decoded.status().code(), StatusCode::kDataLoss);
}

TEST(MetadataCodec, ValidationNamesTheProblem) {
  StepMetadata m = Sample();
  m.entries[0].pieces[1].offsets = {7, 0};
  ExpectInvalid(m, "does not lie within");
  m = Sample();
  m.entries[0].pieces[1].offsets = {4, 0};
  m.entries[0].pieces[1].sizes = {4, 4};
  ExpectInvalid(m, "overlap");
  m = Sample();
  m.entries[0].pieces.pop_back();
  ExpectInvalid(m, "hold 24 of 40 elements");
  m = Sample();
  m.entries[1].pieces[0].nbytes = 7;
  ExpectInvalid(m, "records 7 bytes");
  m = Sample();
  m.entries[0].pieces[0].num_chunks = 5;
  ExpectInvalid(m, "records 5 chunks");
  m = Sample();
  m.entries[2].fqn = "w";
  ExpectInvalid(m, "duplicate FQN 'w'");
  m = Sample();
  m.format_version = 2;
  ExpectInvalid(m, "unsupported format version 2");
}

// Store format 4: a piece cut into boxes records its chunk shape; its chunk
// count and size must follow from it.
TEST(MetadataCodec, ChunkShapesRoundTripAndMustFitThePiece) {
  auto boxed = [] {
    StepMetadata m = Sample();
    StoredPiece& p = m.entries[0].pieces[0];  // bf16 [6, 4]: boxes of 4 x 2, 2 x 2 grid
    p.chunk_shape = {4, 2};
    p.chunk_bytes = 16;
    p.num_chunks = 4;
    p.chunk_hashes = std::string(4 * kChunkHashBytes, 'h');
    return m;
  };
  StepMetadata m = boxed();
  ASSERT_TRUE(ValidateStepMetadata(m).ok()) << ValidateStepMetadata(m);
  auto back = DecodeMetadataValue(EncodeMetadataValue(m));
  ASSERT_TRUE(back.ok()) << back.status();
  const StoredPiece& p = back->entries[0].pieces[0];
  EXPECT_EQ(p.chunk_shape, (std::vector<int64_t>{4, 2}));
  EXPECT_TRUE(back->entries[0].pieces[1].chunk_shape.empty());
  // Chunk 2 is rows 4..5 (clipped), columns 0..1.
  EXPECT_EQ(p.chunk_raw_bytes(2), 2u * 2 * 2);
  std::vector<int64_t> offsets, sizes;
  p.chunk_region(3, &offsets, &sizes);
  EXPECT_EQ(offsets, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 2}));

  m = boxed();
  m.entries[0].pieces[0].num_chunks = 3;
  ExpectInvalid(m, "records 3 chunks, 4 expected");
  m = boxed();
  m.entries[0].pieces[0].chunk_shape = {4};
  ExpectInvalid(m, "invalid chunk shape [4]");
  m = boxed();
  m.entries[0].pieces[0].chunk_shape = {7, 2};
  ExpectInvalid(m, "invalid chunk shape [7, 2]");
  m = boxed();
  m.entries[0].pieces[0].chunk_shape = {4, 0};
  ExpectInvalid(m, "invalid chunk shape");
  m = boxed();
  m.entries[0].pieces[0].chunk_bytes = 32;
  ExpectInvalid(m, "(chunk size 32)");
  m = boxed();
  m.entries[0].pieces[0].chunk_shape = {int64_t{1} << 62, 2};
  ExpectInvalid(m, "invalid chunk shape");
}

TEST(MetadataCodec, UnknownDTypeNumberIsRejected) {
  proto::Metadata pm;
  ToProto(Sample(), &pm);
  pm.mutable_entries(0)->set_dtype(static_cast<proto::DType>(77));
  auto m = FromProto(pm);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("unknown dtype 77"), std::string::npos) << m.status();
}

// Bytes encodings and annotations round-trip; a step without them (stores
// written before) decodes with the encoding unrecorded and no annotations;
// a number this build does not know is kept (a newer writer's).
TEST(MetadataCodec, BytesEncodingsAndAnnotationsRoundTrip) {
  StepMetadata m = Sample();
  m.entries[2].bytes_encoding = BytesEncoding::kTorchSave;
  m.annotations["torch.distributed.checkpoint"] = "{}";
  auto back = DecodeMetadataValue(EncodeMetadataValue(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->entries[2].bytes_encoding, BytesEncoding::kTorchSave);
  EXPECT_EQ(back->entries[0].bytes_encoding, BytesEncoding::kUnrecorded);
  EXPECT_EQ(back->annotations, m.annotations);

  proto::Metadata pm;
  ToProto(m, &pm);
  pm.mutable_entries(2)->clear_bytes_encoding();
  pm.clear_annotations();
  auto old = FromProto(pm);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->entries[2].bytes_encoding, BytesEncoding::kUnrecorded);
  EXPECT_TRUE(old->annotations.empty());

  pm.mutable_entries(2)->set_bytes_encoding(static_cast<proto::BytesEncoding>(12));
  auto newer = FromProto(pm);
  ASSERT_TRUE(newer.ok()) << newer.status();
  EXPECT_EQ(static_cast<int>(newer->entries[2].bytes_encoding), 12);
  EXPECT_STREQ(BytesEncodingName(newer->entries[2].bytes_encoding), "unknown");
  EXPECT_TRUE(ValidateStepMetadata(*newer).ok());

  m = Sample();
  m.entries[0].bytes_encoding = BytesEncoding::kRaw;
  ExpectInvalid(m, "sharded_tensor entry 'w' records a bytes encoding (raw)");
  m = Sample();
  m.annotations[""] = "x";
  ExpectInvalid(m, "an annotation with an empty name");
}

TEST(Keys, SortByStepThenSaveRankItemChunk) {
  std::string a = EncodeDataKey({1, 5, 0, 0, 9});
  std::string b = EncodeDataKey({1, 5, 0, 1, 0});
  std::string c = EncodeDataKey({2, 0, 0, 0, 0});
  std::string d = EncodeDataKey({256, 0, 0, 0, 0});
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_LT(c, d);
  EXPECT_LT(MetadataKey(255), MetadataKey(256));
  DataKey k;
  ASSERT_TRUE(ParseDataKey(EncodeDataKey({7, 8, 9, 10, 11}), &k));
  EXPECT_EQ(k.step, 7);
  EXPECT_EQ(k.save_id, 8u);
  EXPECT_EQ(k.chunk, 11u);
  EXPECT_LE(DataSaveBegin(1, 5), a);
  EXPECT_LT(b, DataSaveEnd(1, 5));
  EXPECT_LT(DataSaveEnd(1, UINT64_MAX), DataSaveBegin(2, 0) + "\x01");
  int64_t step;
  EXPECT_FALSE(ParseMetadataKey(a, &step));
}

// Store format 6: the M record without the pieces, and one record per
// entry holding them.
TEST(MetadataCodec, PiecesApartRoundTrip) {
  const StepMetadata m = Sample();
  const std::string head = EncodeMetadataRecord(m);
  EXPECT_LT(head.size(), EncodeMetadataValue(m).size());
  auto rec = DecodeMetadataRecord(head);
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_TRUE(rec->pieces_apart);
  EXPECT_EQ(rec->metadata.format_version, kFormatVersion);
  EXPECT_EQ(rec->metadata.save_id, m.save_id);
  ASSERT_EQ(rec->metadata.entries.size(), m.entries.size());
  for (size_t i = 0; i < m.entries.size(); ++i) {
    const EntryMetadata& e = rec->metadata.entries[i];
    EXPECT_EQ(e.fqn, m.entries[i].fqn);
    EXPECT_EQ(e.shape, m.entries[i].shape);
    EXPECT_TRUE(e.pieces.empty());
    EXPECT_TRUE(e.pieces_omitted);
  }
  // Such a record is not a whole step's: the whole-step decoder refuses it,
  // and so does validation until each entry's pieces are in.
  EXPECT_EQ(DecodeMetadataValue(head).status().code(), StatusCode::kDataLoss);
  StepMetadata assembled = rec->metadata;
  EXPECT_EQ(ValidateStepMetadata(assembled).code(), StatusCode::kInvalidArgument);
  for (size_t i = 0; i < m.entries.size(); ++i) {
    ASSERT_TRUE(DecodeEntryPiecesValue(EncodeEntryPiecesValue(m, i), assembled, &assembled.entries[i]).ok());
  }
  ASSERT_TRUE(ValidateStepMetadata(assembled).ok());
  EXPECT_EQ(EncodeMetadataValue(assembled), EncodeMetadataValue(m));
  // A record with pieces inline (formats 1-5) decodes whole.
  auto old = DecodeMetadataRecord(EncodeMetadataValue(m));
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_FALSE(old->pieces_apart);
  EXPECT_EQ(old->metadata.entries[0].pieces.size(), 2u);
  // Another entry's record, another save's, a damaged one, pieces that do
  // not fit the entry: DataLoss naming the entry, which keeps no pieces.
  StepMetadata other = m;
  other.save_id ^= 1;
  EntryMetadata e = rec->metadata.entries[0];
  for (const std::string& bad : {EncodeEntryPiecesValue(m, 1), EncodeEntryPiecesValue(other, 0),
                                 std::string("garbage")}) {
    Status st = DecodeEntryPiecesValue(bad, rec->metadata, &e);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
    EXPECT_NE(st.message().find("entry 'w' of step 42"), std::string::npos) << st;
    EXPECT_TRUE(e.pieces_omitted);
  }
  StepMetadata short_one = m;
  short_one.entries[0].pieces.pop_back();
  Status st = DecodeEntryPiecesValue(EncodeEntryPiecesValue(short_one, 0), rec->metadata, &e);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("its shards hold"), std::string::npos) << st;
  EXPECT_TRUE(e.pieces.empty());
}

// The M record of a format-6 step states each entry's piece count and
// stored bytes, so that a listing reads no pieces record; a pieces record
// that disagrees with them is refused.
TEST(MetadataCodec, PiecesApartRecordsEachEntrysTotals) {
  const StepMetadata m = Sample();
  auto rec = DecodeMetadataRecord(EncodeMetadataRecord(m));
  ASSERT_TRUE(rec.ok()) << rec.status();
  const EntryMetadata& w = rec->metadata.entries[0];
  ASSERT_TRUE(w.recorded_totals.has_value());
  EXPECT_EQ(w.recorded_totals->pieces, 2u);
  EXPECT_EQ(w.recorded_totals->stored_bytes, 100u);
  ASSERT_TRUE(w.totals().has_value());
  EXPECT_EQ(w.totals()->pieces, 2u);
  EXPECT_EQ(w.logical_bytes(), 80u);  // from its shape: [10, 4] bf16
  EXPECT_EQ(w.stored_bytes(), 0u);
  EXPECT_EQ(rec->metadata.entries[2].logical_bytes(), 3u);  // bytes entry: its length
  EXPECT_EQ(rec->metadata.entries[3].recorded_totals->pieces, 1u);
  // A record that does not state them (written before they were recorded).
  StepMetadata unrecorded = rec->metadata;
  for (EntryMetadata& e : unrecorded.entries) e.recorded_totals.reset();
  auto bare = DecodeMetadataRecord(EncodeMetadataRecord(unrecorded));
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_FALSE(bare->metadata.entries[0].recorded_totals.has_value());
  EXPECT_FALSE(bare->metadata.entries[0].totals().has_value());
  // Pieces that fit the entry but not the totals its record states.
  StepMetadata restated = m;
  restated.entries[0].pieces[1].stored_bytes = 41;
  EntryMetadata e = rec->metadata.entries[0];
  Status st = DecodeEntryPiecesValue(EncodeEntryPiecesValue(restated, 0), rec->metadata, &e);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("entry 'w' of step 42: it holds 2 pieces of 101 stored bytes; the step's record "
                              "says 2 of 100"),
            std::string::npos)
      << st;
  EXPECT_TRUE(e.pieces_omitted);
  ASSERT_TRUE(DecodeEntryPiecesValue(EncodeEntryPiecesValue(m, 0), rec->metadata, &e).ok());
  EXPECT_EQ(e.totals()->stored_bytes, 100u);
}

TEST(MetadataCodec, PiecesKeysSortAfterEveryMetadataKey) {
  // Data first, then metadata, pending, pieces, references, summaries, tags:
  // a scan of M keys stops at the first pieces key, and the last key before
  // 'N' is still the highest step's metadata.
  EXPECT_LT(MetadataKey(INT64_MAX), PiecesKey(0, 0));
  EXPECT_LT(std::string(1, kMetadataPrefix + 1), PiecesKey(0, 0));
  EXPECT_LT(PendingKey(INT64_MAX, UINT64_MAX), PiecesKey(0, 0));
  EXPECT_LT(PiecesKey(INT64_MAX, UINT32_MAX), ReferencesKey(0));
  EXPECT_LT(PiecesKey(1, UINT32_MAX), PiecesKey(2, 0));
  EXPECT_LE(PiecesStepBegin(2), PiecesKey(2, 0));
  EXPECT_LT(PiecesKey(2, UINT32_MAX), PiecesStepEnd(2));
  EXPECT_EQ(PiecesStepEnd(2), PiecesStepBegin(3));
  int64_t step;
  uint32_t entry;
  ASSERT_TRUE(ParsePiecesKey(PiecesKey(300, 7), &step, &entry));
  EXPECT_EQ(step, 300);
  EXPECT_EQ(entry, 7u);
  EXPECT_FALSE(ParsePiecesKey(MetadataKey(300), &step, &entry));
  EXPECT_FALSE(ParseMetadataKey(PiecesKey(300, 7), &step));
}

}  // namespace
}  // namespace ckptdb
