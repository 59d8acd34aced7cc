// A RocksDB Env whose writable files under a virtual root stream into a
// bucket instead of onto a disk: SstFileWriter writes "ROOT/NAME" and the
// bytes go to s3://BUCKET/KEY_PREFIX + NAME while the file is still being
// written, so a rank keeps no local copy and uploading overlaps encoding.
//
// A file fills a buffer of part_bytes; each full part goes to the file's
// upload threads (the multipart upload is created with the first full part).
// At most parts_in_flight parts are queued or uploading; Append blocks while
// that many are, so a file holds at most (parts_in_flight + 1) x part_bytes.
// A part's buffer goes back to the env after its upload and is filled again
// by the next part of any of its files (no fresh pages per part); the env
// keeps at most parts_in_flight + 1 of them, freed with it.
// The files are BorrowingFiles (store/borrowing_file.h): bytes given to
// AppendBorrowed are not copied into the part but sent from where they lie
// (a part is then a list of pieces, its CRC-32C joined from theirs), so they
// must not change until Close returns. They count in no part's buffer
// (UploadLedger::peak_buffered_bytes); parts are part_bytes all the same.
// Sync and Fsync do nothing: the object exists once Close returns OK, and
// not before. Close uploads the rest and completes the upload (a file that
// never filled one part: one PutObject), then checks the object's size (and,
// for a multipart object, its ETag against S3Client::MultipartEtag) with a
// HEAD. Any failure is returned by the next Append or Close, the multipart
// upload is aborted and no object appears. Paths outside the root go to the
// base file system unchanged.
//
// Thread safety: one writer per file (RocksDB's contract); the ledger may be
// read from any thread.
#ifndef CKPTDB_SRC_BUCKET_OBJECT_UPLOAD_ENV_H_
#define CKPTDB_SRC_BUCKET_OBJECT_UPLOAD_ENV_H_

#include <rocksdb/env.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "s3/s3_client.h"

namespace ckptdb {
namespace bucket {

struct ObjectUploadOptions {
  // Bytes per part. S3 wants at least 5 MiB for every part but the last.
  uint64_t part_bytes = 8u << 20;
  // Parts of one file queued or uploading at once (and upload threads per
  // file). Memory per open file: about (parts_in_flight + 1) x part_bytes.
  int parts_in_flight = 4;
  // The client that aborts a failed file's multipart upload and deletes a
  // mismatched object: one that tries once (a failure must not wait out the
  // retries of a server that stopped answering). Null: the upload client.
  s3::S3Client* cleanup_client = nullptr;
};

// What the files of one env uploaded. Shared by every file of the env.
class UploadLedger {
 public:
  // Final size of every object completed so far, by object key.
  std::map<std::string, uint64_t> objects() const;
  // The most part bytes held in memory at once by all files together.
  uint64_t peak_buffered_bytes() const;

  // The first error of any file, as ckptdb's Status (RocksDB passes it on
  // as an IOError holding its text): the caller reports this one.
  Status first_error() const;

  void Completed(const std::string& key, uint64_t size);
  void Buffered(int64_t delta);
  void Failed(const Status& s);

 private:
  mutable std::mutex mu_;
  Status first_error_;
  std::map<std::string, uint64_t> objects_;
  uint64_t buffered_ = 0;
  uint64_t peak_ = 0;
};

// `root` is a path prefix such as "/ckptdb-upload/" (with the trailing '/');
// `client` and `ledger` must outlive the env. Null base: RocksDB's default.
std::unique_ptr<rocksdb::Env> NewObjectUploadEnv(rocksdb::Env* base, s3::S3Client* client, std::string bucket,
                                                 std::string key_prefix, std::string root, ObjectUploadOptions options,
                                                 UploadLedger* ledger);

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_OBJECT_UPLOAD_ENV_H_
