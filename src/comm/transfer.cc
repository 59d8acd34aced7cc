// Frames and files over point-to-point messages (transfer.h).
#include "comm/transfer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "format/status_codec.h"
#include "util/le_bytes.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

constexpr uint32_t kFrameMagic = 0x436b5446;  // "FTkC"

Status Errno(const std::string& what, const std::string& path) {
  const int e = errno;
  std::string m = what + " '" + path + "': " + std::strerror(e);
  return e == ENOENT ? Status::NotFound(m) : Status::IOError(m);
}

// A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

Status SendOneFile(Communicator& comm, int peer, const std::string& path, std::string* block) {
  Fd f;
  f.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return Errno("cannot open", path);
  struct stat st;
  if (fstat(f.fd, &st) != 0) return Errno("cannot stat", path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const std::string name = std::filesystem::path(path).filename().string();
  std::string begin(8, '\0');
  PutLE64(&begin[0], size);
  begin += name;
  RETURN_IF_ERROR(SendFrame(comm, peer, FrameKind::kFileBegin, begin));
  XXH3_state_t* h = XXH3_createState();
  if (h == nullptr) return Status::Internal("out of memory for a checksum state");
  XXH3_64bits_reset(h);
  uint64_t sent = 0;
  Status result;
  while (sent < size && result.ok()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kMaxFramePayload, size - sent));
    block->resize(n);
    size_t got = 0;
    while (got < n) {
      const ssize_t r = pread(f.fd, block->data() + got, n - got, static_cast<off_t>(sent + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        result = r < 0 ? Errno("cannot read", path)
                       : Status::IOError("'" + path + "' ended at " + std::to_string(sent + got) + " of its " +
                                         std::to_string(size) + " bytes while it was sent");
        break;
      }
      got += static_cast<size_t>(r);
    }
    if (!result.ok()) break;
    XXH3_64bits_update(h, block->data(), n);
    result = SendFrame(comm, peer, FrameKind::kData, *block);
    sent += n;
  }
  const uint64_t digest = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  if (!result.ok()) return result;
  std::string end(8, '\0');
  PutLE64(&end[0], digest);
  return SendFrame(comm, peer, FrameKind::kFileEnd, end);
}

// A file being received: written as frames arrive, checked at its end.
class Incoming {
 public:
  Incoming(std::string path, uint64_t size, std::string name, int peer)
      : path_(std::move(path)), size_(size), name_(std::move(name)), peer_(peer) {
    h_ = XXH3_createState();
    if (h_ != nullptr) XXH3_64bits_reset(h_);
  }
  ~Incoming() {
    if (fd_ >= 0) close(fd_);
    if (h_ != nullptr) XXH3_freeState(h_);
  }

  Status Open() {
    if (h_ == nullptr) return Status::Internal("out of memory for a checksum state");
    fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) return Errno("cannot create", path_);
    return Status::OK();
  }

  Status Append(const std::string& data) {
    if (got_ + data.size() > size_) {
      return Status::DataLoss(What() + " arrived longer than the " + std::to_string(size_) + " bytes announced");
    }
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t w = pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(got_ + done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return Errno("cannot write", path_);
      done += static_cast<size_t>(w);
    }
    XXH3_64bits_update(h_, data.data(), data.size());
    // Start writing the block back now, so that the final fsync has little
    // left to do: the disk works while the next blocks arrive.
    (void)sync_file_range(fd_, static_cast<off_t>(got_), static_cast<off_t>(data.size()), SYNC_FILE_RANGE_WRITE);
    got_ += data.size();
    return Status::OK();
  }

  Status Finish(const std::string& end) {
    if (end.size() != 8) return Status::DataLoss(What() + ": its end frame is malformed");
    if (got_ != size_) {
      return Status::DataLoss(What() + " arrived short: " + std::to_string(got_) + " of " + std::to_string(size_) +
                              " bytes");
    }
    if (GetLE64(end.data()) != XXH3_64bits_digest(h_)) {
      return Status::DataLoss(What() + " arrived damaged: its checksum does not match the sender's");
    }
    // Durable before the coordinator ingests it and commits the step.
    if (fsync(fd_) != 0) return Errno("cannot sync", path_);
    if (close(fd_) != 0) {
      fd_ = -1;
      return Errno("cannot close", path_);
    }
    fd_ = -1;
    return Status::OK();
  }

 private:
  std::string What() const { return "file '" + name_ + "' from rank " + std::to_string(peer_); }

  std::string path_;
  uint64_t size_;
  std::string name_;
  int peer_;
  int fd_ = -1;
  uint64_t got_ = 0;
  XXH3_state_t* h_ = nullptr;
};

}  // namespace

