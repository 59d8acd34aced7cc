// RunInterruptible (py_common.h): long calls off the GIL, stopped by Ctrl-C.
#include <chrono>
#include <future>
#include <optional>
#include <thread>

#include "py_common.h"

namespace ckptdb::py {

Status RunInterruptible(const std::function<Status(const std::atomic<bool>& cancel)>& work) {
  std::atomic<bool> cancel{false};
  std::promise<Status> promise;
  std::future<Status> done = promise.get_future();
  std::thread worker;
  try {
    worker = std::thread([&] {
      Status st;
      try {
        st = work(cancel);
      } catch (const std::exception& e) {
        st = Status::Internal(std::string("unexpected exception: ") + e.what());
      }
      promise.set_value(std::move(st));
    });
  } catch (const std::system_error& e) {
    return Status::Unavailable(std::string("cannot start a thread: ") + e.what());
  }
  std::optional<nb::python_error> interrupted;
  {
    nb::gil_scoped_release release;
    while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      nb::gil_scoped_acquire acquire;
      if (!interrupted && PyErr_CheckSignals() != 0) {
        interrupted.emplace();  // takes the pending exception (KeyboardInterrupt)
        cancel = true;
      }
    }
  }
  worker.join();
  if (interrupted) throw *interrupted;
  return done.get();
}

}  // namespace ckptdb::py
