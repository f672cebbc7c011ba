#include "import_socket.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "conduit/common/unique_fd.h"
#include "conduit/remote_key.h"
#include "import_open.h"
#include "inventory.h"

namespace conduit::agent {

namespace {

// Room for a manifest of thousands of tensors in an import line, and for one in the answer to an open line.
constexpr std::size_t kMaxRequest = std::size_t{1} << 20;
constexpr std::size_t kMaxReply = std::size_t{4} << 20;
constexpr std::size_t kReadPiece = 64 * 1024;
// A client that connects and then says nothing must not hold the (single) accept thread for long.
constexpr int kRequestTimeoutMs = 5000;
constexpr int kReplyTimeoutMs = 30000;
// Room for a sender that attaches more fds than the one we accept: every one of them must be received to
// be closed; any beyond this the kernel drops itself (MSG_CTRUNC).
constexpr std::size_t kMaxFdsPerMessage = 16;

Error sys_error(const std::string& what, int err) {
  return make_error(ErrorCode::Io, what + ": " + std::strerror(err));
}

Result<sockaddr_un> unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return make_error(ErrorCode::InvalidArgument, "unix socket path \"" + path +
                                                      "\" is empty or longer than " +
                                                      std::to_string(sizeof addr.sun_path - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// Waits until `fd` is readable, or the stop eventfd fires (-1 when absent), or the deadline passes.
Status wait_readable(int fd, int stop_fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return make_error(ErrorCode::TimedOut, "no data on the import socket in time");
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    const int n = ::poll(fds, stop_fd >= 0 ? 2 : 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("poll on the import socket", errno);
    if (stop_fd >= 0 && (fds[1].revents & POLLIN))
      return make_error(ErrorCode::Cancelled, "agent shutting down");
    if (n > 0) return {};
  }
}

struct Request {
  std::string line;
  std::vector<UniqueFd> fds;  // every fd that arrived, whatever the sender attached
};

// Reads one line (or up to EOF) of at most kMaxRequest bytes, collecting any fds that ride along.
Result<Request> read_request(int conn, int stop_fd) {
  Request req;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestTimeoutMs);
  std::vector<char> buf(kReadPiece);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  for (;;) {
    if (auto ready = wait_readable(conn, stop_fd, deadline); !ready) return ready.error();
    iovec iov{buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(conn, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return sys_error("receiving an import request", errno);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        req.fds.emplace_back(fd);
      }
    }
    if (n == 0) return req;  // EOF ends the request as a newline would
    req.line.append(buf.data(), static_cast<std::size_t>(n));
    if (const auto nl = req.line.find('\n'); nl != std::string::npos) {
      req.line.resize(nl);
      return req;
    }
    if (req.line.size() > kMaxRequest) {
      return make_error(ErrorCode::InvalidArgument,
                        "import request is longer than " + std::to_string(kMaxRequest) + " bytes");
    }
  }
}

nlohmann::json error_json(const Error& e) {
  return {{"error", {{"code", std::string(to_string(e.code))}, {"message", e.message}}}};
}

Status send_all(int conn, const std::string& data) {
  for (std::size_t done = 0; done < data.size();) {
    const ssize_t n = ::send(conn, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("sending on the import socket", errno);
    done += static_cast<std::size_t>(n);
  }
  return {};
}

ErrorCode code_from_string(const std::string& s) {
  for (int c = 0; c <= static_cast<int>(ErrorCode::Cancelled); ++c) {
    if (to_string(static_cast<ErrorCode>(c)) == s) return static_cast<ErrorCode>(c);
  }
  return ErrorCode::Io;
}

}  // namespace

ImportSocket::ImportSocket(RegionStore& regions, std::string path, std::string node)
    : regions_(regions), path_(std::move(path)), node_(std::move(node)) {}

ImportSocket::~ImportSocket() {
  if (thread_.joinable()) {
    const std::uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(path_.c_str());  // only a file this object bound: a failed start leaves others' files alone
  }
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

Status ImportSocket::start() {
  if (listen_fd_ >= 0) return make_error(ErrorCode::Conflict, "import socket already started");
  auto addr = unix_address(path_);
  if (!addr) return addr.error();

  // A socket file left by a previous agent blocks bind; anything else at the path is not ours to delete.
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path_.c_str());

  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (listener.get() < 0) return sys_error("creating the import socket", errno);
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr) != 0) {
    return sys_error("binding the import socket " + path_, errno);
  }
  // Before listen(), so no client can connect while the file still has the umask's mode.
  if (::chmod(path_.c_str(), 0660) != 0 || ::listen(listener.get(), 64) != 0) {
    const int err = errno;
    ::unlink(path_.c_str());
    return sys_error("preparing the import socket " + path_, err);
  }
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (stop.get() < 0) {
    ::unlink(path_.c_str());
    return sys_error("creating the import socket's stop event", errno);
  }
  listen_fd_ = listener.release();
  stop_fd_ = stop.release();
  thread_ = std::thread([this] { serve(); });
  return {};
}

void ImportSocket::serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents & POLLIN) return;
    if (!(fds[0].revents & POLLIN)) continue;
    UniqueFd conn(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() < 0) {
      // Out of fds: back off instead of spinning on a listen socket that stays readable.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) ::poll(fds + 1, 1, 100);
      continue;
    }

    // An answer (a manifest can be megabytes) to a client that stops reading must not hold the thread.
    const timeval send_limit{kRequestTimeoutMs / 1000, 0};
    (void)::setsockopt(conn.get(), SOL_SOCKET, SO_SNDTIMEO, &send_limit, sizeof send_limit);
    // Who is there, as the kernel says: recorded on the region (and its pod found by the controller).
    const std::optional<Importer> importer = importer_of(conn.get());
    auto req = read_request(conn.get(), stop_fd_);
    nlohmann::json reply;
    UniqueFd outgoing;  // the region's descriptor answering an open line
    if (!req) {
      if (req.error().code == ErrorCode::Cancelled) return;
      reply = error_json(req.error());
    } else {
      Answer answer = answer_request(req->line, std::move(req->fds), importer);
      reply = std::move(answer.reply);
      outgoing = std::move(answer.fd);
    }
    // Messages quote the sender's own strings; replace, rather than throw on, any invalid UTF-8 in them.
    const std::string line = reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    (void)(outgoing ? send_with_fd(conn.get(), line, outgoing.get()) : send_all(conn.get(), line));
  }
}

