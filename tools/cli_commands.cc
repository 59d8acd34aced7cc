#include "cli_commands.h"

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <iomanip>
#include <sstream>

#include "ckptdb/checkpoint.h"
#include "value_format.h"

namespace ckptdb::cli {

namespace {

std::string IsoTime(int64_t unix_ms) {
  std::time_t secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string JsonShape(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// Prints rows as left-aligned columns.
void PrintTable(const std::vector<std::vector<std::string>>& rows, std::ostream& out) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()));
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

}  // namespace

StatusOr<int64_t> ResolveStep(StoreReader& reader, const std::string& arg) {
  if (arg == "latest") return reader.LatestStep();
  if (arg.empty() || arg.find_first_not_of("0123456789") != std::string::npos) {
    if (!arg.empty() && arg[0] == '-' && arg.find_first_not_of("0123456789", 1) == std::string::npos && arg.size() > 1) {
      return Status::InvalidArgument("step " + arg + " is out of range [0, " + std::to_string(kMaxStep) + "]");
    }
    return Status::InvalidArgument("invalid step '" + arg + "': expected a number or 'latest'");
  }
  errno = 0;
  unsigned long long v = std::strtoull(arg.c_str(), nullptr, 10);
  if (errno == ERANGE || v > static_cast<unsigned long long>(kMaxStep)) {
    return Status::InvalidArgument("step " + arg + " is out of range [0, " + std::to_string(kMaxStep) + "]");
  }
  return static_cast<int64_t>(v);
}

Status ListSteps(StoreReader& reader, bool json, std::ostream& out) {
  auto steps = reader.ListSteps();
  if (!steps.ok()) return steps.status();
  if (json) {
    out << "[";
    for (size_t i = 0; i < steps->size(); ++i) {
      const StepInfo& s = (*steps)[i];
      out << (i ? ",\n " : "\n ") << "{\"step\": " << s.step << ", \"created\": " << JsonString(IsoTime(s.created_unix_ms))
          << ", \"created_unix_ms\": " << s.created_unix_ms << ", \"world_size\": " << s.world_size
          << ", \"entries\": " << s.entries << ", \"bytes\": " << s.logical_bytes
          << ", \"stored_bytes\": " << s.stored_bytes << "}";
    }
    out << (steps->empty() ? "]\n" : "\n]\n");
    return Status::OK();
  }
  std::vector<std::vector<std::string>> rows = {{"STEP", "CREATED", "WORLD", "ENTRIES", "BYTES", "STORED"}};
  for (const StepInfo& s : *steps) {
    rows.push_back({std::to_string(s.step), IsoTime(s.created_unix_ms), std::to_string(s.world_size),
                    std::to_string(s.entries), HumanBytes(s.logical_bytes), HumanBytes(s.stored_bytes)});
  }
  PrintTable(rows, out);
  if (steps->empty()) out << "(no committed steps)\n";
  return Status::OK();
}

Status ListEntries(StoreReader& reader, int64_t step, bool json, std::ostream& out) {
  auto md = reader.ReadMetadata(step);
  if (!md.ok()) return md.status();
  if (json) {
    out << "[";
    for (size_t i = 0; i < md->entries.size(); ++i) {
      const EntryMetadata& e = md->entries[i];
      out << (i ? ",\n " : "\n ") << "{\"fqn\": " << JsonString(e.fqn) << ", \"kind\": "
          << JsonString(EntryKindName(e.kind)) << ", \"dtype\": " << JsonString(DTypeName(e.dtype))
          << ", \"shape\": " << JsonShape(e.shape) << ", \"shards\": " << e.pieces.size()
          << ", \"bytes\": " << e.logical_bytes() << ", \"stored_bytes\": " << e.stored_bytes() << "}";
    }
    out << (md->entries.empty() ? "]\n" : "\n]\n");
    return Status::OK();
  }
  std::vector<std::vector<std::string>> rows = {{"FQN", "KIND", "DTYPE", "SHAPE", "SHARDS", "BYTES"}};
  for (const EntryMetadata& e : md->entries) {
    rows.push_back({e.fqn, EntryKindName(e.kind), e.kind == EntryKind::kBytes ? "-" : DTypeName(e.dtype),
                    e.kind == EntryKind::kBytes ? "-" : ShapeToString(e.shape), std::to_string(e.pieces.size()),
                    HumanBytes(e.logical_bytes())});
  }
  PrintTable(rows, out);
  return Status::OK();
}

Status CatEntry(StoreReader& reader, int64_t step, const std::string& fqn, std::ostream& out) {
  auto sd = LoadWhole(reader, step, {fqn});
  if (!sd.ok()) return sd.status();
  const Entry& e = sd->entries().front().second;
  if (const Bytes* b = std::get_if<Bytes>(&e)) {
    out << fqn << ": bytes, " << b->data.size() << " bytes\n" << EscapeBytes(b->data) << "\n";
    return Status::OK();
  }
  const Tensor& t = std::get<Tensor>(e);
  out << fqn << ": " << DTypeName(t.dtype()) << " " << ShapeToString(t.shape()) << "\n" << FormatTensor(t) << "\n";
  return Status::OK();
}

}  // namespace ckptdb::cli
