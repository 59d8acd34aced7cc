#include "chunk_codec.h"

#include <zstd.h>

#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ckptdb {

namespace {

void PutLE32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void PutLE64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t GetLE32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t GetLE64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void WriteHeader(char* p, ChunkCodec codec, uint32_t raw_len, uint64_t sum) {
  p[0] = static_cast<char>(kChunkVersion);
  p[1] = static_cast<char>(codec);
  p[2] = 0;
  p[3] = 0;
  PutLE32(p + 4, raw_len);
  PutLE64(p + 8, sum);
}

struct Header {
  ChunkCodec codec;
  uint32_t raw_len;
  uint64_t checksum;
};

Status ParseHeader(std::string_view value, Header* h) {
  if (value.size() < kChunkHeaderSize) {
    return Status::DataLoss("chunk value of " + std::to_string(value.size()) + " bytes is shorter than its header");
  }
  const char* p = value.data();
  if (static_cast<uint8_t>(p[0]) != kChunkVersion) {
    return Status::DataLoss("chunk has unknown format version " + std::to_string(static_cast<uint8_t>(p[0])));
  }
  uint8_t codec = static_cast<uint8_t>(p[1]);
  if (codec > static_cast<uint8_t>(ChunkCodec::kZstd)) {
    return Status::DataLoss("chunk has unknown codec " + std::to_string(codec));
  }
  if (p[2] != 0 || p[3] != 0) {
    return Status::DataLoss("chunk has unknown filter " + std::to_string(static_cast<uint8_t>(p[2])));
  }
  h->codec = static_cast<ChunkCodec>(codec);
  h->raw_len = GetLE32(p + 4);
  h->checksum = GetLE64(p + 8);
  return Status::OK();
}

}  // namespace

uint64_t Checksum(const void* data, size_t n) { return XXH3_64bits(data, n); }

void EncodeChunk(const void* raw, size_t n, Compression compression, int zstd_level, std::string* out) {
  const uint64_t sum = Checksum(raw, n);
  if (compression != Compression::kNone && n > 0) {
    size_t bound = ZSTD_compressBound(n);
    out->resize(kChunkHeaderSize + bound);
    size_t z = ZSTD_compress(&(*out)[kChunkHeaderSize], bound, raw, n, zstd_level);
    bool use = !ZSTD_isError(z) && (compression == Compression::kZstd || z < n);
    if (use) {
      out->resize(kChunkHeaderSize + z);
      WriteHeader(&(*out)[0], ChunkCodec::kZstd, static_cast<uint32_t>(n), sum);
      return;
    }
  }
  out->resize(kChunkHeaderSize + n);
  WriteHeader(&(*out)[0], ChunkCodec::kRaw, static_cast<uint32_t>(n), sum);
  if (n) std::memcpy(&(*out)[kChunkHeaderSize], raw, n);
}

Status DecodeChunk(std::string_view value, uint64_t expected_raw, void* dest) {
  Header h;
  Status st = ParseHeader(value, &h);
  if (!st.ok()) return st;
  if (h.raw_len != expected_raw) {
    return Status::DataLoss("chunk holds " + std::to_string(h.raw_len) + " bytes, metadata expects " +
                            std::to_string(expected_raw));
  }
  std::string_view payload = value.substr(kChunkHeaderSize);
  if (h.codec == ChunkCodec::kRaw) {
    if (payload.size() != h.raw_len) {
      return Status::DataLoss("raw chunk payload is " + std::to_string(payload.size()) + " bytes, header says " +
                              std::to_string(h.raw_len));
    }
    if (h.raw_len) std::memcpy(dest, payload.data(), h.raw_len);
  } else {
    size_t z = ZSTD_decompress(dest, h.raw_len, payload.data(), payload.size());
    if (ZSTD_isError(z)) return Status::DataLoss(std::string("zstd chunk does not decode: ") + ZSTD_getErrorName(z));
    if (z != h.raw_len) {
      return Status::DataLoss("zstd chunk decodes to " + std::to_string(z) + " bytes, header says " +
                              std::to_string(h.raw_len));
    }
  }
  if (Checksum(dest, h.raw_len) != h.checksum) return Status::DataLoss("chunk checksum mismatch");
  return Status::OK();
}

StatusOr<std::string> DecodeChunkToString(std::string_view value) {
  Header h;
  Status st = ParseHeader(value, &h);
  if (!st.ok()) return st;
  std::string out(h.raw_len, '\0');
  st = DecodeChunk(value, h.raw_len, out.data());
  if (!st.ok()) return st;
  return out;
}

}  // namespace ckptdb
