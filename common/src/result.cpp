#include "conduit/common/result.h"

namespace conduit {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument:
      return "InvalidArgument";
    case ErrorCode::NotFound:
      return "NotFound";
    case ErrorCode::Unsupported:
      return "Unsupported";
    case ErrorCode::Unavailable:
      return "Unavailable";
    case ErrorCode::Provider:
      return "ProviderError";
    case ErrorCode::RemoteAccess:
      return "RemoteAccessDenied";
    case ErrorCode::Forbidden:
      return "Forbidden";
    case ErrorCode::PeerUnreachable:
      return "PeerUnreachable";
    case ErrorCode::TimedOut:
      return "TimedOut";
    case ErrorCode::Io:
      return "IoError";
    case ErrorCode::AlreadyExists:
      return "AlreadyExists";
    case ErrorCode::Conflict:
      return "Conflict";
    case ErrorCode::ResourceExhausted:
      return "ResourceExhausted";
    case ErrorCode::Cancelled:
      return "Cancelled";
  }
  return "Unknown";
}

}  // namespace conduit
