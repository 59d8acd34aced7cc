// The RocksDB options SST objects (per-rank SST files kept in a bucket) are
// written and read with.
//
// The table format is the local store's (DatabaseOptions(): XXH3 block
// checksums, no RocksDB compression, unshortened index keys) with one more
// rule: every key is a data block of its own. A read from a bucket fetches
// whole blocks, one GET each. The local store's rule (a block closes before
// a key that would take it past 4 KiB) keeps a small chunk out of a large
// chunk's block, but small chunks still share blocks of up to 4 KiB, which
// each of their GETs would fetch whole; RocksDB's default rule (a block
// closes once 90% full) was worse: a chunk under ~3.6 KiB (a compressed run
// of zeros, a piece's short last chunk, a small bytes entry) shared its
// block with the next chunk however large. Measured with that default rule
// (tests/s3_sst_object_test.cc): a file of 200 KiB chunks, alternately raw
// and compressible, read chunk by chunk fetched 1.80x the stored bytes with
// the default policy and 1.00x with one chunk per block; a real step saved
// with zstd (zero moments, small biases, 64 KiB chunks) loaded from the
// store's own files fetched 4.18x its stored chunk bytes, from the same
// entries rewritten one chunk per block 0.89x (the rest came with the
// objects' cached tails). Each file also records where every key's block
// starts (bucket/block_starts.h), so that a load fetches the blocks of
// adjacent chunks by one GET. The files stay ordinary SSTs: RocksDB reads and
// ingests them like any other.
#ifndef CKPTDB_SRC_BUCKET_SST_OBJECT_OPTIONS_H_
#define CKPTDB_SRC_BUCKET_SST_OBJECT_OPTIONS_H_

#include <rocksdb/options.h>

namespace ckptdb {
namespace bucket {

// For rocksdb::SstFileWriter (and WriteItemsToSst) writing SST objects.
rocksdb::Options SstObjectWriteOptions();

// For rocksdb::SstFileReader over ObjectFileSystem (`env`): the same table
// format, no readahead (a chunk is one GET of exactly its block) and no
// block cache (chunks are read once; each table reader keeps its index and
// properties). Reads any SST of ckptdb's, whichever block policy wrote it.
rocksdb::Options SstObjectReadOptions(rocksdb::Env* env);

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_SST_OBJECT_OPTIONS_H_
