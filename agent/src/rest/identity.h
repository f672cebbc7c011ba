// Who calls the agent's API, and what each caller may do (docs/security.md, "Identities").
//
// A caller is named by the certificate it presented over TLS, verified against --client-ca-file, or by
// the bearer token of --token-file. Certificates name one of:
//   conduit:controller     the controller: every route
//   conduit:controller:<ns>  a tenant's controller (one that watches namespace <ns> alone): the controller's
//                          routes, for namespace <ns> only: its requests name <ns>, and it reaches only
//                          the regions, grants and transfers of <ns> (and reads regions shared with <ns>)
//   conduit:operator       a person or script with the CLI or SDK: every route
//   conduit:agent:<node>   the agent of <node>: only what a transfer between the two needs, scoped to the
//                          grants made for <node> (a grant's `peer`)
//   conduit:agent          any agent of the install (one certificate shared by every node, as the Helm
//                          chart makes it): the same routes, scoped to grants made for any agent
// The token names the operator. Processes on the import socket are named by the kernel (import_socket.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace conduit::agent::rest {

enum class Role { Operator, Controller, Agent };

struct Caller {
  Role role = Role::Operator;
  std::string node;  // Agent: the node its certificate names; empty: any agent of the install
  std::string ns;    // Controller: the one namespace it acts for; empty: every namespace (the install's)

  // For messages and logs: "the controller", "the controller of namespace \"a\"", "an operator", "the agent
  // of node \"b\"", "an agent".
  std::string describe() const;
  bool tenant_controller() const { return role == Role::Controller && !ns.empty(); }
  // Whether this caller may act for a grant made for `peer` ("" = made for no one in particular).
  bool acts_for(const std::string& peer) const;
  // Why this caller may not act for namespace `job_ns` ("" = no namespace: an operator's request), or
  // nullopt. Only a tenant's controller is ever refused: it acts for its own namespace alone.
  std::optional<std::string> namespace_refusal(const std::string& job_ns) const;
};

// The caller a verified certificate's common name names; nullopt for a name that is none of the above.
std::optional<Caller> caller_from_certificate(std::string_view common_name);

// What a route lets in, declared where the route is registered (rest/*_routes.cpp).
enum class RouteAccess {
  Public,   // no caller needed: probes and Prometheus
  Control,  // the controller and operators
  Peer,     // those, and agents: the route's handler checks the agent's scope (Caller::acts_for)
};

// Whether `caller` passes a route's `access`; agents get the scope check from the handler.
bool admits(RouteAccess access, const Caller& caller);

}  // namespace conduit::agent::rest
