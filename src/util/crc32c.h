// CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and S3's
// x-amz-checksum-crc32c): with the CPU's crc32 instruction where it has one
// (SSE4.2: three independent streams over 12 KiB stripes, joined: the
// instruction takes 8 bytes a cycle at most, one stream a third of that for
// its 3-cycle latency; 32 against 11 GB/s here), else a table (about 1 byte
// a cycle).
#ifndef CKPTDB_SRC_UTIL_CRC32C_H_
#define CKPTDB_SRC_UTIL_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ckptdb {

// The CRC-32C of data[0, n) continuing from `crc` (the CRC of the bytes
// before; 0 to start): Crc32c(b, Crc32c(a)) == Crc32c(a + b).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

// The CRC-32C of a + b from a's, b's and b's length, without the bytes
// (32 steps of 32-bit arithmetic, and about 60 x 32 more when len_b is
// not the length the thread's last call had): CRCs taken piece by piece by
// different threads joined in order. REQUIRES: len_b < 2^61.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// The same CRC by one stream of the instruction (8 bytes a step, each
// waiting for the one before): the baseline ckptdb-codec-bench compares with.
uint32_t Crc32cOneStream(const void* data, size_t n, uint32_t crc = 0);

// As S3 wants it in x-amz-checksum-crc32c: the 4 bytes, big-endian, base64.
std::string Crc32cBase64(std::string_view data);
// A CRC-32C so.
std::string Crc32cToBase64(uint32_t crc);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_UTIL_CRC32C_H_
