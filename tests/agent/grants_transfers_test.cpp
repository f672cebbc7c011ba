// Grants and transfers between two agents' worth of state in one process: each side has its own TransportSet
// (real libfabric endpoints on loopback), RegionStore and GrantTable; the source's TransferManager moves
// bytes into the target's granted range, and verify asks a small HTTP server for the target's checksums.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "conduit/api/agent_client.h"
#include "conduit/crc32c.h"
#include "conduit/pattern.h"
#include "grants.h"
#include "metrics/agent_metrics.h"
#include "regions.h"
#include "transfer/manager.h"
#include "transport_set.h"

namespace conduit::agent {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
const std::string kToken = "test-token";

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("conduit-xfer-" + name + "-" + std::to_string(::getpid()) + "-" +
              std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::filesystem::create_directories(dir);
  return dir;
}

// One agent's state: its fabric endpoints, regions and grants.
struct Node {
  Node(const std::string& provider, const std::string& name)
      : dir(temp_dir(name)), regions(dir, 4ULL << 30), fabric(open(provider)), grants(*fabric) {}
  ~Node() {
    grants.revoke_all();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  static std::unique_ptr<TransportSet> open(const std::string& provider) {
    auto f = TransportSet::open({provider}, 1, "127.0.0.1", 3s);
    EXPECT_TRUE(f) << f.error().message;
    return f ? std::make_unique<TransportSet>(std::move(*f)) : nullptr;
  }

  RegionPtr region(const std::string& name, std::uint64_t bytes, std::uint64_t seed = 0) {
    auto r = regions.create(name, bytes, "host");
    EXPECT_TRUE(r) << r.error().message;
    if (seed != 0) fill_pattern((*r)->memory().bytes(), seed);
    return *r;
  }

  RemoteKey grant(const RegionPtr& r, Access access = Access::RemoteWrite, std::uint64_t offset = 0,
                  std::uint64_t length = 0, std::string* id = nullptr) {
    auto g = grants.create(r, offset, length, access, 60s, "");
    EXPECT_TRUE(g) << g.error().message;
    if (id != nullptr) *id = (*g)->id;
    return (*g)->registration.remote_key();
  }

  std::filesystem::path dir;
  RegionStore regions;  // outlives the fabric: a batch still in flight may point into it
  std::unique_ptr<TransportSet> fabric;
  GrantTable grants;
};

std::uint32_t crc(const RegionPtr& r, std::uint64_t offset = 0, std::uint64_t length = 0) {
  auto bytes = r->memory().bytes().subspan(offset);
  return crc32c(length == 0 ? bytes : bytes.subspan(0, length));
}

// The target agent's checksum route, as the real API serves it, and nothing else.
class ChecksumServer {
 public:
  explicit ChecksumServer(RegionStore& regions) : regions_(regions) {
    server_.Get(R"(/v1/regions/([a-z0-9-]+)/checksum)", [this](const httplib::Request& req,
                                                               httplib::Response& res) {
      if (req.get_header_value("Authorization") != "Bearer " + kToken) {
        res.status = 401;
        res.set_content(R"({"error":{"code":"Unauthorized","message":"bad token"}})", "application/json");
        return;
      }
      auto region = regions_.get(req.matches[1]);
      if (!region) {
        res.status = 404;
        res.set_content(json{{"error", {{"code", "NotFound"}, {"message", region.error().message}}}}.dump(),
                        "application/json");
        return;
      }
      const auto offset = std::stoull(req.get_param_value("offset"));
      const auto length = std::stoull(req.get_param_value("length"));
      const auto slice = std::stoull(req.get_param_value("slice"));
      auto sums = region_checksum(**region, offset, length, slice);
      if (!sums) {
        res.status = 400;
        res.set_content(
            json{{"error", {{"code", "InvalidArgument"}, {"message", sums.error().message}}}}.dump(),
            "application/json");
        return;
      }
      res.set_content(json{{"region", req.matches[1]},
                           {"offset", offset},
                           {"length", length},
                           {"slice", slice},
                           {"crc32c", *sums}}
                          .dump(),
                      "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~ChecksumServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  RegionStore& regions_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TransferStatus wait_done(const TransferManager& m, const std::string& id, std::chrono::seconds limit = 60s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto s = m.get(id);
    EXPECT_TRUE(s) << s.error().message;
    if (!s) return {};
    if (s->state != TransferState::Queued && s->state != TransferState::Running) return *s;
    if (std::chrono::steady_clock::now() > until) {
      ADD_FAILURE() << id << " still " << to_string(s->state) << " after " << limit.count() << " s";
      return *s;
    }
    std::this_thread::sleep_for(5ms);
  }
}

// Waits until the transfer has moved some bytes but not all: the moment to interfere with it.
void wait_moving(const TransferManager& m, const std::string& id) {
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < until) {
    auto s = m.get(id);
    ASSERT_TRUE(s);
    ASSERT_TRUE(s->state == TransferState::Queued || s->state == TransferState::Running) << s->message;
    if (s->bytes_done > 0) return;
    std::this_thread::sleep_for(1ms);
  }
  FAIL() << id << " moved nothing in 30 s";
}

api::TransferRequest request(const std::string& region, std::vector<api::TransferTarget> targets) {
  api::TransferRequest r;
  r.source_region = region;
  r.targets = std::move(targets);
  return r;
}

// ---- TransportSet ----

TEST(TransportSet, FindsTcpByAliasAndCanonicalNameOnce) {
  auto f = TransportSet::open({"tcp", "tcp;ofi_rxm"}, 1, "127.0.0.1", 3s);
  ASSERT_TRUE(f) << f.error().message;
  ASSERT_EQ(f->transports().size(), 1u) << "the same provider twice opens one transport";
  EXPECT_NE(f->find("tcp"), nullptr);
  EXPECT_EQ(f->find("tcp;ofi_rxm"), f->primary());
  EXPECT_EQ(f->find("tc"), nullptr);
  EXPECT_EQ(f->find("shm"), nullptr);
  const json j = f->to_json();
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["provider"], "tcp;ofi_rxm");
  EXPECT_EQ(j[0]["rails"], 1);
  EXPECT_FALSE(j[0]["address"].get<std::string>().empty());
  EXPECT_TRUE(j[0].contains("mrMode") && j[0].contains("orderedWaw") && j[0].contains("deviceMemory"));
}

TEST(TransportSet, NothingOpenedNamesEveryFailure) {
  auto f = TransportSet::open({"bogus", "nonsense"}, 1, "127.0.0.1", 3s);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, ErrorCode::Unavailable);
  EXPECT_NE(f.error().message.find("bogus"), std::string::npos) << f.error().message;
  EXPECT_NE(f.error().message.find("nonsense"), std::string::npos) << f.error().message;
}

TEST(TransportSet, OneFailingProviderDoesNotSinkTheOthers) {
  auto f = TransportSet::open({"bogus", "tcp"}, 1, "127.0.0.1", 3s);
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->transports().size(), 1u);
}

// ---- Grants ----

TEST(GrantTable, GrantRegistersTheRangeAndDescribesIt) {
  Node node("tcp", "grant");
  auto region = node.region("buf", 1 * MiB);
  auto g = node.grants.create(region, 4096, 8192, Access::RemoteWrite, 60s, "tcp");
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ((*g)->id.size(), 18u);
  EXPECT_EQ((*g)->id.rfind("g-", 0), 0u);
  EXPECT_EQ(region->users(), 1);
  const json j = (*g)->to_json();
  EXPECT_EQ(j["region"], "buf");
  EXPECT_EQ(j["offset"], 4096);
  EXPECT_EQ(j["length"], 8192);
  EXPECT_EQ(j["access"], "write");
  EXPECT_EQ(j["provider"], "tcp;ofi_rxm");
  EXPECT_TRUE(j["expiresAt"].get<std::string>().ends_with("Z"));
  auto key = RemoteKey::from_json(j["key"]);
  ASSERT_TRUE(key) << key.error().message;
  EXPECT_EQ(key->length, 8192u);
  EXPECT_EQ(node.grants.list().size(), 1u);
  EXPECT_TRUE(node.grants.get((*g)->id));
}

TEST(GrantTable, RejectsBadRangesTtlsAccessAndProviders) {
  Node node("tcp", "grant-bad");
  auto region = node.region("buf", 1 * MiB);
  auto fails = [&](std::uint64_t offset, std::uint64_t length, Access access, std::chrono::seconds ttl,
                   const std::string& provider, const std::string& says) {
    auto g = node.grants.create(region, offset, length, access, ttl, provider);
    ASSERT_FALSE(g) << says;
    EXPECT_EQ(g.error().code, ErrorCode::InvalidArgument);
    EXPECT_NE(g.error().message.find(says), std::string::npos) << g.error().message;
  };
  fails(4096, 2 * MiB, Access::RemoteWrite, 60s, "", "[4096, +2097152)");
  fails(2 * MiB, 1, Access::RemoteWrite, 60s, "", "past the end");
  fails(0, 4096, Access::RemoteWrite, 0s, "", "ttlSeconds");
  fails(0, 4096, Access::RemoteWrite, 86401s, "", "ttlSeconds");
  fails(0, 4096, Access::Local, 60s, "", "access");
  fails(0, 4096, Access::RemoteRead, 60s, "shm", "no transport for provider shm");
  EXPECT_EQ(region->users(), 0);
  EXPECT_TRUE(node.grants.create(region, 0, 4096, Access::RemoteWrite, 86400s, ""));
}

TEST(GrantTable, RevokingUnknownOrRevokedGrantIsNotFound) {
  Node node("tcp", "grant-revoke");
  EXPECT_EQ(node.grants.revoke("g-0000000000000000").error().code, ErrorCode::NotFound);
  auto region = node.region("buf", 1 * MiB);
  std::string id;
  node.grant(region, Access::RemoteWrite, 0, 0, &id);
  EXPECT_TRUE(node.grants.revoke(id));
  EXPECT_EQ(node.grants.revoke(id).error().code, ErrorCode::NotFound);
  EXPECT_EQ(node.grants.get(id).error().code, ErrorCode::NotFound);
}

TEST(GrantTable, RegionIsInUseWhileAGrantExists) {
  Node node("tcp", "grant-use");
  auto region = node.region("buf", 1 * MiB);
  std::string id;
  node.grant(region, Access::RemoteWrite, 0, 0, &id);
  region.reset();
  EXPECT_EQ(node.regions.remove("buf").error().code, ErrorCode::Conflict);
  ASSERT_TRUE(node.grants.revoke(id));
  EXPECT_TRUE(node.regions.remove("buf"));
}

// A request that listed the grants a moment before (an access check, GET /v1/grants) still holds the
// revoked grant: the region is deletable all the same, and what the holder reads stays mapped.
TEST(GrantTable, ARevokedGrantStillHeldElsewhereDoesNotKeepItsRegion) {
  Node node("tcp", "grant-held");
  auto region = node.region("buf", 1 * MiB);
  std::string id;
  node.grant(region, Access::RemoteWrite, 0, 0, &id);
  region.reset();
  auto held = node.grants.get(id);
  ASSERT_TRUE(held);
  ASSERT_TRUE(node.grants.revoke(id));
  EXPECT_TRUE(node.regions.remove("buf"));
  ASSERT_TRUE((*held)->region.get());
  EXPECT_EQ((*held)->region->bytes(), 1 * MiB);
}

TEST(GrantTable, ExpiredGrantIsRevokedAndItsKeyStopsWorking) {
  Node target("tcp", "grant-exp-t");
  Node source("tcp", "grant-exp-s");
  auto dst = target.region("dst", 1 * MiB);
  auto g = target.grants.create(dst, 0, 0, Access::RemoteWrite, 1s, "");
  ASSERT_TRUE(g) << g.error().message;
  const RemoteKey key = (*g)->registration.remote_key();
  const std::string id = (*g)->id;
  g = make_error(ErrorCode::NotFound, "dropped");  // the table's reference is the only one left

  auto src = source.region("src", 1 * MiB, 7);
  Transport& t = *source.fabric->primary();
  auto local = t.register_memory(src->memory(), Access::Local);
  ASSERT_TRUE(local) << local.error().message;
  auto write = [&] {
    const Op op{OpKind::Write, &*local, 0, key, 0, 1 * MiB};
    auto batch = t.submit(std::span(&op, 1));
    EXPECT_TRUE(batch) << batch.error().message;
    return batch ? wait(t, *batch) : BatchStatus{};
  };
  auto before = write();
  ASSERT_FALSE(before.error) << before.error->message;
  EXPECT_EQ(crc(dst), crc(src));

  EXPECT_EQ(target.grants.expire(), 0u);
  EXPECT_EQ(target.grants.expire(GrantTable::Clock::now() + 2s), 1u);
  EXPECT_EQ(target.grants.get(id).error().code, ErrorCode::NotFound);
  EXPECT_EQ(dst->users(), 0);
  auto after = write();
  EXPECT_TRUE(after.error.has_value()) << "a write with an expired grant's key landed";
}

// ---- Transfer requests ----

json valid_body() {
  RemoteKey key{"tcp;ofi_rxm", 0, 64 * MiB, {RailKey{{std::byte{1}, std::byte{2}}, 7}}};
  return json{{"source", {{"region", "src"}, {"offset", 0}, {"length", 4096}}},
              {"targets", json::array({{{"grant", key.to_json()},
                                        {"offset", 0},
                                        {"url", "http://127.0.0.1:7070"},
                                        {"region", "dst"},
                                        {"regionOffset", 0}}})},
              {"op", "write"},
              {"chunkBytes", 1048576},
              {"window", 16},
              {"verify", "crc32c"},
              {"deadlineSeconds", 0}};
}

TEST(TransferRequestJson, ParsesAFullRequestAndAppliesDefaults) {
  auto full = ResolvedRequest::from_json(valid_body());
  ASSERT_TRUE(full) << full.error().message;
  EXPECT_EQ(full->wire.source_region, "src");
  EXPECT_EQ(full->wire.length, 4096u);
  EXPECT_EQ(full->wire.verify, Verify::Crc32c);
  EXPECT_EQ(full->wire.targets.at(0).url, "http://127.0.0.1:7070");
  EXPECT_EQ(full->grants.at(0).rails.at(0).key, 7u);
  EXPECT_FALSE(full->wire.chain);

  json chain = valid_body();
  chain["strategy"] = "chain";
  chain["source"]["followGrant"] = "g-fedcba9876543210";
  chain["targets"][0]["grantId"] = "g-0123456789abcdef";
  auto hop = ResolvedRequest::from_json(chain);
  ASSERT_TRUE(hop) << hop.error().message;
  EXPECT_TRUE(hop->wire.chain);
  EXPECT_EQ(hop->wire.follow_grant, "g-fedcba9876543210");

  json minimal = {{"source", {{"region", "src"}}},
                  {"targets", json::array({{{"grant", valid_body()["targets"][0]["grant"]}}})}};
  auto r = ResolvedRequest::from_json(minimal);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->wire.op, OpKind::Write);
  EXPECT_EQ(r->wire.length, 0u);
  EXPECT_EQ(r->wire.chunk_bytes, 1u << 20);
  EXPECT_EQ(r->wire.window, 16u);
  EXPECT_EQ(r->wire.verify, Verify::None);
  EXPECT_EQ(r->wire.deadline_seconds, 0u);
}

