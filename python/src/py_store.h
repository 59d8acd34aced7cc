// The store's writer and reader as the Python side holds them.
#ifndef CKPTDB_PYTHON_PY_STORE_H_
#define CKPTDB_PYTHON_PY_STORE_H_

#include <memory>
#include <mutex>

#include "ckptdb/rocksdb_store.h"

namespace ckptdb::py {

struct PyWriter {
  std::unique_ptr<StoreWriter> writer;  // thread-safe (rocksdb_store.h)
};

struct PyReader {
  std::unique_ptr<StoreReader> reader;
  std::mutex mu;  // a StoreReader takes one call at a time
};

}  // namespace ckptdb::py

#endif  // CKPTDB_PYTHON_PY_STORE_H_
