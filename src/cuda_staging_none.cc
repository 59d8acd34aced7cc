// Device staging in a build without the CUDA path: every device copy is an
// error that says how to get one.
#include "device_staging.h"

namespace ckptdb {

namespace {
Status NotBuilt() {
  return Status::FailedPrecondition(
      "this build of ckptdb has no CUDA support (configure with -DCKPTDB_CUDA=ON where the CUDA toolkit is "
      "installed)");
}
}  // namespace

bool CudaBuilt() { return false; }
int CudaDeviceCount() { return 0; }
Status CopyFromDevice(int, const void*, void*, size_t) { return NotBuilt(); }
Status CopyToDevice(int, const void*, void*, size_t) { return NotBuilt(); }

}  // namespace ckptdb
