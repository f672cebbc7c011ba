// The TransferJob spec as the reconciler uses it: parsed from the object's JSON with the CRD's defaults, and
// checked the way the CRD's OpenAPI schema and CEL rules check it, because the local store has no apiserver
// to do that (against a cluster the same checks simply never fail).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/common/result.h"
#include "label_selector.h"

namespace conduit::controller {

// Reshard (docs/reshard.md): every source pod's shard of a model into every target pod's, each target byte
// from the source rank holding it, one scatter batch per (source pod, target pod) pair.
enum class Strategy : std::uint8_t { PointToPoint, Fanout, Chain, Reshard };
enum class TransportType : std::uint8_t { Auto, Efa, Verbs, Tcp, Shm };

std::string_view to_string(Strategy strategy);
std::string_view to_string(TransportType type);

// The pod a podSelector picked (pods.h): the node and region come from it, and the region must be one that
// pod shared with its node's agent.
struct PodRef {
  std::string name;
  std::string uid;
  std::string container_id;  // with `container`: the region must be one that container's process shared
};

struct SourceSpec {
  std::string node;                           // empty while a pod_selector is not resolved
  std::string region;                         // exactly one of region and file
  std::string file;                           // relative to the source agent's data directory
  std::optional<LabelSelector> pod_selector;  // instead of node: the one Ready pod it matches
  std::string container;                      // with pod_selector: the container that shared the region
  std::optional<PodRef> pod;                  // once resolved
};

struct CreateSpec {
  std::uint64_t bytes = 0;
  std::string memory = "host";  // host | cuda:N
};

struct TargetSpec {
  std::string node;  // empty while a pod_selector is not resolved
  std::string region;
  std::optional<CreateSpec> create;
  std::string file;  // save the region here once the bytes are in; empty: don't
  // Instead of node: one target per Ready pod it matches, each the region that pod shared (pods.h).
  std::optional<LabelSelector> pod_selector;
  std::string container;      // with pod_selector: the container that shared the region; "": any of the pod's
  std::optional<PodRef> pod;  // once resolved
};

struct TransferJobSpec {
  SourceSpec source;
  // Reshard, once its source podSelector is resolved: one source per selected pod, in pod-name order
  // (`source` is then the first of them). Empty for every other strategy.
  std::vector<SourceSpec> sources;
  std::vector<TargetSpec> targets;
  Strategy strategy = Strategy::PointToPoint;
  TransportType transport = TransportType::Auto;
  bool allow_fallback = false;
  std::uint64_t chunk_bytes = 1u << 20;
  std::uint32_t window = 16;
  bool verify = true;  // crc32c
  std::uint32_t backoff_limit = 3;
  std::optional<std::int64_t> active_deadline_seconds;
  std::optional<std::int64_t> ttl_seconds_after_finished;
  bool suspend = false;
  std::uint64_t max_bytes_per_second = 0;
  // Names or fnmatch globs of the source's tensors: only those move, into the same tensors of the target
  // (api/tensor_subset.h, docs/tensors.md "Subsets"). Empty: the whole region.
  std::vector<std::string> tensors;

  // InvalidArgument listing every problem ("spec.chunkBytes: 1024 is below the minimum 4096; ...").
  static Result<TransferJobSpec> parse(const nlohmann::json& spec);
  // The rules across fields again, for a spec whose selectors were replaced by the pods they picked
  // (pods.h): InvalidArgument naming each rule broken.
  Status check_resolved() const;
  // Whether the source or a target is still a podSelector.
  bool selects_pods() const;
};

// DNS-1123 label (region names) and subdomain (node names), as the CRD patterns say.
bool is_dns1123_label(std::string_view text);
bool is_dns1123_subdomain(std::string_view text);
// Relative, non-empty, without a ".." segment: a path that stays inside the agent's data directory.
bool is_relative_path_inside(std::string_view path);

}  // namespace conduit::controller
