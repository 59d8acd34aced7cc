// A writable file that can take bytes without copying them. What
// AppendBorrowed is given is read where it lies, at any time until the
// file's Close returns (or the file is destroyed), so it must neither change
// nor go away before then; the file's size and order are as if it had been
// appended. The caller hands each piece's CRC-32C with it, taken as it read
// the piece for its own hashes (in cache), so that the file needs not read
// the pieces for one (an upload part's is joined from them).
// BlockPerKeyTableWriter::AddPieces lends a chunk's raw bytes so to a file
// that is one (the bucket's upload files, bucket/object_upload_env.h, which
// send them from the tensor's memory: no copy into a block and none into an
// upload part) and appends them to any other.
#ifndef CKPTDB_SRC_STORE_BORROWING_FILE_H_
#define CKPTDB_SRC_STORE_BORROWING_FILE_H_

#include <rocksdb/io_status.h>

#include <cstdint>
#include <string_view>
#include <vector>

namespace ckptdb {

class BorrowingFile {
 public:
  virtual ~BorrowingFile() = default;
  // Appends the bytes of `pieces`, in order; crc32cs[i] is the CRC-32C
  // (util/crc32c.h) of pieces[i] (as many CRCs as pieces: InvalidArgument
  // otherwise).
  virtual rocksdb::IOStatus AppendBorrowed(const std::vector<std::string_view>& pieces,
                                           const std::vector<uint32_t>& crc32cs) = 0;
};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STORE_BORROWING_FILE_H_
