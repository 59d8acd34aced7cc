#include "cli_output.h"

#include <algorithm>
#include <ctime>

namespace ckptdb::cli {

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

std::string JsonIntList(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

std::string JoinSteps(const std::vector<int64_t>& v) {
  // Runs of consecutive steps as "a..b"; beyond 20 items the middle ones are
  // elided.
  std::vector<std::string> items;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    items.push_back(j - i >= 2 ? std::to_string(v[i]) + ".." + std::to_string(v[j])
                               : std::to_string(v[i]));
    if (j - i == 1) items.push_back(std::to_string(v[j]));
    i = j + 1;
  }
  constexpr size_t kMax = 20, kHead = 10, kTail = 5;
  if (items.size() > kMax) {
    const size_t hidden = items.size() - kHead - kTail;
    items.erase(items.begin() + kHead, items.end() - kTail);
    items.insert(items.begin() + kHead, "(" + std::to_string(hidden) + " more)");
  }
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

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
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  }
}

}  // namespace ckptdb::cli
