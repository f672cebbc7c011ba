#include "transfer_job.h"

#include <set>
#include <utility>

namespace conduit::controller {

using json = nlohmann::json;

std::string_view to_string(Strategy strategy) {
  switch (strategy) {
    case Strategy::PointToPoint:
      return "PointToPoint";
    case Strategy::Fanout:
      return "Fanout";
    case Strategy::Chain:
      return "Chain";
  }
  return "PointToPoint";
}

std::string_view to_string(TransportType type) {
  switch (type) {
    case TransportType::Auto:
      return "auto";
    case TransportType::Efa:
      return "efa";
    case TransportType::Verbs:
      return "verbs";
    case TransportType::Tcp:
      return "tcp";
    case TransportType::Shm:
      return "shm";
  }
  return "auto";
}

bool is_dns1123_label(std::string_view text) {
  if (text.empty() || text.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(text.front()) || !alnum(text.back())) return false;
  for (const char c : text) {
    if (!alnum(c) && c != '-') return false;
  }
  return true;
}

bool is_dns1123_subdomain(std::string_view text) {
  if (text.empty() || text.size() > 253) return false;
  std::size_t start = 0;
  while (true) {
    const auto dot = text.find('.', start);
    const auto part =
        text.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (!is_dns1123_label(part)) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool is_relative_path_inside(std::string_view path) {
  if (path.empty() || path.front() == '/') return false;
  std::size_t start = 0;
  while (true) {
    const auto slash = path.find('/', start);
    const auto part =
        path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part == "..") return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

namespace {

// Collects every problem so one `kubectl apply`-like round trip shows them all, as the apiserver does.
class Checker {
 public:
  void fail(const std::string& field, const std::string& problem) {
    errors_.push_back(field + ": " + problem);
  }
  bool ok() const { return errors_.empty(); }
  std::string message() const {
    std::string out;
    for (const auto& e : errors_) out += (out.empty() ? "" : "; ") + e;
    return out;
  }

  // Rejects fields the schema does not know: in a cluster they would be pruned, here they are typos.
  void only_fields(const json& object, const std::string& path, std::initializer_list<const char*> known) {
    for (const auto& [key, value] : object.items()) {
      bool found = false;
      for (const char* k : known) found = found || key == k;
      if (!found) fail(path + "." + key, "unknown field");
    }
  }

  std::optional<std::string> string(const json& object, const std::string& path, const char* key,
                                    std::size_t max_length) {
    if (!object.contains(key) || object[key].is_null()) return std::nullopt;
    const json& v = object[key];
    if (!v.is_string()) {
      fail(path + "." + key, "must be a string, got " + v.dump());
      return std::nullopt;
    }
    const auto text = v.get<std::string>();
    if (text.empty()) fail(path + "." + key, "must not be empty");
    if (text.size() > max_length) {
      fail(path + "." + key, "is longer than " + std::to_string(max_length) + " characters");
    }
    return text;
  }

  std::optional<std::int64_t> integer(const json& object, const std::string& path, const char* key,
                                      std::int64_t min, std::int64_t max) {
    if (!object.contains(key) || object[key].is_null()) return std::nullopt;
    const json& v = object[key];
    if (!v.is_number_integer()) {
      fail(path + "." + key, "must be an integer, got " + v.dump());
      return std::nullopt;
    }
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
      fail(path + "." + key, v.dump() + " is above the maximum " + std::to_string(max));
      return std::nullopt;
    }
    const auto n = v.get<std::int64_t>();
    if (n < min) fail(path + "." + key, std::to_string(n) + " is below the minimum " + std::to_string(min));
    if (n > max) fail(path + "." + key, std::to_string(n) + " is above the maximum " + std::to_string(max));
    return n;
  }

  std::optional<bool> boolean(const json& object, const std::string& path, const char* key) {
    if (!object.contains(key) || object[key].is_null()) return std::nullopt;
    if (!object[key].is_boolean()) {
      fail(path + "." + key, "must be true or false, got " + object[key].dump());
      return std::nullopt;
    }
    return object[key].get<bool>();
  }

  template <typename E>
  std::optional<E> one_of(const json& object, const std::string& path, const char* key,
                          std::initializer_list<std::pair<const char*, E>> values) {
    auto text = string(object, path, key, 64);
    if (!text) return std::nullopt;
    std::string allowed;
    for (const auto& [name, value] : values) {
      if (*text == name) return value;
      allowed += (allowed.empty() ? "" : ", ") + std::string(name);
    }
    fail(path + "." + key, "\"" + *text + "\" is not one of " + allowed);
    return std::nullopt;
  }

  const json* object(const json& parent, const std::string& path, const char* key) {
    if (!parent.contains(key) || parent[key].is_null()) return nullptr;
    if (!parent[key].is_object()) {
      fail(path + "." + key, "must be an object");
      return nullptr;
    }
    return &parent[key];
  }

  void node(const std::optional<std::string>& name, const std::string& field) {
    if (name && !name->empty() && !is_dns1123_subdomain(*name)) {
      fail(field,
           "\"" + *name +
               "\" is not a valid node name (a DNS-1123 subdomain: lowercase letters, digits, '-' and '.')");
    }
  }
  void region(const std::optional<std::string>& name, const std::string& field) {
    if (name && !name->empty() && !is_dns1123_label(*name)) {
      fail(field, "\"" + *name +
                      "\" is not a valid region name (a DNS-1123 label: lowercase letters, digits and '-', "
                      "at most 63 characters)");
    }
  }
  void file(const std::optional<std::string>& path, const std::string& field) {
    if (path && !path->empty() && !is_relative_path_inside(*path)) {
      fail(field, "file must be a relative path under the agent's data directory, without '..'");
    }
  }

 private:
  std::vector<std::string> errors_;
};

void parse_source(Checker& c, const json& spec, SourceSpec& out, bool& pod_selector) {
  const json* source = c.object(spec, "spec", "source");
  if (source == nullptr) {
    c.fail("spec.source", "is required");
    return;
  }
  c.only_fields(*source, "spec.source", {"node", "region", "file", "podSelector"});
  auto node = c.string(*source, "spec.source", "node", 253);
  auto region = c.string(*source, "spec.source", "region", 63);
  auto file = c.string(*source, "spec.source", "file", 1024);
  pod_selector = source->contains("podSelector");
  c.node(node, "spec.source.node");
  c.region(region, "spec.source.region");
  c.file(file, "spec.source.file");
  if (node.has_value() == pod_selector)
    c.fail("spec.source", "source needs exactly one of node or podSelector");
  if (region.has_value() == file.has_value())
    c.fail("spec.source", "source needs exactly one of region or file");
  if (pod_selector && file)
    c.fail("spec.source", "source.podSelector can only be combined with region, not file");
  out.node = node.value_or("");
  out.region = region.value_or("");
  out.file = file.value_or("");
}

void parse_targets(Checker& c, const json& spec, std::vector<TargetSpec>& out) {
  if (!spec.contains("targets")) {
    c.fail("spec.targets", "is required");
    return;
  }
  const json& targets = spec["targets"];
  if (!targets.is_array()) {
    c.fail("spec.targets", "must be a list");
    return;
  }
  if (targets.empty()) c.fail("spec.targets", "needs at least 1 item");
  if (targets.size() > 64) c.fail("spec.targets", "has more than 64 items");
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const std::string path = "spec.targets[" + std::to_string(i) + "]";
    if (!targets[i].is_object()) {
      c.fail(path, "must be an object");
      continue;
    }
    const json& t = targets[i];
    c.only_fields(t, path, {"node", "region", "create", "file"});
    TargetSpec target;
    auto node = c.string(t, path, "node", 253);
    auto region = c.string(t, path, "region", 63);
    if (!node) c.fail(path + ".node", "is required");
    if (!region) c.fail(path + ".region", "is required");
    c.node(node, path + ".node");
    c.region(region, path + ".region");
    auto file = c.string(t, path, "file", 1024);
    c.file(file, path + ".file");
    if (const json* create = c.object(t, path, "create")) {
      c.only_fields(*create, path + ".create", {"bytes", "memory"});
      CreateSpec cs;
      const auto bytes = c.integer(*create, path + ".create", "bytes", 1, std::int64_t{1} << 44);
      if (!create->contains("bytes")) c.fail(path + ".create.bytes", "is required");
      cs.bytes = static_cast<std::uint64_t>(bytes.value_or(0));
      if (auto memory = c.string(*create, path + ".create", "memory", 9)) {
        const bool cuda = memory->rfind("cuda:", 0) == 0 && memory->size() > 5 && memory->size() <= 8 &&
                          memory->find_first_not_of("0123456789", 5) == std::string::npos;
        if (*memory != "host" && !cuda)
          c.fail(path + ".create.memory", "must be \"host\" or \"cuda:N\", got \"" + *memory + "\"");
        cs.memory = *memory;
      }
      target.create = cs;
    }
    target.node = node.value_or("");
    target.region = region.value_or("");
    target.file = file.value_or("");
    out.push_back(std::move(target));
  }
}

// The CRD's CEL rules across fields.
void check_cross_field(Checker& c, const TransferJobSpec& s) {
  const auto n = s.targets.size();
  if (s.strategy == Strategy::PointToPoint && n != 1) {
    c.fail("spec", "strategy PointToPoint needs exactly one target; use Fanout or Chain for more");
  }
  if (s.strategy == Strategy::Fanout && n < 2)
    c.fail("spec", "strategy Fanout needs at least 2 targets; use PointToPoint for one");
  if (s.strategy == Strategy::Chain && n < 2)
    c.fail("spec", "strategy Chain needs at least 2 targets; use PointToPoint for one");
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& t : s.targets) {
    if (!s.source.region.empty() && t.node == s.source.node && t.region == s.source.region) {
      c.fail("spec", "a target may not be the source region itself (same node and same region)");
    }
    if (!seen.insert({t.node, t.region}).second) c.fail("spec", "targets must be unique by node and region");
    if (s.transport == TransportType::Shm && t.node != s.source.node) {
      c.fail("spec", "transport shm needs source.node and every target on the source's node");
    }
  }
}

}  // namespace

Result<TransferJobSpec> TransferJobSpec::parse(const json& spec) {
  if (!spec.is_object())
    return make_error(ErrorCode::InvalidArgument, "spec: is required and must be an object");
  Checker c;
  TransferJobSpec s;
  c.only_fields(
      spec, "spec",
      {"source", "targets", "strategy", "transport", "chunkBytes", "window", "verify", "backoffLimit",
       "activeDeadlineSeconds", "ttlSecondsAfterFinished", "suspend", "maxBytesPerSecond"});
  bool pod_selector = false;
  parse_source(c, spec, s.source, pod_selector);
  parse_targets(c, spec, s.targets);
  s.strategy = c.one_of<Strategy>(spec, "spec", "strategy",
                                  {{"PointToPoint", Strategy::PointToPoint},
                                   {"Fanout", Strategy::Fanout},
                                   {"Chain", Strategy::Chain}})
                   .value_or(Strategy::PointToPoint);
  if (const json* transport = c.object(spec, "spec", "transport")) {
    c.only_fields(*transport, "spec.transport", {"type", "allowFallback"});
    s.transport = c.one_of<TransportType>(*transport, "spec.transport", "type",
                                          {{"auto", TransportType::Auto},
                                           {"efa", TransportType::Efa},
                                           {"verbs", TransportType::Verbs},
                                           {"tcp", TransportType::Tcp},
                                           {"shm", TransportType::Shm}})
                      .value_or(TransportType::Auto);
    s.allow_fallback = c.boolean(*transport, "spec.transport", "allowFallback").value_or(false);
  }
  s.chunk_bytes =
      static_cast<std::uint64_t>(c.integer(spec, "spec", "chunkBytes", 4096, 64 << 20).value_or(1 << 20));
  s.window = static_cast<std::uint32_t>(c.integer(spec, "spec", "window", 1, 256).value_or(16));
  s.verify = c.one_of<bool>(spec, "spec", "verify", {{"none", false}, {"crc32c", true}}).value_or(true);
  s.backoff_limit = static_cast<std::uint32_t>(c.integer(spec, "spec", "backoffLimit", 0, 20).value_or(3));
  s.active_deadline_seconds = c.integer(spec, "spec", "activeDeadlineSeconds", 1, 604800);
  s.ttl_seconds_after_finished = c.integer(spec, "spec", "ttlSecondsAfterFinished", 0, 31536000);
  s.suspend = c.boolean(spec, "spec", "suspend").value_or(false);
  s.max_bytes_per_second = static_cast<std::uint64_t>(
      c.integer(spec, "spec", "maxBytesPerSecond", 0, std::int64_t{1} << 40).value_or(0));
  check_cross_field(c, s);
  if (!c.ok()) return make_error(ErrorCode::InvalidArgument, c.message());
  if (pod_selector) {
    return make_error(
        ErrorCode::Unsupported,
        "spec.source.podSelector needs the Kubernetes mode of conduit-controller to find the pod's "
        "node; name source.node instead");
  }
  return s;
}

}  // namespace conduit::controller
