// AsyncSaver (include/ckptdb/async_save.h): staging copies, a background
// thread that runs Save, and handles the caller waits on.
#include "ckptdb/async_save.h"

#include <condition_variable>
#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "ckptdb/checkpoint.h"
#include "device/device_staging.h"
#include "util/ordered_parallel.h"
#include "util/status_macros.h"

namespace ckptdb {

namespace {

using Clock = std::chrono::steady_clock;

class Handle final : public SaveHandle {
 public:
  explicit Handle(int64_t step) : step_(step) {}
  int64_t step() const override { return step_; }
  bool Done() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  Status Wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }
  Status WaitFor(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
      return Status::DeadlineExceeded("the save of step " + std::to_string(step_) + " is still running");
    }
    return status_;
  }
  double blocked_seconds() const override { return blocked_s_; }

  void Finish(Status st) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(st);
      done_ = true;
    }
    cv_.notify_all();
  }
  void set_blocked_seconds(double s) { blocked_s_ = s; }

 private:
  const int64_t step_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  double blocked_s_ = 0;
};

// One slot of staging memory, reused across saves: pinned once a state dict
// with CUDA tensors passes through it (device-to-host copies straight into
// it, at the bus's full speed), ordinary memory otherwise, or when that much
// memory cannot be pinned (then device tensors come through the pinned pool
// in pieces).
struct Slot {
  std::unique_ptr<char[]> buffer;
  PinnedBuffer pinned;
  size_t capacity = 0;
  bool pinning_failed = false;  // at this capacity: not tried again until it grows
  bool busy = false;
  char* data() const { return pinned ? pinned.get() : buffer.get(); }
};

size_t Align(size_t n) { return (n + 63) & ~size_t{63}; }

// Bytes a staging copy of `sd` needs (64-byte aligned pieces).
size_t StagingBytes(const StateDict& sd) {
  size_t n = 0;
  for (const auto& [fqn, e] : sd.entries()) {
    if (const Tensor* t = std::get_if<Tensor>(&e)) n += Align(t->nbytes());
    if (const ShardedTensor* st = std::get_if<ShardedTensor>(&e)) {
      for (const Shard& s : st->local_shards()) n += Align(s.tensor.nbytes());
    }
  }
  return n;
}

// Copies `sd` into `buf`: the copy's tensors are views into it. The bytes
// are copied by every core at once, in slices: the caller is blocked for
// this copy only, so it runs at the machine's memory bandwidth.
StatusOr<StateDict> StageCopy(const StateDict& sd, char* buf, bool pinned) {
  StateDict out;
  size_t off = 0;
  struct Slice {
    const char* src;
    char* dst;
    size_t n;
  };
  std::vector<Slice> slices;
  constexpr size_t kSlice = 8 << 20;
  auto copy = [&](const Tensor& t) -> StatusOr<Tensor> {
    char* dst = buf + off;
    off += Align(t.nbytes());
    if (!t.device().is_cpu()) {
      // Device tensors: straight into a pinned slot, now; through the pinned
      // pool into an ordinary one.
      const int d = t.device().index;
      Status st = pinned ? CopyFromDevice(d, t.data(), dst, t.nbytes()) : StageFromDevice(d, t.data(), dst, t.nbytes());
      if (!st.ok()) return st.WithContext(t.device().ToString());
    } else {
      const char* src = static_cast<const char*>(t.data());
      for (size_t b = 0; b < t.nbytes(); b += kSlice) {
        slices.push_back(Slice{src + b, dst + b, std::min(kSlice, t.nbytes() - b)});
      }
    }
    return Tensor::View(t.dtype(), t.shape(), dst, t.nbytes());
  };
  for (const auto& [fqn, e] : sd.entries()) {
    if (const Tensor* t = std::get_if<Tensor>(&e)) {
      StatusOr<Tensor> staged = copy(*t);
      if (!staged.ok()) return staged.status().WithContext("entry '" + fqn + "'");
      Tensor c = std::move(staged).value();
      RETURN_IF_ERROR(out.Add(fqn, std::move(c)));
    } else if (const ShardedTensor* st = std::get_if<ShardedTensor>(&e)) {
      std::vector<Shard> shards;
      for (const Shard& s : st->local_shards()) {
        StatusOr<Tensor> staged = copy(s.tensor);
        if (!staged.ok()) return staged.status().WithContext("entry '" + fqn + "'");
        Tensor c = std::move(staged).value();
        shards.push_back(Shard{s.offsets, std::move(c)});
      }
      ASSIGN_OR_RETURN(ShardedTensor copy_st, ShardedTensor::Create(st->dtype(), st->global_shape(), std::move(shards)));
      RETURN_IF_ERROR(out.Add(fqn, std::move(copy_st)));
    } else {
      RETURN_IF_ERROR(out.Add(fqn, std::get<Bytes>(e)));
    }
  }
  RETURN_IF_ERROR(RunOrdered(
      slices.size(), DefaultParallelism(), slices.size(),
      [&](size_t i, std::string*) {
        std::memcpy(slices[i].dst, slices[i].src, slices[i].n);
        return Status::OK();
      },
      [](size_t, std::string&) { return Status::OK(); }));
  return out;
}

}  // namespace

struct AsyncSaver::Impl {
  struct Job {
    int64_t step;
    StateDict copy;
    size_t slot;
    std::shared_ptr<Handle> handle;
    std::map<std::string, double> metrics;
    std::string note;
  };

