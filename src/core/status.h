// Status and Result<T>: how library code reports errors. Library code never exits and never
// throws across module boundaries; it returns a Status (or a Result<T> holding a value or a
// Status) whose message says what went wrong, where, and what to do.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace leoam {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // the caller passed something wrong (a bad option, a prompt too long)
  kNotFound,         // a file, key or tensor is missing
  kCorrupt,          // a file's contents are malformed or fail a check
  kUnsupported,      // well-formed input that this build cannot handle (tensor type, arch)
  kIoError,          // the OS reported an error (EIO, ENOSPC, short read)
  kInternal,         // a bug: an invariant did not hold
  kCancelled,        // stopped early because the caller asked (a should_stop callback said so)
  kResourceExhausted,  // the work needs more than a budget the caller set
};

// The setting an error is about, where changing it is the fix: a front end names its own control
// for it (the CLI its flag) beside the message, which names none.
enum class Setting : int {
  kNone = 0,
  kContextSize,       // positions a sequence holds
  kBatchSize,         // prompt tokens a forward pass takes
  kParallel,          // sequences decoded together
  kBos,               // whether the prompt starts with BOS
  kKvDir,             // the disk tier's directory
  kKvDeviceBudget,    // the device tier's bytes
  kKvHostCodec,       // the host tier's stored form
  kKvCompress,        // compressed disk reads
  kKvMetaBudget,      // what a policy may hold about the KV
  kKvSwaFull,         // whether sliding-window layers keep the positions behind their window
  kKvSaveDir,         // where a session is saved
  kPrefillWorkingSet, // the layered prefill's working set
  kListenAddress,     // the server's host and port
  kListenBacklog,
  kAllowedHosts,
  kCorsOrigin,
  kApiKey,
  kMaxBody,           // the largest request body
  kModelAlias,        // the model's name in the API
  kChatTemplate,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  Setting setting() const { return setting_; }

  // Returns a copy whose message is prefixed with `context` ("file.gguf: ...").
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    Status s(code_, context + ": " + message_);
    s.setting_ = setting_;
    return s;
  }
  // Returns a copy that says which setting to change to fix it.
  Status about(Setting setting) const {
    Status s = *this;
    s.setting_ = setting;
    return s;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  Setting setting_ = Setting::kNone;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }

// A value of type T, or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).is_ok() && "a Result must not hold an ok Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }

  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace leoam

// Propagates a non-ok Status from an expression returning Status.
#define LEOAM_RETURN_IF_ERROR(expr)           \
  do {                                        \
    ::leoam::Status leoam_status_ = (expr);   \
    if (!leoam_status_.is_ok()) return leoam_status_; \
  } while (0)

#define LEOAM_CONCAT_INNER(a, b) a##b
#define LEOAM_CONCAT(a, b) LEOAM_CONCAT_INNER(a, b)

// `LEOAM_ASSIGN_OR_RETURN(auto x, f());` declares x from a Result or returns its Status.
#define LEOAM_ASSIGN_OR_RETURN(decl, expr) \
  LEOAM_ASSIGN_OR_RETURN_IMPL(LEOAM_CONCAT(leoam_result_, __LINE__), decl, expr)
#define LEOAM_ASSIGN_OR_RETURN_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.is_ok()) return tmp.status();             \
  decl = std::move(tmp).value()
