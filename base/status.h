// Status and StatusOr: errors as values. A Status carries a code and a message,
// and optionally where it arose (node, actor, op), so an error can cross nodes.
// Thread-compatible: a Status is a plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace rill {

enum class Code : uint8_t {
  kOk = 0,
  kInvalidArgument,  // bad input from a user: job file, flag, shape
  kNotFound,         // a named thing does not exist
  kFailedPrecondition,
  kDataLoss,         // corrupt file or message
  kDeadlineExceeded, // a wait ran out of time (stuck job, join)
  kUnavailable,      // peer or resource not reachable
  kInternal,         // a bug in Rill
  kAborted,
  kPermissionDenied, // refused: no key, another key, outside the allowed roots
};

const char* code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const {
    if (ok()) return "OK";
    return fmt::format("{}: {}", code_name(code_), message_);
  }
  // Prefixes the message with context, e.g. "job.json: ops[3]: ".
  Status with_context(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kNotFound: return "not found";
    case Code::kFailedPrecondition: return "failed precondition";
    case Code::kDataLoss: return "data loss";
    case Code::kDeadlineExceeded: return "deadline exceeded";
    case Code::kUnavailable: return "unavailable";
    case Code::kInternal: return "internal";
    case Code::kAborted: return "aborted";
    case Code::kPermissionDenied: return "permission denied";
  }
  return "unknown";
}

template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Code::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status not_found(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Code::kNotFound, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status internal_error(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Code::kInternal, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status data_loss(fmt::format_string<Args...> f, Args&&... args) {
  return Status(Code::kDataLoss, fmt::format(f, std::forward<Args>(args)...));
}

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace rill

#define RILL_CONCAT_INNER(a, b) a##b
#define RILL_CONCAT(a, b) RILL_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not ok.
#define RILL_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    ::rill::Status rill_status_ = (expr);          \
    if (!rill_status_.ok()) return rill_status_;   \
  } while (0)

// Declares `lhs` from a StatusOr expression, returning its Status on error.
#define RILL_ASSIGN_OR_RETURN(lhs, expr)                                   \
  auto RILL_CONCAT(rill_or_, __LINE__) = (expr);                           \
  if (!RILL_CONCAT(rill_or_, __LINE__).ok())                               \
    return RILL_CONCAT(rill_or_, __LINE__).status();                       \
  lhs = std::move(RILL_CONCAT(rill_or_, __LINE__)).value()
