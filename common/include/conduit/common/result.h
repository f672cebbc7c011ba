// Result<T>: errors as values on the data path. GCC 12 has no std::expected in C++20, so this is the small
// subset we need: a value or an Error {code, message}, where the message carries the provider's own text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace conduit {

enum class ErrorCode : std::uint8_t {
  InvalidArgument,    // the caller asked for something malformed or out of bounds
  NotFound,           // unknown provider, batch, device
  Unsupported,        // the provider needs something we do not implement (names the bit)
  Unavailable,        // hardware or library absent on this machine
  Provider,           // libfabric / verbs call failed; message has fi_strerror text
  RemoteAccess,       // the peer refused the access (bad or revoked key, out of range, credentials it
                      // does not take now: a 401 while a token rotates)
  Forbidden,          // the peer refuses who asks or what for (a 403 by its rules, a certificate one side
                      // does not trust): the same answer at every retry
  PeerUnreachable,    // the peer went away or never answered
  TimedOut,           // no progress for the stall timeout
  Io,                 // file or socket I/O
  AlreadyExists,      // a name is taken
  Conflict,           // the object is in a state that forbids this (a region in use)
  ResourceExhausted,  // over a configured cap
  Cancelled,          // stopped on request
};

std::string_view to_string(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string message;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_{ErrorCode::InvalidArgument, {}};
  bool ok_ = true;
};

using Status = Result<void>;

inline Error make_error(ErrorCode code, std::string message) { return Error{code, std::move(message)}; }

}  // namespace conduit
