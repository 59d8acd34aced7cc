// SST files whose every key is a data block of its own, written from blocks
// the caller builds: the bucket's SST objects (bucket/sst_object_options.h
// gives RocksDB's SstFileWriter the same rule). With SstFileWriter a chunk
// was copied three times on the way to the upload: into its value, into
// RocksDB's block, into the upload's part. Here a worker thread builds the
// block around the chunk where it encodes it (the value is written in
// place, between the block's head and tail), and the file takes the block
// as it is: one copy fewer, and the block's checksum leaves the appending
// thread.
//
// The table is the one SstFileWriter writes with SstObjectWriteOptions()
// (proto/FORMAT.md §9), byte for byte but its random session id: RocksDB
// 7.8's block-based format 5, XXH3 block checksums, no compression, an
// index of unshortened user keys with their blocks' handles, one properties
// block (SstFileWriter's: version 2, global sequence number 0, and what the
// options' property collectors add), a metaindex and the footer. RocksDB
// reads and ingests it like any other SST; tests/block_per_key_table_test.cc
// compares the two writers' files.
#ifndef CKPTDB_SRC_STORE_BLOCK_PER_KEY_TABLE_H_
#define CKPTDB_SRC_STORE_BLOCK_PER_KEY_TABLE_H_

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table_properties.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/status.h"
#include "store/borrowing_file.h"

namespace ckptdb {

// A data block holding `key` (a user key) with a value of `value_size`
// bytes is DataBlockHeadSize(key.size(), value_size) bytes of head, the
// value, then kDataBlockTailBytes: restart array and block trailer.
// REQUIRES (here and below): key.size() + 8 and value_size <= UINT32_MAX
// (RocksDB reads an entry's lengths as varint32).
size_t DataBlockHeadSize(size_t key_size, size_t value_size);
inline constexpr size_t kDataBlockRestartBytes = 8;  // fixed32 0 (the one restart), fixed32 1
inline constexpr size_t kBlockTrailerBytes = 5;      // compression type 0, fixed32 XXH3 checksum
inline constexpr size_t kDataBlockTailBytes = kDataBlockRestartBytes + kBlockTrailerBytes;

// Writes the head of key's block (its entry's lengths, the key, sequence
// number 0 and type "value") at `head`: DataBlockHeadSize bytes.
void WriteDataBlockHead(std::string_view key, size_t value_size, char* head);

// Writes the tail at block + contents_bytes, where contents_bytes is the
// head's and the value's size: the restart array, then the trailer (no
// compression, the XXH3 checksum of everything before it).
void WriteDataBlockTail(char* block, size_t contents_bytes);

// The tail of a block whose contents (its head and value) are in pieces
// (a value whose raw bytes stay where they lie): Add each piece in order,
// then WriteTail writes the kDataBlockTailBytes that follow them.
class DataBlockTail {
 public:
  DataBlockTail();
  ~DataBlockTail();
  DataBlockTail(const DataBlockTail&) = delete;
  DataBlockTail& operator=(const DataBlockTail&) = delete;
  void Add(std::string_view piece);
  void WriteTail(char* tail);

 private:
  void* state_;  // XXH3_state_t*
};

// *out = the whole block of key with `value` (head, value, tail).
void BuildDataBlock(std::string_view key, std::string_view value, std::string* out);

// The value's size in a block built above; false when `block` is not one
// (its lengths do not add up to its size, or the value passes UINT32_MAX).
bool DataBlockValueSize(std::string_view block, uint64_t* value_size);

// Writes one file. Each block is one Append of the file, unbuffered: meant
// for files whose Append buffers (the bucket's upload parts), where large
// blocks make few calls; a block given in pieces (AddPieces) lends its
// middle to a file that takes bytes by reference (store/borrowing_file.h).
// Thread safety: one thread at a time.
class BlockPerKeyTableWriter {
 public:
  // `options` must describe this table (Open checks): its env opens the
  // file, its table_properties_collector_factories collect the file's user
  // properties (each key is reported with the offset where its block
  // starts, and each block's size, as RocksDB's builder reports them; a
  // collector's error leaves its properties out, as RocksDB does).
  // `env_options.bytes_per_sync`: ask for write-back (RangeSync) after
  // every so many bytes; `invalidate_page_cache`: drop the file's pages
  // once it is synced.
  BlockPerKeyTableWriter(const rocksdb::Options& options, const rocksdb::EnvOptions& env_options,
                         bool invalidate_page_cache);
  // An unfinished file is dropped without Close (an upload env's file then
  // aborts its upload: no object appears).
  ~BlockPerKeyTableWriter();