TEST(TransferRequestJson, RejectsEachBadFieldByName) {
  struct Case {
    const char* name;
    std::function<void(json&)> change;
    const char* says;
  };
  const std::vector<Case> cases{
      {"not an object", [](json& j) { j = json::array(); }, "object"},
      {"unknown field", [](json& j) { j["rails"] = 2; }, "rails: unknown field"},
      {"unknown source field", [](json& j) { j["source"]["path"] = "x"; }, "source.path: unknown field"},
      {"region and file", [](json& j) { j["source"]["file"] = "x"; }, "give exactly one of region or file"},
      {"unknown target field", [](json& j) { j["targets"][0]["node"] = "x"; },
       "targets[0].node: unknown field"},
      {"missing source", [](json& j) { j.erase("source"); }, "source: is required"},
      {"missing source region", [](json& j) { j["source"].erase("region"); },
       "source.region: give exactly one of region or file"},
      {"ring without grantId", [](json& j) { j["targets"][0]["ringBytes"] = 65536; }, "grantId and url"},
      {"source region not a name", [](json& j) { j["source"]["region"] = "Bad_Name"; }, "source.region"},
      {"offset wrong type", [](json& j) { j["source"]["offset"] = "0"; }, "source.offset: must be"},
      {"negative length", [](json& j) { j["source"]["length"] = -1; }, "source.length: must be"},
      {"fractional length", [](json& j) { j["source"]["length"] = 1.5; }, "source.length: must be"},
      {"zero targets", [](json& j) { j["targets"] = json::array(); }, "targets: must hold 1 to 16"},
      {"17 targets",
       [](json& j) {
         for (int i = 0; i < 16; ++i) j["targets"].push_back(j["targets"][0]);
       },
       "targets: must hold 1 to 16"},
      {"targets not an array", [](json& j) { j["targets"] = json::object(); }, "targets: must be an array"},
      {"grant missing", [](json& j) { j["targets"][0].erase("grant"); }, "targets[0].grant: is required"},
      {"grant without rails", [](json& j) { j["targets"][0]["grant"]["rails"] = json::array(); },
       "targets[0].grant: remote key: rails must be a non-empty array"},
      {"url not http", [](json& j) { j["targets"][0]["url"] = "ftp://x"; }, "targets[0].url"},
      {"bad op", [](json& j) { j["op"] = "copy"; }, "op: must be"},
      {"read with two targets",
       [](json& j) {
         j["op"] = "read";
         j["targets"].push_back(j["targets"][0]);
       },
       "exactly one target"},
      {"chunk too small", [](json& j) { j["chunkBytes"] = 4095; }, "chunkBytes: must be between"},
      {"chunk too large", [](json& j) { j["chunkBytes"] = 64 * MiB + 1; }, "chunkBytes: must be between"},
      {"window zero", [](json& j) { j["window"] = 0; }, "window: must be between"},
      {"window too large", [](json& j) { j["window"] = 257; }, "window: must be between"},
      {"bad verify", [](json& j) { j["verify"] = "md5"; }, "verify: must be"},
      {"verify without url", [](json& j) { j["targets"][0].erase("url"); }, "targets[0].url: is required"},
      {"verify without region", [](json& j) { j["targets"][0].erase("region"); },
       "targets[0].region: is required"},
      {"deadline too long", [](json& j) { j["deadlineSeconds"] = 604801; },
       "deadlineSeconds: must be between"},
      {"unknown strategy", [](json& j) { j["strategy"] = "tree"; },
       "strategy: must be \"fanout\" or \"chain\""},
      {"chain hop without grantId", [](json& j) { j["strategy"] = "chain"; },
       "targets[0]: a chain hop needs url, grantId and region"},
      {"chain hop into a ring",
       [](json& j) {
         j["strategy"] = "chain";
         j["targets"][0]["grantId"] = "g-0123456789abcdef";
         j["targets"][0]["ringBytes"] = 65536;
       },
       "a chain hop takes the whole range"},
      {"chain that reads",
       [](json& j) {
         j["strategy"] = "chain";
         j["op"] = "read";
       },
       "a chain writes"},
      {"followGrant without length",
       [](json& j) {
         j["source"].erase("length");
         j["source"]["followGrant"] = "g-0123456789abcdef";
       },
       "source.followGrant: forwards what lands in a region"},
      {"followGrant from a file",
       [](json& j) {
         j["source"].erase("region");
         j["source"]["file"] = "a.bin";
         j["source"]["followGrant"] = "g-0123456789abcdef";
       },
       "source.followGrant"},
  };
  for (const Case& c : cases) {
    json body = valid_body();
    c.change(body);
    auto r = ResolvedRequest::from_json(body);
    ASSERT_FALSE(r) << c.name << " was accepted";
    EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument) << c.name;
    EXPECT_NE(r.error().message.find(c.says), std::string::npos) << c.name << ": " << r.error().message;
  }
}