ImportSocket::Answer ImportSocket::answer_request(const std::string& line, std::vector<UniqueFd> fds,
                                                  const std::optional<Importer>& peer) {
  const nlohmann::json agent{{"node", node_}, {"instance", instance_id()}};
  const auto body = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object())
    return {error_json(make_error(ErrorCode::InvalidArgument, "import request is not a JSON object")), {}};
  if (body.contains("identify")) {
    if (body.size() != 1 || body["identify"] != true || !fds.empty()) {
      return {error_json(make_error(ErrorCode::InvalidArgument,
                                    "{\"identify\": true} comes alone, without other fields or an fd")),
              {}};
    }
    return {{{"ok", true}, {"agent", agent}}, {}};
  }
  if (body.contains("open")) {
    if (!fds.empty()) {
      return {error_json(make_error(ErrorCode::InvalidArgument, "an open request comes without an fd")), {}};
    }
    auto opened = open_region(regions_, body, peer);
    if (!opened) return {error_json(opened.error()), {}};
    nlohmann::json reply{{"ok", true}, {"region", opened->region->to_json()}, {"agent", agent}};
    if (const auto manifest = opened->region->manifest()) reply["manifest"] = manifest->to_json();
    return {std::move(reply), std::move(opened->fd)};
  }
  auto imported = import_line(body, fds, peer);
  // Closed before replying, so a client that sees the answer sees no fd of its still open here.
  fds.clear();
  if (!imported) return {error_json(imported.error()), {}};
  return {{{"ok", true}, {"region", (*imported)->to_json()}, {"agent", agent}}, {}};
}

