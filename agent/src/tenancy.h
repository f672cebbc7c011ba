// Which namespace a region belongs to, and which others it is shared with (docs/security.md, "Tenancy").
// A TransferJob's grants and transfers name the job's namespace; the agent lets them touch a region only
// when the region belongs to that namespace or is shared with it, checking again what the controller
// checked, so a controller's credentials alone do not reach another tenant's memory. A region that belongs
// to no namespace (made by an operator or shared by a local process without one) is anyone's.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "conduit/common/result.h"

namespace conduit::agent {

class Region;

struct Tenancy {
  std::string ns;                        // "" = no namespace: anyone's
  std::vector<std::string> shared_with;  // namespaces let in besides ns; "*" = every namespace

  // Whether a job of namespace `job_ns` may read or write the region ("" = an operator's own request).
  bool admits(const std::string& job_ns) const;
  // Why not (the region, both namespaces, how to share), or nullopt when admits().
  std::optional<std::string> refusal(const std::string& region, const std::string& job_ns) const;
  // Adds {namespace, sharedWith} when set.
  void add_to(nlohmann::json& region) const;
};

// Why a job's request (namespace `job_ns`, addressing pod UID `pod` or none) may not touch `region`, or
// nullopt. Tenancy first; then a region a pod shared (importedBy.podUID) is reached only by a job that
// addressed that pod, and a job that addressed a pod only reaches that pod's regions, so no job claims a
// pod's memory by naming its node and region, nor another region by naming a pod. An operator's own
// request (no namespace, no pod) is not a job's and passes.
std::optional<std::string> refusal(const Region& region, const std::string& job_ns, const std::string& pod);

// Why a job of namespace `job_ns` may not read or write `file` (relative to the data directory), or nullopt.
// With --namespace-files a job's files are those under "<job_ns>/" only; an operator's request (no
// namespace) reaches any file, and without the flag every request does.
std::optional<std::string> file_refusal(const std::string& file, const std::string& job_ns,
                                        bool namespace_files);
// The namespace whose directory a job's files are opened beneath (files/data_dir.h), so a link out of it is
// refused where the file is opened: the job's with --namespace-files, else "" (the whole data directory).
inline std::string file_namespace(const std::string& job_ns, bool namespace_files) {
  return namespace_files ? job_ns : std::string();
}

}  // namespace conduit::agent