Status SendFrame(Communicator& comm, int peer, FrameKind kind, std::string_view payload) {
  char head[16];
  PutLE32(head, kFrameMagic);
  PutLE32(head + 4, static_cast<uint32_t>(kind));
  PutLE64(head + 8, payload.size());
  RETURN_IF_ERROR(comm.Send(peer, head, sizeof head));
  if (!payload.empty()) RETURN_IF_ERROR(comm.Send(peer, payload.data(), payload.size()));
  return Status::OK();
}

Status RecvFrame(Communicator& comm, int peer, FrameKind* kind, std::string* payload, uint64_t max_payload) {
  char head[16];
  RETURN_IF_ERROR(comm.Recv(peer, head, sizeof head));
  const uint32_t magic = GetLE32(head), k = GetLE32(head + 4);
  const uint64_t n = GetLE64(head + 8);
  if (magic != kFrameMagic || k < 1 || k > static_cast<uint32_t>(FrameKind::kBatch) || n > max_payload) {
    return Status::DataLoss("the stream from rank " + std::to_string(peer) +
                            " is out of step (a frame header that is not one)");
  }
  *kind = static_cast<FrameKind>(k);
  payload->resize(n);
  if (n > 0) RETURN_IF_ERROR(comm.Recv(peer, payload->data(), n));
  return Status::OK();
}

void SendErrorFrame(Communicator& comm, int peer, const Status& st) {
  (void)SendFrame(comm, peer, FrameKind::kError, EncodeStatus(st));
}

Status DecodeErrorFrame(const std::string& payload) {
  Status st = DecodeStatus(payload);
  return st.ok() ? Status::Internal("an error frame carried no error") : st;
}

Status SendFiles(Communicator& comm, int peer, const std::vector<std::string>& paths) {
  std::string block;
  for (const std::string& p : paths) {
    Status st = SendOneFile(comm, peer, p, &block);
    if (!st.ok()) {
      // A local failure: tell the receiver (a transport failure: it knows).
      SendErrorFrame(comm, peer, st);
      return st;
    }
  }
  return SendFrame(comm, peer, FrameKind::kDone, {});
}

Status ReceiveFiles(Communicator& comm, int peer,
                    const std::function<StatusOr<std::string>(const std::string&)>& path_for,
                    std::vector<std::string>* received) {
  std::unique_ptr<Incoming> file;
  std::string payload;
  // After the first error the rest of the stream is still taken (and
  // dropped), so that the sender is not left waiting on this rank.
  Status failed;
  auto step = [&](FrameKind kind) -> Status {
    switch (kind) {
      case FrameKind::kFileBegin: {
        if (file) return Status::DataLoss("rank " + std::to_string(peer) + " began a file inside another");
        if (payload.size() < 9) return Status::DataLoss("a malformed file frame from rank " + std::to_string(peer));
        const uint64_t size = GetLE64(payload.data());
        std::string name = payload.substr(8);
        if (name.find('/') != std::string::npos || name == "." || name == "..") {
          return Status::DataLoss("rank " + std::to_string(peer) + " sent a file named '" + name + "'");
        }
        ASSIGN_OR_RETURN(std::string path, path_for(name));
        file = std::make_unique<Incoming>(path, size, name, peer);
        received->push_back(path);
        return file->Open();
      }
      case FrameKind::kData:
        if (!file) return Status::DataLoss("rank " + std::to_string(peer) + " sent data outside a file");
        return file->Append(payload);
      case FrameKind::kFileEnd: {
        if (!file) return Status::DataLoss("rank " + std::to_string(peer) + " ended a file it did not begin");
        Status st = file->Finish(payload);
        file.reset();
        return st;
      }
      default:
        return Status::DataLoss("rank " + std::to_string(peer) + " sent a frame of kind " +
                                std::to_string(static_cast<uint32_t>(kind)) + " among its files");
    }
  };
  for (;;) {
    FrameKind kind;
    Status got = RecvFrame(comm, peer, &kind, &payload);
    if (!got.ok()) return failed.ok() ? got : failed;
    if (kind == FrameKind::kDone) {
      if (failed.ok() && file) return Status::DataLoss("rank " + std::to_string(peer) + " stopped inside a file");
      return failed;
    }
    if (kind == FrameKind::kError) return failed.ok() ? DecodeErrorFrame(payload) : failed;
    if (!failed.ok()) continue;
    failed = step(kind);
    if (!failed.ok()) file.reset();
  }
}

}  // namespace ckptdb
