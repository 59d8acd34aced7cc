// Runs a storage call and turns an escaping exception (a fault-injecting
// wrapper, a library that throws) into an Internal status naming the call,
// so that one rank's exception becomes an error on every rank, not a hang.
#ifndef CKPTDB_SRC_GUARDED_CALL_H_
#define CKPTDB_SRC_GUARDED_CALL_H_

#include <exception>
#include <string>

#include "ckptdb/status.h"

namespace ckptdb {

template <typename F>
auto GuardedCall(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Status::Internal(std::string(what) + " threw: " + e.what());
  } catch (...) {
    return Status::Internal(std::string(what) + " threw a non-standard exception");
  }
}

}  // namespace ckptdb

#endif  // CKPTDB_SRC_GUARDED_CALL_H_
