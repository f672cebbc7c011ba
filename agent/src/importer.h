// Who shared a region through the import socket, as the kernel says (SO_PEERCRED), never as the process
// claims: its pid and uid, and the Kubernetes pod it runs in, read from its cgroup (the kubelet puts every
// container of a pod under a cgroup named for the pod's UID). The controller finds a pod's regions by that
// UID (docs/security.md), which no process can choose.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace conduit::agent {

struct Importer {
  pid_t pid = 0;
  uid_t uid = 0;
  std::string pod_uid;             // "" outside a pod
  std::string container_id;        // the container runtime's ID, as the pod's containerStatuses name it; ""
  nlohmann::json to_json() const;  // {pid, uid, podUID?, containerID?}
};

// The process at the other end of a connected unix socket; nullopt when the kernel does not say.
std::optional<Importer> importer_of(int unix_socket);

// The pod UID in /proc/<pid>/cgroup text: "pod<uid>" of the cgroupfs driver (dashes) or of the systemd driver
// ("kubepods-burstable-pod<uid>.slice", underscores), as the dashed UID the apiserver shows; "" if none.
std::string pod_uid_from_cgroup(std::string_view cgroup);
// The container's ID under that pod's cgroup: "<pod>/<id>" (cgroupfs) or "<pod>.slice/<runtime>-<id>.scope"
// (systemd: cri-containerd-, crio-, docker-), hex digits; "" if none.
std::string container_id_from_cgroup(std::string_view cgroup);

}  // namespace conduit::agent