TEST(TransferStatusJson, HasEveryDocumentedField) {
  TransferStatus s;
  s.id = "t-1";
  s.targets.resize(1);
  const json j = s.to_api().to_json();
  for (const char* field :
       {"id", "state", "bytesTotal", "bytesDone", "throughputBytesPerSecond", "retries", "slicesResent",
        "verified", "reason", "message", "targets", "createdAt", "startedAt", "finishedAt"}) {
    EXPECT_TRUE(j.contains(field)) << field;
  }
  EXPECT_EQ(j["state"], "Queued");
  EXPECT_TRUE(j["startedAt"].is_null());
  EXPECT_EQ(j["targets"][0]["state"], "Queued");
}

// ---- Agent client ----

// The checksum call as a transfer makes it: `token` on the agent at `url`.
Result<std::vector<std::uint32_t>> checksum(const std::string& url, const std::string& token,
                                            const std::string& region, std::uint64_t offset,
                                            std::uint64_t length, std::uint64_t slice) {
  auto sums = api::AgentClient(url, {.token = token})
                  .checksum(region, {.offset = offset, .length = length, .slice = slice});
  if (!sums) return sums.error();
  return sums->crc32c;
}

TEST(TransferAgentClient, ReportsUnreachableUnauthorizedAndUnknownRegion) {
  Node target("tcp", "client");
  auto dst = target.region("dst", 1 * MiB, 3);
  ChecksumServer server(target.regions);

  auto sums = checksum(server.url(), kToken, "dst", 0, 1 * MiB, 256 * KiB);
  ASSERT_TRUE(sums) << sums.error().message;
  EXPECT_EQ(*sums, crc32c_slices(dst->memory().bytes(), 256 * KiB));

  EXPECT_TRUE(checksum(server.url() + "/", kToken, "dst", 0, 1 * MiB, 256 * KiB));

  // A refused token is RemoteAccess for every client of the agents (conduit/api/errors.h).
  auto unauthorized = checksum(server.url(), "wrong", "dst", 0, 1 * MiB, 256 * KiB);
  ASSERT_FALSE(unauthorized);
  EXPECT_EQ(unauthorized.error().code, ErrorCode::RemoteAccess);
  EXPECT_NE(unauthorized.error().message.find("Unauthorized"), std::string::npos);

  auto missing = checksum(server.url(), kToken, "nope", 0, 1 * MiB, 256 * KiB);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::NotFound);

  auto bad = checksum(server.url(), kToken, "dst", 2 * MiB, 1, 4096);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::InvalidArgument);  // the agent's own code, as every client reads it
  EXPECT_NE(bad.error().message.find("offset"), std::string::npos) << bad.error().message;

  auto gone = checksum("http://127.0.0.1:1", kToken, "dst", 0, 1 * MiB, 256 * KiB);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::PeerUnreachable);
  EXPECT_NE(gone.error().message.find("did not answer"), std::string::npos) << gone.error().message;
}

