#include "conduit/api/errors.h"

namespace conduit::api {

std::string_view wire_code(ErrorCode code) { return to_string(code); }

int http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument:
      return 400;
    case ErrorCode::NotFound:
      return 404;
    case ErrorCode::AlreadyExists:
    case ErrorCode::Conflict:
      return 409;
    case ErrorCode::ResourceExhausted:
    case ErrorCode::Unsupported:
      return 422;
    case ErrorCode::Unavailable:
      return 503;
    case ErrorCode::Forbidden:
      return 403;
    default:
      return 500;
  }
}

ErrorCode error_code_from_wire(std::string_view code) {
  if (code == "NotFound" || code == code::kRouteNotFound) return ErrorCode::NotFound;
  if (code == "AlreadyExists") return ErrorCode::AlreadyExists;
  if (code == "Conflict") return ErrorCode::Conflict;
  if (code == "ResourceExhausted" || code == code::kPayloadTooLarge) return ErrorCode::ResourceExhausted;
  if (code == "Unsupported") return ErrorCode::Unsupported;
  if (code == "Unavailable") return ErrorCode::Unavailable;
  if (code == code::kUnauthorized) return ErrorCode::RemoteAccess;
  if (code == code::kForbidden) return ErrorCode::Forbidden;
  if (code == "InvalidArgument" || code == code::kMalformedJson || code == code::kMethodNotAllowed ||
      code == code::kUnsupportedMediaType) {
    return ErrorCode::InvalidArgument;
  }
  if (code == "IoError") return ErrorCode::Io;
  return ErrorCode::Provider;
}

ErrorCode error_code_from_http_status(int status) {
  switch (status) {
    case 401:
      return ErrorCode::RemoteAccess;
    case 403:
      return ErrorCode::Forbidden;
    case 404:
      return ErrorCode::NotFound;
    default:
      return ErrorCode::Provider;
  }
}

}  // namespace conduit::api
