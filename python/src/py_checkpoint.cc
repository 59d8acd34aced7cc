// Binds Save, Load and AsyncSaver. Saves and loads run through
// RunInterruptible over stores wrapped so that every chunk checks for
// Ctrl-C: an interrupted rank stops at its next chunk and fails its part
// ("interrupted"), so the save fails on every rank and commits nothing (or
// the load stops), and the interrupted rank raises KeyboardInterrupt.
#include <nanobind/stl/map.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckptdb/async_save.h"
#include "ckptdb/checkpoint.h"
#include "ckptdb/rocksdb_store.h"
#include "py_common.h"
#include "py_communicator.h"
#include "py_state_dict.h"
#include "py_store.h"

namespace ckptdb::py {

namespace {

Status Interrupted() { return Status::Aborted("interrupted (KeyboardInterrupt on this rank)"); }

// A StorageWriter whose items are read through sources that check `cancel`
// before each range.
class InterruptibleWriter final : public StorageWriter {
 public:
  InterruptibleWriter(StorageWriter& inner, const std::atomic<bool>& cancel) : inner_(inner), cancel_(cancel) {}

  StatusOr<uint64_t> Prepare(int64_t step) override { return inner_.Prepare(step); }
  StatusOr<std::vector<ReuseCandidate>> FindReusable(const SaveContext& ctx, const StepMetadata& planned) override {
    return inner_.FindReusable(ctx, planned);
  }
  FileDelivery delivery() const override { return inner_.delivery(); }
  StatusOr<std::string> ReceivedFilePath(const SaveContext& ctx, int rank, const std::string& name) override {
    return inner_.ReceivedFilePath(ctx, rank, name);
  }
  void DiscardLocalFiles(const SaveContext& ctx) override { inner_.DiscardLocalFiles(ctx); }
  Status PrepareStorage(const SaveContext& ctx, const std::vector<WriteItem>& items) override {
    return inner_.PrepareStorage(ctx, items);
  }
  StatusOr<WriteResult> Write(const SaveContext& ctx, const std::vector<WriteItem>& items) override {
    if (cancel_) return Interrupted();
    std::vector<WriteItem> checked = items;
    for (WriteItem& item : checked) {
      auto inner_source = item.source;
      const char* data = static_cast<const char*>(item.data);
      item.source = [this, inner_source, data](uint64_t begin, uint64_t n,
                                               const std::function<void(const char*)>& use) -> Status {
        if (cancel_) return Interrupted();
        if (inner_source) return inner_source(begin, n, use);
        use(data + begin);
        return Status::OK();
      };
    }
    return inner_.Write(ctx, checked);
  }
  Status Finish(const SaveContext& ctx, const StepMetadata& metadata,
                const std::vector<WriteResult>& results) override {
    return inner_.Finish(ctx, metadata, results);
  }
  void Abort(const SaveContext& ctx) override { inner_.Abort(ctx); }

 private:
  StorageWriter& inner_;
  const std::atomic<bool>& cancel_;
};

// A StorageReader whose reads are delivered through sinks that check
// `cancel` before each chunk.
class InterruptibleReader final : public StorageReader {
 public:
  InterruptibleReader(StorageReader& inner, const std::atomic<bool>& cancel) : inner_(inner), cancel_(cancel) {}

