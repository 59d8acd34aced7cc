// The extension module ckptdb._ckptdb: the C++ library, bound one part per
// file. The Python package (python/ckptdb/) is the public API; this module is
// its engine and not meant to be used directly.
#include <nanobind/stl/string.h>

#include <map>
#include <string>

#include "py_common.h"

namespace ckptdb::py {

void Raise(const Status& st) {
  nb::dict failures;
  for (const auto& [rank, failure] : st.rank_failures()) {
    failures[nb::int_(rank)] = nb::make_tuple(StatusCodeName(failure.code()), failure.ToString());
  }
  nb::object exc = nb::module_::import_("ckptdb._errors")
                       .attr("_from_status")(StatusCodeName(st.code()), st.message(), st.ToString(), failures);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw nb::python_error();
}

}  // namespace ckptdb::py

NB_MODULE(_ckptdb, m) {
  m.doc() = "ckptdb's C++ engine (use the ckptdb package, not this module)";
  ckptdb::py::BindStateDict(m);
  ckptdb::py::BindStore(m);
  ckptdb::py::BindCommunicator(m);
  ckptdb::py::BindCheckpoint(m);
}
