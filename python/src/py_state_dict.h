// StateDict as Python builds it: entries added one by one from the Python
// side's flattening (ckptdb/_state.py), tensors as views of memory the Python
// objects own (data pointer and size; the caller keeps them alive and
// unchanged for the duration of the call that uses the state dict).
#ifndef CKPTDB_PYTHON_PY_STATE_DICT_H_
#define CKPTDB_PYTHON_PY_STATE_DICT_H_

#include "ckptdb/state_dict.h"

namespace ckptdb::py {

struct PyStateDict {
  StateDict state;
};

}  // namespace ckptdb::py

#endif  // CKPTDB_PYTHON_PY_STATE_DICT_H_
