#include "s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <map>

namespace ckptdb {
namespace s3 {

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(md), len));
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), md, &len);
  return std::string(reinterpret_cast<const char*>(md), len);
}

std::string UriEncode(std::string_view s, bool encode_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (c == '/' && !encode_slash)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string CanonicalQueryString(const NameValues& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) encoded.emplace_back(UriEncode(name, true), UriEncode(value, true));
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out.push_back('&');
    out += name;
    out.push_back('=');
    out += value;
  }
  return out;
}

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Leading and trailing blanks dropped, each inner run collapsed to one space.
std::string TrimValue(std::string_view v) {
  std::string out;
  bool pending_space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string CanonicalRequest(const SignableRequest& request, std::string* signed_headers) {
  // A repeated header signs as one, its values joined by commas in order.
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : request.headers) {
    std::string& joined = headers[Lower(name)];
    if (!joined.empty()) joined.push_back(',');
    joined += TrimValue(value);
  }
  std::string out = request.method;
  out.push_back('\n');
  out += request.path.empty() ? std::string("/") : UriEncode(request.path, false);
  out.push_back('\n');
  out += CanonicalQueryString(request.query);
  out.push_back('\n');
  signed_headers->clear();
  for (const auto& [name, value] : headers) {
    out += name;
    out.push_back(':');
    out += value;
    out.push_back('\n');
    if (!signed_headers->empty()) signed_headers->push_back(';');
    *signed_headers += name;
  }
  out.push_back('\n');
  out += *signed_headers;
  out.push_back('\n');
  out += request.payload_sha256;
  return out;
}

std::string AmzDate(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string CredentialScope(std::string_view amz_date, std::string_view region, std::string_view service) {
  std::string out(amz_date.substr(0, 8));
  out.push_back('/');
  out += region;
  out.push_back('/');
  out += service;
  out += "/aws4_request";
  return out;
}

std::string StringToSign(std::string_view amz_date, std::string_view scope, std::string_view canonical_request) {
  std::string out = "AWS4-HMAC-SHA256\n";
  out += amz_date;
  out.push_back('\n');
  out += scope;
  out.push_back('\n');
  out += Sha256Hex(canonical_request);
  return out;
}

std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service) {
  std::string key = HmacSha256("AWS4" + std::string(secret), date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  return HmacSha256(key, "aws4_request");
}

std::string AuthorizationFor(const SignableRequest& request, const Credentials& credentials, std::string_view amz_date,
                             std::string_view region, std::string_view service) {
  std::string signed_headers;
  const std::string canonical = CanonicalRequest(request, &signed_headers);
  const std::string scope = CredentialScope(amz_date, region, service);
  const std::string key = SigningKey(credentials.secret_access_key, amz_date.substr(0, 8), region, service);
  const std::string signature = HexEncode(HmacSha256(key, StringToSign(amz_date, scope, canonical)));
  return "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
         ", SignedHeaders=" + signed_headers + ", Signature=" + signature;
}

void SignRequest(SignableRequest* request, const Credentials& credentials, std::string_view region,
                 std::string_view service, std::time_t now) {
  const std::string amz_date = AmzDate(now);
  request->headers.emplace_back("x-amz-date", amz_date);
  request->headers.emplace_back("x-amz-content-sha256", request->payload_sha256);
  if (!credentials.session_token.empty()) {
    request->headers.emplace_back("x-amz-security-token", credentials.session_token);
  }
  request->headers.emplace_back("Authorization", AuthorizationFor(*request, credentials, amz_date, region, service));
}

}  // namespace s3
}  // namespace ckptdb