// ---- Transfers ----

class TransferFixture {
 protected:
  void open(const std::string& provider, TransferOptions options) {
    target_ = std::make_unique<Node>(provider, "target");
    source_ = std::make_unique<Node>(provider, "source");
    server_ = std::make_unique<ChecksumServer>(target_->regions);
    manager_ =
        std::make_unique<TransferManager>(*source_->fabric, source_->regions, client_, &metrics_, options);
  }

  api::TransferTarget target(const RemoteKey& key, const std::string& region = "dst",
                             std::uint64_t region_offset = 0) {
    api::TransferTarget t;
    t.grant = key.to_json();
    t.url = server_->url();
    t.region = region;
    t.region_offset = region_offset;
    return t;
  }

  // As the REST route starts it: the body read strictly, the grant keys resolved, then the manager's checks.
  Result<std::string> try_start(const api::TransferRequest& r) {
    auto read = ResolvedRequest::from_json(r.to_json());
    if (!read) return read.error();
    return manager_->start(std::move(*read));
  }

  std::string start(const api::TransferRequest& r) {
    auto id = try_start(r);
    EXPECT_TRUE(id) << id.error().message;
    return id ? *id : std::string();
  }

  // A transfer slow enough on loopback (4 KiB per round trip) to interfere with while it runs.
  std::string start_slow(std::uint64_t bytes, std::chrono::seconds deadline = 0s) {
    src_ = source_->region("slow-src", bytes, 5);
    dst_ = target_->region("slow-dst", bytes);
    auto r = request("slow-src",
                     {target(target_->grant(dst_, Access::RemoteWrite, 0, 0, &grant_id_), "slow-dst")});
    r.chunk_bytes = 4 * KiB;
    r.window = 1;
    r.deadline_seconds = static_cast<std::uint64_t>(deadline.count());
    r.max_bytes_per_second = 64 * MiB;  // about 4 s for 256 MiB, whatever the machine does
    return start(std::move(r));
  }

