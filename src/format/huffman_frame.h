// A fast writer of zstd frames for bytes that only an entropy coder can
// shrink, such as the exponent bytes of trained weights (chunk_codec.cc,
// filter 2). Its frames are ordinary zstd frames (RFC 8878) that
// ZSTD_decompress reads: every block holds only literals, Huffman-coded in 4
// streams with one code built from a sample of the bytes (the first block
// describes the code, the others reuse it, "treeless"), and no sequences.
// It skips zstd's match finder and per-block histograms, and codes two
// symbols per table lookup: 2-3x the speed of ZSTD_compress2 with literal
// compression on such bytes, for a few tenths of a percent more bytes.
#ifndef CKPTDB_SRC_FORMAT_HUFFMAN_FRAME_H_
#define CKPTDB_SRC_FORMAT_HUFFMAN_FRAME_H_

#include <cstddef>

namespace ckptdb {

// The room EncodeHuffmanFrame may write: up to 11/8 of n and a little more
// (a block is coded before it is known not to shrink).
size_t HuffmanFrameBound(size_t n);

enum class HuffmanFrame {
  kCoded,        // *size bytes at out are the frame
  kNotWorth,     // the sample codes to keep_below of its size or more
  kUnsupported,  // not these bytes (fewer than 1 KiB, a single value, ...): use zstd itself
};

// Codes in[0, n) as one zstd frame at out (HuffmanFrameBound(n) bytes of
// room) when a sample of it (all of it up to 32 KiB, else 16 slices of 1
// KiB spread over it) codes to less than keep_below (0 < keep_below <= 1)
// of its size and the whole frame is smaller than n. Every byte value
// between the least and the greatest of each half of `in` (below 128, and
// 128 or above: sign-and-exponent bytes of floats cluster in one range per
// sign) gets a code, so the frame decodes to `in` whatever the sample
// missed; finding those ranges is the only pass over all of `in` before
// coding it, and is skipped when the sample alone says it does not pay.
// Uses thread-local tables.
HuffmanFrame EncodeHuffmanFrame(const void* in, size_t n, double keep_below, char* out, size_t* size);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_FORMAT_HUFFMAN_FRAME_H_
