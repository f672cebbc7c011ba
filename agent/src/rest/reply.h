// Answers in the shapes agent/openapi.yaml promises: a JSON body, or {"error": {"code", "message"}} with a
// 4xx/5xx, the code and status taken from the one table every client reads back (conduit/api/errors.h).
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string_view>

#include "conduit/common/result.h"

namespace conduit::agent::rest {

inline constexpr const char* kJsonType = "application/json";

void send_json(httplib::Response& res, int status, const nlohmann::json& body);
void send_error(httplib::Response& res, int status, std::string_view code, std::string_view message);
void send_error(httplib::Response& res, const Error& error);

// {"items": [...]}: every list the API answers.
nlohmann::json items(nlohmann::json array);

}  // namespace conduit::agent::rest
