#include "cli_args.h"

#include <cctype>

namespace ckptdb::cli {

const std::string* Args::Value(const std::string& name) const {
  auto it = values.find(name);
  return it == values.end() ? nullptr : &it->second;
}

Args ParseArgs(int argc, char** argv, int first, const ArgSpec& spec) {
  Args a;
  bool only_positional = false;
  auto fail = [&a](const std::string& m) {
    if (a.error.empty()) a.error = m;
  };
  for (int i = first; i < argc; ++i) {
    const std::string s = argv[i];
    const bool option_like =
        !only_positional && s.size() > 1 && s[0] == '-' && !std::isdigit(static_cast<unsigned char>(s[1]));
    if (!only_positional && s == "--") {
      only_positional = true;
    } else if (!option_like) {
      a.positional.push_back(s);
    } else if (s == "--help" || s == "-h") {
      a.help = true;
    } else {
      const size_t eq = s.find('=');
      const std::string name = s.substr(0, eq);
      if (spec.values.count(name) != 0) {
        if (a.values.count(name) != 0) fail("option " + name + " given twice");
        if (eq != std::string::npos) {
          a.values[name] = s.substr(eq + 1);
        } else if (i + 1 < argc) {
          a.values[name] = argv[++i];
        } else {
          fail("option " + name + " needs a value");
        }
      } else if (spec.flags.count(s) != 0) {
        a.flags.insert(s);
      } else if (eq != std::string::npos && spec.flags.count(name) != 0) {
        fail("option " + name + " takes no value");
      } else {
        fail("unknown option " + s);
      }
    }
  }
  return a;
}

}  // namespace ckptdb::cli
