#include "conduit/api/names.h"

#include <algorithm>

namespace conduit::api {

Status validate_name(const std::string& name) {
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  const bool ok = !name.empty() && name.size() <= 63 && alnum(name.front()) && alnum(name.back()) &&
                  std::all_of(name.begin(), name.end(), [&](char c) { return alnum(c) || c == '-'; });
  if (ok) return {};
  return make_error(
      ErrorCode::InvalidArgument,
      "region name \"" + name +
          "\" is not a DNS-1123 label (1-63 characters of a-z, 0-9 and '-', starting and ending "
          "with a letter or digit)");
}

bool valid_namespace(const std::string& name) { return static_cast<bool>(validate_name(name)); }

std::string parse_namespace(JsonFields& f) {
  auto ns = f.string("namespace");
  if (!ns) return {};
  if (!valid_namespace(*ns)) f.fail("namespace", "must be a namespace name (a DNS-1123 label)");
  return std::move(*ns);
}

std::vector<std::string> parse_shared_with(JsonFields& f) {
  std::vector<std::string> out;
  if (const nlohmann::json* shared = f.array("sharedWith")) {
    if (shared->size() > 64) f.fail("sharedWith", "at most 64 namespaces");
    for (const auto& item : *shared) {
      if (!item.is_string() || (item != "*" && !valid_namespace(item.get<std::string>()))) {
        f.fail("sharedWith", "each item must be a namespace name or \"*\"");
        break;
      }
      out.push_back(item.get<std::string>());
    }
  }
  return out;
}

std::string parse_pod(JsonFields& f) {
  auto pod = f.string("pod");
  if (!pod) return {};
  const bool uid =
      !pod->empty() && pod->size() <= 64 && pod->find_first_not_of("0123456789abcdef-") == std::string::npos;
  if (!uid) f.fail("pod", "must be a pod UID (lowercase hex digits and '-')");
  return std::move(*pod);
}

}  // namespace conduit::api
