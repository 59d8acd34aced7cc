// The chunk value format (proto/FORMAT.md, "Chunk values"): every value that
// ckptdb stores, data chunks and step metadata alike, is self-describing and
// checksummed.
//
//   offset size field
//   0      1    version      1
//   1      1    codec        0 raw, 1 zstd
//   2      1    filter       0 none, 1 byte planes (applied before compression)
//   3      1    filter_param byte planes: the element size (2, 4 or 8)
//   4      4    raw_length   u32 little-endian: bytes after decoding
//   8      8    checksum     u64 little-endian: XXH3-64 of the raw bytes
//   16     ...  payload      raw bytes, or the zstd frame of them
//
// Decoding verifies the header, decompresses, and checks the length and the
// checksum: corrupt values are reported as DataLoss, never returned.
#ifndef CKPTDB_SRC_CHUNK_CODEC_H_
#define CKPTDB_SRC_CHUNK_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/rocksdb_store.h"
#include "ckptdb/status.h"

namespace ckptdb {

inline constexpr size_t kChunkHeaderSize = 16;
inline constexpr uint8_t kChunkVersion = 1;
inline constexpr uint64_t kMaxChunkRawBytes = 1ull << 30;

enum class ChunkCodec : uint8_t { kRaw = 0, kZstd = 1 };

uint64_t Checksum(const void* data, size_t n);

// kBytePlanes: the planes compressed together, as one zstd frame.
// kPlanesApart: each plane coded (zstd) or stored on its own (kAuto on
// floating-point chunks; proto/FORMAT.md §3).
enum class ChunkFilter : uint8_t { kNone = 0, kBytePlanes = 1, kPlanesApart = 2 };

// InvalidArgument naming `name` and the value unless `c` is one of
// Compression's values ("StoreOptions.compression 7 is not ...").
Status ValidateCompression(Compression c, const std::string& name);

// Encodes `raw` into *out (replacing its contents).
//
// plane_width > 1 (the element size of a floating-point tensor) groups the
// bytes into planes before compressing: byte j of every element, then byte
// j+1, ... The exponent bytes of trained weights repeat a lot and compress;
// the mantissa bytes mostly do not. Ignored when nothing is compressed.
// kAuto first compresses a sample and stores the chunk raw when the sample
// does not shrink, so incompressible data costs little. With plane_width it
// codes each plane apart (filter 2): Huffman-only (huffman_frame.h) where
// that pays, else stored; zstd_level then only matters for a plane that
// coder does not take (a single byte value, under 1 KiB).
// REQUIRES: n <= kMaxChunkRawBytes; n is a multiple of plane_width.
//
// `content_hash`, when the caller computed the chunk's ChunkContentHash of
// these raw bytes already (a deduplicating save does, before it decides to
// write the chunk): a raw chunk's checksum is then taken from it
// (ChecksumFromContentHash) instead of hashing the bytes a second time. The
// value is the same bytes either way.
void EncodeChunk(const void* raw, size_t n, Compression compression, int zstd_level, std::string* out,
                 size_t plane_width = 0, const char* content_hash = nullptr);

// Decodes `value` into dest, which holds exactly `expected_raw` bytes.
// DataLoss describing what is wrong (caller adds which chunk of which FQN).
Status DecodeChunk(std::string_view value, uint64_t expected_raw, void* dest);

// Like DecodeChunk, but without copying a raw chunk: verifies it where it
// lies and points *out at its payload (inside `value`); a compressed chunk is
// decoded into *scratch and *out points there.
Status DecodeChunkView(std::string_view value, uint64_t expected_raw, std::string* scratch, std::string_view* out);

// Hands the verified or verifying bytes of a chunk to `visit`, in order, as
// windows [begin, begin + n) of its raw bytes (multiples of 64 KiB but the
// last): a raw chunk, and one of byte planes coded apart (filter 2), is
// checksummed block by block as it is visited, so `visit` sees its bytes
// before the checksum is known, and a mismatch is DataLoss after the last
// block; any other compressed chunk is decoded (verified) into *scratch
// first and visited as one window. visit's error stops it and is returned.
Status VisitChunk(std::string_view value, uint64_t expected_raw, std::string* scratch,
                  const std::function<Status(uint64_t begin, const char* data, uint64_t n)>& visit);

// Makes *value, whose raw bytes the caller wrote after kChunkHeaderSize
// bytes of room, a raw chunk value (header and checksum), as EncodeChunk
// with Compression::kNone would have made it; `content_hash` as EncodeChunk's.
void FinishRawChunk(std::string* value, const char* content_hash = nullptr);

// The same at `value`, which holds kChunkHeaderSize bytes of room, then the
// n raw bytes: writes the header (a value built inside a larger buffer, as
// a data block of BlockPerKeyTableWriter's). REQUIRES: n <= kMaxChunkRawBytes.
void FinishRawChunkAt(char* value, size_t n, const char* content_hash = nullptr);

// Writes the raw chunk value of raw[0, n) at `value` (kChunkHeaderSize + n
// bytes), as EncodeChunk with Compression::kNone writes it into a string.
// REQUIRES: n <= kMaxChunkRawBytes.
void EncodeRawChunkAt(const void* raw, size_t n, char* value, const char* content_hash = nullptr);

// A raw chunk whose bytes stay where they lie, as `pieces` in order (a
// box's rows lent to an upload): one pass over them, in slices that stay in
// cache, takes their ChunkContentHash into content_hash (when set) and each
// piece's CRC-32C into (*crc32cs)[i] (when set); then writes the raw chunk
// value's kChunkHeaderSize-byte header at `header` (the pieces are the rest
// of the value, as EncodeRawChunkAt would have copied them).
// REQUIRES: their sum <= kMaxChunkRawBytes.
void HashRawChunkPieces(const std::vector<std::string_view>& pieces, char* content_hash,
                        std::vector<uint32_t>* crc32cs, char* header);

// Decodes a value whose raw length is not known in advance.
StatusOr<std::string> DecodeChunkToString(std::string_view value);

// The content hash of a chunk (StoredPiece::chunk_hashes): XXH3-128 of its
// raw (decoded) bytes, written to out[0..kChunkHashBytes) as the high then
// the low 64 bits, each big-endian (proto/FORMAT.md).
void ChunkContentHash(const char* data, size_t n, char* out);

// The chunk checksum (Checksum: XXH3-64) of the n raw bytes at `data` whose
// ChunkContentHash is `content_hash`. For more than 240 bytes XXH3 computes
// its 64- and 128-bit hashes from the same accumulators and merges them
// alike, so XXH3-64 is the low 64 bits of XXH3-128 and is read from the hash
// without a pass over the bytes; shorter chunks (other code paths in XXH3)
// are hashed.
uint64_t ChecksumFromContentHash(const char* content_hash, const void* data, size_t n);

// StoredPiece::encoding of chunks written with these settings:
// (compression + 1) << 8 | zstd level (0 for kNone). Never 0.
uint32_t PieceEncoding(Compression compression, int zstd_level);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_CHUNK_CODEC_H_