  // The metrics line of one sample, e.g. `conduit_agent_transfers_total{result="succeeded"}`; "" if absent.
  std::string metric(const std::string& sample) const {
    const std::string text = metrics_.serialize();
    const auto at = text.find("\n" + sample + " ");
    return at == std::string::npos ? "" : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  }

  api::ClientOptions client_{.token = std::string(kToken)};
  metrics::AgentMetrics metrics_{"test", "node"};
  std::unique_ptr<Node> target_;
  std::unique_ptr<Node> source_;
  std::unique_ptr<ChecksumServer> server_;
  std::unique_ptr<TransferManager> manager_;  // last: stops before the nodes go
  RegionPtr src_, dst_;
  std::string grant_id_;
};

class TransferMoves : public TransferFixture, public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    TransferOptions o;
    o.stall_timeout = 10s;
    open(GetParam(), o);
  }
  void TearDown() override { manager_.reset(); }
};

TEST_P(TransferMoves, SixtyFourMiBLandIntactAndVerify) {
  auto src = source_->region("src", 64 * MiB, 11);
  auto dst = target_->region("dst", 64 * MiB);
  auto r = request("src", {target(target_->grant(dst))});
  r.verify = Verify::Crc32c;
  const std::string id = start(std::move(r));
  EXPECT_GE(src->users(), 0);
  const TransferStatus s = wait_done(*manager_, id);
  ASSERT_EQ(s.state, TransferState::Succeeded) << s.reason << ": " << s.message;
  EXPECT_EQ(crc(dst), crc(src));
  EXPECT_EQ(s.bytes_total, 64 * MiB);
  EXPECT_EQ(s.bytes_done, 64 * MiB);
  EXPECT_TRUE(s.verified);
  EXPECT_EQ(s.slices_resent, 0u);
  EXPECT_EQ(s.retries, 0u);
  EXPECT_GT(s.throughput_bytes_per_second, 0);
  ASSERT_EQ(s.targets.size(), 1u);
  EXPECT_EQ(s.targets[0].state, TransferState::Succeeded);
  EXPECT_EQ(src->users(), 0) << "a finished transfer still holds its source region";
  EXPECT_EQ(manager_->active(), 0u);
  const std::string provider = source_->fabric->primary()->capabilities().provider;
  EXPECT_EQ(metric("conduit_agent_transfer_bytes_total{direction=\"write\",transport=\"" + provider + "\"}"),
            "conduit_agent_transfer_bytes_total{direction=\"write\",transport=\"" + provider + "\"} 67108864")
      << metrics_.serialize();
  EXPECT_NE(metric("conduit_agent_transfers_total{result=\"succeeded\"}"), "");
  EXPECT_EQ(metric("conduit_agent_active_transfers"), "conduit_agent_active_transfers 0");
  std::cout << GetParam() << ": 64 MiB at " << s.throughput_bytes_per_second / 1e9 << " GB/s\n";
}

