#include "s3/s3_config.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "util/status_macros.h"

namespace ckptdb {
namespace s3 {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

using IniFile = std::map<std::string, std::map<std::string, std::string>>;

// A missing file is an empty one: most setups have only one of the two.
StatusOr<IniFile> ReadIni(const std::string& path) {
  std::ifstream in(path);
  if (!in) return IniFile();
  std::stringstream text;
  text << in.rdbuf();
  return ParseAwsIniFile(text.str(), path);
}

std::string HomePath(const char* env_override, const char* default_relative) {
  std::string p = Env(env_override);
  if (!p.empty()) return p;
  std::string home = Env("HOME");
  return home.empty() ? std::string() : home + "/" + default_relative;
}

StatusOr<AddressingStyle> ParseAddressing(const std::string& value, const std::string& where) {
  if (value.empty() || value == "auto") return AddressingStyle::kAuto;
  if (value == "path") return AddressingStyle::kPath;
  if (value == "virtual") return AddressingStyle::kVirtual;
  return Status::InvalidArgument(where + " is '" + value + "'; expected path, virtual or auto");
}

Status CheckEndpoint(std::string* endpoint, const std::string& where) {
  while (!endpoint->empty() && endpoint->back() == '/') endpoint->pop_back();
  if (endpoint->rfind("http://", 0) != 0 && endpoint->rfind("https://", 0) != 0) {
    return Status::InvalidArgument(where + " is '" + *endpoint + "'; expected an http:// or https:// URL");
  }
  const size_t host_start = endpoint->find("://") + 3;
  if (host_start >= endpoint->size() || endpoint->find('/', host_start) != std::string::npos) {
    return Status::InvalidArgument(where + " is '" + *endpoint +
                                   "'; expected scheme://host[:port] without a path (the bucket goes in s3://BUCKET)");
  }
  return Status::OK();
}

}  // namespace

StatusOr<IniFile> ParseAwsIniFile(const std::string& text, const std::string& path) {
  IniFile out;
  std::string section;
  std::string nested;  // "s3" while reading the indented lines under "s3 ="
  std::istringstream lines(text);
  std::string raw;
  int line_number = 0;
  while (std::getline(lines, raw)) {
    ++line_number;
    const std::string line = Trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    const bool indented = !raw.empty() && std::isspace(static_cast<unsigned char>(raw[0]));
    if (line.front() == '[') {
      if (line.back() != ']') {
        return Status::InvalidArgument(path + ":" + std::to_string(line_number) + ": unterminated section header");
      }
      section = Trim(std::string_view(line).substr(1, line.size() - 2));
      nested.clear();
      out[section];
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos || section.empty()) {
      return Status::InvalidArgument(path + ":" + std::to_string(line_number) +
                                     (section.empty() ? ": a setting before any [section]" : ": expected KEY = VALUE"));
    }
    const std::string key = Trim(std::string_view(line).substr(0, eq));
    const std::string value = Trim(std::string_view(line).substr(eq + 1));
    if (indented && !nested.empty()) {
      out[section][nested + "." + key] = value;
      continue;
    }
    nested = value.empty() ? key : std::string();
    if (!value.empty()) out[section][key] = value;
  }
  return out;
}

bool IsS3Url(std::string_view url) { return url.rfind("s3://", 0) == 0; }

StatusOr<S3Url> S3Url::Parse(std::string_view url) {
  if (!IsS3Url(url)) {
    return Status::InvalidArgument("'" + std::string(url) + "' is not a bucket URL; expected s3://BUCKET/PREFIX");
  }
  std::string_view rest = url.substr(5);
  const size_t slash = rest.find('/');
  S3Url out;
  out.bucket = std::string(rest.substr(0, slash));
  std::string prefix = slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash + 1));
  const std::string& b = out.bucket;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("bad bucket name '" + b + "' in '" + std::string(url) + "': " + why);
  };
  if (b.size() < 3 || b.size() > 63) return bad("a bucket name has 3 to 63 characters");
  for (char c : b) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '.' ||
          c == '-')) {
      return bad("only lower-case letters, digits, '.' and '-' are allowed");
    }
  }
  if (!std::isalnum(static_cast<unsigned char>(b.front())) || !std::isalnum(static_cast<unsigned char>(b.back()))) {
    return bad("it must start and end with a letter or digit");
  }
  while (!prefix.empty() && prefix.front() == '/') prefix.erase(prefix.begin());
  if (prefix.find("//") != std::string::npos) {
    return Status::InvalidArgument("bad prefix in '" + std::string(url) + "': empty path segment ('//')");
  }
  if (!prefix.empty() && prefix.back() != '/') prefix.push_back('/');
  out.prefix = std::move(prefix);
  return out;
}

