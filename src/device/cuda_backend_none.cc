// The device backend of a build without the CUDA path: every device call is
// an error that says how to get one.
#include "device/device_backend.h"

namespace ckptdb {

namespace {

Status NotBuilt() {
  return Status::FailedPrecondition(
      "this build of ckptdb has no CUDA support (configure with -DCKPTDB_CUDA=ON where the CUDA toolkit is "
      "installed)");
}

class NoCudaBackend final : public DeviceBackend {
 public:
  int DeviceCount() override { return 0; }
  Status CheckDevice(int) override { return NotBuilt(); }
  Status Synchronize(int) override { return NotBuilt(); }
  StatusOr<void*> AllocPinned(size_t, int) override { return NotBuilt(); }
  void FreePinned(void*, int) override {}
  Status CopyToHost(int, const void*, void*, size_t) override { return NotBuilt(); }
  Status CopyToDevice(int, const void*, void*, size_t) override { return NotBuilt(); }
};

}  // namespace

bool CudaBuilt() { return false; }

DeviceBackend& BuiltinDeviceBackend() {
  static NoCudaBackend backend;
  return backend;
}

}  // namespace ckptdb
