#include "agent_csr_review.h"

#include <openssl/obj_mac.h>
#include <openssl/objects.h>

#include <array>
#include <optional>
#include <vector>

#include "conduit/common/base64.h"
#include "conduit/common/openssl.h"
#include "kube_client/kube_config.h"

namespace conduit::kube {
namespace {

using nlohmann::json;

// A CSR is whatever the server (or a test) sent: every read is checked, none throws.
const json* member(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string string_member(const json& object, const char* key) {
  const json* v = member(object, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

CsrVerdict deny(std::string message) {
  CsrVerdict v;
  v.message = std::move(message);
  return v;
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

// The values of one spec.extra key; `ok` false when the key is there but not a list of strings.
std::vector<std::string> extra_values(const json& spec, const char* key, bool& ok) {
  ok = true;
  std::vector<std::string> out;
  const json* extra = member(spec, "extra");
  const json* values = extra != nullptr ? member(*extra, key) : nullptr;
  if (values == nullptr) return out;
  if (!values->is_array()) {
    ok = false;
    return out;
  }
  for (const json& v : *values) {
    if (!v.is_string()) {
      ok = false;
      return {};
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

// Only what a client certificate needs. The leaf's extensions are the signer's, never these; the rule keeps
// requests honest about what they will get.
std::optional<CsrVerdict> check_usages(const json& spec) {
  static constexpr std::array<const char*, 3> kAllowed = {"client auth", "digital signature",
                                                          "key encipherment"};
  const json* usages = member(spec, "usages");
  bool client_auth = false;
  if (usages != nullptr && usages->is_array()) {
    for (const json& u : *usages) {
      const std::string usage = u.is_string() ? u.get<std::string>() : u.dump();
      bool allowed = false;
      for (const char* a : kAllowed) allowed = allowed || usage == a;
      if (!allowed) {
        return deny(
            "spec.usages may hold only \"client auth\", \"digital signature\" and \"key encipherment\"; " +
            quoted(usage) + " is not allowed");
      }
      client_auth = client_auth || usage == "client auth";
    }
  }
  if (!client_auth) return deny("spec.usages must include \"client auth\"");
  return std::nullopt;
}

std::string utf8(const ASN1_STRING* s) {
  unsigned char* out = nullptr;
  const int n = ASN1_STRING_to_UTF8(&out, s);
  if (n < 0) return {};
  std::string text(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
  OPENSSL_free(out);
  return text;
}

std::string rfc2253(const X509_NAME* name) {
  ossl::Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253) < 0) return "(unprintable)";
  return ossl::bio_text(bio.get());
}

// Exactly one attribute, the CN naming the verified node: an O= would put the certificate in a group, and
// anything else would be a claim nobody checked.
std::optional<CsrVerdict> check_subject(X509_REQ* req, const std::string& node) {
  const X509_NAME* subject = X509_REQ_get_subject_name(req);
  const std::string prefix = kube_client::kAgentCommonNamePrefix;
  const std::string want = prefix + node;
  std::optional<std::string> only_cn;
  if (X509_NAME_entry_count(subject) == 1) {
    const X509_NAME_ENTRY* e = X509_NAME_get_entry(subject, 0);
    if (OBJ_obj2nid(X509_NAME_ENTRY_get_object(e)) == NID_commonName) {
      only_cn = utf8(X509_NAME_ENTRY_get_data(e));
    }
  }
  if (only_cn && only_cn->starts_with(prefix) && *only_cn != want) {
    return deny("the CSR asks for node " + quoted(only_cn->substr(prefix.size())) +
                " but the requesting pod runs on node " + quoted(node));
  }
  if (!only_cn || *only_cn != want) {
    return deny("the request's subject must be exactly CN=" + want + " and nothing else, got " +
                quoted(rfc2253(subject)));
  }
  return std::nullopt;
}

std::optional<CsrVerdict> check_key(EVP_PKEY* key) {
  const int id = EVP_PKEY_get_base_id(key);
  if (id == EVP_PKEY_EC) {
    char group[80] = {};
    std::size_t len = 0;
    const int nid = EVP_PKEY_get_group_name(key, group, sizeof group, &len) == 1 ? OBJ_sn2nid(group) : 0;
    if (nid == NID_X9_62_prime256v1 || nid == NID_secp384r1) return std::nullopt;
    return deny(std::string("the request's key is EC on curve ") + (group[0] != 0 ? group : "(unknown)") +
                ": want P-256 or P-384 (or RSA of at least 2048 bits)");
  }
  if (id == EVP_PKEY_RSA) {
    const int bits = EVP_PKEY_get_bits(key);
    if (bits >= 2048) return std::nullopt;
    return deny("the request's key is RSA of " + std::to_string(bits) +
                " bits: want at least 2048 (or EC P-256 or P-384)");
  }
  const char* type = EVP_PKEY_get0_type_name(key);
  return deny(std::string("the request's key is ") + (type != nullptr ? type : "of an unknown type") +
              ": want EC P-256 or P-384, or RSA of at least 2048 bits");
}

}  // namespace

CsrPhase csr_phase(const json& csr) {
  const json* spec = member(csr, "spec");
  if (spec == nullptr || string_member(*spec, "signerName") != kube_client::kAgentSignerName)
    return CsrPhase::NotOurs;
  const json* status = member(csr, "status");
  const json* conditions = status != nullptr ? member(*status, "conditions") : nullptr;
  bool approved = false;
  if (conditions != nullptr && conditions->is_array()) {
    for (const json& c : *conditions) {
      // A condition without a status counts as True, as the API server defaults it.
      const std::string state = string_member(c, "status");
      if (state != "True" && !state.empty()) continue;
      const std::string type = string_member(c, "type");
      if (type == "Denied" || type == "Failed") return CsrPhase::Finished;
      approved = approved || type == "Approved";
    }
  }
  if (!approved) return CsrPhase::Pending;
  return string_member(*status, "certificate").empty() ? CsrPhase::ApprovedUnsigned : CsrPhase::Finished;
}

CsrVerdict review_agent_csr(const json& csr, const ServiceAccountRef& agent) {
  static const json kNone = json::object();
  const json* spec_ptr = member(csr, "spec");
  const json& spec = spec_ptr != nullptr ? *spec_ptr : kNone;

  const std::string username = string_member(spec, "username");
  if (username != agent.username()) {
    return deny("the CSR was made by " + quoted(username) + ", not by the agent service account " +
                quoted(agent.username()));
  }

  bool ok = true;
  const std::vector<std::string> nodes = extra_values(spec, kNodeNameExtra, ok);
  if (!ok || nodes.size() > 1) {
    return deny(std::string("spec.extra[\"") + kNodeNameExtra + "\"] must hold exactly one node name");
  }
  if (nodes.empty() || nodes[0].empty()) {
    return deny(std::string("the CSR names no node in spec.extra[\"") + kNodeNameExtra +
                "\"]: it must be made with the agent pod's own service-account token, bound to the pod");
  }
  const std::string& node = nodes[0];

  if (auto bad = check_usages(spec)) return *bad;

  const json* request_b64 = member(spec, "request");
  auto pem = request_b64 != nullptr && request_b64->is_string()
                 ? base64_decode(request_b64->get<std::string>())
                 : Result<std::string>(std::string());
  if (!pem) return deny("spec.request is not base64: " + pem.error().message);
  ossl::Req req = ossl::parse_request(*pem);
  if (!req) return deny("spec.request is not a PEM certificate request: " + ossl::error_text());
  EVP_PKEY* key = X509_REQ_get0_pubkey(req.get());
  if (key == nullptr) return deny("the request's public key cannot be read: " + ossl::error_text());
  if (X509_REQ_verify(req.get(), key) != 1) {
    ossl::error_text();
    return deny("the request's signature does not verify against its own public key");
  }
  if (auto bad = check_subject(req.get(), node)) return *bad;
  if (auto bad = check_key(key)) return *bad;

  bool pods_ok = true;  // the pod's name is for the message only; the node is the proof
  const std::vector<std::string> pods = extra_values(spec, kPodNameExtra, pods_ok);
  const std::string pod = pods.size() == 1 ? agent.ns + "/" + pods[0] : "(unnamed)";
  return CsrVerdict{true, node,
                    "the CSR comes from the agent on node " + quoted(node) + " (pod " + pod +
                        ", service account " + agent.ns + "/" + agent.name + ")",
                    std::move(*pem)};
}

}  // namespace conduit::kube
