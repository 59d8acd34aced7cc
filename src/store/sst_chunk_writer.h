// The save side's data path: one rank's pieces cut into chunks, checksummed
// and compressed on worker threads, and appended in key order to the rank's
// SST files in the staging area.
#ifndef CKPTDB_SRC_SST_CHUNK_WRITER_H_
#define CKPTDB_SRC_SST_CHUNK_WRITER_H_

#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>

#include <functional>
#include <string>
#include <vector>

#include "ckptdb/rocksdb_store.h"
#include "ckptdb/storage.h"

namespace ckptdb {

struct ChunkWriteOptions {
  uint64_t chunk_bytes = 4u << 20;
  Compression compression = Compression::kNone;
  int zstd_level = 1;
  uint64_t max_sst_file_bytes = 1ull << 30;
  bool invalidate_page_cache = false;
  int threads = 1;  // encoding workers; the calling thread appends
  // Tests only: cut chunks at exactly chunk_bytes even where that splits an
  // element, as stores written before format 2 may have (the reader must
  // still read them correctly).
  bool split_elements = false;
  // Record each chunk's content hash (WrittenItem::chunk_hashes).
  bool content_hashes = true;
  // Start writing a file's pages back to disk after every this many bytes
  // (RocksDB's bytes_per_sync: sync_file_range, not waited for), so that the
  // disk works while the chunks are still being encoded and the closing
  // fsync has little left to wait for; 0: only that fsync (for files that
  // are never synced). 512 MiB saved on 2 ranks here: 0.29-0.36 s with it,
  // 0.47 s without.
  uint64_t writeback_bytes = 4u << 20;
  // Cut host pieces of two or more dimensions into n-d boxes where
  // ChooseChunkShape gives a shape (StoreOptions::chunk_layout kBoxes).
  bool boxes = true;
  // Write the files with BlockPerKeyTableWriter (store/block_per_key_table.h),
  // each chunk's data block built around it by the worker that encodes it,
  // instead of SstFileWriter: for options whose every key is a data block of
  // its own (bucket::SstObjectWriteOptions(), whose collectors it runs). A
  // raw chunk is then copied once, into its block, where SstFileWriter
  // copied it into a value and again into its block; a raw chunk of 64 KiB
  // or more of a host piece that lies in the piece as one run or as rows of
  // 512 bytes or more is not copied at all when its bytes are the piece's
  // own (read at `data`, or handed over there by the item's source): the
  // file is lent them (BlockPerKeyTableWriter::AddPieces), and a file that
  // borrows them (the bucket's uploads) sends them from there.
  bool block_per_key = false;
  // Called on the appending thread as soon as each file is finished (before
  // the next is opened), with its path and what SstFileWriter::Finish
  // reported (size, smallest and largest key): a bucket store records the
  // object its file became. An error stops the write and is returned.
  std::function<Status(const std::string& path, const rocksdb::ExternalSstFileInfo& info)> on_file_finished;
};

// The chunk size of one piece: chunk_bytes rounded down to a whole number of
// elements of `dtype`, so that no chunk boundary splits an element (a strided
// or converting load handles each chunk on its own).
uint64_t PieceChunkBytes(uint64_t chunk_bytes, DType dtype);

// Writes every chunk of `items` (whose keys name this rank) into
// dir/rank-R-N.sst files, N = 0, 1, ... (a new file after
// max_sst_file_bytes). Each piece is cut into chunks of
// PieceChunkBytes(chunk_bytes, its dtype) raw bytes, or, with
// options.boxes, into the boxes of ChooseChunkShape(its sizes) where that
// gives a shape, for items in host memory (`data` set; a device item's
// ranges are read off the device as runs). A host item with a `source` too
// is read through it, a box at a time, as the span of its bytes that holds
// the box. Floating-point pieces are compressed with
// byte planes.
// Each file is finished (synced) before this returns; nothing is ingested.
// The items' bytes must not change until this returns: a file may read
// them until it is finished (o.block_per_key).
StatusOr<WriteResult> WriteItemsToSst(const std::string& dir, const SaveContext& ctx,
                                      const std::vector<WriteItem>& items, const rocksdb::Options& db_options,
                                      const ChunkWriteOptions& options);

// What every store's PrepareStorage checks of the items a rank will write:
// each is this rank's (Internal otherwise: a planning bug) and has its bytes
// (InvalidArgument naming the entry otherwise).
Status CheckWriteItems(const SaveContext& ctx, const std::vector<WriteItem>& items);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_SST_CHUNK_WRITER_H_
