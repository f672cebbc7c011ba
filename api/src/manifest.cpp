#include "conduit/api/manifest.h"

#include <algorithm>
#include <array>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "conduit/common/json_fields.h"
#include "conduit/common/little_endian.h"

namespace conduit::api {

namespace {

using json = nlohmann::json;

// safetensors' dtypes (safetensors/src/tensor.rs, Dtype::bitsize).
constexpr std::array<std::pair<std::string_view, std::uint32_t>, 22> kDtypes{{
    {"BOOL", 8},    {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6},     {"U8", 8},          {"I8", 8},
    {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},
    {"U16", 16},    {"F16", 16},    {"BF16", 16},   {"I32", 32},        {"U32", 32},        {"F32", 32},
    {"C64", 64},    {"F64", 64},    {"I64", 64},    {"U64", 64},
}};

constexpr std::string_view kMetadataKey = "__metadata__";

Error bad(const std::string& what) { return make_error(ErrorCode::InvalidArgument, what); }

std::string label(std::size_t i, const Tensor& t) {
  return "tensors[" + std::to_string(i) + "] (" +
         (t.name.size() <= 128 ? t.name : t.name.substr(0, 128) + "...") + ")";
}

// Elements x bits / 8, or why not: a product past 64 bits, or a sub-byte dtype whose elements end mid-byte.
Result<std::uint64_t> byte_length(const std::vector<std::uint64_t>& shape, const std::string& dtype,
                                  std::uint32_t bits) {
  std::uint64_t elements = 1;
  for (const std::uint64_t d : shape) {
    if (d != 0 && elements > UINT64_MAX / d) return bad("shape overflows 64 bits");
    elements *= d;
  }
  if (elements > UINT64_MAX / bits) return bad("shape overflows 64 bits");
  const std::uint64_t total_bits = elements * bits;
  if (total_bits % 8 != 0)
    return bad(dtype + " elements end mid-byte: " + std::to_string(elements) + " of them");
  return total_bits / 8;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) { return json(shape).dump(); }

// A dimension or an offset: parsed text holds n >= 0 as unsigned, but a body built in C++ holds small
// numbers as signed.
std::optional<std::uint64_t> natural(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

// The dimensions of `shape` (an array), or why not, for the field at `path` ("tensors[0].shape").
Result<std::vector<std::uint64_t>> dimensions(const json& shape, const std::string& path) {
  std::vector<std::uint64_t> out;
  for (const json& d : shape) {
    const auto n = natural(d);
    // int64, as the spec and torch hold them: a dimension past 2^63 - 1 is refused even beside a 0.
    if (!n || *n > INT64_MAX) return bad(path + ": each dimension must be an integer in [0, 2^63)");
    out.push_back(*n);
  }
  return out;
}

// A placement as REST bodies and a .safetensors header's kPlacementKey carry it: {globalShape, start}.
Result<Placement> placement_from_json(const json& j, const std::string& path) {
  JsonFields f(j, path);
  f.only({"globalShape", "start"});
  const json* global = f.array("globalShape", Need::Required);
  const json* start = f.array("start", Need::Required);
  if (!f.ok()) return f.status().error();
  auto global_dims = dimensions(*global, path + ".globalShape");
  if (!global_dims) return global_dims.error();
  auto start_dims = dimensions(*start, path + ".start");
  if (!start_dims) return start_dims.error();
  return Placement{std::move(*global_dims), std::move(*start_dims)};
}

nlohmann::ordered_json placement_json(const Placement& p) {
  return {{"globalShape", p.global_shape}, {"start", p.start}};
}

// Why `t`'s placement cannot be right (dtype and shape already checked), or "".
std::string placement_problem(const Tensor& t, std::uint32_t bits) {
  if (!t.placement) return "";
  const Placement& p = *t.placement;
  if (p.global_shape.size() != t.shape.size() || p.start.size() != t.shape.size()) {
    return "placement: globalShape " + shape_text(p.global_shape) + " and start " + shape_text(p.start) +
           " must have as many dimensions as shape " + shape_text(t.shape);
  }
  for (std::size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] > p.global_shape[d] || p.start[d] > p.global_shape[d] - t.shape[d]) {
      return "placement: start " + shape_text(p.start) + " + shape " + shape_text(t.shape) +
             " passes globalShape " + shape_text(p.global_shape) + " in dimension " + std::to_string(d);
    }
  }
  if (bits % 8 != 0 && (p.global_shape != t.shape || std::any_of(p.start.begin(), p.start.end(),
                                                                 [](std::uint64_t s) { return s != 0; }))) {
    return "placement: a " + t.dtype +
           " tensor is placed only whole (its elements share bytes): globalShape must be its shape and "
           "start all 0";
  }
  if (auto length = byte_length(p.global_shape, t.dtype, bits); !length) {
    return "placement: globalShape: " + length.error().message;
  }
  return "";
}

// One tensor as REST bodies carry it.
Result<Tensor> tensor_from_json(const json& j, const std::string& path) {
  JsonFields f(j, path);
  f.only({"name", "dtype", "shape", "offset", "length", "placement"});
  Tensor t;
  t.name = f.text("name", Need::Required, Manifest::kMaxNameBytes).value_or("");
  t.dtype = f.text("dtype", Need::Required, 16).value_or("");
  const json* shape = f.array("shape", Need::Required);
  t.offset = f.u64("offset", Need::Required).value_or(0);
  t.length = f.u64("length", Need::Required).value_or(0);
  const json* placement = f.object("placement");
  if (!f.ok()) return f.status().error();
  auto dims = dimensions(*shape, path + ".shape");
  if (!dims) return dims.error();
  t.shape = std::move(*dims);
  if (placement != nullptr) {
    auto p = placement_from_json(*placement, path + ".placement");
    if (!p) return p.error();
    t.placement = std::move(*p);
  }
  return t;
}

// The placements a .safetensors header carries under __metadata__'s kPlacementKey, moved from `m`'s metadata
// into its tensors, or why the value cannot be read.
Status take_placements(Manifest& m) {
  const auto found = m.metadata.find(std::string(Manifest::kPlacementKey));
  if (found == m.metadata.end()) return {};
  const std::string at = "__metadata__." + std::string(Manifest::kPlacementKey);
  const json doc = json::parse(found->second, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return bad(at + ": must be a JSON object {tensor name: {globalShape, start}} in a string");
  }
  std::unordered_map<std::string_view, Tensor*> by_name;
  for (Tensor& t : m.tensors) by_name.emplace(t.name, &t);
  for (const auto& [name, entry] : doc.items()) {
    const std::string shown = name.size() <= 128 ? name : name.substr(0, 128) + "...";
    const auto t = by_name.find(name);
    if (t == by_name.end())
      return bad(at + ": names tensor \"" + shown + "\", which the header does not hold");
    auto p = placement_from_json(entry, at + ".\"" + shown + "\"");
    if (!p) return p.error();
    t->second->placement = std::move(*p);
  }
  m.metadata.erase(found);
  return {};
}

}  // namespace