INSTANTIATE_TEST_SUITE_P(Transfer, TransferMoves, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

class TransferTcp : public TransferFixture, public ::testing::Test {
 protected:
  void SetUp() override { open("tcp", options()); }
  void TearDown() override { manager_.reset(); }
  virtual TransferOptions options() {
    TransferOptions o;
    o.stall_timeout = 10s;
    return o;
  }
};

TEST_F(TransferTcp, FansOutToTwoTargetsAndRanges) {
  auto src = source_->region("src", 64 * MiB, 21);
  auto dst = target_->region("dst", 80 * MiB);
  auto r =
      request("src", {target(target_->grant(dst, Access::RemoteWrite, 0, 32 * MiB)),
                      target(target_->grant(dst, Access::RemoteWrite, 40 * MiB, 40 * MiB), "dst", 40 * MiB)});
  r.offset = 16 * MiB;
  r.length = 32 * MiB;
  r.targets[1].offset = 8 * MiB;
  r.verify = Verify::Crc32c;
  const TransferStatus s = wait_done(*manager_, start(std::move(r)));
  ASSERT_EQ(s.state, TransferState::Succeeded) << s.reason << ": " << s.message;
  EXPECT_EQ(s.bytes_total, 64 * MiB);
  EXPECT_EQ(s.bytes_done, 64 * MiB);
  EXPECT_EQ(crc(dst, 0, 32 * MiB), crc(src, 16 * MiB, 32 * MiB));
  EXPECT_EQ(crc(dst, 48 * MiB, 32 * MiB), crc(src, 16 * MiB, 32 * MiB));
  ASSERT_EQ(s.targets.size(), 2u);
  EXPECT_EQ(s.targets[1].bytes_done, 32 * MiB);
  EXPECT_TRUE(s.verified);
}

TEST_F(TransferTcp, ReadPullsTheGrantedRange) {
  auto remote = target_->region("remote", 16 * MiB, 31);
  auto local = source_->region("local", 16 * MiB);
  auto r = request("local", {target(target_->grant(remote, Access::RemoteRead), "remote")});
  r.op = OpKind::Read;
  r.verify = Verify::Crc32c;
  const TransferStatus s = wait_done(*manager_, start(std::move(r)));
  ASSERT_EQ(s.state, TransferState::Succeeded) << s.reason << ": " << s.message;
  EXPECT_EQ(crc(local), crc(remote));
}

TEST_F(TransferTcp, VerifyOfTheWrongPlaceResendsThenFailsNamingTheSlice) {
  auto src = source_->region("src", 4 * MiB, 41);
  auto dst = target_->region("dst", 8 * MiB);
  // The bytes land in [0, 4 MiB) but verify is told they sit at 4 MiB: every slice differs, re-sending
  // cannot fix it, so after two rounds the transfer must fail rather than claim success.
  auto r = request("src", {target(target_->grant(dst, Access::RemoteWrite, 0, 4 * MiB), "dst", 4 * MiB)});
  r.verify = Verify::Crc32c;
  const TransferStatus s = wait_done(*manager_, start(std::move(r)));
  ASSERT_EQ(s.state, TransferState::Failed);
  EXPECT_EQ(s.reason, reason::kChecksumMismatch);
  EXPECT_NE(s.message.find("slice 0 at byte offset 0"), std::string::npos) << s.message;
  EXPECT_EQ(s.slices_resent, 2u * 4u) << "4 slices of 1 MiB, re-sent in each of 2 rounds";
  EXPECT_FALSE(s.verified);
  EXPECT_EQ(crc(dst, 0, 4 * MiB), crc(src));
}

TEST_F(TransferTcp, ResumeSendsOnlyTheRestAndVerifyStillCoversTheWholeRange) {
  auto src = source_->region("src", 8 * MiB, 43);
  auto dst = target_->region("dst", 8 * MiB);
  // An earlier transfer left the first half in place.
  std::memcpy(dst->memory().bytes().data(), src->memory().bytes().data(), 4 * MiB);
  auto r = request("src", {target(target_->grant(dst))});
  r.verify = Verify::Crc32c;
  r.targets[0].resume_offset = 4 * MiB;
  const TransferStatus s = wait_done(*manager_, start(std::move(r)));
  ASSERT_EQ(s.state, TransferState::Succeeded) << s.message;
  EXPECT_TRUE(s.verified);
  EXPECT_EQ(s.slices_resent, 0u) << "the first half was right: nothing to re-send";
  EXPECT_EQ(s.targets[0].committed_bytes, 8 * MiB);
  EXPECT_EQ(crc(dst), crc(src));

  // A wrong claim (the target lost the first half) costs a re-send, never wrong bytes.
  auto lost = target_->region("lost", 8 * MiB);
  auto wrong = request("src", {target(target_->grant(lost), "lost")});
  wrong.verify = Verify::Crc32c;
  wrong.targets[0].resume_offset = 4 * MiB;
  const TransferStatus w = wait_done(*manager_, start(std::move(wrong)));
  ASSERT_EQ(w.state, TransferState::Succeeded) << w.message;
  EXPECT_EQ(w.slices_resent, 4u) << "the 4 slices of 1 MiB that were never sent";
  EXPECT_EQ(crc(lost), crc(src));

  auto past = request("src", {target(target_->grant(dst))});
  past.targets[0].resume_offset = 8 * MiB + 1;
  auto refused = try_start(past);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("resumeOffset"), std::string::npos) << refused.error().message;
}