  StatusOr<StepMetadata> ReadMetadata(int64_t step) override { return inner_.ReadMetadata(step); }
  StatusOr<StepMetadata> ReadMetadataOf(int64_t step, const std::vector<std::string>& fqns) override {
    return inner_.ReadMetadataOf(step, fqns);
  }
  StatusOr<StepMetadata> ReadMetadataFor(int64_t step, const std::vector<std::string>& fqns,
                                         const std::vector<EntryRegion>& regions) override {
    return inner_.ReadMetadataFor(step, fqns, regions);
  }
  StatusOr<ReadStats> Read(const StepMetadata& metadata, const std::vector<ReadItem>& items) override {
    if (cancel_) return Interrupted();
    std::vector<ReadItem> checked = items;
    for (ReadItem& item : checked) {
      if (item.box_sink) {  // a region of a piece cut into boxes
        auto inner_box_sink = item.box_sink;
        item.box_sink = [this, inner_box_sink](const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes,
                                               uint64_t begin, const char* data, uint64_t n) -> Status {
          if (cancel_) return Interrupted();
          return inner_box_sink(offsets, sizes, begin, data, n);
        };
        if (item.box_place) {  // once interrupted, no chunk lands: box_sink says so
          auto inner_box_place = item.box_place;
          item.box_place = [this, inner_box_place](const std::vector<int64_t>& offsets,
                                                   const std::vector<int64_t>& sizes) -> BoxPlace {
            return cancel_ ? BoxPlace{} : inner_box_place(offsets, sizes);
          };
        }
        continue;
      }
      auto inner_sink = item.sink;
      char* dest = static_cast<char*>(item.dest);
      const uint64_t offset = item.offset;
      item.sink = [this, inner_sink, dest, offset](uint64_t begin, const char* data, uint64_t n) -> Status {
        if (cancel_) return Interrupted();
        if (inner_sink) return inner_sink(begin, data, n);
        std::memcpy(dest + (begin - offset), data, n);
        return Status::OK();
      };
      if (!inner_sink && dest != nullptr) {  // bytes copied as they are: they may land (none once interrupted)
        item.range_place = [this, dest, offset](uint64_t begin, uint64_t) -> char* {
          return cancel_ ? nullptr : dest + (begin - offset);
        };
      }
    }
    return inner_.Read(metadata, checked);
  }

 private:
  StorageReader& inner_;
  const std::atomic<bool>& cancel_;
};

// The communicator to use: none means this process alone.
Communicator* CommOf(PyCommunicator* c) { return c ? c->comm.get() : nullptr; }

class PyAsyncSaver {
 public:
  PyAsyncSaver(PyWriter& writer, PyCommunicator* comm, int coordinator, int max_in_flight) {
    AsyncSaveOptions o;
    o.coordinator_rank = coordinator;
    o.no_dist = comm == nullptr;
    o.communicator = CommOf(comm);
    o.max_in_flight = max_in_flight;
    if (max_in_flight < 1) throw nb::value_error("max_in_flight must be at least 1");
    saver_ = std::make_unique<AsyncSaver>(*writer.writer, o);
  }
  ~PyAsyncSaver() { Close(); }

  std::shared_ptr<SaveHandle> SaveAsync(PyStateDict& sd, int64_t step, const std::map<std::string, double>& metrics,
                                        const std::string& note) {
    StatusOr<std::shared_ptr<SaveHandle>> h = [&] {
      nb::gil_scoped_release release;
      return saver_->SaveAsync(sd.state, step, metrics, note);
    }();
    return Take(std::move(h));
  }

  // Waits for every save in flight and stops the saver.
  void Close() {
    if (!saver_) return;
    nb::gil_scoped_release release;
    saver_.reset();
  }