  // InvalidArgument naming the first option that describes another table
  // than the one this writes; the file's error otherwise.
  Status Open(const std::string& path);

  // Appends the block of `key` (built with the functions above); keys come
  // in strictly increasing order. *value_size (when set): the block's value
  // bytes. InvalidArgument when the key is out of order or the block is not
  // key's; the file's error otherwise, after which every call returns it.
  Status Add(std::string_view key, std::string_view block, uint64_t* value_size = nullptr);

  // Add of the block that is front, then the `lent` pieces, then back, in
  // order; front holds at least the block's head. A file that is a
  // BorrowingFile takes the lent pieces by reference, with lent_crc32cs,
  // each one's CRC-32C: they must stay unchanged until Finish returns (or
  // the writer is destroyed); any other file is appended a copy. The
  // options' collectors are handed an empty value (it is not in one piece):
  // the bucket's read none. InvalidArgument, before anything is written,
  // also when the CRCs are not one per lent piece.
  Status AddPieces(std::string_view key, std::string_view front, const std::vector<std::string_view>& lent,
                   const std::vector<uint32_t>& lent_crc32cs, std::string_view back, uint64_t* value_size = nullptr);

  // Writes the index, properties, metaindex and footer, syncs and closes
  // the file, and reports it as SstFileWriter::Finish does. A file with no
  // entries is InvalidArgument, and stays open (as SstFileWriter's). On any
  // other failure the file is deleted, as SstFileWriter deletes it.
  Status Finish(rocksdb::ExternalSstFileInfo* info);

  uint64_t FileSize() const { return offset_; }

  // The file's session id property (rocksdb.creating.session.identity):
  // by default a new random one per writer, as SstFileWriter draws one.
  // Tests set SstFileWriter's to compare whole files.
  void SetSessionId(std::string id) { session_id_ = std::move(id); }

 private:
  class EntriesBlock;  // a block of entries as RocksDB's BlockBuilder writes them

  Status Append(std::string_view bytes);
  // Appends the pieces, lent to a borrowing file.
  Status Lend(const std::vector<std::string_view>& pieces, const std::vector<uint32_t>& crc32cs);
  // Counts n bytes appended; asks for write-back every bytes_per_sync.
  Status Appended(uint64_t n);
  Status WriteBlock(const std::string& contents, uint64_t* offset, uint64_t* size);
  Status WriteTail(rocksdb::ExternalSstFileInfo* info);

  rocksdb::Options options_;
  rocksdb::EnvOptions env_options_;
  bool invalidate_page_cache_;
  std::string path_;
  std::string session_id_;
  std::unique_ptr<rocksdb::FSWritableFile> file_;
  BorrowingFile* borrowing_ = nullptr;  // file_, where it takes bytes by reference
  Status failed_;  // the file's first error: every later call returns it
  std::vector<std::unique_ptr<rocksdb::TablePropertiesCollector>> collectors_;
  std::vector<bool> collector_failed_;
  uint64_t offset_ = 0;
  uint64_t synced_to_ = 0;
  // The index block so far, and the table's counts.
  std::unique_ptr<EntriesBlock> index_;
  std::string first_key_, last_key_;
  uint64_t entries_ = 0, raw_key_bytes_ = 0, raw_value_bytes_ = 0;
};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STORE_BLOCK_PER_KEY_TABLE_H_