TEST_F(TransferTcp, RefusesWhatDoesNotFitLocalState) {
  auto src = source_->region("src", 1 * MiB, 1);
  auto dst = target_->region("dst", 1 * MiB);
  const RemoteKey key = target_->grant(dst);
  auto fails = [&](const api::TransferRequest& r, ErrorCode code, const std::string& says) {
    auto id = try_start(r);
    ASSERT_FALSE(id) << says;
    EXPECT_EQ(id.error().code, code) << id.error().message;
    EXPECT_NE(id.error().message.find(says), std::string::npos) << id.error().message;
  };
  fails(request("nope", {target(key)}), ErrorCode::NotFound, "nope");
  auto r = request("src", {target(key)});
  r.offset = 4096;
  r.length = 1 * MiB;
  fails(r, ErrorCode::InvalidArgument, "[4096, +1048576)");
  RemoteKey shm = key;
  shm.provider = "shm";
  fails(request("src", {target(shm)}), ErrorCode::InvalidArgument,
        "no transport for provider shm on this agent");
  r = request("src", {target(key)});
  r.targets[0].offset = 1;
  fails(r, ErrorCode::InvalidArgument, "grant");
  EXPECT_EQ(src->users(), 0);
  EXPECT_TRUE(manager_->list().empty());
}

TEST_F(TransferTcp, CancelEndsCancelledAndFreesTheSource) {
  const std::string id = start_slow(256 * MiB);
  wait_moving(*manager_, id);
  EXPECT_EQ(source_->regions.remove("slow-src").error().code, ErrorCode::Conflict);
  ASSERT_TRUE(manager_->cancel(id));
  const auto t0 = std::chrono::steady_clock::now();
  const TransferStatus s = wait_done(*manager_, id, 10s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(s.state, TransferState::Cancelled);
  EXPECT_EQ(s.reason, reason::kCancelled);
  EXPECT_LT(s.bytes_done, s.bytes_total);
  EXPECT_EQ(s.targets.at(0).state, TransferState::Cancelled);
  EXPECT_TRUE(manager_->cancel(id)) << "cancelling a finished transfer changes nothing";
  EXPECT_EQ(manager_->get(id)->state, TransferState::Cancelled);
  EXPECT_EQ(manager_->cancel("t-999").error().code, ErrorCode::NotFound);
  src_.reset();
  EXPECT_TRUE(source_->regions.remove("slow-src"));
}

TEST_F(TransferTcp, BandwidthCapIsHonoured) {
  auto src = source_->region("capped-src", 32 * MiB, 8);
  auto dst = target_->region("capped-dst", 32 * MiB);
  auto r = request("capped-src", {target(target_->grant(dst, Access::RemoteWrite, 0, 0), "capped-dst")});
  r.max_bytes_per_second = 16 * MiB;
  const auto t0 = std::chrono::steady_clock::now();
  const TransferStatus s = wait_done(*manager_, start(std::move(r)), 20s);
  ASSERT_EQ(s.state, TransferState::Succeeded) << s.message;
  // 32 MiB at 16 MiB/s cannot finish in under ~2 s; unthrottled it takes milliseconds here.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 1900ms);
  EXPECT_LE(s.throughput_bytes_per_second, 17.0 * MiB);
}

TEST_F(TransferTcp, DeadlineFailsASlowTransfer) {
  // 256 MiB take ~4 s at its 64 MiB/s; 2 s leave a slow start (TSan, a loaded machine) time to move bytes.
  const std::string id = start_slow(256 * MiB, 2s);
  const TransferStatus s = wait_done(*manager_, id, 20s);
  ASSERT_EQ(s.state, TransferState::Failed);
  EXPECT_EQ(s.reason, reason::kDeadlineExceeded);
  EXPECT_GT(s.bytes_done, 0u);
  EXPECT_LT(s.bytes_done, s.bytes_total);
}

TEST_F(TransferTcp, RevokedGrantMidwayFailsWithAReason) {
  const std::string id = start_slow(256 * MiB);
  wait_moving(*manager_, id);
  ASSERT_TRUE(target_->grants.revoke(grant_id_));
  const TransferStatus s = wait_done(*manager_, id, 60s);
  ASSERT_EQ(s.state, TransferState::Failed);
  EXPECT_FALSE(s.reason.empty());
  EXPECT_EQ(s.retries, TransferOptions{}.max_segment_retries);
  EXPECT_EQ(metric("conduit_agent_slice_retries_total"), "conduit_agent_slice_retries_total 3");
  EXPECT_NE(metric("conduit_agent_errors_total{reason=\"" + s.reason + "\"}"), "") << metrics_.serialize();
  std::cout << "revoked: " << s.reason << ": " << s.message << "\n";
}

TEST_F(TransferTcp, ShutdownFailsRunningTransfersAndRefusesNewOnes) {
  const std::string id = start_slow(256 * MiB);
  wait_moving(*manager_, id);
  const auto t0 = std::chrono::steady_clock::now();
  manager_->shutdown(2s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2500ms);
  auto s = manager_->get(id);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, TransferState::Failed);
  EXPECT_EQ(s->reason, reason::kAgentShuttingDown);
  EXPECT_EQ(src_->users(), 0);
  auto refused = try_start(request("slow-src", {target(target_->grant(dst_))}));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::Unavailable);
  EXPECT_NE(refused.error().message.find("agent is shutting down"), std::string::npos);
}

