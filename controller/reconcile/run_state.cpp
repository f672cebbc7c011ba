#include "run_state.h"

#include <algorithm>

namespace conduit::controller {

using json = nlohmann::json;

namespace {

json ref_json(const NodeRef& r) { return {{"node", r.node}, {"name", r.name}}; }

std::optional<NodeRef> ref_from(const json& j) {
  if (!j.is_object() || !j.contains("node") || !j.contains("name")) return std::nullopt;
  return NodeRef{j.value("node", ""), j.value("name", "")};
}

std::vector<NodeRef> refs_from(const json& j) {
  std::vector<NodeRef> out;
  if (!j.is_array()) return out;
  for (const auto& item : j) {
    if (auto r = ref_from(item)) out.push_back(*r);
  }
  return out;
}

}  // namespace

bool has_finalizer(const json& job) {
  const json& meta = job.value("metadata", json::object());
  for (const auto& f : meta.value("finalizers", json::array())) {
    if (f.is_string() && f.get<std::string>() == kFinalizer) return true;
  }
  return false;
}

RunState RunState::from_job(const json& job) {
  RunState run;
  const json* annotations = nullptr;
  if (job.contains("metadata") && job["metadata"].contains("annotations")) {
    annotations = &job["metadata"]["annotations"];
  }
  if (annotations == nullptr || !annotations->is_object() || !annotations->contains(kRunAnnotation))
    return run;
  const json& text = (*annotations)[kRunAnnotation];
  if (!text.is_string()) return run;
  const json j = json::parse(text.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return run;
  run.attempt = j.value("attempt", 0U);
  run.source = ref_from(j.value("source", json()));
  run.source_temporary = j.value("sourceTemporary", false);
  run.length = j.value("length", std::uint64_t{0});
  run.created = refs_from(j.value("created", json()));
  run.grants = refs_from(j.value("grants", json()));
  run.unrevoked = refs_from(j.value("unrevoked", json()));
  run.transfer = ref_from(j.value("transfer", json()));
  if (j.contains("transports") && j["transports"].is_array()) {
    for (const auto& t : j["transports"]) run.transports.push_back(t.is_string() ? t.get<std::string>() : "");
  }
  if (j.contains("savedAsLanded") && j["savedAsLanded"].is_array()) {
    for (const auto& t : j["savedAsLanded"]) run.saved_as_landed.push_back(t.is_boolean() && t.get<bool>());
  }
  if (j.contains("resume") && j["resume"].is_array()) {
    for (const auto& r : j["resume"])
      run.resume.push_back(r.is_number_unsigned() ? r.get<std::uint64_t>() : 0);
  }
  if (j.contains("landed") && j["landed"].is_array()) {
    for (const auto& t : j["landed"]) run.landed.push_back(t.is_boolean() && t.get<bool>());
  }
  if (j.contains("sent") && j["sent"].is_array()) {
    for (const auto& t : j["sent"]) {
      if (t.is_number_unsigned() && t.get<std::uint64_t>() <= UINT32_MAX)
        run.sent.push_back(t.get<std::uint32_t>());
    }
  }
  if (j.contains("notBefore") && j["notBefore"].is_string())
    run.not_before = parse_rfc3339(j["notBefore"].get<std::string>());
  if (j.contains("pods") && j["pods"].is_array()) {
    for (const auto& p : j["pods"]) {
      if (auto pick = PodPick::from_json(p)) run.pods.push_back(std::move(*pick));
    }
  }
  if (j.contains("reshard")) run.reshard = ReshardRun::from_json(j["reshard"]);
  if (j.contains("subsetVersion") && j["subsetVersion"].is_number_unsigned())
    run.subset_version = j["subsetVersion"].get<std::uint64_t>();
  return run;
}

json RunState::to_json() const {
  json j{{"attempt", attempt}};
  if (source) j["source"] = ref_json(*source);
  if (source_temporary) j["sourceTemporary"] = true;
  if (length > 0) j["length"] = length;
  if (!created.empty()) {
    j["created"] = json::array();
    for (const auto& r : created) j["created"].push_back(ref_json(r));
  }
  if (!grants.empty()) {
    j["grants"] = json::array();
    for (const auto& r : grants) j["grants"].push_back(ref_json(r));
  }
  if (!unrevoked.empty()) {
    j["unrevoked"] = json::array();
    for (const auto& r : unrevoked) j["unrevoked"].push_back(ref_json(r));
  }
  if (transfer) j["transfer"] = ref_json(*transfer);
  if (!transports.empty()) j["transports"] = transports;
  if (std::find(saved_as_landed.begin(), saved_as_landed.end(), true) != saved_as_landed.end())
    j["savedAsLanded"] = saved_as_landed;
  if (!resume.empty()) j["resume"] = resume;
  if (std::find(landed.begin(), landed.end(), true) != landed.end()) j["landed"] = landed;
  if (!sent.empty()) j["sent"] = sent;
  if (not_before) j["notBefore"] = format_rfc3339(*not_before, TimePrecision::Millis);
  if (!pods.empty()) {
    j["pods"] = json::array();
    for (const auto& p : pods) j["pods"].push_back(p.to_json(/*with_entry=*/true));
  }
  if (reshard) j["reshard"] = reshard->to_json();
  if (subset_version) j["subsetVersion"] = *subset_version;
  return j;
}

bool RunState::created_region(const std::string& node, const std::string& region) const {
  for (const auto& r : created) {
    if (r.node == node && r.name == region) return true;
  }
  return false;
}

}  // namespace conduit::controller