StatusOr<S3Settings> S3Settings::FromEnvironment() {
  S3Settings s;
  const std::string profile_env = Env("AWS_PROFILE");
  const std::string profile = profile_env.empty() ? "default" : profile_env;
  const std::string credentials_path = HomePath("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  const std::string config_path = HomePath("AWS_CONFIG_FILE", ".aws/config");
  IniFile credentials_file, config_file;
  if (!credentials_path.empty()) {
    ASSIGN_OR_RETURN(credentials_file, ReadIni(credentials_path));
  }
  if (!config_path.empty()) {
    ASSIGN_OR_RETURN(config_file, ReadIni(config_path));
  }
  const std::map<std::string, std::string> empty;
  auto section_of = [&](const IniFile& f, const std::string& name) -> const std::map<std::string, std::string>& {
    auto it = f.find(name);
    return it == f.end() ? empty : it->second;
  };
  const auto& cred_section = section_of(credentials_file, profile);
  const auto& conf_section =
      section_of(config_file, profile == "default" && config_file.count("default") ? "default" : "profile " + profile);
  if (!profile_env.empty() && !credentials_file.count(profile) && !config_file.count("profile " + profile) &&
      !config_file.count(profile)) {
    return Status::InvalidArgument("AWS_PROFILE is '" + profile + "', but neither " + credentials_path + " nor " +
                                   config_path + " has that profile");
  }
  auto setting = [&](const std::string& key) -> std::string {
    auto it = conf_section.find(key);
    return it == conf_section.end() ? std::string() : it->second;
  };

  // Credentials: the environment, then the credentials file, then config.
  s.credentials.access_key_id = Env("AWS_ACCESS_KEY_ID");
  s.credentials.secret_access_key = Env("AWS_SECRET_ACCESS_KEY");
  if (!s.credentials.access_key_id.empty() || !s.credentials.secret_access_key.empty()) {
    if (s.credentials.access_key_id.empty() || s.credentials.secret_access_key.empty()) {
      return Status::InvalidArgument(
          std::string(s.credentials.access_key_id.empty() ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID") +
          " is set but " + (s.credentials.access_key_id.empty() ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") +
          " is not; set both");
    }
    s.credentials.session_token = Env("AWS_SESSION_TOKEN");
    s.credentials_source = "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY";
  } else {
    for (const auto* section : {&cred_section, &conf_section}) {
      auto id = section->find("aws_access_key_id");
      auto secret = section->find("aws_secret_access_key");
      if (id == section->end() && secret == section->end()) continue;
      const std::string file = section == &cred_section ? credentials_path : config_path;
      if (id == section->end() || secret == section->end()) {
        return Status::InvalidArgument("profile '" + profile + "' in " + file + " has only one of aws_access_key_id " +
                                       "and aws_secret_access_key; set both");
      }
      s.credentials.access_key_id = id->second;
      s.credentials.secret_access_key = secret->second;
      auto token = section->find("aws_session_token");
      if (token != section->end()) s.credentials.session_token = token->second;
      s.profile = profile;
      s.credentials_source = "profile '" + profile + "' in " + file;
      break;
    }
    if (s.credentials.access_key_id.empty()) {
      return Status::FailedPrecondition(
          "no S3 credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with a profile "
          "in " +
          credentials_path + " or " + config_path + " (looked for profile '" + profile + "')");
    }
  }
  if (s.profile.empty() && !profile_env.empty()) s.profile = profile;

  // Region.
  std::string region = Env("AWS_REGION");
  if (region.empty()) region = Env("AWS_DEFAULT_REGION");
  if (region.empty()) region = setting("region");
  if (!region.empty()) s.region = region;

  // Endpoint.
  std::string where = "AWS_ENDPOINT_URL_S3";
  s.endpoint = Env("AWS_ENDPOINT_URL_S3");
  if (s.endpoint.empty()) {
    where = "AWS_ENDPOINT_URL";
    s.endpoint = Env("AWS_ENDPOINT_URL");
  }
  if (s.endpoint.empty()) {
    where = "endpoint_url of profile '" + profile + "' in " + config_path;
    s.endpoint = setting("s3.endpoint_url");
    if (s.endpoint.empty()) s.endpoint = setting("endpoint_url");
  }
  if (s.endpoint.empty()) {
    s.endpoint = "https://s3." + s.region + ".amazonaws.com";
  } else {
    RETURN_IF_ERROR(CheckEndpoint(&s.endpoint, where));
  }

  // Trusted certificates.
  s.ca_bundle = Env("AWS_CA_BUNDLE");
  if (s.ca_bundle.empty()) s.ca_bundle = setting("ca_bundle");

  // Addressing style.
  const std::string style_env = Env("CKPTDB_S3_ADDRESSING_STYLE");
  if (!style_env.empty()) {
    ASSIGN_OR_RETURN(s.addressing, ParseAddressing(style_env, "CKPTDB_S3_ADDRESSING_STYLE"));
  } else {
    ASSIGN_OR_RETURN(s.addressing,
                     ParseAddressing(setting("s3.addressing_style"),
                                     "s3.addressing_style of profile '" + profile + "' in " + config_path));
  }
  return s;
}

}  // namespace s3
}  // namespace ckptdb
