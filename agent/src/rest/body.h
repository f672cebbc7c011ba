// Request bodies: bounded before they are read, and JSON objects before any route parses them.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>

namespace conduit::agent::rest {

// 411 (and Handled) for a chunked body, or a POST, PUT or PATCH without a Content-Length. cpp-httplib 0.11
// bounds a body only by its Content-Length: such a body (read until the connection closes) went into memory
// whole before any check (300 MiB did, tests/hostile). JSON bodies always come with a length, so neither is
// accepted; the body is left unread and the connection closed.
httplib::Server::HandlerResponse refuse_unbounded_body(const httplib::Request& req, httplib::Response& res);

// The body as a JSON object, or nullopt after answering: Content-Type (415), then size (413), then JSON
// syntax (400), then "is an object" (400); the first failure answers.
std::optional<nlohmann::json> read_json_body(std::size_t max_bytes, const httplib::Request& req,
                                             httplib::Response& res);

}  // namespace conduit::agent::rest
