// The whole public API of ckptdb. Callers rely on nothing outside
// include/ckptdb/.
#ifndef CKPTDB_CKPTDB_H_
#define CKPTDB_CKPTDB_H_

#include "ckptdb/async_save.h"     // IWYU pragma: export
#include "ckptdb/checkpoint.h"     // IWYU pragma: export
#include "ckptdb/copy.h"           // IWYU pragma: export
#include "ckptdb/communicator.h"   // IWYU pragma: export
#include "ckptdb/device.h"         // IWYU pragma: export
#include "ckptdb/distributed.h"    // IWYU pragma: export
#include "ckptdb/dtype.h"          // IWYU pragma: export
#include "ckptdb/metadata.h"       // IWYU pragma: export
#include "ckptdb/rendezvous_store.h" // IWYU pragma: export
#include "ckptdb/rocksdb_store.h"  // IWYU pragma: export
#include "ckptdb/sharded_tensor.h" // IWYU pragma: export
#include "ckptdb/staging.h"        // IWYU pragma: export
#include "ckptdb/state_dict.h"     // IWYU pragma: export
#include "ckptdb/status.h"         // IWYU pragma: export
#include "ckptdb/storage.h"        // IWYU pragma: export
#include "ckptdb/tensor.h"         // IWYU pragma: export

#endif  // CKPTDB_CKPTDB_H_
