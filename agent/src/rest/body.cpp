#include "rest/body.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "conduit/api/errors.h"
#include "http_server.h"
#include "rest/reply.h"

namespace conduit::agent::rest {

using json = nlohmann::json;
using HandlerResponse = httplib::Server::HandlerResponse;

HandlerResponse refuse_unbounded_body(const httplib::Request& req, httplib::Response& res) {
  const bool has_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
  if (!req.has_header("Transfer-Encoding") && (!has_body || req.has_header("Content-Length"))) {
    return HandlerResponse::Unhandled;
  }
  res.set_header("Connection", "close");
  close_after_response();
  send_error(res, 411, api::code::kLengthRequired,
             "a request body needs a Content-Length (chunked bodies are not accepted)");
  return HandlerResponse::Handled;
}

std::size_t body_limit(std::size_t max_body_bytes, const httplib::Request& req) {
  if (req.method == "POST" && req.path == kReshardPlansPath)
    return std::max(max_body_bytes, kReshardPlanBodyBytes);
  return max_body_bytes;
}

std::optional<json> read_json_body(std::size_t max_bytes, const httplib::Request& req,
                                   httplib::Response& res) {
  std::string media_type = req.get_header_value("Content-Type");
  media_type = media_type.substr(0, media_type.find(';'));
  media_type.erase(std::remove(media_type.begin(), media_type.end(), ' '), media_type.end());
  std::transform(media_type.begin(), media_type.end(), media_type.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (media_type != kJsonType) {
    send_error(res, 415, api::code::kUnsupportedMediaType, "the body must be application/json");
    return std::nullopt;
  }
  // httplib refuses oversized bodies it knows the length of up front; this also covers any it read whole.
  if (req.body.size() > max_bytes) {
    send_error(res, 413, api::code::kPayloadTooLarge,
               "the body exceeds " + std::to_string(max_bytes) + " bytes");
    return std::nullopt;
  }
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    send_error(res, 400, api::code::kMalformedJson, "the body is not valid JSON");
    return std::nullopt;
  }
  if (!body.is_object()) {
    send_error(res, 400, api::wire_code(ErrorCode::InvalidArgument), "the body must be a JSON object");
    return std::nullopt;
  }
  return body;
}

}  // namespace conduit::agent::rest
