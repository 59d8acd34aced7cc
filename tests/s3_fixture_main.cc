// Readies the test server that tools/seaweedfs.sh started: creates the test
// bucket and warms it (SeaweedFS's first PUT into a new bucket takes about a
// second while it grows volumes), so that no test pays for it.
//   ckptdb_s3_fixture SERVER_ENV BUCKET
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "s3/s3_client.h"

namespace {

std::map<std::string, std::string> ReadEnvFile(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

int Fail(const ckptdb::Status& st) {
  std::fprintf(stderr, "ckptdb_s3_fixture: %s\n", st.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: ckptdb_s3_fixture SERVER_ENV BUCKET\n");
    return 2;
  }
  auto env = ReadEnvFile(argv[1]);
  ckptdb::s3::S3Settings settings;
  settings.endpoint = env["CKPTDB_S3_ENDPOINT"];
  settings.credentials = {env["CKPTDB_S3_ACCESS_KEY"], env["CKPTDB_S3_SECRET_KEY"], ""};
  settings.addressing = ckptdb::s3::AddressingStyle::kPath;
  auto client = ckptdb::s3::S3Client::Create(settings);
  if (!client.ok()) return Fail(client.status());
  const std::string bucket = argv[2];
  if (auto st = (*client)->CreateBucket(bucket); !st.ok()) return Fail(st);
  // Warm every path the tests take: a put, a multipart upload, a listing.
  if (auto put = (*client)->PutObject(bucket, "warm/object", "warm"); !put.ok()) return Fail(put.status());
  auto upload = (*client)->CreateMultipartUpload(bucket, "warm/multipart");
  if (!upload.ok()) return Fail(upload.status());
  auto part = (*client)->UploadPart(bucket, "warm/multipart", *upload, 1, "warm");
  if (!part.ok()) return Fail(part.status());
  auto done = (*client)->CompleteMultipartUpload(bucket, "warm/multipart", *upload, {*part});
  if (!done.ok()) return Fail(done.status());
  if (auto list = (*client)->ListAll(bucket, "warm/"); !list.ok()) return Fail(list.status());
  for (const char* key : {"warm/object", "warm/multipart"}) {
    if (auto st = (*client)->DeleteObject(bucket, key); !st.ok()) return Fail(st);
  }
  std::printf("%s\n", bucket.c_str());
  return 0;
}
