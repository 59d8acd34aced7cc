// What the binding's files share: raising a ckptdb Status as the Python
// exception of ckptdb._errors, running long calls off the GIL (and
// interruptible by Ctrl-C), and the functions that bind each part.
#ifndef CKPTDB_PYTHON_PY_COMMON_H_
#define CKPTDB_PYTHON_PY_COMMON_H_

#include <nanobind/nanobind.h>

#include <atomic>
#include <functional>
#include <utility>

#include "ckptdb/status.h"

namespace nb = nanobind;

namespace ckptdb::py {

// Raises `st` (not OK) as the exception ckptdb._errors makes for it
// (CheckpointError or one of its subclasses). REQUIRES: the GIL is held.
[[noreturn]] void Raise(const Status& st);
inline void Check(const Status& st) {
  if (!st.ok()) Raise(st);
}
template <typename T>
T Take(StatusOr<T> v) {
  if (!v.ok()) Raise(v.status());
  return std::move(v).value();
}

// Runs `work` on a thread of its own while the calling thread waits with
// the GIL released, taking it back every 50 ms to let Python run its signal
// handlers. When a handler raises (Ctrl-C: KeyboardInterrupt), `cancel` is
// set, `work` is waited for (it stops at its next check of `cancel`), and
// the handler's exception is raised. Otherwise returns what `work` returned.
// REQUIRES: the GIL is held.
Status RunInterruptible(const std::function<Status(const std::atomic<bool>& cancel)>& work);

void BindStateDict(nb::module_& m);
void BindStore(nb::module_& m);
void BindCommunicator(nb::module_& m);
void BindCheckpoint(nb::module_& m);

}  // namespace ckptdb::py

#endif  // CKPTDB_PYTHON_PY_COMMON_H_
