// Early-return helpers for Status and StatusOr (internal).
#ifndef CKPTDB_SRC_STATUS_MACROS_H_
#define CKPTDB_SRC_STATUS_MACROS_H_

#include "ckptdb/status.h"

#define CKPTDB_CONCAT_INNER_(a, b) a##b
#define CKPTDB_CONCAT_(a, b) CKPTDB_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                   \
  do {                                          \
    ::ckptdb::Status _st = (expr);              \
    if (!_st.ok()) return _st;                  \
  } while (0)

// Declares `lhs` from a StatusOr, or returns its status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(CKPTDB_CONCAT_(_status_or_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#endif  // CKPTDB_SRC_STATUS_MACROS_H_
