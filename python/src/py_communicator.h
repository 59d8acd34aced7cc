// A communicator as the Python side holds it: one per connection, used by
// one call at a time (the mutex).
#ifndef CKPTDB_PYTHON_PY_COMMUNICATOR_H_
#define CKPTDB_PYTHON_PY_COMMUNICATOR_H_

#include <memory>
#include <mutex>

#include "ckptdb/communicator.h"

namespace ckptdb::py {

struct PyCommunicator {
  std::unique_ptr<Communicator> comm;
  std::mutex mu;
};

}  // namespace ckptdb::py

#endif  // CKPTDB_PYTHON_PY_COMMUNICATOR_H_
