#include "rest/reply.h"

#include "conduit/api/errors.h"

namespace conduit::agent::rest {
namespace {

using json = nlohmann::json;

// Never throws: a message may echo client bytes that are not valid UTF-8.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), kJsonType);
}

void send_error(httplib::Response& res, int status, std::string_view code, std::string_view message) {
  send_json(res, status, {{"error", {{"code", code}, {"message", message}}}});
}

void send_error(httplib::Response& res, const Error& error) {
  send_error(res, api::http_status(error.code), api::wire_code(error.code), error.message);
}

json items(json array) { return {{"items", std::move(array)}}; }

}  // namespace conduit::agent::rest