std::optional<std::uint32_t> dtype_bits(std::string_view dtype) {
  for (const auto& [name, bits] : kDtypes) {
    if (name == dtype) return bits;
  }
  return std::nullopt;
}

std::vector<std::uint64_t> Tensor::global_shape() const {
  return placement ? placement->global_shape : shape;
}

std::vector<std::uint64_t> Tensor::start() const {
  return placement ? placement->start : std::vector<std::uint64_t>(shape.size(), 0);
}

Status Manifest::check(std::uint64_t region_bytes) const {
  if (tensors.size() > kMaxTensors) return bad("tensors: at most " + std::to_string(kMaxTensors));
  // Hashed: a model's manifest holds up to a million names, most sharing long prefixes.
  std::unordered_set<std::string_view> names;
  names.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const auto at = [&] { return label(i, t); };  // made only for an error
    if (t.name.empty() || t.name.size() > kMaxNameBytes)
      return bad(at() + ": the name must be 1 to " + std::to_string(kMaxNameBytes) + " bytes");
    if (t.name == kMetadataKey)
      return bad(at() + ": the name is reserved for a .safetensors file's metadata");
    if (!names.insert(t.name).second) return bad(at() + ": the name is given twice");
    const auto bits = dtype_bits(t.dtype);
    if (!bits)
      return bad(at() + ": dtype \"" + t.dtype + "\" is not one of safetensors' (F32, BF16, I8, ...)");
    if (t.shape.size() > kMaxRank)
      return bad(at() + ": more than " + std::to_string(kMaxRank) + " dimensions");
    auto length = byte_length(t.shape, t.dtype, *bits);
    if (!length) return bad(at() + ": " + length.error().message);
    if (*length != t.length) {
      return bad(at() + ": length " + std::to_string(t.length) + " is not what " + t.dtype + " " +
                 shape_text(t.shape) + " takes (" + std::to_string(*length) + " bytes)");
    }
    if (const std::string why = placement_problem(t, *bits); !why.empty()) return bad(at() + ": " + why);
    if (t.offset > region_bytes || t.length > region_bytes - t.offset) {
      return bad(at() + ": bytes [" + std::to_string(t.offset) + ", +" + std::to_string(t.length) +
                 ") are outside the " + std::to_string(region_bytes) + "-byte region");
    }
    if (i > 0) {
      const Tensor& before = tensors[i - 1];
      if (t.offset < before.offset + before.length) {
        return bad(at() + ": starts at " + std::to_string(t.offset) + ", inside or before " +
                   label(i - 1, before) + ", which ends at " + std::to_string(before.offset + before.length) +
                   " (tensors are listed by offset and do not overlap)");
      }
    }
  }
  if (metadata.contains(std::string(kPlacementKey))) {
    return bad("metadata." + std::string(kPlacementKey) +
               ": the key is reserved for the placements a .safetensors file carries");
  }
  if (metadata.size() > kMaxMetadataEntries)
    return bad("metadata: at most " + std::to_string(kMaxMetadataEntries) + " entries");
  std::size_t bytes = 0;
  for (const auto& [k, v] : metadata) bytes += k.size() + v.size();
  if (bytes > kMaxMetadataBytes)
    return bad("metadata: more than " + std::to_string(kMaxMetadataBytes) + " bytes");
  return {};
}

