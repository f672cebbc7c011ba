// A Kubernetes label selector (metav1.LabelSelector), as a TransferJob's podSelector holds it: read as
// strictly as the CRD's schema reads it, and written as the API server's `labelSelector` query, so the server
// picks the pods and the controller never matches labels itself.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/common/json_fields.h"

namespace conduit::controller {

struct LabelSelector {
  struct Requirement {
    std::string key;
    std::string op;  // In | NotIn | Exists | DoesNotExist
    std::vector<std::string> values;
    bool operator==(const Requirement&) const = default;
  };
  std::map<std::string, std::string> match_labels;
  std::vector<Requirement> match_expressions;

  // `selector` at `path` ("spec.targets[0].podSelector"), each problem into `problems`. Keys must be
  // qualified names and values label values, so the query below cannot be anything but this selector.
  static std::optional<LabelSelector> parse(const nlohmann::json& selector, const std::string& path,
                                            JsonProblems& problems);
  // "app=infer,tier in (a,b),!canary": the API server's syntax, also what messages show the user.
  std::string to_query() const;
  bool operator==(const LabelSelector&) const = default;
};

// A label key: an optional DNS-1123 subdomain prefix and '/', then a name of 1-63 of [A-Za-z0-9-_.] that
// starts and ends alphanumeric.
bool is_label_key(const std::string& key);
// A label value: empty, or as a key's name part.
bool is_label_value(const std::string& value);

}  // namespace conduit::controller
