#include "resource.h"

namespace conduit::kube_client {

namespace resources {
const Resource& transfer_jobs() {
  static const Resource r{"conduit.dev", "v1alpha1", "TransferJob", "transferjobs", true};
  return r;
}
const Resource& fabric_nodes() {
  static const Resource r{"conduit.dev", "v1alpha1", "FabricNode", "fabricnodes", false};
  return r;
}
const Resource& events() {
  static const Resource r{"", "v1", "Event", "events", true};
  return r;
}
const Resource& leases() {
  static const Resource r{"coordination.k8s.io", "v1", "Lease", "leases", true};
  return r;
}
const Resource& pods() {
  static const Resource r{"", "v1", "Pod", "pods", true};
  return r;
}
const Resource& namespaces() {
  static const Resource r{"", "v1", "Namespace", "namespaces", false};
  return r;
}
const Resource& custom_resource_definitions() {
  static const Resource r{"apiextensions.k8s.io", "v1", "CustomResourceDefinition",
                          "customresourcedefinitions", false};
  return r;
}
const Resource& certificate_signing_requests() {
  static const Resource r{"certificates.k8s.io", "v1", "CertificateSigningRequest",
                          "certificatesigningrequests", false};
  return r;
}
}  // namespace resources

std::string collection_path(const Resource& r, std::string_view ns) {
  std::string path = r.group.empty() ? "/api/" + r.version : "/apis/" + r.group + "/" + r.version;
  if (r.namespaced && !ns.empty()) {
    path += "/namespaces/";
    path += ns;
  }
  return path + "/" + r.plural;
}

std::string object_path(const Resource& r, std::string_view ns, std::string_view name,
                        std::string_view subresource) {
  std::string path = collection_path(r, ns) + "/" + std::string(name);
  if (!subresource.empty()) path += "/" + std::string(subresource);
  return path;
}

std::string meta_string(const nlohmann::json& object, const char* field) {
  if (!object.is_object()) return {};
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return {};
  auto value = meta->find(field);
  return value != meta->end() && value->is_string() ? value->get<std::string>() : std::string();
}

std::string url_encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace conduit::kube_client
