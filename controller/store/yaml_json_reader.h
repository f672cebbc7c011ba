// YAML as people and tools write it, read as the JSON the Kubernetes API speaks: the one reader behind the
// local store's job files (one object per file) and Kubernetes mode's kubeconfig files, CRDs and examples
// (multi-document). Plain scalars are typed as YAML 1.2's core schema types them (as kubectl does), quoted
// ones stay strings. Aliases are bounded (65,536 values, 256 levels a document), strings must be UTF-8
// without U+FFFE or U+FFFF; anything else is InvalidArgument naming yaml-cpp's line and column.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "conduit/common/result.h"

namespace conduit::controller {

// What a plain (unquoted, untagged) scalar with this text reads as: null, a bool, an integer (non-negative
// ones unsigned, as nlohmann's parser makes them), a float, or else the text itself.
nlohmann::json plain_scalar(const std::string& text);

// The first document of the text (null when there is none); the error is yaml-cpp's message.
Result<nlohmann::json> parse_yaml(const std::string& text);

// Every non-empty document of a (possibly multi-document) text; the error is "YAML: " and yaml-cpp's message.
Result<std::vector<nlohmann::json>> parse_yaml_documents(const std::string& text);
// parse_yaml_documents of a file's text; Io when it cannot be read, errors prefixed with the path.
Result<std::vector<nlohmann::json>> load_yaml_file(const std::string& path);

}  // namespace conduit::controller
