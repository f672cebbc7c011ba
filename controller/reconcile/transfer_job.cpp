#include "transfer_job.h"

#include <algorithm>
#include <set>
#include <utility>

#include "conduit/api/manifest.h"
#include "conduit/api/tensor_subset.h"
#include "conduit/common/json_fields.h"

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
    case Strategy::Reshard:
      return "Reshard";
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

// Collects every problem so one `kubectl apply`-like round trip shows them all, as the apiserver does. Fields
// are read by conduit::JsonFields (null reads as absent: merge patches write null); the checks here are the
// CRD's own (names, enums).
class Checker {
 public:
  void fail(const std::string& field, const std::string& problem) { problems_.add(field + ": " + problem); }
  bool ok() const { return problems_.ok(); }
  std::string message() const { return problems_.message(); }

  // A reader of one object at `path`. Callers refuse unknown fields with only(): in a cluster they would be
  // pruned, here they are typos.
  JsonFields fields(const json& object, const std::string& path) {
    return JsonFields(object, path, problems_, /*null_is_absent=*/true);
  }
  std::optional<LabelSelector> selector(const json& object, const std::string& path) {
    return LabelSelector::parse(object, path, problems_);
  }
  // A container name (a DNS-1123 label), only beside a podSelector.
  std::string container(JsonFields& f, bool pod_selector, const std::string& path) {
    auto name = f.text("container", Need::Optional, 63);
    if (!name) return {};
    if (!is_dns1123_label(*name))
      fail(path + ".container", "\"" + *name + "\" is not a container name (a DNS-1123 label)");
    if (!pod_selector)
      fail(path,
           "container applies to a podSelector: it names which of the pod's containers shared the region");
    return *name;
  }

