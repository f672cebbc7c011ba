#include "agent_client.h"

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <utility>

#include "conduit/http_error.h"

namespace conduit::agent {

namespace {

// A checksum of a few GiB takes the target well under a second, a staging copy of one piece (tens of MiB)
// between pinned memory and a GPU milliseconds; ten seconds means it is not coming.
constexpr time_t kTimeoutSeconds = 10;

Error http_error(const std::string& url, const httplib::Response& response) {
  std::string message;
  auto body = nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_object() && body.contains("error") && body["error"].is_object() &&
      body["error"].contains("message") && body["error"]["message"].is_string()) {
    message = body["error"]["message"].get<std::string>();
  } else {
    message = "HTTP " + std::to_string(response.status);
  }
  const std::string prefix = "agent at " + url + ": ";
  switch (response.status) {
    case 404:
      return make_error(ErrorCode::NotFound, prefix + message);
    case 401:
      return make_error(ErrorCode::InvalidArgument, prefix + "unauthorized: " + message);
    default:
      return make_error(ErrorCode::Provider, prefix + message);
  }
}

Result<std::vector<std::uint32_t>> parse_checksums(const std::string& url, const std::string& text) {
  auto malformed = [&url](const std::string& why) {
    return make_error(ErrorCode::Provider, "agent at " + url + " sent a malformed checksum answer: " + why);
  };
  auto body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return malformed("not a JSON object");
  auto it = body.find("crc32c");
  if (it == body.end() || !it->is_array()) return malformed("crc32c must be an array");
  std::vector<std::uint32_t> out;
  out.reserve(it->size());
  for (const auto& v : *it) {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > 0xffffffffULL) {
      return malformed("crc32c holds something other than 32-bit unsigned integers");
    }
    out.push_back(v.get<std::uint32_t>());
  }
  return out;
}

// One request to the agent at `url` (scheme://host[:port]; a configured "http://node:7070/" is the same
// agent, httplib wants no path): its 200 answer, PeerUnreachable when it does not answer, its own error
// otherwise. `send` makes the call on the client with the headers (the bearer token, when there is one).
template <typename Send>
Result<httplib::Response> request(const std::string& url, const std::function<std::string()>& token,
                                  Send send) {
  std::string base = url;
  while (base.ends_with('/')) base.pop_back();
  httplib::Client client(base);
  if (!client.is_valid()) {
    return make_error(ErrorCode::InvalidArgument, "agent URL \"" + url + "\" is not http(s)://host[:port]");
  }
  client.set_connection_timeout(kTimeoutSeconds, 0);
  client.set_read_timeout(kTimeoutSeconds, 0);
  client.set_write_timeout(kTimeoutSeconds, 0);
  httplib::Headers headers;
  if (const std::string t = token(); !t.empty()) headers.emplace("Authorization", "Bearer " + t);
  auto response = send(client, headers);
  if (!response) {
    return make_error(ErrorCode::PeerUnreachable,
                      "agent at " + url + " did not answer: " + describe_http_error(response.error()));
  }
  if (response->status != 200) return http_error(url, *response);
  return std::move(*response);
}

}  // namespace

Status AgentClient::staging(const std::string& url, const std::string& region, std::uint64_t offset,
                            std::uint64_t length, bool to_device) const {
  const nlohmann::json body{
      {"offset", offset}, {"length", length}, {"direction", to_device ? "toDevice" : "toHost"}};
  auto response = request(url, token_, [&](httplib::Client& client, const httplib::Headers& headers) {
    return client.Post("/v1/regions/" + region + "/staging", headers, body.dump(), "application/json");
  });
  if (!response) return response.error();
  return {};
}

Result<std::vector<std::uint32_t>> AgentClient::checksum(const std::string& url, const std::string& region,
                                                         std::uint64_t offset, std::uint64_t length,
                                                         std::uint64_t slice) const {
  const std::string path = "/v1/regions/" + region + "/checksum?offset=" + std::to_string(offset) +
                           "&length=" + std::to_string(length) + "&slice=" + std::to_string(slice);
  auto response = request(url, token_, [&](httplib::Client& client, const httplib::Headers& headers) {
    return client.Get(path, headers);
  });
  if (!response) return response.error();
  return parse_checksums(url, response->body);
}

}  // namespace conduit::agent