Result<RegionPtr> ImportSocket::import_line(const nlohmann::json& body, std::vector<UniqueFd>& fds,
                                            const std::optional<Importer>& peer) {
  for (const auto& [key, value] : body.items()) {
    if (key != "name" && key != "bytes" && key != "cudaIpcHandle" && key != "device" && key != "manifest")
      return make_error(ErrorCode::InvalidArgument, "unknown field \"" + key + "\" in import request");
  }
  if (!body.contains("name") || !body["name"].is_string())
    return make_error(ErrorCode::InvalidArgument, "import request needs \"name\" (a string)");
  std::uint64_t bytes = 0;
  if (body.contains("bytes")) {
    if (!body["bytes"].is_number_unsigned())
      return make_error(ErrorCode::InvalidArgument, "\"bytes\" must be a non-negative integer");
    bytes = body["bytes"].get<std::uint64_t>();
  }
  const std::string name = body["name"].get<std::string>();
  if (body.contains("cudaIpcHandle")) {
    // GPU memory of the sender: a CUDA IPC handle (hex) instead of an fd; see docs/gpu.md.
    if (!fds.empty() || !body["cudaIpcHandle"].is_string()) {
      return make_error(ErrorCode::InvalidArgument,
                        "\"cudaIpcHandle\" must be a hex string and comes without an fd");
    }
    if (body.contains("manifest")) {
      return make_error(
          ErrorCode::InvalidArgument,
          "\"manifest\" comes with an fd import (PUT /v1/regions/{name}/manifest for this one)");
    }
    auto handle = from_hex(body["cudaIpcHandle"].get<std::string>());
    if (!handle)
      return make_error(ErrorCode::InvalidArgument, "\"cudaIpcHandle\": " + handle.error().message);
    int device = 0;
    if (body.contains("device")) {
      if (!body["device"].is_number_unsigned() || body["device"].get<std::uint64_t>() > 999)
        return make_error(ErrorCode::InvalidArgument, "\"device\" must be a CUDA ordinal (0-999)");
      device = body["device"].get<int>();
    }
    return regions_.import_cuda_ipc(name, *handle, bytes, device, peer);
  }
  if (fds.size() != 1) {
    return make_error(ErrorCode::InvalidArgument,
                      "import request needs exactly one fd (SCM_RIGHTS), got " + std::to_string(fds.size()));
  }
  const nlohmann::json* manifest = nullptr;
  if (body.contains("manifest")) {
    if (!body["manifest"].is_object())
      return make_error(ErrorCode::InvalidArgument, "\"manifest\" must be an object {tensors, metadata}");
    manifest = &body["manifest"];
  }
  return regions_.import_fd(name, fds.front().release(), bytes, peer, manifest);
}

Status send_with_fd(int socket, std::string_view line, int fd) {
  iovec iov{const_cast<char*>(line.data()), line.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t sent;
  do {
    sent = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return sys_error("sending the import request", errno);
  // The fd went with the first byte; a short send only leaves plain bytes to follow.
  return send_all(socket, std::string(line.substr(static_cast<std::size_t>(sent))));
}

Status import_region(const std::string& socket_path, const std::string& name, int fd, std::uint64_t bytes) {
  if (fd < 0) return make_error(ErrorCode::InvalidArgument, "no file descriptor to import");
  auto addr = unix_address(socket_path);
  if (!addr) return addr.error();
  UniqueFd conn(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (conn.get() < 0) return sys_error("creating a unix socket", errno);
  if (::connect(conn.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr) != 0) {
    return make_error(ErrorCode::Unavailable,
                      "connecting to the agent's import socket " + socket_path + ": " + std::strerror(errno));
  }

  const std::string line = nlohmann::json{{"name", name}, {"bytes", bytes}}.dump() + "\n";
  if (auto sent = send_with_fd(conn.get(), line, fd); !sent) return sent.error();

  std::string reply;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kReplyTimeoutMs);
  char buf[4096];
  while (reply.find('\n') == std::string::npos && reply.size() <= kMaxReply) {
    if (auto ready = wait_readable(conn.get(), -1, deadline); !ready) return ready.error();
    const ssize_t n = ::recv(conn.get(), buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("reading the import reply", errno);
    if (n == 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
  }
  const auto body = nlohmann::json::parse(reply.substr(0, reply.find('\n')), nullptr, false);
  if (body.is_object() && body.contains("ok") && body["ok"] == true) return {};
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    const auto& e = body["error"];
    const auto text = [&](const char* key) {
      return e.contains(key) && e[key].is_string() ? e[key].get<std::string>() : std::string();
    };
    return make_error(code_from_string(text("code")), text("message"));
  }
  return make_error(ErrorCode::Io, "the agent's import socket sent no valid reply");
}

}  // namespace conduit::agent
