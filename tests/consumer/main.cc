// Saves a step into STORE and loads it back, through the installed headers
// and library only. Prints "ok" and exits 0 when the bytes round-trip.
#include <cstdio>
#include <cstring>

#include "ckptdb/ckptdb.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s STORE\n", argv[0]);
    return 2;
  }
  float values[6] = {1, 2, 3, 4, 5, 6};
  ckptdb::StateDict sd;
  ckptdb::Status st = sd.Add("w", ckptdb::Tensor::Copy(ckptdb::DType::kF32, {2, 3}, values, sizeof values).value());
  auto writer = ckptdb::OpenStoreWriter(argv[1]);
  if (!st.ok() || !writer.ok()) return std::fprintf(stderr, "open: %s\n", writer.status().ToString().c_str()), 1;
  ckptdb::SaveOptions so;
  so.step = 7;
  so.no_dist = true;
  st = ckptdb::Save(sd, **writer, so);
  if (!st.ok()) return std::fprintf(stderr, "save: %s\n", st.ToString().c_str()), 1;
  auto reader = ckptdb::OpenStoreReader(argv[1]);
  if (!reader.ok()) return std::fprintf(stderr, "reader: %s\n", reader.status().ToString().c_str()), 1;
  auto loaded = ckptdb::LoadWhole(**reader, 7);
  if (!loaded.ok()) return std::fprintf(stderr, "load: %s\n", loaded.status().ToString().c_str()), 1;
  const ckptdb::Tensor& w = std::get<ckptdb::Tensor>(*loaded->Find("w"));
  if (w.nbytes() != sizeof values || std::memcmp(w.data(), values, sizeof values) != 0) {
    std::fprintf(stderr, "loaded bytes differ\n");
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
