// One copy per node: a region the agent holds in a memfd ("shareable": true, or imported) is opened by a
// second local process over the agent's import socket and mapped there, read-only unless it asks otherwise,
// so every inference process on the node sees the weights a transfer landed without a transfer of its own.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "agent_process.h"
#include "conduit/common/unique_fd.h"
#include "conduit/crc32c.h"
#include "conduit/pattern.h"
#include "import_socket.h"

namespace conduit {
namespace {

using json = nlohmann::json;
using testing::AgentProcess;

constexpr std::uint64_t MiB = 1 << 20;

// AgentProcess serves the import socket beside the data directory.
std::string socket_of(AgentProcess& agent) {
  return (agent.data_dir().parent_path() / "import.sock").string();
}

// The agent's one-line answer to `line`, and the fd that came with it (none on an error).
struct Answer {
  json body;
  UniqueFd fd;
};

// Sends `line` as a local process does (with `fd` attached when given) and reads the answer and any fd.
Answer ask(const std::string& sock, const json& line, int fd = -1) {
  Answer out;
  UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  if (::connect(c.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    out.body = {{"connect", sock + ": " + std::strerror(errno)}};
    return out;
  }
  const std::string text = line.dump() + "\n";
  if (fd >= 0) {
    if (!agent::send_with_fd(c.get(), text, fd).ok()) return out;
  } else if (::send(c.get(), text.data(), text.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(text.size())) {
    return out;
  }
  std::string reply;
  char buf[4096];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  for (;;) {
    iovec iov{buf, sizeof buf};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(c.get(), &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) break;
    for (cmsghdr* h = CMSG_FIRSTHDR(&msg); h != nullptr; h = CMSG_NXTHDR(&msg, h)) {
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
        int got;
        std::memcpy(&got, CMSG_DATA(h), sizeof got);
        out.fd.reset(got);
      }
    }
    reply.append(buf, static_cast<std::size_t>(n));
    if (reply.find('\n') != std::string::npos) break;
  }
  out.body = json::parse(reply.substr(0, reply.find('\n')), nullptr, false);
  return out;
}

// The first `bytes` of `fd` as a process that maps it read-only sees them.
std::vector<std::byte> mapped_bytes(int fd, std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return {};
  const auto* b = static_cast<const std::byte*>(p);
  std::vector<std::byte> out(b, b + bytes);
  ::munmap(p, bytes);
  return out;
}

json write_grant(AgentProcess& target, const std::string& region, std::uint64_t length) {
  return testing::region_grant(target, region,
                               {{"offset", 0}, {"length", length}, {"access", "write"}, {"ttlSeconds", 600}});
}

json transfer_body(const std::string& source, const json& grant, const AgentProcess& target,
                   const std::string& region) {
  return {{"source", {{"region", source}}},
          {"targets",
           {{{"grant", grant["key"]},
             {"offset", 0},
             {"url", target.url()},
             {"region", region},
             {"regionOffset", 0}}}},
          {"op", "write"},
          {"verify", "crc32c"}};
}

using Share = testing::TwoAgents;

TEST_F(Share, AnOpenerMapsTheBytesATransferLandedReadOnly) {
  ASSERT_TRUE(a.started() && b.started());
  const std::uint64_t size = 4 * MiB;
  const auto made = b.post("/v1/regions", {{"name", "weights"}, {"bytes", size}, {"shareable", true}});
  ASSERT_EQ(made.status, 201) << made.body.dump();
  EXPECT_EQ(made.body["shareable"], true);
  EXPECT_EQ(b.get("/v1/regions/weights").body["shareable"], true);

  const auto source = testing::load_seeded(a, "source", size, 7);
  auto started =
      a.post("/v1/transfers", transfer_body("source", write_grant(b, "weights", size), b, "weights"));
  ASSERT_EQ(started.status, 202) << started.body.dump();
  ASSERT_EQ(a.wait_transfer(started.body["id"])["state"], "Succeeded");

  Answer opened = ask(socket_of(b), {{"open", "weights"}});
  ASSERT_EQ(opened.body["ok"], true) << opened.body.dump();
  EXPECT_EQ(opened.body["region"]["name"], "weights");
  EXPECT_EQ(opened.body["region"]["bytes"], size);
  EXPECT_FALSE(opened.body.contains("manifest")) << "it has none";
  EXPECT_TRUE(opened.body["agent"].contains("instance"));
  ASSERT_TRUE(opened.fd);
  EXPECT_EQ(mapped_bytes(opened.fd.get(), size), source);
  // Read-only: the kernel refuses a shared writable mapping of the descriptor handed over.
  errno = 0;
  EXPECT_EQ(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, opened.fd.get(), 0), MAP_FAILED);
  EXPECT_EQ(errno, EACCES);
}

TEST_F(Share, AWritableOpenersWritesReachTheRegion) {
  ASSERT_TRUE(b.started());
  ASSERT_EQ(b.post("/v1/regions", {{"name", "kv"}, {"bytes", MiB}, {"shareable", true}}).status, 201);
  Answer writer = ask(socket_of(b), {{"open", "kv"}, {"writable", true}});
  ASSERT_EQ(writer.body["ok"], true) << writer.body.dump();
  void* p = ::mmap(nullptr, MiB, PROT_READ | PROT_WRITE, MAP_SHARED, writer.fd.get(), 0);
  ASSERT_NE(p, MAP_FAILED) << std::strerror(errno);
  std::vector<std::byte> content(MiB);
  fill_pattern(content, 3);
  std::memcpy(p, content.data(), MiB);
  ::munmap(p, MiB);
  // What the agent would send from it, and what a reader opening it now maps.
  EXPECT_EQ(testing::region_crc(b, "kv", MiB), crc32c(content));
  Answer reader = ask(socket_of(b), {{"open", "kv"}});
  ASSERT_TRUE(reader.fd);
  EXPECT_EQ(mapped_bytes(reader.fd.get(), MiB), content);

  // The agent keeps nothing per opener: the region is deleted while mapped, and the mapping lives on.
  ASSERT_EQ(b.del("/v1/regions/kv").status, 204);
  EXPECT_EQ(mapped_bytes(reader.fd.get(), MiB), content);
}

TEST_F(Share, OpensOfWhatCannotBeSharedAreRefusedWithNoFd) {
  ASSERT_TRUE(b.started());
  const auto cuda =
      b.post("/v1/regions", {{"name", "g"}, {"bytes", MiB}, {"memory", "cuda:0"}, {"shareable", true}});
  EXPECT_EQ(cuda.status, 400);
  EXPECT_NE(cuda.body.dump().find("shareable"), std::string::npos) << cuda.body.dump();
  ASSERT_EQ(b.post("/v1/regions", {{"name", "plain"}, {"bytes", MiB}}).status, 201);
  EXPECT_FALSE(b.get("/v1/regions/plain").body.contains("shareable"));

  Answer plain = ask(socket_of(b), {{"open", "plain"}});
  EXPECT_EQ(plain.body["error"]["code"], "InvalidArgument") << plain.body.dump();
  EXPECT_NE(plain.body["error"]["message"].get<std::string>().find(
                "region \"plain\" is not shareable: made without shareable:true"),
            std::string::npos)
      << plain.body.dump();
  EXPECT_FALSE(plain.fd);

  Answer unknown = ask(socket_of(b), {{"open", "nothing"}});
  EXPECT_EQ(unknown.body["error"]["code"], "NotFound") << unknown.body.dump();
  EXPECT_FALSE(unknown.fd);

  for (const json& bad : {json{{"open", 7}}, json{{"open", "plain"}, {"writable", "yes"}},
                          json{{"open", "plain"}, {"name", "x"}}}) {
    Answer refused = ask(socket_of(b), bad);
    EXPECT_EQ(refused.body["error"]["code"], "InvalidArgument")
        << bad.dump() << " -> " << refused.body.dump();
    EXPECT_FALSE(refused.fd);
  }
}

// A memfd of `bytes`, as a local process makes one to import.
UniqueFd memfd(std::uint64_t bytes) {
  UniqueFd fd(::memfd_create("share-test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd && ::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) fd.reset();
  return fd;
}

json two_tensors() {
  return {{"tensors",
           json::array({{{"name", "w"}, {"dtype", "F32"}, {"shape", {4}}, {"offset", 0}, {"length", 16}},
                        {{"name", "b"}, {"dtype", "U8"}, {"shape", {16}}, {"offset", 16}, {"length", 16}}})}};
}

TEST_F(Share, AnImportLineCarriesTheManifestAndAnOpenerGetsIt) {
  ASSERT_TRUE(b.started());
  const UniqueFd fd = memfd(4096);
  ASSERT_TRUE(fd);
  Answer imported =
      ask(socket_of(b), {{"name", "named"}, {"bytes", 4096}, {"manifest", two_tensors()}}, fd.get());
  ASSERT_EQ(imported.body["ok"], true) << imported.body.dump();
  EXPECT_EQ(imported.body["region"]["tensors"], 2);
  EXPECT_EQ(imported.body["region"]["shareable"], true) << "an imported memfd is shareable too";
  EXPECT_EQ(b.get("/v1/regions/named/manifest").body["tensors"][1]["name"], "b");

  Answer opened = ask(socket_of(b), {{"open", "named"}});
  ASSERT_EQ(opened.body["ok"], true) << opened.body.dump();
  EXPECT_EQ(opened.body["manifest"]["tensors"][0]["name"], "w");
  EXPECT_TRUE(opened.fd);

  // A tensor past the bytes refuses the import, naming it, and imports nothing.
  json past = two_tensors();
  past["tensors"][1]["offset"] = 4090;
  Answer refused = ask(socket_of(b), {{"name", "bad"}, {"bytes", 4096}, {"manifest", past}}, fd.get());
  EXPECT_EQ(refused.body["error"]["code"], "InvalidArgument") << refused.body.dump();
  EXPECT_NE(refused.body["error"]["message"].get<std::string>().find("manifest."), std::string::npos);
  EXPECT_NE(refused.body["error"]["message"].get<std::string>().find("(b)"), std::string::npos)
      << refused.body.dump();
  EXPECT_EQ(b.get("/v1/regions/bad").status, 404);
  Answer not_object = ask(socket_of(b), {{"name", "bad"}, {"manifest", "w"}}, fd.get());
  EXPECT_EQ(not_object.body["error"]["code"], "InvalidArgument") << not_object.body.dump();
  EXPECT_EQ(b.get("/v1/regions/bad").status, 404);
}

}  // namespace
}  // namespace conduit
