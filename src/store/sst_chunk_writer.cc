#include "store/sst_chunk_writer.h"

#include <rocksdb/sst_file_writer.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "format/chunk_codec.h"
#include "format/keys.h"
#include "model/chunk_grid.h"
#include "model/region.h"
#include "util/crc32c.h"
#include "util/le_bytes.h"
#include "util/ordered_parallel.h"
#include "store/block_per_key_table.h"
#include "store/rocksdb_status.h"
#include "util/status_macros.h"

namespace ckptdb {

uint64_t PieceChunkBytes(uint64_t chunk_bytes, DType dtype) {
  const uint64_t es = DTypeSize(dtype);
  return es > 1 ? chunk_bytes - chunk_bytes % es : chunk_bytes;
}

Status CheckWriteItems(const SaveContext& ctx, const std::vector<WriteItem>& items) {
  for (const WriteItem& it : items) {
    if (it.key.rank != static_cast<uint32_t>(ctx.rank)) {
      return Status::Internal("item of '" + it.fqn + "' has rank " + std::to_string(it.key.rank) +
                              " in its key, but this is rank " + std::to_string(ctx.rank));
    }
    if (it.nbytes > 0 && it.data == nullptr && !it.source) {
      return Status::InvalidArgument("entry '" + it.fqn + "' has no data");
    }
  }
  return Status::OK();
}

StatusOr<WriteResult> WriteItemsToSst(const std::string& dir, const SaveContext& ctx,
                                      const std::vector<WriteItem>& items, const rocksdb::Options& db_options,
                                      const ChunkWriteOptions& o) {
  WriteResult result;
  result.rank = ctx.rank;
  std::vector<const WriteItem*> sorted;
  sorted.reserve(items.size());
  for (const WriteItem& it : items) sorted.push_back(&it);
  // (Sized once: a rank may write hundreds of thousands of small pieces,
  // and a vector grown by doubling holds up to twice their memory.)
  result.items.reserve(items.size());
  // SST keys must be added in order: by item number, then chunk.
  std::sort(sorted.begin(), sorted.end(), [](const WriteItem* a, const WriteItem* b) { return a->key.item < b->key.item; });

  // Every chunk of every item, in key order.
  struct Job {
    size_t item;  // index into `sorted` and result.items
    uint32_t chunk;
  };
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<ChunkGrid>> grids(sorted.size());  // pieces cut into boxes
  for (size_t i = 0; i < sorted.size(); ++i) {
    const WriteItem* it = sorted[i];
    WrittenItem w;
    w.key = it->key;
    w.chunk_bytes = o.split_elements ? o.chunk_bytes : PieceChunkBytes(o.chunk_bytes, it->dtype);
    uint64_t chunks = (it->nbytes + w.chunk_bytes - 1) / w.chunk_bytes;
    if (o.boxes && !o.split_elements && it->data != nullptr) {
      w.chunk_shape = ChooseChunkShape(it->sizes, DTypeSize(it->dtype), o.chunk_bytes);
    }
    if (!w.chunk_shape.empty()) {
      const Box piece{std::vector<int64_t>(it->sizes.size(), 0), it->sizes};
      w.chunk_bytes = static_cast<uint64_t>(BoxNumel(Box{piece.offsets, w.chunk_shape})) * DTypeSize(it->dtype);
      chunks = ChunkGrid(piece, w.chunk_shape).num_chunks();
      grids[i] = std::make_unique<ChunkGrid>(piece, w.chunk_shape);
    }
    if (chunks > UINT32_MAX) {
      return Status::InvalidArgument("entry '" + it->fqn + "' would be cut into " + std::to_string(chunks) +
                                     " chunks, more than a piece can hold; raise StoreOptions.chunk_bytes");
    }
    w.num_chunks = static_cast<uint32_t>(chunks);
    // Sized once here: the workers fill disjoint 16-byte slots in parallel.
    if (o.content_hashes) w.chunk_hashes.assign(size_t{w.num_chunks} * kChunkHashBytes, '\0');
    w.encoding = PieceEncoding(o.compression, o.zstd_level);
    result.items.push_back(std::move(w));
  }
  // (Sized once, as result.items: a vector grown by doubling held up to
  // twice the jobs, and three times while it moved them.)
  size_t total_chunks = 0;
  for (const WrittenItem& w : result.items) total_chunks += w.num_chunks;
  jobs.reserve(total_chunks);
  for (size_t i = 0; i < result.items.size(); ++i) {
    for (uint32_t c = 0; c < result.items[i].num_chunks; ++c) jobs.push_back(Job{i, c});
  }

  // Chunks that need not be written: their bytes are stored already.
  std::vector<uint8_t> shared(jobs.size(), 0);
  // Items whose candidate can share chunks at all: encoded alike, cut alike,
  // with recorded hashes.
  std::vector<uint8_t> usable(sorted.size(), 0);
  for (size_t i = 0; i < sorted.size(); ++i) {
    const ReuseCandidate* r = sorted[i]->reuse;
    const WrittenItem& w = result.items[i];
    usable[i] = r != nullptr && o.content_hashes && r->piece.encoding == w.encoding &&
                r->piece.chunk_bytes == w.chunk_bytes && r->piece.chunk_shape == w.chunk_shape &&
                r->piece.chunk_hashes.size() == size_t{r->piece.num_chunks} * kChunkHashBytes;
  }

  // Raw chunks of host pieces whose bytes the file is lent where they lie
  // (BlockPerKeyTableWriter::AddPieces): the worker hashes them and builds
  // the rest of the block (head, chunk header, tail), and nothing copies
  // them before the upload sends them. A chunk's runs are its one run of
  // the piece's bytes, or the rows of its box; smaller chunks and shorter
  // runs are copied into their blocks (a piece per few bytes costs more
  // than the copy). Only the item's own bytes (`data`, which hold still
  // through the write) are lent: read directly, or handed over by a source
  // that checks before it hands them (a wrapper's), never a source's copy
  // (a device's staging buffer).
  // A run is lent in pieces of at most kLentPieceBytes, each with its
  // CRC-32C, taken with the chunk's content hash (BorrowingFile::
  // AppendBorrowed: an upload joins its parts' from them, and reads no more
  // than a piece where a part ends).
  // The worker sets a lent chunk's entry; the appending thread hands it
  // to the file and frees it (null: the chunk is not lent).
  constexpr uint64_t kLentChunkBytes = 64 << 10;
  constexpr uint64_t kLentRunBytes = 512;
  constexpr uint64_t kLentPieceBytes = 64 << 10;
  struct LentChunk {
    std::vector<std::string_view> pieces;
    std::vector<uint32_t> crc32cs;
  };
  std::vector<std::unique_ptr<LentChunk>> lent(o.block_per_key && o.compression == Compression::kNone ? jobs.size()
                                                                                                      : 0);
  auto add_run = [&](const char* run, uint64_t n, std::vector<std::string_view>* runs) {
    for (uint64_t at = 0; at < n; at += kLentPieceBytes) {
      runs->emplace_back(run + at, std::min(kLentPieceBytes, n - at));
    }
  };

  // The file being written: by SstFileWriter, or (o.block_per_key) from
  // the blocks the workers build.
  std::unique_ptr<rocksdb::SstFileWriter> sst;
  std::unique_ptr<BlockPerKeyTableWriter> table;
  uint64_t file_bytes = 0;
  std::string file;
  auto finish_file = [&]() -> Status {
    if (!sst && !table) return Status::OK();
    rocksdb::ExternalSstFileInfo info;
    if (table) {
      Status st = table->Finish(&info);  // syncs the file
      table.reset();
      RETURN_IF_ERROR(st);
    } else {
      rocksdb::Status s = sst->Finish(&info);  // syncs the file
      sst.reset();
      if (!s.ok()) return FromRocks(s, "finishing SST file " + file);
    }
    result.files.push_back(file);
    return o.on_file_finished ? o.on_file_finished(file, info) : Status::OK();
  };
  auto key_of = [&](size_t j) {
    const WriteItem* it = sorted[jobs[j].item];
    return EncodeDataKey(DataKey{ctx.step, ctx.save_id, it->key.rank, it->key.item, jobs[j].chunk});
  };
  auto produce = [&](size_t j, std::string* value) -> Status {
    const WriteItem* it = sorted[jobs[j].item];
    const uint64_t chunk_bytes = result.items[jobs[j].item].chunk_bytes;
    const ChunkGrid* grid = grids[jobs[j].item].get();
    Box box;  // of a chunk cut as a box
    if (grid != nullptr) box = grid->ChunkBox(jobs[j].chunk);
    const uint64_t begin = uint64_t{jobs[j].chunk} * chunk_bytes;
    const uint64_t len = grid != nullptr ? static_cast<uint64_t>(BoxNumel(box)) * DTypeSize(it->dtype)
                                         : std::min<uint64_t>(chunk_bytes, it->nbytes - begin);
    const size_t planes = IsFloatingPoint(it->dtype) ? DTypeSize(it->dtype) : 0;
    char* hash = o.content_hashes ? result.items[jobs[j].item].chunk_hashes.data() +
                                        size_t{jobs[j].chunk} * kChunkHashBytes
                                  : nullptr;
    // Chunk c may be shared with its candidate's chunk c of the same length.
    const bool may_share = usable[jobs[j].item] && jobs[j].chunk < it->reuse->piece.num_chunks &&
                           it->reuse->piece.chunk_raw_bytes(jobs[j].chunk) == len;
    // True (and marked) when the chunk, its hash taken, is stored already:
    // then it is neither encoded nor written.
    auto is_stored = [&] {
      if (!may_share || std::memcmp(hash, it->reuse->piece.chunk_hashes.data() + size_t{jobs[j].chunk} * kChunkHashBytes,
                                    kChunkHashBytes) != 0) {
        return false;
      }
      shared[j] = 1;
      return true;
    };
    // Hashes the chunk's raw bytes; is_stored then.
    auto stored_already = [&](const char* bytes) {
      if (hash != nullptr) ChunkContentHash(bytes, len, hash);
      return is_stored();
    };
    // With o.block_per_key, *value is the chunk's data block: its head, the
    // value, its tail. A raw value is written in place (raw_room gives where
    // it goes, close_block writes the rest); a compressed one, made by
    // EncodeChunk, is then wrapped (copied) into its block.
    std::string key;
    if (o.block_per_key) key = key_of(j);
    size_t head = 0;
    auto raw_room = [&]() -> char* {
      const size_t value_bytes = kChunkHeaderSize + len;
      head = o.block_per_key ? DataBlockHeadSize(key.size(), value_bytes) : 0;
      value->resize(head + value_bytes + (o.block_per_key ? kDataBlockTailBytes : 0));
      return value->data() + head;
    };
    auto close_block = [&]() {
      if (!o.block_per_key) return;
      WriteDataBlockHead(key, kChunkHeaderSize + len, value->data());
      WriteDataBlockTail(value->data(), head + kChunkHeaderSize + len);
    };
    auto wrap = [&]() {
      if (!o.block_per_key) return;
      thread_local std::string plain;
      plain.swap(*value);
      BuildDataBlock(key, plain, value);
    };
    // Lends the chunk when `bytes`, where its bytes (or their span) were
    // handed over, is `own`, where they lie in the item's memory; true then.
    auto lend = [&](const char* bytes, uint64_t own) -> bool {
      const char* data = static_cast<const char*>(it->data);
      if (lent.empty() || data == nullptr || bytes != data + own || len < kLentChunkBytes) return false;
      auto chunk = std::make_unique<LentChunk>();
      LentChunk& l = *chunk;
      if (grid == nullptr) {
        add_run(data + begin, len, &l.pieces);
      } else {
        // The box's rows, where one stride places them.
        const size_t es = DTypeSize(it->dtype);
        const Box piece{std::vector<int64_t>(it->sizes.size(), 0), it->sizes};
        uint64_t first = 0, run = 0, stride = 0;
        if (!RunsOfBox(piece, box, es, &first, &run, &stride) || run < kLentRunBytes) return false;
        l.pieces.reserve(len / run * ((run + kLentPieceBytes - 1) / kLentPieceBytes));
        for (uint64_t k = 0; k < len / run; ++k) add_run(data + first + k * stride, run, &l.pieces);
      }
      // *value: the block's head with the chunk's header, then its tail.
      const size_t value_bytes = kChunkHeaderSize + len;
      head = DataBlockHeadSize(key.size(), value_bytes);
      value->resize(head + kChunkHeaderSize + kDataBlockTailBytes);
      // One pass for the content hash and the CRC-32C the file takes (not
      // for a chunk that may be stored already: its hash decides first).
      HashRawChunkPieces(l.pieces, hash, may_share ? nullptr : &l.crc32cs, value->data() + head);
      if (is_stored()) return true;
      if (may_share) {
        for (std::string_view r : l.pieces) l.crc32cs.push_back(Crc32c(r.data(), r.size()));
      }
      WriteDataBlockHead(key, value_bytes, value->data());
      DataBlockTail tail;
      tail.Add(std::string_view(value->data(), head + kChunkHeaderSize));
      for (std::string_view r : l.pieces) tail.Add(r);
      tail.WriteTail(value->data() + head + kChunkHeaderSize);
      lent[j] = std::move(chunk);
      return true;
    };
    auto encode = [&](const char* bytes) {
      if (lend(bytes, begin) || stored_already(bytes)) return;
      if (o.compression == Compression::kNone) {
        EncodeRawChunkAt(bytes, len, raw_room(), hash);
        close_block();
      } else {
        EncodeChunk(bytes, len, o.compression, o.zstd_level, value, planes, hash);
        wrap();
      }
    };
    if (grid != nullptr) {
      const Box piece{std::vector<int64_t>(it->sizes.size(), 0), it->sizes};
      // The box's elements gathered out of the piece's rows: raw, straight
      // into the value; else into this worker's buffer (kept for its next
      // chunks), then encoded.
      const bool raw = o.compression == Compression::kNone;
      thread_local std::unique_ptr<char[]> gathered;
      thread_local uint64_t capacity = 0;
      if (!raw && capacity < len) {
        gathered.reset(new char[len]);
        capacity = len;
      }
      auto gather_and_encode = [&](const char* src, uint64_t src_begin, uint64_t src_len) {
        if (lend(src, src_begin)) return;
        char* dst = raw ? raw_room() + kChunkHeaderSize : gathered.get();
        CopyRegionWindow(piece, src, src_begin, src_len, it->dtype, box, dst, it->dtype, box);
        if (stored_already(dst)) return;
        if (raw) {
          FinishRawChunkAt(dst - kChunkHeaderSize, len, hash);
          close_block();
        } else {
          EncodeChunk(dst, len, o.compression, o.zstd_level, value, planes, hash);
          wrap();
        }
      };
      if (!it->source) {
        gather_and_encode(static_cast<const char*>(it->data), 0, it->nbytes);
        return Status::OK();
      }
      // Through the item's source (host bytes behind a wrapper's checks):
      // the span of the piece's bytes that holds the box.
      uint64_t span_begin = 0, span_end = 0;
      ByteSpan(piece, box, DTypeSize(it->dtype), &span_begin, &span_end);
      Status st = it->source(span_begin, span_end - span_begin,
                             [&](const char* span) { gather_and_encode(span, span_begin, span_end - span_begin); });
      return st.ok() ? st : st.WithContext("chunk " + std::to_string(jobs[j].chunk) + " of '" + it->fqn + "'");
    }
    if (!it->source) {
      encode(static_cast<const char*>(it->data) + begin);
      return Status::OK();
    }
    // Off the device into a staging buffer, encoded while it is held; other
    // workers copy and encode the next chunks meanwhile.
    Status st = it->source(begin, len, encode);
    return st.ok() ? st : st.WithContext("chunk " + std::to_string(jobs[j].chunk) + " of '" + it->fqn + "'");
  };
  auto consume = [&](size_t j, std::string_view value) -> Status {
    const WriteItem* it = sorted[jobs[j].item];
    if (shared[j]) {
      const ReuseCandidate& r = *it->reuse;
      const uint32_t c = jobs[j].chunk;
      const ChunkLocation at = r.piece.LocateChunk(r.step, r.save_id, c);
      std::vector<ChunkReference>& refs = result.items[jobs[j].item].references;
      if (!refs.empty()) {
        ChunkReference& last = refs.back();
        if (last.first + last.count == c && last.step == at.step && last.save_id == at.save_id && last.key == at.key &&
            last.chunk + last.count == at.chunk) {
          ++last.count;
          return Status::OK();
        }
      }
      refs.push_back(ChunkReference{c, 1, at.step, at.save_id, at.key, at.chunk});
      return Status::OK();
    }
    if ((!sst && !table) || file_bytes >= o.max_sst_file_bytes) {
      RETURN_IF_ERROR(finish_file());
      file = dir + "/rank-" + std::to_string(ctx.rank) + "-" + std::to_string(result.files.size()) + ".sst";
      rocksdb::EnvOptions env_options;
      env_options.bytes_per_sync = o.writeback_bytes;
      if (o.block_per_key) {
        table = std::make_unique<BlockPerKeyTableWriter>(db_options, env_options, o.invalidate_page_cache);
        RETURN_IF_ERROR(table->Open(file));
      } else {
        sst = std::make_unique<rocksdb::SstFileWriter>(env_options, db_options, nullptr, o.invalidate_page_cache);
        RETURN_IF_ERROR(FromRocks(sst->Open(file), "opening SST file " + file));
      }
      file_bytes = 0;
    }
    auto where = [&] { return "writing chunk " + std::to_string(jobs[j].chunk) + " of '" + it->fqn + "'"; };
    uint64_t stored = value.size();
    if (!lent.empty() && lent[j]) {
      Status st = table->AddPieces(key_of(j), value.substr(0, value.size() - kDataBlockTailBytes), lent[j]->pieces,
                                   lent[j]->crc32cs, value.substr(value.size() - kDataBlockTailBytes), &stored);
      lent[j].reset();  // (held no longer than its chunk)
      if (!st.ok()) return st.WithContext(where());
    } else if (table) {
      Status st = table->Add(key_of(j), value, &stored);
      if (!st.ok()) return st.WithContext(where());
    } else {
      rocksdb::Status s = sst->Put(key_of(j), rocksdb::Slice(value.data(), value.size()));
      if (!s.ok()) return FromRocks(s, where());
    }
    file_bytes += stored;
    result.items[jobs[j].item].stored_bytes += stored;
    return Status::OK();
  };
  // Small chunks (of small pieces: a job of thousands of ranks' rows, or
  // many small tensors) travel between the workers and this thread in
  // batches of consecutive chunks of up to kBatchBytes: a hand-off per
  // chunk of a few bytes costs far more than the chunk (two wake-ups). A
  // batch's values are framed in one buffer (u32 size, bytes); a chunk of
  // kBatchBytes or more is a batch of its own, its value not copied.
  constexpr uint64_t kBatchBytes = 256 << 10;
  constexpr size_t kBatchChunks = 4096;
  struct Batch {
    size_t first = 0, count = 0;
  };
  std::vector<Batch> batches;
  uint64_t batch_bytes = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const WriteItem* it = sorted[jobs[j].item];
    const uint64_t most = std::min<uint64_t>(result.items[jobs[j].item].chunk_bytes, it->nbytes);
    if (batches.empty() || batch_bytes + most > kBatchBytes || batches.back().count >= kBatchChunks) {
      batches.push_back(Batch{j, 0});
      batch_bytes = 0;
    }
    ++batches.back().count;
    batch_bytes += most;
  }
  auto produce_batch = [&](size_t b, std::string* out) -> Status {
    const Batch& batch = batches[b];
    if (batch.count == 1) return produce(batch.first, out);
    thread_local std::string value;
    out->clear();
    for (size_t j = batch.first; j < batch.first + batch.count; ++j) {
      value.clear();
      RETURN_IF_ERROR(produce(j, &value));
      AppendLEString(out, shared[j] ? std::string_view() : std::string_view(value));
    }
    return Status::OK();
  };
  auto consume_batch = [&](size_t b, std::string& in) -> Status {
    const Batch& batch = batches[b];
    if (batch.count == 1) return consume(batch.first, in);
    std::string_view rest(in);
    for (size_t j = batch.first; j < batch.first + batch.count; ++j) {
      uint32_t size = 0;
      if (!ConsumeLE32(&rest, &size) || size > rest.size()) return Status::Internal("a batch of chunks is malformed");
      RETURN_IF_ERROR(consume(j, rest.substr(0, size)));
      rest.remove_prefix(size);
    }
    return Status::OK();
  };
  // A window of a few batches per worker keeps every core busy while
  // bounding the memory held by encoded chunks waiting for their turn.
  RETURN_IF_ERROR(RunOrdered(batches.size(), o.threads, static_cast<size_t>(std::max(1, o.threads)) * 2 + 2,
                             produce_batch, consume_batch));
  RETURN_IF_ERROR(finish_file());
  return result;
}

}  // namespace ckptdb
