// A region's manifest: the named tensors in it, in safetensors' vocabulary (dtype names, shapes, byte ranges
// relative to the region, which is a .safetensors file's data section), plus string metadata. Users move
// models as named tensors; the manifest is what lets a receiver find, check and apply them without a layout
// table of its own. The same checks guard every way one arrives: a REST body, a .safetensors header, a
// TransferJob's source. Tensor names are free strings ("model.layers.0.self_attn.q_proj.weight"), not the
// DNS labels regions are named with.
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

struct Tensor {
  std::string name;
  std::string dtype;                 // safetensors' name: "F32", "BF16", "I8", "F8_E4M3", ...
  std::vector<std::uint64_t> shape;  // [] is a 0-d tensor (one element); a 0 anywhere, an empty one
  std::uint64_t offset = 0;          // bytes from the region's start
  std::uint64_t length = 0;          // elements x dtype bits / 8
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

  // {tensors: [{name, dtype, shape, offset, length}], metadata?: {string: string}}, as REST bodies carry it.
  // Strict, and checked as check() does against a region of `region_bytes`: every error is InvalidArgument
  // naming the tensor ("tensors[3] (model.embed.weight): ...").
  static Result<Manifest> from_json(const nlohmann::json& body, std::uint64_t region_bytes);
  nlohmann::json to_json() const;

  // Names unique and bounded; dtypes known; each length what its dtype and shape make; ranges sorted by
  // offset, not overlapping, and inside [0, region_bytes).
  Status check(std::uint64_t region_bytes) const;

  // The tensors' end: where the last one ends (0 without tensors).
  std::uint64_t data_bytes() const;
  const Tensor* find(std::string_view name) const;

  // A .safetensors header (the JSON after the 8-byte size) over a data section of `data_bytes`. As the
  // format requires: the tensors back to back from offset 0, covering the data section exactly,
  // "__metadata__" string to string; a name given twice is refused (a JSON reader would keep one).
  static Result<Manifest> from_safetensors_header(std::string_view header, std::uint64_t data_bytes);
  // The header this manifest is, padded with spaces to a multiple of 8 bytes so the data section that
  // follows the 8-byte size and the header starts 8-byte aligned. Conflict when the tensors are not
  // back to back from 0 (a region may leave gaps; a .safetensors file may not), naming the first gap.
  Result<std::string> safetensors_header() const;
};

// The first 8 bytes of a .safetensors file: the header's size, little-endian. InvalidArgument past
// kMaxSafetensorsHeader or past what a file of `file_bytes` holds.
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;
Result<std::uint64_t> safetensors_header_size(const unsigned char (&prefix)[8], std::uint64_t file_bytes);

}  // namespace conduit::api
