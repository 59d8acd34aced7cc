#include "bucket/save_marker.h"

#include <algorithm>

namespace ckptdb {
namespace bucket {

SaveMarker::SaveMarker(s3::S3Client* client, std::string bucket, std::string key, std::chrono::milliseconds interval)
    : client_(client), bucket_(std::move(bucket)), key_(std::move(key)), interval_(interval) {}

SaveMarker::~SaveMarker() { Stop(); }

Status SaveMarker::Write() {
  const auto start = std::chrono::steady_clock::now();
  Status st = client_->PutObject(bucket_, key_, "").status();
  const auto answered = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok()) {
    ++failed_writes_;
    last_error_ = st;
    return st;
  }
  if (last_start_ != std::chrono::steady_clock::time_point()) {
    worst_gap_ = std::max(worst_gap_, answered - last_start_);
  }
  last_start_ = start;
  return st;
}

Status SaveMarker::Start() {
  Status st = Write();
  if (!st.ok()) return st;
  if (interval_.count() > 0) thread_ = std::thread([this] { Run(); });
  return Status::OK();
}

void SaveMarker::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    (void)Write();  // a failed write only leaves StalestAge growing
    lock.lock();
  }
}

void SaveMarker::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::chrono::milliseconds SaveMarker::StalestAge() const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  const auto since_last = last_start_ == std::chrono::steady_clock::time_point() ? std::chrono::steady_clock::duration(0)
                                                                                 : now - last_start_;
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::max(worst_gap_, since_last));
}

int SaveMarker::failed_writes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_writes_;
}

Status SaveMarker::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

}  // namespace bucket
}  // namespace ckptdb
