// A writable file that can take bytes without copying them. What
// AppendBorrowed is given is read where it lies, at any time until the
// file's Close returns (or the file is destroyed), so it must neither change
// nor go away before then; the file's size and order are as if it had been
// appended. BlockPerKeyTableWriter::AddPieces hands a chunk's raw bytes so to
// a file that is one (the bucket's upload files, bucket/object_upload_env.h,
// which send them from the tensor's memory: no copy into a block and none
// into an upload part) and appends them to any other file.
#ifndef CKPTDB_SRC_STORE_BORROWING_FILE_H_
#define CKPTDB_SRC_STORE_BORROWING_FILE_H_

#include <rocksdb/io_status.h>
#include <rocksdb/slice.h>

namespace ckptdb {

class BorrowingFile {
 public:
  virtual ~BorrowingFile() = default;
  virtual rocksdb::IOStatus AppendBorrowed(const rocksdb::Slice& data) = 0;
};

}  // namespace ckptdb

#endif  // CKPTDB_SRC_STORE_BORROWING_FILE_H_