Result<Manifest> Manifest::from_json(const json& body, std::uint64_t region_bytes) {
  if (!body.is_object()) return bad("the manifest must be a JSON object");
  JsonFields f(body, "");
  f.only({"tensors", "metadata"});
  const json* list = f.array("tensors", Need::Required);
  const json* meta = f.object("metadata");
  if (!f.ok()) return f.status().error();
  if (list->size() > kMaxTensors) return bad("tensors: at most " + std::to_string(kMaxTensors));
  Manifest m;
  m.tensors.reserve(list->size());
  for (std::size_t i = 0; i < list->size(); ++i) {
    auto t = tensor_from_json((*list)[i], "tensors[" + std::to_string(i) + "]");
    if (!t) return t.error();
    m.tensors.push_back(std::move(*t));
  }
  if (meta != nullptr) {
    for (const auto& [k, v] : meta->items()) {
      if (!v.is_string()) return bad("metadata." + k + ": must be a string");
      m.metadata.emplace(k, v.get<std::string>());
    }
  }
  if (auto ok = m.check(region_bytes); !ok) return ok.error();
  return m;
}

json Manifest::to_json() const {
  json list = json::array();
  for (const Tensor& t : tensors) {
    json entry = {
        {"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"offset", t.offset}, {"length", t.length}};
    if (t.placement)
      entry["placement"] = {{"globalShape", t.placement->global_shape}, {"start", t.placement->start}};
    list.push_back(std::move(entry));
  }
  return {{"tensors", std::move(list)}, {"metadata", metadata}};
}

std::uint64_t Manifest::data_bytes() const {
  std::uint64_t end = 0;
  for (const Tensor& t : tensors) end = std::max(end, t.offset + t.length);
  return end;
}

const Tensor* Manifest::find(std::string_view name) const {
  for (const Tensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<Manifest> Manifest::from_safetensors_header(std::string_view header, std::uint64_t data_bytes) {
  // nlohmann keeps the last of two equal keys; the format (and a reader trusting names) needs them unique.
  bool duplicate = false;
  std::string duplicate_name;
  std::set<std::string> seen;
  const json::parser_callback_t unique_keys = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second &&
        !duplicate) {
      duplicate = true;
      duplicate_name = parsed.get<std::string>();
    }
    return true;
  };
  const json doc = json::parse(header.begin(), header.end(), unique_keys, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return bad("the .safetensors header is not JSON");
  if (!doc.is_object()) return bad("the .safetensors header must be a JSON object");
  if (duplicate) return bad("the .safetensors header names tensor \"" + duplicate_name + "\" twice");
  Manifest m;
  for (const auto& [name, entry] : doc.items()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) return bad("__metadata__ must be an object of strings");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) return bad("__metadata__." + k + ": must be a string");
        m.metadata.emplace(k, v.get<std::string>());
      }
      continue;
    }
    if (m.tensors.size() == kMaxTensors)
      return bad("the .safetensors header holds more than " + std::to_string(kMaxTensors) + " tensors");
    const std::string path = "tensor \"" + (name.size() <= 128 ? name : name.substr(0, 128) + "...") + "\"";
    JsonFields f(entry, path);
    f.only({"dtype", "shape", "data_offsets"});
    Tensor t;
    t.name = name;
    t.dtype = f.text("dtype", Need::Required, 16).value_or("");
    const json* shape = f.array("shape", Need::Required);
    const json* offsets = f.array("data_offsets", Need::Required);
    if (!f.ok()) return f.status().error();
    auto dims = dimensions(*shape, path + ".shape");
    if (!dims) return dims.error();
    t.shape = std::move(*dims);
    if (offsets->size() != 2) return bad(path + ".data_offsets: must be [begin, end]");
    const std::uint64_t begin = natural((*offsets)[0]).value_or(UINT64_MAX);
    const std::uint64_t end = natural((*offsets)[1]).value_or(UINT64_MAX);
    if (begin == UINT64_MAX || end == UINT64_MAX) return bad(path + ".data_offsets: must be [begin, end]");
    if (end < begin) return bad(path + ".data_offsets: end before begin");
    t.offset = begin;
    t.length = end - begin;
    m.tensors.push_back(std::move(t));
  }
  if (auto placed = take_placements(m); !placed) return placed.error();
  // By offset, as the data section holds them; a zero-length tensor before a longer one at the same offset.
  std::stable_sort(m.tensors.begin(), m.tensors.end(), [](const Tensor& a, const Tensor& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.length < b.length;
  });
  std::uint64_t expected = 0;
  for (const Tensor& t : m.tensors) {
    if (t.offset != expected) {
      return bad("tensor \"" + t.name + "\" starts at " + std::to_string(t.offset) + ", not at " +
                 std::to_string(expected) +
                 " where the tensor before it ends (a .safetensors file holds its "
                 "tensors back to back)");
    }
    expected = t.offset + t.length;
  }
  if (expected != data_bytes) {
    return bad("the tensors end at byte " + std::to_string(expected) + " of a " + std::to_string(data_bytes) +
               "-byte data section (a .safetensors file holds exactly its tensors)");
  }
  if (auto ok = m.check(data_bytes); !ok) return ok.error();
  return m;
}