// A restarted agent runs a new TransferManager: its ids must not repeat the earlier run's, or a controller
// holding an id from before the restart would take another client's transfer for its own.
TEST_F(TransferTcp, IdsDoNotRepeatAfterARestart) {
  auto src = source_->region("src", 1 * MiB, 63);
  auto dst = target_->region("dst", 1 * MiB);
  const RemoteKey key = target_->grant(dst);
  const std::string before = start(request("src", {target(key)}));
  EXPECT_EQ(wait_done(*manager_, before).state, TransferState::Succeeded);
  manager_.reset();
  manager_ =
      std::make_unique<TransferManager>(*source_->fabric, source_->regions, client_, &metrics_, options());
  const std::string after = start(request("src", {target(key)}));
  EXPECT_NE(after, before);
  EXPECT_EQ(manager_->get(before).error().code, ErrorCode::NotFound);
  EXPECT_EQ(wait_done(*manager_, after).state, TransferState::Succeeded);
}

class TransferHistory : public TransferTcp {
  TransferOptions options() override {
    TransferOptions o = TransferTcp::options();
    o.history = 2;
    o.history_min_age = std::chrono::seconds(0);
    return o;
  }
};

// Finished transfers younger than history_min_age stay beyond the count, up to history_max.
class TransferHistoryByAge : public TransferTcp {
  TransferOptions options() override {
    TransferOptions o = TransferTcp::options();
    o.history = 1;
    o.history_min_age = std::chrono::seconds(600);
    o.history_max = 3;
    return o;
  }
};

TEST_F(TransferHistoryByAge, KeepsYoungFinishedTransfersUpToTheCap) {
  auto src = source_->region("src", 1 * MiB, 52);
  auto dst = target_->region("dst", 1 * MiB);
  const RemoteKey key = target_->grant(dst);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(start(request("src", {target(key)})));
    EXPECT_EQ(wait_done(*manager_, ids.back()).state, TransferState::Succeeded);
  }
  EXPECT_EQ(manager_->list().size(), 3u) << "all three finished moments ago: none is dropped";
  ids.push_back(start(request("src", {target(key)})));
  EXPECT_EQ(wait_done(*manager_, ids.back()).state, TransferState::Succeeded);
  EXPECT_EQ(manager_->list().size(), 3u) << "history_max caps what age keeps";
  EXPECT_EQ(manager_->get(ids[0]).error().code, ErrorCode::NotFound);
}

TEST_F(TransferHistory, KeepsTheNewestFinishedAndListsNewestFirst) {
  auto src = source_->region("src", 1 * MiB, 51);
  auto dst = target_->region("dst", 1 * MiB);
  const RemoteKey key = target_->grant(dst);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(start(request("src", {target(key)})));
    EXPECT_EQ(wait_done(*manager_, ids.back()).state, TransferState::Succeeded);
  }
  const auto all = manager_->list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, ids[2]);
  EXPECT_EQ(all[1].id, ids[1]);
  EXPECT_EQ(manager_->get(ids[0]).error().code, ErrorCode::NotFound);
}

// A tcp socket that accepts connections and never says a word: to the transport, a peer that is there but
// never completes anything.
class SilentPeer {
 public:
  SilentPeer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof(addr_);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr_), &len);
  }
  ~SilentPeer() { ::close(fd_); }

  // A grant as the tcp provider would hand it out, pointing here.
  RemoteKey key(std::uint64_t length) const {
    std::vector<std::byte> address(sizeof(addr_));
    std::memcpy(address.data(), &addr_, sizeof(addr_));
    return RemoteKey{"tcp;ofi_rxm", 0, length, {RailKey{std::move(address), 1}}};
  }

 private:
  int fd_ = -1;
  sockaddr_in addr_{};
};

class TransferStall : public TransferTcp {
  TransferOptions options() override {
    TransferOptions o;
    o.stall_timeout = 1s;  // below the transports' own 3 s: the transfer's watchdog must fire first
    o.max_segment_retries = 0;
    return o;
  }
};

TEST_F(TransferStall, PeerThatNeverCompletesFailsStalled) {
  SilentPeer peer;
  auto src = source_->region("src", 1 * MiB, 61);
  const auto t0 = std::chrono::steady_clock::now();
  const TransferStatus s = wait_done(*manager_, start(request("src", {target(peer.key(1 * MiB))})), 20s);
  EXPECT_EQ(s.state, TransferState::Failed);
  EXPECT_EQ(s.reason, reason::kStalled) << s.message;
  EXPECT_EQ(s.bytes_done, 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  // The transport gives up on the batch too (its own stall timeout covers ops it could never post), and
  // only then are the registrations and the source released: never freed under a pending op.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (src->users() != 0 && std::chrono::steady_clock::now() < until) {
    manager_->list();  // reaps parked transfers
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(src->users(), 0);
}

// The transports' own stall timer (3 s here) fires before the transfer's (10 s) and fails the batch: it
// moved nothing for a whole stall timeout, so the transfer fails Stalled then, not after re-sending the
// segment max_segment_retries times, each waiting out the timeout again (a dead target held transfers
// for 4 stall timeouts).
TEST_F(TransferTcp, ASegmentTheTransportTimedOutIsNotRetried) {
  SilentPeer peer;
  auto src = source_->region("src", 1 * MiB, 62);
  const auto t0 = std::chrono::steady_clock::now();
  const TransferStatus s = wait_done(*manager_, start(request("src", {target(peer.key(1 * MiB))})), 30s);
  EXPECT_EQ(s.state, TransferState::Failed);
  EXPECT_EQ(s.reason, reason::kStalled) << s.message;
  EXPECT_EQ(s.retries, 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 8s);
}

}  // namespace
}  // namespace conduit::agent
