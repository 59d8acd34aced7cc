// The RocksDB key layout (proto/FORMAT.md, "Keys"). Keys are binary and
// big-endian so that they sort by step, then save, rank, item and chunk.
//
//   data      'D' step:u64 save_id:u64 rank:u32 item:u32 chunk:u32  29 bytes
//   metadata  'M' step:u64                                        9 bytes
//   pending   'P' step:u64 save_id:u64                           17 bytes
//   pieces    'Q' step:u64 entry:u32                            13 bytes
//   refs      'R' step:u64                                        9 bytes
//   summary   'S' step:u64                                        9 bytes
//   tag       'T' name (1..128 bytes of [A-Za-z0-9._-])
// 'D' < 'M' < 'P' < 'Q' < 'R' < 'S' < 'T', so each kind is one contiguous key
// range (data first, metadata keys before every other record).
#ifndef CKPTDB_SRC_KEYS_H_
#define CKPTDB_SRC_KEYS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ckptdb {

inline constexpr char kMetadataPrefix = 'M';
inline constexpr char kDataPrefix = 'D';
inline constexpr char kPendingPrefix = 'P';
inline constexpr char kPiecesPrefix = 'Q';
inline constexpr char kReferencesPrefix = 'R';
inline constexpr char kSummaryPrefix = 'S';
inline constexpr char kTagPrefix = 'T';
inline constexpr size_t kMetadataKeySize = 9;
inline constexpr size_t kDataKeySize = 29;
inline constexpr size_t kPiecesKeySize = 13;

std::string MetadataKey(int64_t step);
// False when `key` is not a metadata key.
bool ParseMetadataKey(std::string_view key, int64_t* step);

// The summary record of a step, committed in the same batch as its metadata.
std::string SummaryKey(int64_t step);
bool ParseSummaryKey(std::string_view key, int64_t* step);

// A save attempt in flight (format 2): written, synced, before any of its
// data is ingested, and deleted by the batch that commits its metadata. The
// sweep deletes only the data of attempts named here (proto/FORMAT.md).
std::string PendingKey(int64_t step, uint64_t save_id);
bool ParsePendingKey(std::string_view key, int64_t* step, uint64_t* save_id);

// The save attempts whose chunks a step shares (format 3): written in the
// batch that commits the step, when it shares any, and deleted with it.
std::string ReferencesKey(int64_t step);
bool ParseReferencesKey(std::string_view key, int64_t* step);

// The pieces of entry `entry` (its index in the step's Metadata) of a step
// written in store format 6: written in the batch that commits the step and
// deleted with it. [PiecesStepBegin(s), PiecesStepBegin(s + 1)) holds every
// one of step s.
std::string PiecesKey(int64_t step, uint32_t entry);
std::string PiecesStepBegin(int64_t step);
std::string PiecesStepEnd(int64_t step);  // exclusive
// Store format 7: page `page` of the pieces of an entry kept in pages
// (proto Entry.pages), under the entry's key followed by the page's number:
// the pages of an entry sort after its key and before the next entry's.
std::string PiecesPageKey(int64_t step, uint32_t entry, uint32_t page);
// Either kind of pieces key; `page` (when given) is set to the page's
// number for a page's key, and to nullopt for an entry's.
bool ParsePiecesKey(std::string_view key, int64_t* step, uint32_t* entry,
                    std::optional<uint32_t>* page = nullptr);

// A tag: 'T' followed by the tag's name (ValidateTagName).
std::string TagKey(std::string_view name);
bool ParseTagKey(std::string_view key, std::string* name);

struct DataKey {
  int64_t step = 0;
  uint64_t save_id = 0;
  uint32_t rank = 0;
  uint32_t item = 0;
  uint32_t chunk = 0;
};
std::string EncodeDataKey(const DataKey& k);
bool ParseDataKey(std::string_view key, DataKey* out);

// [begin, end) of every data key of one save attempt of one step.
std::string DataSaveBegin(int64_t step, uint64_t save_id);
std::string DataSaveEnd(int64_t step, uint64_t save_id);  // exclusive

void PutBigEndian64(std::string* out, uint64_t v);
void PutBigEndian32(std::string* out, uint32_t v);
uint64_t GetBigEndian64(const char* p);
uint32_t GetBigEndian32(const char* p);

}  // namespace ckptdb

#endif  // CKPTDB_SRC_KEYS_H_
