#include "tenancy.h"

#include <filesystem>

#include "conduit/api/wire.h"
#include "regions.h"

namespace conduit::agent {

bool Tenancy::admits(const std::string& job_ns) const {
  return api::namespace_admits(ns, shared_with, job_ns);
}

std::optional<std::string> Tenancy::refusal(const std::string& region, const std::string& job_ns) const {
  if (admits(job_ns)) return std::nullopt;
  return "region " + region + " belongs to namespace " + ns + ", which does not share it with namespace " +
         job_ns + " (sharedWith, docs/security.md)";
}

void Tenancy::add_to(nlohmann::json& region) const {
  if (!ns.empty()) region["namespace"] = ns;
  if (!shared_with.empty()) region["sharedWith"] = shared_with;
}

std::optional<std::string> refusal(const Region& region, const std::string& job_ns, const std::string& pod) {
  if (auto why = region.tenancy().refusal(region.name(), job_ns)) return why;
  const std::string owner = region.importer() ? region.importer()->pod_uid : "";
  if (api::pod_admits(owner, job_ns, pod)) return std::nullopt;
  if (!pod.empty()) {
    return "region " + region.name() + " was not shared by pod " + pod +
           (owner.empty() ? "" : " but by pod " + owner) + " (docs/pods.md)";
  }
  return "region " + region.name() + " was shared by pod " + owner +
         ": a TransferJob reaches it only through a podSelector that picks that pod (docs/pods.md)";
}

std::optional<std::string> file_refusal(const std::string& file, const std::string& job_ns,
                                        bool namespace_files) {
  if (!namespace_files || job_ns.empty()) return std::nullopt;
  // By the spelling, for an early answer; the file is then opened beneath the namespace's directory
  // (file_namespace), which refuses a link out of it.
  const std::filesystem::path normal = std::filesystem::path(file).lexically_normal();
  if (!normal.empty() && !normal.is_absolute() && *normal.begin() == job_ns && normal != job_ns) {
    return std::nullopt;
  }
  return "file \"" + file + "\" is not in namespace " + job_ns + "'s directory \"" + job_ns +
         "/\": with --namespace-files a TransferJob reads and writes only the files of its namespace "
         "(docs/security.md)";
}

}  // namespace conduit::agent