  template <typename E>
  std::optional<E> one_of(JsonFields& f, const char* key,
                          std::initializer_list<std::pair<const char*, E>> values) {
    auto text = f.text(key, Need::Optional, 64);
    if (!text) return std::nullopt;
    std::string allowed;
    for (const auto& [name, value] : values) {
      if (*text == name) return value;
      allowed += (allowed.empty() ? "" : ", ") + std::string(name);
    }
    f.fail(key, "\"" + *text + "\" is not one of " + allowed);
    return std::nullopt;
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
  JsonProblems problems_{JsonProblems::Keep::All};
};

void parse_source(Checker& c, JsonFields& fields, SourceSpec& out) {
  const json* source = fields.object("source", Need::Required);
  if (source == nullptr) return;
  auto f = c.fields(*source, "spec.source");
  f.only({"node", "region", "file", "podSelector", "container"});
  auto node = f.text("node", Need::Optional, 253);
  auto region = f.text("region", Need::Optional, 63);
  auto file = f.text("file", Need::Optional, 1024);
  const bool pod_selector = f.has("podSelector");
  if (pod_selector) out.pod_selector = c.selector((*source)["podSelector"], "spec.source.podSelector");
  out.container = c.container(f, pod_selector, "spec.source");
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
  if (!spec.contains("targets") || spec["targets"].is_null()) {
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
    auto f = c.fields(targets[i], path);
    f.only({"node", "region", "create", "file", "podSelector", "container"});
    TargetSpec target;
    auto node = f.text("node", Need::Optional, 253);
    const bool pod_selector = f.has("podSelector");
    if (pod_selector) target.pod_selector = c.selector(targets[i]["podSelector"], path + ".podSelector");
    target.container = c.container(f, pod_selector, path);
    if (node.has_value() == pod_selector) c.fail(path, "a target needs exactly one of node or podSelector");
    auto region = f.text("region", Need::Optional, 63);
    c.node(node, path + ".node");
    c.region(region, path + ".region");
    auto file = f.text("file", Need::Optional, 1024);
    c.file(file, path + ".file");
    if (!region && !file) c.fail(path, "a target needs a region, a file, or both");
    if (pod_selector && (!region || file || f.has("create"))) {
      c.fail(
          path,
          "a podSelector target is the region each pod shared: it takes region, and neither file nor create");
    }
    if (!region && f.has("create"))
      c.fail(path, "create applies to a region; a file target with no region needs none");
    if (const json* create = f.object("create")) {
      auto cf = c.fields(*create, path + ".create");
      cf.only({"bytes", "memory"});
      CreateSpec cs;
      const auto bytes = cf.i64("bytes", Need::Required, 1, std::int64_t{1} << 44);
      cs.bytes = static_cast<std::uint64_t>(bytes.value_or(0));
      if (auto memory = cf.text("memory", Need::Optional, 9)) {
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

// The CRD's CEL rules across fields. A target still given by a podSelector has no node yet: the rules that
// need one are checked again once its pods are known (`resolved`), when a Fanout or Chain may have come
// down to one target, which check_resolved's caller (pods.cpp) runs as PointToPoint.
// spec.tensors: 1 to kMaxTensorPatterns names or globs, each as long as a tensor name may be.
std::vector<std::string> parse_tensors(Checker& c, const json& tensors) {
  std::vector<std::string> out;
  if (tensors.empty() || tensors.size() > api::kMaxTensorPatterns) {
    c.fail("spec.tensors", "must hold 1 to " + std::to_string(api::kMaxTensorPatterns) + " names, got " +
                               std::to_string(tensors.size()));
    return out;
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string path = "spec.tensors[" + std::to_string(i) + "]";
    if (!tensors[i].is_string() || tensors[i].get_ref<const std::string&>().empty() ||
        tensors[i].get_ref<const std::string&>().size() > api::Manifest::kMaxNameBytes) {
      c.fail(path, "must be a tensor name or glob of 1 to " + std::to_string(api::Manifest::kMaxNameBytes) +
                       " characters");
      continue;
    }
    out.push_back(tensors[i].get<std::string>());
  }
  return out;
}

// A subset moves as one scatter batch (api/tensor_subset.h), which has the rules of an op list: from a
// region, to one target region, neither verified as it lands, paced, saved nor forwarded.
void check_tensors(Checker& c, const TransferJobSpec& s) {
  if (s.tensors.empty()) return;
  if (!s.source.file.empty())
    c.fail("spec.tensors",
           "needs source.region: a file's tensors are moved by loading it into a region first");
  if (s.strategy == Strategy::Chain)
    c.fail("spec.tensors", "cannot be used with strategy Chain: a hop forwards whole ranges, not tensors");
  if (s.strategy == Strategy::Fanout)
    c.fail("spec.tensors", "needs strategy PointToPoint for now: one scatter batch reaches one target");
  if (s.max_bytes_per_second != 0)
    c.fail("spec.tensors", "cannot be used with maxBytesPerSecond: a scatter batch is not paced");
  for (const auto& t : s.targets) {
    if (!t.file.empty() || t.region.empty())
      c.fail("spec.tensors", "moves into a target region's tensors: a target takes a region and no file");
  }
}

// Reshard: every trainer pod's region into every inference pod's (docs/reshard.md), so one podSelector on
// each side and nothing a scatter batch cannot do (a file, a region to create, a subset, a pace).
void check_reshard(Checker& c, const TransferJobSpec& s, bool resolved) {
  if (s.strategy != Strategy::Reshard) return;
  const bool source_selects = s.source.pod_selector.has_value() || !s.sources.empty();
  if (!source_selects || !s.source.file.empty())
    c.fail("spec.source", "strategy Reshard needs source.podSelector with region: the trainer pods' regions");
  if (!resolved && s.targets.size() != 1)
    c.fail("spec.targets", "strategy Reshard needs exactly one target, a podSelector: the inference pods");
  for (const auto& t : s.targets) {
    if ((!resolved && !t.pod_selector) || !t.file.empty() || t.create || t.region.empty()) {
      c.fail("spec.targets",
             "strategy Reshard needs a podSelector target with region, and neither node, file nor create: "
             "each inference pod's region, holding its shards' manifest");
      break;
    }
  }
  if (!s.tensors.empty())
    c.fail("spec.tensors", "cannot be used with strategy Reshard: the manifests say which tensors move");
  if (s.max_bytes_per_second != 0)
    c.fail("spec.maxBytesPerSecond", "cannot be used with strategy Reshard: a scatter batch is not paced");
  if (!resolved) return;
  // Over its pods: no region both a source and a target, none a source twice.
  std::set<std::pair<std::string, std::string>> sources;
  for (const auto& src : s.sources) {
    if (!sources.insert({src.node, src.region}).second) {
      c.fail("spec.source",
             "two source pods' regions are one region (\"" + src.region + "\" on node \"" + src.node + "\")");
    }
  }
  for (const auto& t : s.targets) {
    if (sources.count({t.node, t.region}) > 0) {
      c.fail("spec", "a target pod's region is a source pod's region (\"" + t.region + "\" on node \"" +
                         t.node + "\")");
    }
  }
}

void check_cross_field(Checker& c, const TransferJobSpec& s, bool resolved) {
  check_tensors(c, s);
  check_reshard(c, s, resolved);
  const auto n = s.targets.size();
  const bool selects = std::any_of(s.targets.begin(), s.targets.end(),
                                   [](const TargetSpec& t) { return t.pod_selector.has_value(); });
  if (s.strategy == Strategy::PointToPoint && n != 1) {
    c.fail("spec", "strategy PointToPoint needs exactly one target; use Fanout or Chain for more");
  }
  if (!resolved && !selects && s.strategy == Strategy::Fanout && n < 2)
    c.fail("spec", "strategy Fanout needs at least 2 targets; use PointToPoint for one");
  if (!resolved && !selects && s.strategy == Strategy::Chain && n < 2)
    c.fail("spec", "strategy Chain needs at least 2 targets; use PointToPoint for one");
  std::set<std::pair<std::string, std::string>> seen;
  std::set<std::pair<std::string, std::string>> files;
  for (const auto& t : s.targets) {
    if (t.pod_selector) {
      // As the CRD: which node a pod is on is not known before the job starts, so shm cannot be promised.
      if (s.transport == TransportType::Shm)
        c.fail("spec", "transport shm needs source.node and every target on the source's node");
      continue;
    }
    const std::string target = t.pod ? " (pod " + t.pod->name + ")" : "";
    if (!s.source.region.empty() && !s.source.node.empty() && t.node == s.source.node &&
        t.region == s.source.region) {
      c.fail("spec", "a target may not be the source region itself (same node and same region)" + target);
    }
    if (!t.region.empty() && !seen.insert({t.node, t.region}).second)
      c.fail("spec", "targets must be unique by node and region" + target);
    if (!t.file.empty() && !files.insert({t.node, t.file}).second)
      c.fail("spec", "two targets on one node may not write the same file (\"" + t.file + "\" on \"" +
                         t.node + "\")");
    if (!t.file.empty() && t.node == s.source.node && t.file == s.source.file)
      c.fail("spec", "a target may not write the source file itself (same node and same file)");
    if (s.transport == TransportType::Shm && (s.source.node.empty() || t.node != s.source.node)) {
      c.fail("spec", "transport shm needs source.node and every target on the source's node" + target);
    }
  }
}

}  // namespace

Result<TransferJobSpec> TransferJobSpec::parse(const json& spec) {
  if (!spec.is_object())
    return make_error(ErrorCode::InvalidArgument, "spec: is required and must be an object");
  Checker c;
  TransferJobSpec s;
  auto f = c.fields(spec, "spec");
  f.only({"source", "targets", "strategy", "transport", "chunkBytes", "window", "verify", "backoffLimit",
          "activeDeadlineSeconds", "ttlSecondsAfterFinished", "suspend", "maxBytesPerSecond", "tensors"});
  parse_source(c, f, s.source);
  parse_targets(c, spec, s.targets);
  s.strategy = c.one_of<Strategy>(f, "strategy",
                                  {{"PointToPoint", Strategy::PointToPoint},
                                   {"Fanout", Strategy::Fanout},
                                   {"Chain", Strategy::Chain},
                                   {"Reshard", Strategy::Reshard}})
                   .value_or(Strategy::PointToPoint);
  if (const json* transport = f.object("transport")) {
    auto tf = c.fields(*transport, "spec.transport");
    tf.only({"type", "allowFallback"});
    s.transport = c.one_of<TransportType>(tf, "type",
                                          {{"auto", TransportType::Auto},
                                           {"efa", TransportType::Efa},
                                           {"verbs", TransportType::Verbs},
                                           {"tcp", TransportType::Tcp},
                                           {"shm", TransportType::Shm}})
                      .value_or(TransportType::Auto);
    s.allow_fallback = tf.boolean("allowFallback").value_or(false);
  }
  s.chunk_bytes =
      static_cast<std::uint64_t>(f.i64("chunkBytes", Need::Optional, 4096, 64 << 20).value_or(1 << 20));
  s.window = static_cast<std::uint32_t>(f.i64("window", Need::Optional, 1, 256).value_or(16));
  s.verify = c.one_of<bool>(f, "verify", {{"none", false}, {"crc32c", true}}).value_or(true);
  s.backoff_limit = static_cast<std::uint32_t>(f.i64("backoffLimit", Need::Optional, 0, 20).value_or(3));
  s.active_deadline_seconds = f.i64("activeDeadlineSeconds", Need::Optional, 1, 604800);
  s.ttl_seconds_after_finished = f.i64("ttlSecondsAfterFinished", Need::Optional, 0, 31536000);
  s.suspend = f.boolean("suspend").value_or(false);
  s.max_bytes_per_second = static_cast<std::uint64_t>(
      f.i64("maxBytesPerSecond", Need::Optional, 0, std::int64_t{1} << 40).value_or(0));
  if (const json* tensors = f.array("tensors")) s.tensors = parse_tensors(c, *tensors);
  check_cross_field(c, s, /*resolved=*/false);
  if (!c.ok()) return make_error(ErrorCode::InvalidArgument, c.message());
  return s;
}

Status TransferJobSpec::check_resolved() const {
  Checker c;
  check_cross_field(c, *this, /*resolved=*/true);
  if (!c.ok()) return make_error(ErrorCode::InvalidArgument, c.message());
  return {};
}

bool TransferJobSpec::selects_pods() const {
  return source.pod_selector.has_value() ||
         std::any_of(targets.begin(), targets.end(),
                     [](const TargetSpec& t) { return t.pod_selector.has_value(); });
}

}  // namespace conduit::controller
