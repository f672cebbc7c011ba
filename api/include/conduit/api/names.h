// The names a body carries, read alike by the agent that enforces them and every client that builds them:
// region names and namespaces are DNS-1123 labels, a pod is named by its UID.
#pragma once

#include <string>
#include <vector>

#include "conduit/common/json_fields.h"
#include "conduit/common/result.h"

namespace conduit::api {

// A region name: 1-63 of [a-z0-9-], starting and ending alphanumeric. InvalidArgument saying so otherwise.
Status validate_name(const std::string& name);

// A Kubernetes namespace name: a DNS-1123 label.
bool valid_namespace(const std::string& name);

// "namespace" of a body (grants, transfers, files: the job's). Absent: "". Problems go to `f`.
std::string parse_namespace(JsonFields& f);
// "sharedWith" of a region's body: namespaces let in besides its own, "*" for every namespace. Absent: none.
std::vector<std::string> parse_shared_with(JsonFields& f);
// "pod" (grants, a transfer's source): the UID of the pod a podSelector job addressed. Absent: "".
std::string parse_pod(JsonFields& f);

}  // namespace conduit::api
