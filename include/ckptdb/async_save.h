// Asynchronous save: the caller is blocked only while its state is copied
// into staging memory; checksums, compression, SST files, ingestion and the
// commit run on a background thread while training goes on.
//
//   AsyncSaver saver(writer, options);          // once per job, every rank
//   auto handle = saver.SaveAsync(state, step); // returns after the copy
//   ... train; the caller may change its tensors at once ...
//   Status st = handle->Wait();                 // same result on every rank
//
// The background thread runs the same protocol as Save (checkpoint.h) on its
// own Communicator, never the caller's, so its collectives never interleave
// with the caller's. A failure in the background reaches the caller through
// the handle, on every rank, as the same checkpoint error a synchronous save
// would return.
//
// Staging memory: each of options.max_in_flight slots holds one copy of a
// state dict; a slot's buffer is allocated on first use and reused by later
// saves (grown only when a state dict needs more), so the bound is
// max_in_flight copies of the state. A state dict with CUDA tensors gets a
// pinned slot (cudaHostAlloc, once), and its device tensors are copied
// straight into it at the bus's speed; where that much memory cannot be
// pinned, an ordinary slot, and device tensors come through the pinned pool
// of staging.h in pieces (slower, but the save goes on). Host tensors are
// copied by every core at once. SaveAsync waits while all slots are busy.
//
// Shutdown: the destructor waits for every save in flight to finish (each
// either commits whole or fails whole; a crash at any moment leaves no half
// step: see the atomicity contract in checkpoint.h).
//
// Thread safety: SaveAsync may be called from one thread at a time; handles
// may be waited on from any thread.
//
// fork(): an AsyncSaver belongs to the process that made it. In a child
// forked from that process, SaveAsync fails with FailedPrecondition, WaitAll
// returns at once, the destructor neither waits nor touches the parent's
// saves, and handles of saves queued before the fork never finish there.
#ifndef CKPTDB_ASYNC_SAVE_H_
#define CKPTDB_ASYNC_SAVE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <memory>

#include "ckptdb/communicator.h"
#include "ckptdb/state_dict.h"
#include "ckptdb/status.h"
#include "ckptdb/storage.h"

namespace ckptdb {

struct AsyncSaveOptions {
  int coordinator_rank = 0;
  // Run in this process alone, as SaveOptions::no_dist.
  bool no_dist = false;
  // The background thread's communicator (required unless no_dist): a
  // separate one from the caller's, e.g. ConnectGloo with another job id.
  // Not owned; must outlive the AsyncSaver.
  Communicator* communicator = nullptr;
  // Saves that may be in flight at once; each holds a full copy of the
  // state dict in staging memory. At least 1.
  int max_in_flight = 1;
};

// The outcome of one asynchronous save.
class SaveHandle {
 public:
  virtual ~SaveHandle() = default;
  virtual int64_t step() const = 0;
  // True once the save has finished (committed or failed).
  virtual bool Done() const = 0;
  // Blocks until the save has finished and returns its Status.
  virtual Status Wait() = 0;
  // Waits at most `timeout`; DeadlineExceeded if the save is still running.
  virtual Status WaitFor(std::chrono::milliseconds timeout) = 0;
  // How long SaveAsync blocked the caller (waiting for a slot and copying).
  virtual double blocked_seconds() const = 0;
};

class AsyncSaver {
 public:
  // `writer` is not owned and must outlive the AsyncSaver.
  AsyncSaver(StorageWriter& writer, const AsyncSaveOptions& options);
  ~AsyncSaver();
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Copies `state_dict` into staging memory and returns a handle; the rest of
  // the save runs in the background. Argument errors (bad step, options, a
  // device this build cannot read) are returned at once and nothing is
  // queued. REQUIRES: every rank calls SaveAsync with the same steps in the
  // same order.
  StatusOr<std::shared_ptr<SaveHandle>> SaveAsync(const StateDict& state_dict, int64_t step);
  // The same, committing `metrics` and `note` with the step
  // (SaveOptions::metrics and note; invalid ones fail the save, on every
  // rank, through its handle).
  StatusOr<std::shared_ptr<SaveHandle>> SaveAsync(const StateDict& state_dict, int64_t step,
                                                  const std::map<std::string, double>& metrics,
                                                  const std::string& note = {});

  // Waits for every save in flight.
  void WaitAll();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ckptdb

#endif  // CKPTDB_ASYNC_SAVE_H_
