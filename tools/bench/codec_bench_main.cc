// ckptdb-codec-bench: how fast one core encodes and decodes chunks with each
// Compression, in GB/s of raw bytes, and the stored/raw ratio, on the data
// kinds ckptdb-bench saves (trained bf16 and f32 weights, random bytes).
//
//   ckptdb-codec-bench [--chunk-bytes 4MiB] [--repeat 20]
//
// Then what a deduplicating save spends on each raw chunk (its content hash
// and its value), with the value's checksum hashed again or read from the
// content hash, alternating, over chunks read from memory; and the CRC-32C
// every uploaded part carries (x-amz-checksum-crc32c), three streams of the
// crc32 instruction against one, alternating, over 8 MiB parts (the upload's
// part size) in cache and out of it, and over a box's rows of 4 KiB (what a
// part lent a tensor's rows reads, one row after another).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/chunk_codec.h"
#include "util/crc32c.h"

using namespace ckptdb;
using Clock = std::chrono::steady_clock;

namespace {

// Weights as training leaves them: normal, sigma 0.02.
std::string Weights(size_t n, size_t width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::string s(n, '\0');
  for (size_t i = 0; i + width <= n; i += width) {
    float f = d(rng);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    if (width == 2) {
      const uint16_t h = static_cast<uint16_t>(b >> 16);
      std::memcpy(&s[i], &h, 2);
    } else {
      std::memcpy(&s[i], &b, 4);
    }
  }
  return s;
}

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  size_t n = 4u << 20;
  int repeat = 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--chunk-bytes" && i + 1 < argc) {
      n = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else {
      std::printf("usage: ckptdb-codec-bench [--chunk-bytes N] [--repeat 20]\n\n"
                  "Encodes and decodes one chunk of each data kind with each Compression on one\n"
                  "core, and prints GB/s of raw bytes (medians of --repeat runs) and stored/raw.\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  struct Kind {
    const char* name;
    std::string bytes;
    size_t width;
  };
  std::mt19937 rng(7);
  std::string noise(n, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  std::vector<Kind> kinds = {{"bf16", Weights(n, 2, 1), 2}, {"fp32", Weights(n, 4, 2), 4}, {"bytes", noise, 0}};
  std::printf("%-6s %-6s %10s %12s %12s\n", "data", "codec", "stored/raw", "encode GB/s", "decode GB/s");
  for (const Kind& k : kinds) {
    for (auto [c, name] : {std::pair{Compression::kNone, "none"}, {Compression::kZstd, "zstd"},
                           {Compression::kAuto, "auto"}}) {
      std::string v, back(n, '\0');
      std::vector<double> enc, dec;
      for (int r = 0; r < repeat; ++r) {
        auto t0 = Clock::now();
        EncodeChunk(k.bytes.data(), n, c, 1, &v, k.width);
        enc.push_back(Seconds(t0));
        t0 = Clock::now();
        Status st = DecodeChunk(v, n, back.data());
        dec.push_back(Seconds(t0));
        if (!st.ok() || back != k.bytes) {
          std::fprintf(stderr, "ckptdb-codec-bench: %s/%s does not round-trip: %s\n", k.name, name,
                       st.ToString().c_str());
          return 1;
        }
      }
      std::sort(enc.begin(), enc.end());
      std::sort(dec.begin(), dec.end());
      std::printf("%-6s %-6s %10.3f %12.2f %12.2f\n", k.name, name, static_cast<double>(v.size()) / n,
                  n / enc[enc.size() / 2] / 1e9, n / dec[dec.size() / 2] / 1e9);
    }
  }
  // What a deduplicating save does with each raw chunk: its content hash
  // (to compare with the stored chunk's), then its value, whose checksum is
  // hashed again or taken from the content hash (EncodeChunk's
  // content_hash). Over 64 distinct chunks (256 MiB at 4 MiB), so that each
  // is read from memory, not from the cache, as a save reads a state dict;
  // the two ways alternate, each its own medians.
  {
    const size_t chunks = 64;
    std::string many(chunks * n, '\0');
    for (size_t i = 0; i < many.size(); i += 64) many[i] = static_cast<char>(rng());
    std::string v;
    char hash[kChunkHashBytes];
    std::vector<double> again, taken;
    for (int r = 0; r < repeat; ++r) {
      for (int way = 0; way < 2; ++way) {
        const bool from_hash = (way + r) % 2 == 1;
        const auto t0 = Clock::now();
        for (size_t c = 0; c < chunks; ++c) {
          const char* raw = many.data() + c * n;
          ChunkContentHash(raw, n, hash);
          EncodeChunk(raw, n, Compression::kNone, 1, &v, 0, from_hash ? hash : nullptr);
        }
        (from_hash ? taken : again).push_back(Seconds(t0));
      }
    }
    std::sort(again.begin(), again.end());
    std::sort(taken.begin(), taken.end());
    const double total = static_cast<double>(chunks * n);
    std::printf("\ndeduplicating save, raw chunks (content hash, then value), %zu chunks of %zu bytes:\n", chunks, n);
    std::printf("  checksum hashed again     %6.2f GB/s (%.2f-%.2f)\n", total / again[again.size() / 2] / 1e9,
                total / again.back() / 1e9, total / again.front() / 1e9);
    std::printf("  checksum from the hash    %6.2f GB/s (%.2f-%.2f): %.2fx the time\n",
                total / taken[taken.size() / 2] / 1e9, total / taken.back() / 1e9, total / taken.front() / 1e9,
                taken[taken.size() / 2] / again[again.size() / 2]);
  }
  // One stream against three over the same bytes, alternating: `crc`
  // takes the CRC of every piece of one case, through the function given.
  using CrcFunction = uint32_t (*)(const void*, size_t, uint32_t);
  auto one_against_three = [&](const char* title, double total, const std::function<uint32_t(CrcFunction)>& crc) {
    std::vector<double> one, three;
    uint32_t sink = 0;
    for (int r = 0; r < repeat; ++r) {
      for (int way = 0; way < 2; ++way) {
        const bool three_streams = (way + r) % 2 == 1;
        const auto t0 = Clock::now();
        sink ^= crc(three_streams ? &Crc32c : &Crc32cOneStream);
        (three_streams ? three : one).push_back(Seconds(t0));
      }
    }
    std::sort(one.begin(), one.end());
    std::sort(three.begin(), three.end());
    std::printf("\nCRC-32C of %s (%08x):\n", title, sink);
    std::printf("  one stream                %6.2f GB/s (%.2f-%.2f)\n", total / one[one.size() / 2] / 1e9,
                total / one.back() / 1e9, total / one.front() / 1e9);
    std::printf("  three streams             %6.2f GB/s (%.2f-%.2f): %.2fx the time\n",
                total / three[three.size() / 2] / 1e9, total / three.back() / 1e9, total / three.front() / 1e9,
                three[three.size() / 2] / one[one.size() / 2]);
  };
  // The parts' CRC-32C: one part again and again (in cache), then 32
  // distinct parts (256 MiB, from memory).
  for (const size_t parts : {size_t{1}, size_t{32}}) {
    const size_t part = 8u << 20;
    std::string bytes(parts * part, '\0');
    for (size_t i = 0; i < bytes.size(); i += 64) bytes[i] = static_cast<char>(rng());
    const int rounds = parts == 1 ? 32 : 1;
    one_against_three(parts == 1 ? "8 MiB parts, one part, in cache" : "8 MiB parts, 32 parts, from memory",
                      static_cast<double>(rounds * parts * part), [&](CrcFunction f) {
                        uint32_t x = 0;
                        for (int k = 0; k < rounds; ++k) {
                          for (size_t p = 0; p < parts; ++p) x ^= f(bytes.data() + p * part, part, 0);
                        }
                        return x;
                      });
  }
  // A part lent a box's rows where they lie (rows of 4 KiB, 16 KiB apart:
  // 1024 fp32 columns of a 4096-column tensor): each row's CRC continues
  // the last's, 64 MiB of rows from memory.
  const size_t row = 4096, stride = 16384, rows = 16384;
  std::string strided(rows * stride, '\0');
  for (size_t i = 0; i < strided.size(); i += 64) strided[i] = static_cast<char>(rng());
  one_against_three("rows of 4 KiB, 16 KiB apart, from memory", static_cast<double>(rows * row), [&](CrcFunction f) {
    uint32_t c = 0;
    for (size_t k = 0; k < rows; ++k) c = f(strided.data() + k * stride, row, c);
    return c;
  });
  return 0;
}
