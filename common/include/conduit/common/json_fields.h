// Strict reading of one JSON object from outside (a REST body, a TransferJob spec): every field has one
// type, integers are integers (4096.0 is refused: a size that went through a double may be off), unknown
// fields are errors, and each error names the path of the field ("targets[0].offset: must be a non-negative
// integer"). Errors go to a JsonProblems: a REST body keeps the first (one clear 400; after it every read
// returns nullopt, so a parser reads straight down and checks ok() once), a TransferJob spec keeps them all
// (reported at once, as the apiserver does).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/common/result.h"

namespace conduit {

enum class Need { Optional, Required };

// Client text for an error message: in double quotes, cut after 64 characters so that a hostile body cannot
// make the answer huge.
std::string quoted_text(std::string_view text);

// What the readers of one document refused, as "path: why" lines.
class JsonProblems {
 public:
  enum class Keep { First, All };
  explicit JsonProblems(Keep keep = Keep::First) : keep_(keep) {}

  void add(std::string problem);
  bool ok() const { return problems_.empty(); }
  std::size_t count() const { return problems_.size(); }
  // Whether reading goes on: always when keeping all, else until the first problem.
  bool reading() const { return keep_ == Keep::All || problems_.empty(); }
  // The problems joined by "; ".
  std::string message() const;
  // InvalidArgument with message(), or OK.
  Status status() const;

 private:
  Keep keep_;
  std::vector<std::string> problems_;
};

class JsonFields {
 public:
  // `path` names the object in messages: "" for a body, "source", "targets[0]", "spec.source".
  // `null_is_absent`: a null field reads as a missing one (Kubernetes objects; merge patches write null).
  // Problems go to `problems`, which must outlive this reader; without it, to the reader's own (Keep::First).
  JsonFields(const nlohmann::json& object, std::string path, JsonProblems& problems,
             bool null_is_absent = false);
  JsonFields(const nlohmann::json& object, std::string path, bool null_is_absent = false);
  JsonFields(const JsonFields&) = delete;
  JsonFields& operator=(const JsonFields&) = delete;

  bool ok() const { return problems_->ok(); }
  // The problems so far (InvalidArgument), or OK.
  Status status() const { return problems_->status(); }
  // Records `why` for `key` ("path.key: why").
  void fail(std::string_view key, const std::string& why);
  // "path.key", or "key" at the top level.
  std::string path_of(std::string_view key) const;

  // Every field must be one of `known`.
  void only(std::initializer_list<std::string_view> known);
  bool has(const char* key) const;

  std::optional<std::string> string(const char* key, Need need = Need::Optional);
  // A string of 1..max_length characters (names, paths, enum words).
  std::optional<std::string> text(const char* key, Need need, std::size_t max_length);
  std::optional<std::uint64_t> u64(const char* key, Need need = Need::Optional, std::uint64_t min = 0,
                                   std::uint64_t max = UINT64_MAX);
  std::optional<std::int64_t> i64(const char* key, Need need, std::int64_t min, std::int64_t max);
  std::optional<bool> boolean(const char* key, Need need = Need::Optional);
  // The field itself when it is an object (or an array); null when absent or after an error.
  const nlohmann::json* object(const char* key, Need need = Need::Optional);
  const nlohmann::json* array(const char* key, Need need = Need::Optional);

 private:
  const nlohmann::json* field(const char* key, Need need);

  const nlohmann::json& object_;
  std::string path_;
  bool null_is_absent_;
  JsonProblems own_;
  JsonProblems* problems_;
};

}  // namespace conduit