 private:
  std::unique_ptr<AsyncSaver> saver_;
};

}  // namespace

void BindCheckpoint(nb::module_& m) {
  m.def(
      "save",
      [](PyStateDict& sd, PyWriter& writer, int64_t step, PyCommunicator* comm, int coordinator,
         const std::map<std::string, nb::bytes>& annotations, const std::map<std::string, double>& metrics,
         const std::string& note) {
        SaveOptions o;
        o.metrics = metrics;
        o.note = note;
        for (const auto& [name, value] : annotations) o.annotations[name] = std::string(value.c_str(), value.size());
        Check(RunInterruptible([&](const std::atomic<bool>& cancel) {
          InterruptibleWriter w(*writer.writer, cancel);
          o.step = step;
          o.coordinator_rank = coordinator;
          o.no_dist = comm == nullptr;
          o.communicator = CommOf(comm);
          if (comm == nullptr) return Save(sd.state, w, o);
          std::lock_guard<std::mutex> l(comm->mu);
          return Save(sd.state, w, o);
        }));
      },
      nb::arg("state_dict"), nb::arg("writer"), nb::arg("step"), nb::arg("comm").none(), nb::arg("coordinator"),
      nb::arg("annotations") = std::map<std::string, nb::bytes>{},
      nb::arg("metrics") = std::map<std::string, double>{}, nb::arg("note") = "",
      "Saves a step; `annotations` (name -> bytes), `metrics` (name -> float) and `note` are stored with it "
      "(SaveOptions)");

  m.def(
      "load",
      [](PyStateDict& sd, PyReader* reader, int64_t step, PyCommunicator* comm, int coordinator,
         const std::vector<std::string>& keys, bool allow_missing, bool convert_dtype, const std::string& remote,
         bool shared, int64_t s3_stall_timeout_seconds) {
        if (reader == nullptr && (remote.empty() || comm == nullptr)) {
          throw nb::value_error("load needs a reader, or a store path and a communicator for a remote load");
        }
        LoadStats stats;
        Check(RunInterruptible([&](const std::atomic<bool>& cancel) {
          // A reader over this load's communicator whose store only the
          // coordinator opens: `shared`, every rank reads the files or objects
          // the coordinator names it (OpenSharedStoreReader); else the store is on
          // the coordinator's host only, and it serves the others their
          // chunks (OpenRemoteStoreReader).
          std::unique_ptr<StorageReader> remote_reader;
          std::unique_lock<std::mutex> rl;
          if (reader == nullptr) {
            ReaderOptions ro;
            ro.s3_stall_timeout_seconds = s3_stall_timeout_seconds;
            StatusOr<std::unique_ptr<StorageReader>> opened =
                shared ? OpenSharedStoreReader(remote, CommOf(comm), coordinator, ro)
                       : OpenRemoteStoreReader(remote, CommOf(comm), coordinator, ro);
            if (!opened.ok()) return opened.status();
            remote_reader = std::move(opened).value();
          } else {
            rl = std::unique_lock<std::mutex>(reader->mu);
          }
          InterruptibleReader r(reader == nullptr ? *remote_reader : *reader->reader, cancel);
          LoadOptions o;
          o.step = step;
          o.coordinator_rank = coordinator;
          o.no_dist = comm == nullptr;
          o.communicator = CommOf(comm);
          o.keys = keys;
          o.allow_missing = allow_missing;
          o.convert_dtype = convert_dtype;
          if (comm == nullptr) return Load(sd.state, r, o, &stats);
          std::lock_guard<std::mutex> l(comm->mu);
          return Load(sd.state, r, o, &stats);
        }));
        nb::dict d;
        d["chunks_read"] = stats.chunks_read;
        d["chunks_landed"] = stats.chunks_landed;
        d["stored_bytes_read"] = stats.stored_bytes_read;
        d["raw_bytes_read"] = stats.raw_bytes_read;
        d["bytes_copied"] = stats.bytes_copied;
        d["missing"] = stats.missing;
        return d;
      },
      nb::arg("state_dict"), nb::arg("reader").none(), nb::arg("step"), nb::arg("comm").none(),
      nb::arg("coordinator"), nb::arg("keys"), nb::arg("allow_missing"), nb::arg("convert_dtype"),
      nb::arg("remote") = "", nb::arg("shared") = false, nb::arg("s3_stall_timeout_seconds") = 0);

  nb::class_<SaveHandle>(m, "SaveHandle", "The outcome of one asynchronous save")
      .def_prop_ro("step", &SaveHandle::step)
      .def("done", &SaveHandle::Done)
      .def_prop_ro("blocked_seconds", &SaveHandle::blocked_seconds)
      .def(
          "wait",
          [](SaveHandle& h, double timeout_s) {
            Status st;
            {
              nb::gil_scoped_release release;
              st = timeout_s < 0 ? h.Wait()
                                 : h.WaitFor(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
            }
            Check(st);
          },
          nb::arg("timeout_s") = -1.0, "Blocks until the save finished (or timeout_s passed) and raises its error");

  nb::class_<PyAsyncSaver>(m, "AsyncSaver", "Background saves on a communicator of their own")
      .def(nb::init<PyWriter&, PyCommunicator*, int, int>(), nb::arg("writer"), nb::arg("comm").none(),
           nb::arg("coordinator"), nb::arg("max_in_flight"), nb::keep_alive<1, 2>(), nb::keep_alive<1, 3>())
      .def("save_async", &PyAsyncSaver::SaveAsync, nb::arg("state_dict"), nb::arg("step"),
           nb::arg("metrics") = std::map<std::string, double>{}, nb::arg("note") = "")
      .def("close", &PyAsyncSaver::Close);
}

}  // namespace ckptdb::py
