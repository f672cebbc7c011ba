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

namespace conduit::controller {

enum class Strategy : std::uint8_t { PointToPoint, Fanout, Chain };
enum class TransportType : std::uint8_t { Auto, Efa, Verbs, Tcp, Shm };

std::string_view to_string(Strategy strategy);
std::string_view to_string(TransportType type);

struct SourceSpec {
  std::string node;
  std::string region;  // exactly one of region and file
  std::string file;    // relative to the source agent's data directory
};

struct CreateSpec {
  std::uint64_t bytes = 0;
  std::string memory = "host";  // host | cuda:N
};

struct TargetSpec {
  std::string node;
  std::string region;
  std::optional<CreateSpec> create;
  std::string file;  // save the region here once the bytes are in; empty: don't
};

struct TransferJobSpec {
  SourceSpec source;
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

  // InvalidArgument listing every problem ("spec.chunkBytes: 1024 is below the minimum 4096; ..."), or
  // Unsupported for forms this controller cannot carry out yet (source.podSelector without Kubernetes).
  static Result<TransferJobSpec> parse(const nlohmann::json& spec);
};

// DNS-1123 label (region names) and subdomain (node names), as the CRD patterns say.
bool is_dns1123_label(std::string_view text);
bool is_dns1123_subdomain(std::string_view text);
// Relative, non-empty, without a ".." segment: a path that stays inside the agent's data directory.
bool is_relative_path_inside(std::string_view path);

}  // namespace conduit::controller
