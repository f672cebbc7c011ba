// REST paths of Kubernetes resources: core ones live under /api/v1, grouped ones under /apis/GROUP/VERSION;
// namespaced ones add /namespaces/NS (or not, to span all namespaces), cluster-scoped ones never do.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace conduit::kube_client {

struct Resource {
  std::string group;  // "" for the core group
  std::string version;
  std::string kind;
  std::string plural;
  bool namespaced = true;

  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
};

namespace resources {
const Resource& transfer_jobs();                 // conduit.dev/v1alpha1, namespaced
const Resource& fabric_nodes();                  // conduit.dev/v1alpha1, cluster-scoped
const Resource& events();                        // v1
const Resource& leases();                        // coordination.k8s.io/v1
const Resource& pods();                          // v1, namespaced
const Resource& namespaces();                    // v1, cluster-scoped
const Resource& custom_resource_definitions();   // apiextensions.k8s.io/v1, cluster-scoped
const Resource& certificate_signing_requests();  // certificates.k8s.io/v1, cluster-scoped
}  // namespace resources

// The signer of agents' per-node client certificates (CN kAgentCommonNamePrefix + node): the agent asks it
// (agent/src/node_certificate.h), the controller is it (controller/kube/agent_signer.h).
inline constexpr const char* kAgentSignerName = "conduit.dev/agent";
inline constexpr const char* kAgentCommonNamePrefix = "conduit:agent:";

// The collection: `ns` empty on a namespaced resource means all namespaces.
std::string collection_path(const Resource& r, std::string_view ns);
// One object, optionally a subresource ("status").
std::string object_path(const Resource& r, std::string_view ns, std::string_view name,
                        std::string_view subresource = {});
// metadata.<field> of an object as a string; "" when absent or not a string. Never throws, whatever the
// server (or a test) sent.
std::string meta_string(const nlohmann::json& object, const char* field);

// Percent-encoding for query values (selectors, continue tokens, resourceVersions, which are opaque).
std::string url_encode(std::string_view s);

}  // namespace conduit::kube_client
