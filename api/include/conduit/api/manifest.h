// A region's manifest: the named tensors in it, in safetensors' vocabulary (dtype names, shapes, byte ranges
// relative to the region, which is a .safetensors file's data section), plus string metadata. Users move
// models as named tensors; the manifest is what lets a receiver find, check and apply them without a layout
// table of its own. The same checks guard every way one arrives: a REST body, a .safetensors header, a
// TransferJob's source. Tensor names are free strings ("model.layers.0.self_attn.q_proj.weight"), not the
// DNS labels regions are named with.
//
// A sharded model's rank says where its tensors sit in the whole with a placement (docs/reshard.md): the
// reshard planner (conduit/api/reshard_plan.h) intersects those of the trainer's ranks with the inference
// ranks'.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/common/result.h"

namespace conduit::api {

// Where a rank's tensor sits in the whole: the row-major sub-box [start, start + shape) of a tensor of
// `global_shape`, the Tensor's own `shape` being the slice's extent (a TP rank's rows or columns, an FSDP
// rank's dim-0 shard, torch's uneven last shard). REST: {"globalShape": [...], "start": [...]}.
struct Placement {
  std::vector<std::uint64_t> global_shape;
  std::vector<std::uint64_t> start;

  bool operator==(const Placement&) const = default;
};

struct Tensor {
  std::string name;
  std::string dtype;                 // safetensors' name: "F32", "BF16", "I8", "F8_E4M3", ...
  std::vector<std::uint64_t> shape;  // [] is a 0-d tensor (one element); a 0 anywhere, an empty one
  std::uint64_t offset = 0;          // bytes from the region's start
  std::uint64_t length = 0;          // elements x dtype bits / 8
  // This rank's slice of a larger tensor; absent: the whole tensor (global shape = shape, start = 0).
  std::optional<Placement> placement{};

  // The whole tensor's shape, and where this slice starts in it: the placement's, or shape and zeros.
  std::vector<std::uint64_t> global_shape() const;
  std::vector<std::uint64_t> start() const;
};

// Bits per element of a safetensors dtype name; nullopt for a name safetensors does not define.
std::optional<std::uint32_t> dtype_bits(std::string_view dtype);

struct Manifest {
  std::vector<Tensor> tensors;  // by offset, ascending
  std::map<std::string, std::string> metadata{};

  // Bounds that keep one manifest from costing an agent more than a large model needs.
  static constexpr std::size_t kMaxTensors = 1 << 20;
  static constexpr std::size_t kMaxNameBytes = 1024;
  static constexpr std::size_t kMaxRank = 16;
  static constexpr std::size_t kMaxMetadataEntries = 1024;
  static constexpr std::size_t kMaxMetadataBytes = 1 << 20;  // keys and values together
  // The __metadata__ key a .safetensors header carries the placements under (a header has no place of its
  // own for them): a JSON string {tensor name: {globalShape, start}}, written only when a tensor has one.
  // Reserved: a manifest's own metadata may not use it.
  static constexpr std::string_view kPlacementKey = "conduit.placement";

  // {tensors: [{name, dtype, shape, offset, length, placement?}], metadata?: {string: string}}, as REST
  // bodies carry it.
  // Strict, and checked as check() does against a region of `region_bytes`: every error is InvalidArgument
  // naming the tensor ("tensors[3] (model.embed.weight): ...").
  static Result<Manifest> from_json(const nlohmann::json& body, std::uint64_t region_bytes);
  nlohmann::json to_json() const;

  // Names unique and bounded; dtypes known; each length what its dtype and shape make; ranges sorted by
  // offset, not overlapping, and inside [0, region_bytes). A placement has as many dimensions as the shape,
  // holds the slice inside the global shape, and places a sub-byte dtype (F4, F6_*) only whole.
  Status check(std::uint64_t region_bytes) const;

  // The tensors' end: where the last one ends (0 without tensors).
  std::uint64_t data_bytes() const;
  const Tensor* find(std::string_view name) const;

  // A .safetensors header (the JSON after the 8-byte size) over a data section of `data_bytes`. As the
  // format requires: the tensors back to back from offset 0, covering the data section exactly,
  // "__metadata__" string to string; a name given twice is refused (a JSON reader would keep one). The
  // placements under __metadata__'s kPlacementKey are read back into the tensors (and the key dropped from
  // the metadata); a malformed value is refused with the reason.
  static Result<Manifest> from_safetensors_header(std::string_view header, std::uint64_t data_bytes);
  // The header this manifest is (the placements under __metadata__'s kPlacementKey), padded with spaces to a
  // multiple of 8 bytes so the data section that follows the 8-byte size and the header starts 8-byte
  // aligned. Conflict when the tensors are not back to back from 0 (a region may leave gaps; a .safetensors
  // file may not), naming the first gap.
  Result<std::string> safetensors_header() const;
};

// The first 8 bytes of a .safetensors file: the header's size, little-endian. InvalidArgument past
// kMaxSafetensorsHeader or past what a file of `file_bytes` holds.
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;
Result<std::uint64_t> safetensors_header_size(const unsigned char (&prefix)[8], std::uint64_t file_bytes);

}  // namespace conduit::api
