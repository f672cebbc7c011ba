// The agent's unix socket for zero-copy import: a local process sends one line of JSON
// {"name": "...", "bytes": N} with a memfd attached (SCM_RIGHTS); the agent maps it as a region and answers
// one line {"ok": true, "region": {...}, "agent": {"node", "instance"}} or {"error": {"code", "message"}}.
// GPU memory comes as {"name", "bytes", "cudaIpcHandle": <hex of cuIpcGetMemHandle's 64 bytes>, "device": N}
// with no fd (docs/gpu.md); an fd import may carry "manifest" (the region's named tensors, checked against
// its bytes: a bad one imports nothing). {"open": "<region>", "writable": false} hands a descriptor of a
// shareable region's memory back (import_open.h): {"ok": true, "region", "manifest"?, "agent"} with the fd
// attached. {"identify": true} imports nothing and answers {"ok": true, "agent": {...}}: a
// client checks that the socket belongs to the agent it talks REST to (the instance of GET /v1/node) before
// it imports anything. Only processes that can open the socket file (mode 0660) can import.
#pragma once

#include <atomic>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "regions.h"

namespace conduit::agent {

class ImportSocket {
 public:
  // `node`: this agent's node name, said in every answer beside its instance_id() (inventory.h).
  ImportSocket(RegionStore& regions, std::string path, std::string node = {});
  ~ImportSocket();  // stops accepting, removes the socket file
  Status start();
  const std::string& path() const { return path_; }

 private:
  void serve();
  // One request line, with the fds that came with it, answered: the reply, and the fd to send with it.
  struct Answer {
    nlohmann::json reply;
    UniqueFd fd;
  };
  Answer answer_request(const std::string& line, std::vector<UniqueFd> fds,
                        const std::optional<Importer>& peer);
  Result<RegionPtr> import_line(const nlohmann::json& body, std::vector<UniqueFd>& fds,
                                const std::optional<Importer>& peer);
  RegionStore& regions_;
  std::string path_;
  std::string node_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
};

// Client side: sends `line` on the connected unix `socket` with `fd` attached (SCM_RIGHTS on the first byte),
// the rest of the line after it if the first send was short.
Status send_with_fd(int socket, std::string_view line, int fd);

// Client side (used by tests and by training processes through the CLI): sends `fd` as region `name`.
Status import_region(const std::string& socket_path, const std::string& name, int fd, std::uint64_t bytes);

}  // namespace conduit::agent