  Impl(StorageWriter& w, const AsyncSaveOptions& o) : writer(w), options(o) {
    slots.resize(static_cast<size_t>(std::max(1, o.max_in_flight)));
    worker = std::thread([this] { Run(); });
  }

  ~Impl() {
    if (getpid() != created_in) {
      // A forked child's copy: its worker thread is the parent's and does
      // not run here; joining it would wait forever.
      worker.detach();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    worker.join();  // finishes every queued save first
  }

  void Run() {
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;  // stopping, and nothing left to do
        job = std::move(queue.front());
        queue.pop_front();
      }
      SaveOptions so;
      so.step = job.step;
      so.coordinator_rank = options.coordinator_rank;
      so.no_dist = options.no_dist;
      so.communicator = options.communicator;
      so.metrics = std::move(job.metrics);
      so.note = std::move(job.note);
      Status st = Save(job.copy, writer, so);
      job.copy = StateDict();
      // The handle first: once WaitAll returns, every handle is Done.
      job.handle->Finish(std::move(st));
      {
        std::lock_guard<std::mutex> lock(mu);
        slots[job.slot].busy = false;
      }
      cv.notify_all();
    }
  }

  StorageWriter& writer;
  const AsyncSaveOptions options;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Slot> slots;
  std::deque<Job> queue;
  bool stopping = false;
  const pid_t created_in = getpid();  // the process whose thread `worker` is
  std::thread worker;
};

AsyncSaver::AsyncSaver(StorageWriter& writer, const AsyncSaveOptions& options)
    : impl_(std::make_unique<Impl>(writer, options)) {}

AsyncSaver::~AsyncSaver() = default;

StatusOr<std::shared_ptr<SaveHandle>> AsyncSaver::SaveAsync(const StateDict& state_dict, int64_t step) {
  return SaveAsync(state_dict, step, {}, {});
}

StatusOr<std::shared_ptr<SaveHandle>> AsyncSaver::SaveAsync(const StateDict& state_dict, int64_t step,
                                                            const std::map<std::string, double>& metrics,
                                                            const std::string& note) {
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(ValidateStep(step));
  const AsyncSaveOptions& o = impl_->options;
  if (getpid() != impl_->created_in) {
    return Status::FailedPrecondition("this AsyncSaver was made by process " + std::to_string(impl_->created_in) +
                                      ", which this process (" + std::to_string(getpid()) +
                                      ") was forked from: its background thread does not run here; make an "
                                      "AsyncSaver in this process");
  }
  if (o.max_in_flight < 1) return Status::InvalidArgument("AsyncSaveOptions.max_in_flight must be at least 1");
  if (!o.no_dist && o.communicator == nullptr) {
    return Status::InvalidArgument("AsyncSaveOptions: no communicator for the background saves; pass one, or set no_dist");
  }
  // Devices this process cannot use are argument errors, before any wait;
  // then the work queued on the devices finishes, so that the copy below
  // takes the tensors as the application's kernels left them.
  RETURN_IF_ERROR(CheckAndSynchronizeDevices(state_dict));
  // Wait for a free slot of staging memory.
  size_t slot = 0;
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->cv.wait(lock, [&] {
      for (size_t i = 0; i < impl_->slots.size(); ++i) {
        if (!impl_->slots[i].busy) {
          slot = i;
          return true;
        }
      }
      return false;
    });
    impl_->slots[slot].busy = true;
  }
  Slot& s = impl_->slots[slot];
  auto release = [&](Status st) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      s.busy = false;
    }
    impl_->cv.notify_all();
    return st;
  };
  const size_t need = StagingBytes(state_dict);
  const int device = FirstDeviceOf(state_dict);
  if (need > s.capacity || (device >= 0 && !s.pinned && !s.pinning_failed)) {
    s.buffer.reset();
    s.pinned.reset();
    s.capacity = 0;
    s.pinning_failed = false;
    if (device >= 0) {
      StatusOr<PinnedBuffer> p = AllocPinnedHost(std::max<size_t>(need, 1), device);
      if (p.ok()) {
        s.pinned = std::move(p).value();
      } else {
        s.pinning_failed = true;  // an ordinary slot below; device copies go through the pool
      }
    }
    if (!s.pinned) {
      s.buffer.reset(new (std::nothrow) char[std::max<size_t>(need, 1)]);
      if (!s.buffer) {
        return release(Status::Unavailable("AsyncSaver: cannot allocate " + std::to_string(need) +
                                           " bytes of staging memory"));
      }
    }
    s.capacity = need;
  }
  StatusOr<StateDict> copy = StageCopy(state_dict, s.data(), s.pinned != nullptr);
  if (!copy.ok()) return release(copy.status());
  auto handle = std::make_shared<Handle>(step);
  handle->set_blocked_seconds(std::chrono::duration<double>(Clock::now() - t0).count());
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->queue.push_back(Impl::Job{step, std::move(copy).value(), slot, handle, metrics, note});
  }
  impl_->cv.notify_all();
  return std::shared_ptr<SaveHandle>(handle);
}

void AsyncSaver::WaitAll() {
  if (getpid() != impl_->created_in) return;  // nothing of this process's is queued (SaveAsync refuses)
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->cv.wait(lock, [&] {
    if (!impl_->queue.empty()) return false;
    for (const Slot& s : impl_->slots) {
      if (s.busy) return false;
    }
    return true;
  });
}

}  // namespace ckptdb
