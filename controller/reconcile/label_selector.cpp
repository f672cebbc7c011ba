#include "label_selector.h"

#include <cctype>

#include "transfer_job.h"

namespace conduit::controller {

using json = nlohmann::json;

namespace {

bool is_label_name(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (const char c : name) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace

bool is_label_key(const std::string& key) {
  const auto slash = key.find('/');
  if (slash == std::string::npos) return is_label_name(key);
  return is_dns1123_subdomain(key.substr(0, slash)) && is_label_name(key.substr(slash + 1));
}

bool is_label_value(const std::string& value) { return value.empty() || is_label_name(value); }

std::optional<LabelSelector> LabelSelector::parse(const json& selector, const std::string& path,
                                                  JsonProblems& problems) {
  if (!selector.is_object()) {
    problems.add(path + ": must be an object");
    return std::nullopt;
  }
  const std::size_t before = problems.count();
  JsonFields f(selector, path, problems, /*null_is_absent=*/true);
  f.only({"matchLabels", "matchExpressions"});
  LabelSelector out;
  auto bad_key = [&](const std::string& field, const std::string& key) {
    problems.add(field + ": \"" + key +
                 "\" is not a label key (an optional DNS subdomain and '/', then 1-63 letters, digits, '-', "
                 "'_' or '.', starting and ending alphanumeric)");
  };
  auto bad_value = [&](const std::string& field, const std::string& value) {
    problems.add(field + ": \"" + value +
                 "\" is not a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending "
                 "alphanumeric)");
  };
  if (const json* labels = f.object("matchLabels")) {
    if (!labels->is_object()) {
      problems.add(path + ".matchLabels: must be an object of key: value");
    } else if (labels->size() > 32) {
      problems.add(path + ".matchLabels: has more than 32 labels");
    } else {
      for (const auto& [key, value] : labels->items()) {
        const std::string field = path + ".matchLabels." + key;
        if (!is_label_key(key)) bad_key(field, key);
        if (!value.is_string()) {
          problems.add(field + ": must be a string");
          continue;
        }
        if (!is_label_value(value.get<std::string>())) bad_value(field, value.get<std::string>());
        out.match_labels[key] = value.get<std::string>();
      }
    }
  }
  if (const json* expressions = f.array("matchExpressions")) {
    if (expressions->size() > 16) problems.add(path + ".matchExpressions: has more than 16 items");
    for (std::size_t i = 0; i < expressions->size() && i < 16; ++i) {
      const std::string at = path + ".matchExpressions[" + std::to_string(i) + "]";
      const json& item = (*expressions)[i];
      if (!item.is_object()) {
        problems.add(at + ": must be an object");
        continue;
      }
      JsonFields e(item, at, problems, /*null_is_absent=*/true);
      e.only({"key", "operator", "values"});
      Requirement r;
      r.key = e.text("key", Need::Required, 317).value_or("");
      r.op = e.text("operator", Need::Required, 16).value_or("");
      if (!r.key.empty() && !is_label_key(r.key)) bad_key(at + ".key", r.key);
      const bool takes_values = r.op == "In" || r.op == "NotIn";
      if (!r.op.empty() && !takes_values && r.op != "Exists" && r.op != "DoesNotExist")
        problems.add(at + ".operator: \"" + r.op + "\" is not one of In, NotIn, Exists, DoesNotExist");
      if (const json* values = e.array("values")) {
        if (values->size() > 64) problems.add(at + ".values: has more than 64 items");
        for (const auto& v : *values) {
          if (!v.is_string()) {
            problems.add(at + ".values: every value must be a string");
            break;
          }
          if (!is_label_value(v.get<std::string>())) bad_value(at + ".values", v.get<std::string>());
          r.values.push_back(v.get<std::string>());
        }
      }
      if (!r.op.empty() && takes_values == r.values.empty())
        problems.add(at + ": operators In and NotIn need values; Exists and DoesNotExist take none");
      out.match_expressions.push_back(std::move(r));
    }
  }
  if (out.match_labels.empty() && out.match_expressions.empty())
    problems.add(path + ": must not be empty (it would match every pod)");
  if (problems.count() != before) return std::nullopt;
  return out;
}

std::string LabelSelector::to_query() const {
  std::string q;
  auto add = [&](const std::string& term) { q += (q.empty() ? "" : ",") + term; };
  for (const auto& [key, value] : match_labels) add(key + "=" + value);
  for (const auto& r : match_expressions) {
    if (r.op == "Exists") {
      add(r.key);
    } else if (r.op == "DoesNotExist") {
      add("!" + r.key);
    } else {
      std::string values;
      for (const auto& v : r.values) values += (values.empty() ? "" : ",") + v;
      add(r.key + (r.op == "In" ? " in (" : " notin (") + values + ")");
    }
  }
  return q;
}

}  // namespace conduit::controller
