// A running save's pending marker (PREFIX/pending/<step>-<save id>-<ms>),
// kept fresh while the save runs, so that gc never takes a long save for a
// dead one (proto/FORMAT.md §9, "gc").
//
// gc judges a marker by the server's clock alone: the marker's LastModified
// in its listing against the listing's Date. The heartbeat PUTs the marker
// again every `interval`, which moves its LastModified forward; so the
// saving host's clock never matters, and a save may run for any length of
// time. What the coordinator must know before it commits is that gc cannot
// have judged the save dead at any moment of it: StalestAge() bounds the age
// the marker can have had (by the server's clock) since Start, from the
// local monotonic clock: a write lands on the server between its start and
// its answer, so the marker was never older than the longest span from the
// start of one successful write to the answer of the next, nor is it older
// now than the time since the last one started.
//
// Thread safety: StalestAge may be called from any thread; Start and Stop
// from one.
#ifndef CKPTDB_SRC_BUCKET_SAVE_MARKER_H_
#define CKPTDB_SRC_BUCKET_SAVE_MARKER_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "ckptdb/status.h"
#include "s3/s3_client.h"

namespace ckptdb {
namespace bucket {

class SaveMarker {
 public:
  // `client` outlives the marker. interval 0: no heartbeat (the marker is
  // written once).
  SaveMarker(s3::S3Client* client, std::string bucket, std::string key, std::chrono::milliseconds interval);
  ~SaveMarker();  // Stop()
  SaveMarker(const SaveMarker&) = delete;
  SaveMarker& operator=(const SaveMarker&) = delete;

  // Writes the marker (the error of that write, if any) and starts the
  // heartbeat thread.
  Status Start();
  // Ends the heartbeat (waits for a write in flight, which the client's
  // limits bound). The marker object stays; deleting it is the caller's.
  void Stop();

  // The longest the marker may have gone unrefreshed, by the server's clock,
  // from Start until now (see the header comment). A failed heartbeat write
  // does not count as a refresh.
  std::chrono::milliseconds StalestAge() const;
  // Heartbeat writes that failed so far, and the last one's error.
  int failed_writes() const;
  Status last_error() const;

  const std::string& key() const { return key_; }

 private:
  void Run();
  Status Write();

  s3::S3Client* const client_;
  const std::string bucket_;
  const std::string key_;
  const std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  // The start of the last successful write, and the longest span from the
  // start of one successful write to the answer of the next; guarded by mu_.
  std::chrono::steady_clock::time_point last_start_;
  std::chrono::steady_clock::duration worst_gap_{0};
  int failed_writes_ = 0;  // guarded by mu_
  Status last_error_;      // guarded by mu_
  std::thread thread_;
};

}  // namespace bucket
}  // namespace ckptdb

#endif  // CKPTDB_SRC_BUCKET_SAVE_MARKER_H_