Result<std::string> Manifest::safetensors_header() const {
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  nlohmann::ordered_json placements = nlohmann::ordered_json::object();
  for (const Tensor& t : tensors) {
    if (t.placement) placements[t.name] = placement_json(*t.placement);
  }
  if (!metadata.empty() || !placements.empty()) {
    auto meta = nlohmann::ordered_json(metadata);
    // std::map's order, kPlacementKey among the others: as a writer sorting its keys puts it.
    if (!placements.empty()) {
      std::map<std::string, std::string> all = metadata;
      all.emplace(kPlacementKey, placements.dump());
      meta = all;
    }
    doc[std::string(kMetadataKey)] = std::move(meta);
  }
  std::uint64_t expected = 0;
  for (const Tensor& t : tensors) {
    if (t.offset != expected) {
      return make_error(ErrorCode::Conflict,
                        "tensor \"" + t.name + "\" starts at " + std::to_string(t.offset) +
                            ", after a gap from " + std::to_string(expected) +
                            ": a .safetensors file holds its tensors back to back from offset 0");
    }
    expected = t.offset + t.length;
    doc[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.offset, t.offset + t.length}}};
  }
  std::string text = doc.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

Result<std::uint64_t> safetensors_header_size(const unsigned char (&prefix)[8], std::uint64_t file_bytes) {
  const std::uint64_t n = load_le64(prefix);
  if (n > kMaxSafetensorsHeader) {
    return bad("the .safetensors header claims " + std::to_string(n) + " bytes, more than the format's " +
               std::to_string(kMaxSafetensorsHeader));
  }
  if (file_bytes < 8 || n > file_bytes - 8) {
    return bad("the .safetensors header claims " + std::to_string(n) + " bytes, past the end of the " +
               std::to_string(file_bytes) + "-byte file");
  }
  return n;
}

}  // namespace conduit::api
