// export --format safetensors: a step as one safetensors file.
//
// The file (https://github.com/huggingface/safetensors, "Format"): an 8-byte
// little-endian header length N, N bytes of JSON, then the tensors' bytes.
// The JSON maps each tensor's name to {"dtype", "shape", "data_offsets":
// [begin, end)} (offsets into the byte buffer after the header), and
// "__metadata__" to a string -> string map. Here:
//   - every tensor and sharded tensor, assembled whole, in the step's order,
//     its bytes row-major and little-endian as stored;
//   - every bytes entry in __metadata__ under its FQN: the text when it is
//     valid UTF-8, else its base64, and then its FQN is listed in the JSON
//     array held by "ckptdb.base64";
//   - "ckptdb.step": the step number.
// The header is padded with spaces to a multiple of 8 bytes.
// OUT is written as an OutputFile (cli_output_file.h): a regular file,
// complete or not there at all, never a link or a device replaced.
#include <cstdio>

#include "ckptdb/checkpoint.h"
#include "cli_commands.h"
#include "cli_entries.h"
#include "cli_output.h"
#include "cli_output_file.h"
#include "cli_slice.h"
#include "value_format.h"

namespace ckptdb::cli {

namespace {

const char* SafetensorsDType(DType d) {
  switch (d) {
    case DType::kF64: return "F64";
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kF8E5M2: return "F8_E5M2";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kI16: return "I16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

constexpr char kStepKey[] = "ckptdb.step";
constexpr uint64_t kExportBlockBytes = 64u << 20;
constexpr char kBase64Key[] = "ckptdb.base64";

}  // namespace

Status ExportSafetensors(StoreReader& reader, int64_t step, const std::string& out_path, bool json,
                         std::ostream& out) {
  // OUT is checked (and the file that will become it opened) first, before
  // anything is read.
  auto file = OutputFile::Create(out_path);
  if (!file.ok()) return file.status();
  auto md = reader.ReadStepSummary(step);
  if (!md.ok()) return md.status();
  // The header needs only the step's summary (names, dtypes, shapes); the
  // bytes entries are small and are read now, the tensors one at a time
  // while writing, each with its own pieces only (one entry's at a time).
  std::string tensors_json, metadata_json = std::string("\"") + kStepKey + "\": \"" + std::to_string(step) + "\"";
  std::vector<std::string> base64_fqns;
  std::vector<size_t> tensors;  // indices into md->entries
  uint64_t offset = 0;
  size_t bytes_entries = 0;
  for (size_t index = 0; index < md->entries.size(); ++index) {
    const EntryMetadata& e = md->entries[index];
    if (e.fqn == "__metadata__") {
      return Status::InvalidArgument("entry '__metadata__' cannot be exported: safetensors reserves that name");
    }
    if (e.kind == EntryKind::kBytes) {
      if (e.fqn == kStepKey || e.fqn == kBase64Key) {
        return Status::InvalidArgument("bytes entry '" + e.fqn + "' cannot be exported: the name is used by the "
                                       "export's own metadata");
      }
      std::string data;
      Status read = WithPieces(reader, &*md, index, [&](const EntryMetadata& with_pieces) {
        auto bytes = ReadBytesEntry(reader, *md, with_pieces);
        if (!bytes.ok()) return bytes.status();
        data = std::move(bytes->data);
        return Status::OK();
      });
      if (!read.ok()) return read;
      const bool text = IsValidUtf8(data);
      if (!text) base64_fqns.push_back(e.fqn);
      metadata_json += ", " + JsonString(e.fqn) + ": " + JsonString(text ? data : Base64Encode(data));
      bytes_entries++;
      continue;
    }
    const uint64_t n = e.logical_bytes();
    tensors_json += ", " + JsonString(e.fqn) + ": {\"dtype\": \"" + SafetensorsDType(e.dtype) +
                    "\", \"shape\": " + JsonShape(e.shape) + ", \"data_offsets\": [" + std::to_string(offset) + ", " +
                    std::to_string(offset + n) + "]}";
    offset += n;
    tensors.push_back(index);
  }
  if (!base64_fqns.empty()) {
    std::string list = "[";
    for (size_t i = 0; i < base64_fqns.size(); ++i) list += (i ? ", " : "") + JsonString(base64_fqns[i]);
    metadata_json += std::string(", \"") + kBase64Key + "\": " + JsonString(list + "]");
  }
  std::string header = "{\"__metadata__\": {" + metadata_json + "}" + tensors_json + "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  char len[8];
  const uint64_t header_bytes = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((header_bytes >> (8 * i)) & 0xff);
  Status st = (*file)->Write(len, 8);
  if (st.ok()) st = (*file)->Write(header.data(), header.size());
  // Each tensor streams through in blocks of rows, so memory stays bounded
  // by the block size, not by the largest tensor.
  for (size_t i = 0; st.ok() && i < tensors.size(); ++i) {
    st = WithPieces(reader, &*md, tensors[i], [&](const EntryMetadata& e) {
      return ForEachRowBlock(reader, *md, e, kExportBlockBytes,
                             [&](const Tensor& block) { return (*file)->Write(block.data(), block.nbytes()); });
    });
  }
  if (st.ok()) st = (*file)->Commit();
  if (!st.ok()) return st;  // the file is discarded with it
  const uint64_t file_bytes = 8 + header.size() + offset;
  if (json) {
    out << "{\"step\": " << step << ", \"path\": " << JsonString(out_path) << ", \"tensors\": " << tensors.size()
        << ", \"bytes_entries\": " << bytes_entries << ", \"file_bytes\": " << file_bytes << "}\n";
  } else {
    out << "exported step " << step << " to " << out_path << ": " << tensors.size() << " tensors, " << bytes_entries
        << " bytes entries in __metadata__, " << HumanBytes(file_bytes) << "\n";
  }
  return Status::OK();
}

}  // namespace ckptdb::cli
