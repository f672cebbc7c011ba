// The agent's error codes (agent/openapi.yaml, `{"error": {"code", "message"}}`) and conduit::ErrorCode, both
// ways, in one table: the agent writes its errors with wire_code() and http_status(), every client reads
// them back with error_code_from_wire(), so a code means the same thing on both ends of every hop.
#pragma once

#include <string_view>

#include "conduit/common/result.h"

namespace conduit::api {

// The codes an agent's HTTP layer answers with that no ErrorCode names (the rest are wire_code()'s).
namespace code {
inline constexpr const char* kUnauthorized = "Unauthorized";                  // 401
inline constexpr const char* kForbidden = "Forbidden";                        // 403: the caller may not
inline constexpr const char* kMalformedJson = "MalformedJson";                // 400
inline constexpr const char* kBadRequest = "BadRequest";                      // 400, not parsable as HTTP
inline constexpr const char* kRouteNotFound = "RouteNotFound";                // 404
inline constexpr const char* kMethodNotAllowed = "MethodNotAllowed";          // 405
inline constexpr const char* kLengthRequired = "LengthRequired";              // 411
inline constexpr const char* kPayloadTooLarge = "PayloadTooLarge";            // 413
inline constexpr const char* kUriTooLong = "UriTooLong";                      // 414
inline constexpr const char* kUnsupportedMediaType = "UnsupportedMediaType";  // 415
inline constexpr const char* kInternal = "Internal";                          // 500
inline constexpr const char* kHttpError = "HttpError";                        // any other status
}  // namespace code

// The code an agent writes for `code` ("NotFound", "IoError", "ProviderError", ...).
std::string_view wire_code(ErrorCode code);

// The HTTP status an agent answers `code` with: InvalidArgument 400, NotFound 404, AlreadyExists/Conflict
// 409, ResourceExhausted/Unsupported 422, Unavailable 503, others 500.
int http_status(ErrorCode code);

// A code in an agent's error body as the caller's ErrorCode. The codes of the agent's own failures that name
// something beyond the agent (PeerUnreachable, RemoteAccessDenied, TimedOut, ...) read as Provider: the
// caller did reach the agent, and to the caller it is the agent that failed. PeerUnreachable is kept for an
// agent that does not answer at all. Unauthorized (a missing or wrong bearer token) is RemoteAccess: the
// agent refused us access, as the Kubernetes client reads a 401/403 too; so is Forbidden (the caller is known
// and may not do this: docs/security.md).
ErrorCode error_code_from_wire(std::string_view code);

// An HTTP error status without an agent error body (a proxy or another server answered): only the statuses
// whose meaning no server changes are told apart. 401/403 RemoteAccess, 404 NotFound, the rest Provider.
ErrorCode error_code_from_http_status(int status);

}  // namespace conduit::api
