// The SST files of a directory store that hold a step's chunks, for the
// ranks of a job that read a store every rank sees without opening its
// database (OpenSharedStoreReader in include/ckptdb/rocksdb_store.h).
//
// Opening the database replays its MANIFEST, which lists one file per rank
// and step of the whole history, and lists its directory: at W ranks that
// is W replays of O(W x steps) records on the shared file system. Instead
// the coordinator, which has the database open, lists its table files with
// their key ranges (DataFileIndex), names each rank the few files its
// chunks lie in (data keys sort by step, save, rank and item, so a rank's
// own chunks are in its own file), and the rank reads its chunks from those
// files alone (DataFileChunks), with RocksDB's block checksums verified as
// the database's own reads verify them. These are a directory store's
// chunk places (store/chunk_places.h): TableFilePlaces, TableFileReader.
#ifndef CKPTDB_SRC_STORE_DATA_FILES_H_
#define CKPTDB_SRC_STORE_DATA_FILES_H_

#include <rocksdb/slice.h>
#include <rocksdb/sst_file_reader.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "format/keys.h"
#include "store/chunk_places.h"
#include "util/le_bytes.h"

namespace ckptdb {

// One table file of a store's database: its name in STORE/db
// ("000123.sst") and the least and greatest user keys it holds.
struct DataFile {
  std::string name;
  std::string smallest;
  std::string largest;
};

// The table files of a database that may hold data ('D') keys, by key
// range. Data values are written through SST files that hold data keys
// alone (a rank's, or gc's rewrite of one): their ranges are narrow and
// mostly disjoint, and are searched by range. A file whose range starts
// among data keys and ends past them (a flush of the memtable: metadata,
// and range deletions of dropped steps' data; or what RocksDB's own
// compactions make of such files and data files together) is "wide": it
// may hold a data value, so it is a candidate for every key from its
// start on, tried after the narrow ones. Files that start past the data
// keys are left out.
class DataFileIndex {
 public:
  DataFileIndex() = default;
  explicit DataFileIndex(std::vector<DataFile> files);

  // Adds to *out (indices into files(), unsorted, maybe repeated) the files
  // that may hold a chunk of piece `p` of save (step, save_id): its own
  // chunks and those it shares with earlier steps.
  void AddFilesOf(int64_t step, uint64_t save_id, const StoredPiece& p, std::vector<size_t>* out) const;
  // The files that may hold `key`: the narrow ones (indices, increasing),
  // then the wide ones.
  std::vector<size_t> FilesHolding(const std::string& key) const;

  const std::vector<DataFile>& files() const { return files_; }

 private:
  void AddFilesMeeting(const std::string& begin, const std::string& end, std::vector<size_t>* out) const;

  std::vector<DataFile> files_;  // the narrow files by smallest key, then the wide ones
  size_t narrow_ = 0;            // how many of files_ are narrow
  // reach_[i] (narrow files): the index, among files 0..i, of one whose
  // largest key is the greatest; a search walks back from the last file
  // starting at or before its range's end while that reach still meets
  // the range.
  std::vector<size_t> reach_;
};

// The files of `indices` (into index.files()), each once, appended to `out`:
// u32 n | n times: string name | string smallest | string largest.
void AppendDataFiles(const DataFileIndex& index, std::vector<size_t> indices, std::string* out);
// Reads what AppendDataFiles wrote. False when it is malformed or names a
// file that is not a table file of the database directory ("NNNNNN.sst").
bool ConsumeDataFiles(LECursor* in, std::vector<DataFile>* files);

// Reads chunk values from the named table files of the store at `store`,
// opening each file (rocksdb::SstFileReader, mmap when asked) on its first
// use. Thread safety: Get from any thread.
class DataFileChunks {
 public:
  DataFileChunks(std::string store, std::vector<DataFile> files, bool mmap_reads);
  ~DataFileChunks();

  // The stored value of `key`, pinned where it lies until *value is reset;
  // NotFound when none of the files holds it. IOError naming the file when
  // one of them cannot be opened (deleted since the coordinator listed it,
  // or the store is not on a file system this host shares), DataLoss when
  // a block is damaged.
  Status Get(const DataKey& key, rocksdb::PinnableSlice* value);

 private:
  StatusOr<rocksdb::SstFileReader*> Open(size_t i);

  const std::string db_dir_;
  const DataFileIndex index_;
  const bool mmap_reads_;
  // By index_.files(): each file is opened once (opened_), into its reader,
  // or its error when the open failed.
  std::unique_ptr<std::once_flag[]> opened_;
  std::vector<std::unique_ptr<rocksdb::SstFileReader>> readers_;
  std::vector<Status> open_errors_;
};

// The table files of `files` (a database's, as its reader lists them) as
// chunk places: AppendPlaces writes AppendDataFiles's bytes.
std::unique_ptr<ChunkPlaceIndex> TableFilePlaces(std::vector<DataFile> files);

// A rank's reads from the named table files of the directory store at
// `store` (DataFileChunks, on options.threads threads, mmap when
// options.mmap_reads).
std::unique_ptr<PlacedChunkReader> NewTableFileReader(std::string store, const ReaderOptions& options);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STORE_DATA_FILES_H_
