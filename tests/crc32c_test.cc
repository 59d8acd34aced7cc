// CRC-32C, the checksum S3 uploads carry (x-amz-checksum-crc32c).
#include "util/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace ckptdb {
namespace {

TEST(Crc32c, MatchesTheStandardCheckValues) {
  // The check value of CRC-32C (RFC 3720 and every CRC catalogue).
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  // RFC 3720 B.4: 32 bytes of zeros, of 0xFF.
  EXPECT_EQ(Crc32c(std::string(32, '\0').data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff').data(), 32), 0x62A8AB43u);
  // As S3 wants it: big-endian bytes in base64 (AWS's own example of
  // "123456789" is 4waSgw==).
  EXPECT_EQ(Crc32cBase64("123456789"), "4waSgw==");
  EXPECT_EQ(Crc32cBase64(""), "AAAAAA==");
}

TEST(Crc32c, ContinuesAcrossPiecesAtAnyAlignment) {
  std::string data(100003, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + (i >> 7));
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{13}, size_t{4096}, size_t{99999}}) {
    // Starting at odd addresses too: the unaligned head and tail paths.
    const uint32_t head = Crc32c(data.data(), cut);
    EXPECT_EQ(Crc32c(data.data() + cut, data.size() - cut, head), whole) << "cut at " << cut;
  }
  std::string changed = data;
  changed[54321] ^= 1;
  EXPECT_NE(Crc32c(changed.data(), changed.size()), whole);
}

// Two pieces' CRCs joined are the CRC of the two together, at any lengths
// (none, short, across the stripes, all).
TEST(Crc32c, CombinedCrcsAreTheCrcOfTheWhole) {
  std::string data(70000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 2654435761u >> 11);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, size_t{12289}, size_t{65536}, data.size()}) {
    const uint32_t a = Crc32c(data.data(), cut), b = Crc32c(data.data() + cut, data.size() - cut);
    EXPECT_EQ(Crc32cCombine(a, b, data.size() - cut), Crc32c(data.data(), data.size())) << cut;
  }
  EXPECT_EQ(Crc32cCombine(0x12345678u, 0, 0), 0x12345678u);
  // A piece cut in two: the rest's CRC follows from the piece's and the
  // head's (how an upload part ends inside a lent piece).
  for (size_t cut : {size_t{1}, size_t{4095}, size_t{30000}}) {
    const uint32_t piece = Crc32c(data.data(), data.size()), head = Crc32c(data.data(), cut);
    EXPECT_EQ(piece ^ Crc32cCombine(head, 0, data.size() - cut), Crc32c(data.data() + cut, data.size() - cut)) << cut;
  }
  // Zero bytes by the million: as fed one by one.
  const std::string zeros(3 << 20, '\0');
  const uint32_t head = Crc32c("ckptdb", 6);
  EXPECT_EQ(Crc32cCombine(head, Crc32c(zeros.data(), zeros.size()), zeros.size()),
            Crc32c(zeros.data(), zeros.size(), head));
}

// Lengths around the three-stream stripes (3 x 4 KiB, then 3 x 256 bytes)
// and from odd addresses: the same CRC as one stream's, piece by piece or
// whole.
TEST(Crc32c, ThreeStreamsGiveOneStreamsCrcAtEveryLengthAndAlignment) {
  std::string data(5 * 12288 + 77, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 2654435761u >> 13);
  for (size_t start : {size_t{0}, size_t{1}, size_t{5}}) {
    for (size_t n : {size_t{0}, size_t{767}, size_t{768}, size_t{769}, size_t{4096}, size_t{12287}, size_t{12288},
                     size_t{12289}, size_t{12288 + 768 + 5}, size_t{24576 + 8}, size_t{3 * 12288 + 3},
                     data.size() - start}) {
      if (start + n > data.size()) continue;
      const char* p = data.data() + start;
      EXPECT_EQ(Crc32c(p, n), Crc32cOneStream(p, n)) << start << " " << n;
      EXPECT_EQ(Crc32c(p, n, 0x12345678u), Crc32cOneStream(p, n, 0x12345678u)) << start << " " << n;
    }
  }
  // A flipped bit in the middle stream of a stripe changes the CRC.
  std::string changed = data;
  changed[12288 + 4096 + 100] ^= 4;
  EXPECT_NE(Crc32c(changed.data(), changed.size()), Crc32c(data.data(), data.size()));
  // And in the middle stream of a short stripe.
  changed = data;
  changed[256 + 100] ^= 4;
  EXPECT_NE(Crc32c(changed.data(), 4096), Crc32c(data.data(), 4096));
}

}  // namespace
}  // namespace ckptdb
