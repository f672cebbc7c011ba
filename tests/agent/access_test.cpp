// Access as someone holding a key or a token meets it: real conduit-agent processes on loopback, and this
// test process as the remote writer with its own libfabric endpoint and the RemoteKey the agent handed out.
//   - a key stops working the moment its grant is revoked or expires, and nothing lands after;
//   - a grant reaches exactly its range with its access: a key stretched past the range, moved before it,
//     or used for what the grant does not allow is refused by the agent's side, and no byte outside moves;
//   - every protected route in agent/openapi.yaml answers 401 with a JSON error without or with a wrong
//     token, and a rotated --token-file takes effect without a restart;
//   - nothing the agents or the controller log at debug level holds the token or a grant's key.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent_process.h"
#include "build_paths.h"
#include "conduit/crc32c.h"
#include "conduit/pattern.h"
#include "conduit/transport.h"
#include "eventually.h"
#include "file_bytes.h"
#include "local_mode_dir.h"
#include "openapi_spec.h"
#include "peer_process.h"

namespace conduit {
namespace {

using namespace std::chrono_literals;
using testing::AgentProcess;
using testing::eventually;
using testing::PeerProcess;
using testing::small_tcp_agent;
using json = nlohmann::json;
using Steady = std::chrono::steady_clock;

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;

// ---------------------------------------------------------------------------------------------------------
// The remote writer: a tcp endpoint in this process and a seeded host buffer registered for local use.

class RemoteWriter {
 public:
  explicit RemoteWriter(std::uint64_t bytes) {
    TransportConfig config;
    config.provider = "tcp";
    config.bind_address = "127.0.0.1";
    config.stall_timeout = 5s;
    auto t = open_transport(config);
    EXPECT_TRUE(t) << t.error().message;
    if (!t) return;
    transport_ = std::move(*t);
    auto region = MemoryRegion::allocate_host(bytes);
    EXPECT_TRUE(region) << region.error().message;
    if (!region) return;
    region_ = std::make_unique<MemoryRegion>(std::move(*region));
    auto reg = transport_->register_memory(*region_, Access::Local);
    EXPECT_TRUE(reg) << reg.error().message;
    if (reg) local_ = std::move(*reg);
  }

  bool ready() const { return transport_ && region_ && local_.valid(); }
  void fill(std::uint64_t seed) { fill_pattern(region_->bytes(), seed); }
  std::span<const std::byte> bytes(std::uint64_t offset, std::uint64_t length) const {
    return region_->bytes().subspan(offset, length);
  }

  // One op, waited for: the error when the writer's side refused it or the agent's side did.
  std::optional<Error> run(OpKind kind, const RemoteKey& key, std::uint64_t remote_offset,
                           std::uint64_t length, std::uint64_t local_offset = 0) {
    const Op op{kind, &local_, local_offset, key, remote_offset, length};
    auto id = transport_->submit(std::span(&op, 1), BatchOptions{64 * KiB, 4});
    if (!id) return id.error();
    return wait(*transport_, *id).error;
  }
  std::optional<Error> write(const RemoteKey& key, std::uint64_t remote_offset, std::uint64_t length,
                             std::uint64_t local_offset = 0) {
    return run(OpKind::Write, key, remote_offset, length, local_offset);
  }

 private:
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<MemoryRegion> region_;
  Registration local_;
};

std::string describe(const std::optional<Error>& e) {
  return e ? std::string(to_string(e->code)) + ": " + e->message : "succeeded";
}

// ---------------------------------------------------------------------------------------------------------
// The agent's side, through its REST API only.

std::uint32_t region_crc(AgentProcess& agent, const std::string& name, std::uint64_t offset,
                         std::uint64_t length) {
  auto r = agent.get("/v1/regions/" + name + "/checksum?offset=" + std::to_string(offset) +
                     "&length=" + std::to_string(length) + "&slice=" + std::to_string(length));
  EXPECT_EQ(r.status, 200) << r.body.dump();
  return r.status == 200 ? r.body["crc32c"][0].get<std::uint32_t>() : 0;
}

json grant(AgentProcess& agent, const std::string& region, std::uint64_t offset, std::uint64_t length,
           const std::string& access, int ttl_seconds = 600) {
  return testing::region_grant(
      agent, region,
      {{"offset", offset}, {"length", length}, {"access", access}, {"ttlSeconds", ttl_seconds}});
}

RemoteKey key_of(const json& granted) {
  auto key = RemoteKey::from_json(granted.value("key", json()));
  EXPECT_TRUE(key) << granted.dump();
  return key ? *key : RemoteKey{};
}

// "2026-01-02T03:04:05Z" -> its time point.
std::chrono::system_clock::time_point parse_utc(const std::string& text) {
  std::tm tm{};
  std::istringstream in(text);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%SZ");
  EXPECT_FALSE(in.fail()) << text;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

// ---------------------------------------------------------------------------------------------------------
// 1. A key lives exactly as long as its grant.

class Grants : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(agent.started());
    ASSERT_TRUE(writer.ready());
    original = load_seeded(agent, "dst", MiB, 11);
    writer.fill(12);
  }
  // The target region's bytes in [offset, +length) are still the seeded ones.
  void expect_untouched(std::uint64_t offset, std::uint64_t length, const std::string& what) {
    EXPECT_EQ(region_crc(agent, "dst", offset, length), crc32c(std::span(original).subspan(offset, length)))
        << what << ": bytes changed in [" << offset << ", +" << length << ")";
  }

  AgentProcess agent{small_tcp_agent()};
  RemoteWriter writer{MiB};
  std::vector<std::byte> original;
};

TEST_F(Grants, ARevokedGrantsKeyFailsAtOnceAndNothingLands) {
  const json g = grant(agent, "dst", 0, MiB, "write");
  const RemoteKey key = key_of(g);
  // While granted, the key works: the first half of the region takes the writer's bytes.
  ASSERT_FALSE(writer.write(key, 0, 512 * KiB)) << "a write under a live grant failed";
  EXPECT_EQ(region_crc(agent, "dst", 0, 512 * KiB), crc32c(writer.bytes(0, 512 * KiB)));

  ASSERT_EQ(agent.del("/v1/grants/" + g["id"].get<std::string>()).status, 204);
  // No pause: the DELETE's answer is the moment the key must stop working.
  const auto refused = writer.write(key, 512 * KiB, 512 * KiB, 512 * KiB);
  EXPECT_TRUE(refused) << "a write with a revoked grant's key landed";
  std::cout << "[ revoked  ] write with the revoked key: " << describe(refused) << "\n";
  expect_untouched(512 * KiB, 512 * KiB, "write after revoke");
  EXPECT_EQ(region_crc(agent, "dst", 0, 512 * KiB), crc32c(writer.bytes(0, 512 * KiB)));
  EXPECT_EQ(agent.get("/v1/grants/" + g["id"].get<std::string>()).status, 404);

  // The agent stays healthy: a fresh grant's key works. (From another writer: the agent refused the revoked
  // key by closing this writer's connection, and the first op after that may fail while libfabric connects
  // again, which is why the agent's own transfers retry a failed segment.)
  const RemoteKey fresh = key_of(grant(agent, "dst", 512 * KiB, 512 * KiB, "write"));
  RemoteWriter other(MiB);
  other.fill(13);
  const auto by_other = other.write(fresh, 0, 512 * KiB, 512 * KiB);
  EXPECT_FALSE(by_other) << "a fresh grant's key failed after a refusal: " << describe(by_other);
  EXPECT_EQ(region_crc(agent, "dst", 512 * KiB, 512 * KiB), crc32c(other.bytes(512 * KiB, 512 * KiB)));
}

TEST_F(Grants, AnExpiredGrantsKeyFailsFromItsExpiresAtAndNothingLands) {
  const json g = grant(agent, "dst", 0, MiB, "write", /*ttl_seconds=*/1);
  const RemoteKey key = key_of(g);
  const auto expires = parse_utc(g["expiresAt"]);
  ASSERT_FALSE(writer.write(key, 0, 64 * KiB)) << "a write before expiry failed";
  EXPECT_EQ(region_crc(agent, "dst", 0, 64 * KiB), crc32c(writer.bytes(0, 64 * KiB)));

  // The agent drops the grant at its expiresAt (a timer set for it, not a periodic sweep): 100 ms after it
  // covers the timer's wake-up on a loaded machine, and the key must be refused by then.
  std::this_thread::sleep_until(expires + 100ms);
  const auto refused = writer.write(key, 64 * KiB, 64 * KiB, 64 * KiB);
  EXPECT_TRUE(refused) << "a write with an expired grant's key landed";
  std::cout << "[ expired  ] write 100 ms after expiresAt: " << describe(refused) << "\n";
  expect_untouched(64 * KiB, MiB - 64 * KiB, "write after expiry");
  EXPECT_EQ(agent.get("/v1/grants/" + g["id"].get<std::string>()).status, 404);
  // A grant lasts at least its ttlSeconds: expiresAt is on a whole second no sooner than creation + ttl.
  EXPECT_EQ(g["expiresAt"].get<std::string>().size(), 20u) << g["expiresAt"];
}

// ---------------------------------------------------------------------------------------------------------
// 2. A grant never covers more than its range, nor more than its access.

TEST_F(Grants, AKeyStretchedOrMovedPastItsRangeIsRefusedByTheAgentAndNothingOutsideMoves) {
  constexpr std::uint64_t kOffset = 256 * KiB;
  constexpr std::uint64_t kLength = 256 * KiB;
  const RemoteKey key = key_of(grant(agent, "dst", kOffset, kLength, "write"));
  EXPECT_EQ(key.length, kLength);

  // The writer's own transport refuses what the key says is out of range before anything is sent.
  const auto past_end = writer.write(key, kLength - 4 * KiB, 8 * KiB);
  ASSERT_TRUE(past_end);
  EXPECT_EQ(past_end->code, ErrorCode::InvalidArgument) << describe(past_end);

  // A hostile writer edits the key instead: only the agent's registration stands in the way now.
  struct Forged {
    std::string what;
    RemoteKey key;
    std::uint64_t remote_offset;
    std::uint64_t length;
  };
  RemoteKey stretched = key;
  stretched.length = MiB;  // as if the grant were the whole region
  RemoteKey moved_back = key;
  moved_back.base =
      key.base - kOffset;  // offset 0 of the key = offset 0 of the region (wraps when base is 0)
  moved_back.length = MiB;
  const std::vector<Forged> forged = {
      {"stretched: the 64 KiB right after the range", stretched, kLength, 64 * KiB},
      {"stretched: 8 KiB straddling the end of the range", stretched, kLength - 4 * KiB, 8 * KiB},
      {"stretched: the rest of the region", stretched, kLength, MiB - kOffset - kLength},
      {"moved back: the 64 KiB at the region's start", moved_back, 0, 64 * KiB},
      {"moved back: 8 KiB straddling the start of the range", moved_back, kOffset - 4 * KiB, 8 * KiB},
  };
  for (const auto& f : forged) {
    const auto refused = writer.write(f.key, f.remote_offset, f.length);
    EXPECT_TRUE(refused) << f.what << ": the agent let a write outside the grant land";
    std::cout << "[ forged   ] " << f.what << ": " << describe(refused) << "\n";
    expect_untouched(0, kOffset, f.what);
    expect_untouched(kOffset + kLength, MiB - kOffset - kLength, f.what);
  }

  // The range itself still takes writes, and only it changes (from a writer whose connection the agent has
  // not just closed: see ARevokedGrantsKeyFailsAtOnceAndNothingLands).
  RemoteWriter honest(MiB);
  honest.fill(14);
  const auto landed = honest.write(key, 0, kLength);
  ASSERT_FALSE(landed) << "the honest write into the granted range failed: " << describe(landed);
  EXPECT_EQ(region_crc(agent, "dst", kOffset, kLength), crc32c(honest.bytes(0, kLength)));
  expect_untouched(0, kOffset, "honest write");
  expect_untouched(kOffset + kLength, MiB - kOffset - kLength, "honest write");
}

// Someone who can reach the agent's fabric endpoint but was handed no key guesses one: the endpoint's address
// and the base are no secret (the base is 0 where the provider addresses by offset), so the rail key is the
// only thing between a guesser and a live grant's range. Small numbers and neighbours of a key they do hold
// must not work.
TEST_F(Grants, AKeyCannotBeGuessedFromSmallNumbersOrAnotherGrantsKey) {
  const RemoteKey victim = key_of(grant(agent, "dst", 0, MiB, "write"));  // never used by the guesser
  ASSERT_EQ(region_crc(agent, "dst", 0, MiB), crc32c(original));
  ASSERT_TRUE(agent.post("/v1/regions", {{"name", "mine"}, {"bytes", MiB}}).status == 201);
  const RemoteKey own = key_of(grant(agent, "mine", 0, MiB, "write"));
  std::cout << "[ guessing ] rail keys handed out: " << victim.rails[0].key << ", " << own.rails[0].key
            << "\n";

  std::vector<std::uint64_t> guesses;
  for (std::uint64_t k = 0; k <= 16; ++k) guesses.push_back(k);
  for (std::uint64_t d = 1; d <= 8; ++d) {
    guesses.push_back(own.rails[0].key + d);
    guesses.push_back(own.rails[0].key - d);
  }
  int landed = 0;
  for (const std::uint64_t k : guesses) {
    if (k == own.rails[0].key) continue;
    RemoteKey guess = own;  // the endpoint address and base, which a guesser can know
    guess.rails[0].key = k;
    if (!writer.write(guess, 0, 4 * KiB)) ++landed;
  }
  EXPECT_EQ(landed, 0) << "writes under guessed keys landed";
  expect_untouched(0, MiB, "writes under guessed keys");
}

TEST_F(Grants, AReadGrantCannotBeWrittenThroughNorAWriteGrantRead) {
  const RemoteKey read_key = key_of(grant(agent, "dst", 0, 128 * KiB, "read"));
  const auto written = writer.write(read_key, 0, 64 * KiB);
  EXPECT_TRUE(written) << "a write through a read grant landed";
  std::cout << "[ access   ] write through a read grant: " << describe(written) << "\n";
  expect_untouched(0, MiB, "write through a read grant");

  // Reading what a write grant covers: refused, and the writer's buffer keeps its own bytes.
  const RemoteKey write_key = key_of(grant(agent, "dst", 512 * KiB, 128 * KiB, "write"));
  const std::uint32_t mine = crc32c(writer.bytes(0, 64 * KiB));
  const auto read = writer.run(OpKind::Read, write_key, 0, 64 * KiB);
  EXPECT_TRUE(read) << "a read through a write grant succeeded";
  std::cout << "[ access   ] read through a write grant: " << describe(read) << "\n";
  EXPECT_EQ(crc32c(writer.bytes(0, 64 * KiB)), mine) << "bytes were read through a write grant";
  // And the read grant does what it says (for a reader whose connection was not just closed).
  RemoteWriter reader(MiB);
  const auto read_back = reader.run(OpKind::Read, read_key, 0, 64 * KiB);
  EXPECT_FALSE(read_back) << "a read through a read grant failed: " << describe(read_back);
  EXPECT_EQ(crc32c(reader.bytes(0, 64 * KiB)), crc32c(std::span(original).subspan(0, 64 * KiB)));
}

// ---------------------------------------------------------------------------------------------------------
// 3. Tokens.

struct Reply {
  int status = 0;  // 0: no answer
  json body;
  std::string content_type;
  std::string www_authenticate;
};

Reply send(const std::string& url, const std::string& method, const std::string& path,
           const std::string& token, const std::string& body = "") {
  httplib::Client client(url);
  client.set_read_timeout(30, 0);
  httplib::Request req;
  req.method = method;
  req.path = path;
  if (!token.empty()) req.set_header("Authorization", "Bearer " + token);
  if (!body.empty()) {
    req.body = body;
    req.set_header("Content-Type", "application/json");
  }
  auto res = client.send(req);
  Reply r;
  if (!res) return r;
  r.status = res->status;
  r.body = json::parse(res->body, nullptr, false);
  r.content_type = res->get_header_value("Content-Type");
  r.www_authenticate = res->get_header_value("WWW-Authenticate");
  return r;
}

// A concrete path for a template: every placeholder gets a value that names an object that exists, so a
// request the token let through would do something.
std::string concrete(std::string path) {
  for (auto at = path.find('{'); at != std::string::npos; at = path.find('{')) {
    const auto end = path.find('}', at);
    const std::string name = path.substr(at + 1, end - at - 1);
    path.replace(at, end - at + 1, name == "name" ? "existing" : "x-1");
  }
  return path;
}

// The controller releases what a job's run record names, and whoever may edit the TransferJob may write that
// record: the agent, holding each DELETE (and a transfer's GET) to the job's namespace, is what keeps a
// forged record from reaching another namespace's region, grant or transfer.
TEST(Release, ANamespacedRequestReachesOnlyThatNamespacesRegionsGrantsAndTransfers) {
  AgentProcess agent(small_tcp_agent());
  ASSERT_TRUE(agent.started());
  for (const auto& [name, ns] :
       {std::pair{"theirs", "team-b"}, {"theirs-dst", "team-b"}, {"ours", "team-a"}}) {
    ASSERT_EQ(
        agent.post("/v1/regions", {{"name", name}, {"bytes", MiB}, {"memory", "host"}, {"namespace", ns}})
            .status,
        201);
  }
  auto granted = [&](const std::string& region, const std::string& ns) {
    return testing::region_grant(
        agent, region, {{"length", MiB}, {"access", "write"}, {"ttlSeconds", 600}, {"namespace", ns}});
  };
  const json theirs = granted("theirs-dst", "team-b"), ours = granted("ours", "team-a");
  auto t = agent.post("/v1/transfers", {{"source", {{"region", "theirs"}}},
                                        {"targets", {{{"grant", theirs["key"]}}}},
                                        {"namespace", "team-b"}});
  ASSERT_EQ(t.status, 202) << t.body.dump();
  const std::string transfer = "/v1/transfers/" + t.body["id"].get<std::string>();
  const std::string their_grant = "/v1/grants/" + theirs["id"].get<std::string>();

  // As team-a: refused, each saying why, and nothing of team-b's changed.
  const std::vector<std::pair<std::string, std::string>> refused{
      {"DELETE", "/v1/regions/theirs?namespace=team-a"},
      {"DELETE", their_grant + "?namespace=team-a"},
      {"GET", transfer + "?namespace=team-a"},
      {"GET", transfer + "?waitSeconds=1&namespace=team-a"},
      {"DELETE", transfer + "?namespace=team-a"}};
  for (const auto& [method, path] : refused) {
    auto r = method == "GET" ? agent.get(path) : agent.del(path);
    EXPECT_EQ(r.status, 403) << method << " " << path << ": " << r.body.dump();
    EXPECT_EQ(r.body["error"]["code"], "Forbidden") << r.body.dump();
    EXPECT_NE(r.body["error"]["message"].get<std::string>().find("namespace team-a"), std::string::npos)
        << r.body.dump();
  }
  EXPECT_EQ(agent.get("/v1/regions/theirs").status, 200);
  EXPECT_EQ(agent.get(their_grant).status, 200);
  EXPECT_EQ(agent.get(transfer + "?namespace=team-b").status, 200);

  // A name that is no namespace, or two of them: 400.
  EXPECT_EQ(agent.del("/v1/regions/ours?namespace=Team_A").status, 400);
  EXPECT_EQ(agent.del("/v1/regions/ours?namespace=team-a&namespace=team-b").status, 400);
  EXPECT_EQ(agent.get(transfer + "?namespace=").status, 400);

  // As team-a, its own: revoked and deleted.
  EXPECT_EQ(agent.del("/v1/grants/" + ours["id"].get<std::string>() + "?namespace=team-a").status, 204);
  EXPECT_EQ(agent.del("/v1/regions/ours?namespace=team-a").status, 204);
  EXPECT_EQ(agent.get("/v1/regions/ours").status, 404);
}

TEST(Tokens, EveryProtectedRouteInTheSpecAnswers401WithAJsonErrorWithoutOrWithAWrongToken) {
  AgentProcess agent(small_tcp_agent());
  ASSERT_TRUE(agent.started());
  ASSERT_EQ(agent.post("/v1/regions", {{"name", "existing"}, {"bytes", 4096}}).status, 201);
  const auto routes = testing::spec_operations(testing::agent_openapi());
  std::size_t protected_routes = 0;
  for (const auto& route : routes) {
    const std::string path = concrete(route.path);
    const std::string label = route.method + " " + route.path;
    // A body that would succeed if let in, so only the 401 keeps it out.
    const std::string body = route.method == "POST" ? R"({"name":"sneaky","bytes":4096})" : "";
    if (route.is_public) {
      EXPECT_EQ(send(agent.url(), route.method, path, "").status, 200) << label << " is public in the spec";
      continue;
    }
    ++protected_routes;
    for (const std::string& token : {std::string(), std::string("wrong"), agent.token() + "x"}) {
      const Reply r = send(agent.url(), route.method, path, token, body);
      const std::string what = label + (token.empty() ? " without a token" : " with a wrong token");
      EXPECT_EQ(r.status, 401) << what;
      EXPECT_EQ(r.content_type, "application/json") << what;
      ASSERT_TRUE(r.body.is_object() && r.body.contains("error")) << what << ": " << r.body;
      EXPECT_EQ(r.body["error"].value("code", ""), "Unauthorized") << what;
      EXPECT_TRUE(r.body["error"]["message"].is_string()) << what;
      EXPECT_TRUE(r.www_authenticate.starts_with("Bearer ")) << what;
    }
  }
  // The spec has 18 operations, 3 of them public; a parse that found none must not pass.
  EXPECT_GE(protected_routes, 15u);
  EXPECT_EQ(routes.size() - protected_routes, 3u);
  // Nothing the refused requests carried took effect.
  EXPECT_EQ(agent.get("/v1/regions/sneaky").status, 404);
  EXPECT_EQ(agent.get("/v1/regions").body["items"].size(), 1u);
}

// Writes `token` into `path` the way an operator or a Secret volume would: in place (truncate and write), or
// into a new file renamed over the old one.
void write_token(const std::filesystem::path& path, const std::string& token, bool rename_over) {
  if (!rename_over) {
    std::ofstream(path, std::ios::trunc) << token << "\n";
    return;
  }
  const auto tmp = path.string() + ".new";
  std::ofstream(tmp) << token << "\n";
  std::filesystem::rename(tmp, path);
}

TEST(Tokens, ARotatedTokenFileTakesEffectWithoutARestart) {
  AgentProcess a(small_tcp_agent());
  AgentProcess b(small_tcp_agent());
  ASSERT_TRUE(a.started() && b.started());
  const int pid = a.process().pid();
  // AgentProcess writes the token file next to the data directory.
  const auto token_file = [](AgentProcess& agent) { return agent.data_dir().parent_path() / "token"; };
  ASSERT_TRUE(std::filesystem::exists(token_file(a)));

  std::string old_token = a.token();
  int round = 0;
  for (const bool rename_over : {false, true}) {
    const std::string new_token = "rotated-" + std::to_string(++round) + "-0123456789abcdef";
    write_token(token_file(a), new_token, rename_over);
    const auto written = Steady::now();
    // The next request already sees the new file: allow 1 s for a loaded machine, report what it took.
    const bool switched = eventually(
        [&] {
          return send(a.url(), "GET", "/v1/regions", new_token).status == 200 &&
                 send(a.url(), "GET", "/v1/regions", old_token).status == 401;
        },
        1s, 1ms);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Steady::now() - written);
    EXPECT_TRUE(switched) << (rename_over ? "renamed" : "rewritten") << " token file not in effect after 1 s";
    std::cout << "[ rotation ] " << (rename_over ? "renamed over" : "rewritten in place")
              << ": new token accepted, old refused after " << took.count() << " ms\n";
    EXPECT_EQ(send(a.url(), "GET", "/v1/regions", old_token).status, 401);
    old_token = new_token;
  }
  EXPECT_EQ(a.process().pid(), pid);
  EXPECT_EQ(::kill(pid, 0), 0) << "the agent restarted or died";

  // A token file caught empty half way through a rotation keeps the last token working (rather than
  // locking every client out); once written, the new one takes over.
  std::ofstream(token_file(a), std::ios::trunc).flush();
  EXPECT_EQ(send(a.url(), "GET", "/v1/regions", old_token).status, 200);
  EXPECT_EQ(send(a.url(), "GET", "/v1/regions", "").status, 401);
  const std::string shared = "shared-token-fedcba9876543210";
  write_token(token_file(a), shared, true);
  EXPECT_EQ(send(a.url(), "GET", "/v1/regions", shared).status, 200);
  EXPECT_EQ(send(a.url(), "GET", "/v1/regions", old_token).status, 401);

  // The agent calls other agents with its token as it is now: a verified transfer from a to b needs a's
  // checksum requests to b to carry the rotated token.
  write_token(token_file(b), shared, false);
  ASSERT_EQ(send(b.url(), "GET", "/v1/regions", shared).status, 200);
  const auto data = testing::write_seeded(a.data_dir() / "src.bin", 4 * MiB, 5);
  const Reply source = send(a.url(), "POST", "/v1/regions", shared, R"({"name":"src","file":"src.bin"})");
  ASSERT_EQ(source.status, 201) << source.body;
  const Reply target = send(b.url(), "POST", "/v1/regions", shared, R"({"name":"dst","bytes":4194304})");
  ASSERT_EQ(target.status, 201) << target.body;
  const Reply granted =
      send(b.url(), "POST", "/v1/regions/dst/grants", shared, R"({"access":"write","ttlSeconds":600})");
  ASSERT_EQ(granted.status, 201) << granted.body;
  const json transfer = {{"source", {{"region", "src"}}},
                         {"targets", {{{"grant", granted.body["key"]}, {"url", b.url()}, {"region", "dst"}}}},
                         {"verify", "crc32c"}};
  const Reply started = send(a.url(), "POST", "/v1/transfers", shared, transfer.dump());
  ASSERT_EQ(started.status, 202) << started.body;
  json status;
  ASSERT_TRUE(eventually(
      [&] {
        status = send(a.url(), "GET", "/v1/transfers/" + started.body["id"].get<std::string>(), shared).body;
        return status.value("state", "") != "Queued" && status.value("state", "") != "Running";
      },
      60s, 50ms));
  EXPECT_EQ(status["state"], "Succeeded") << status.dump();
  EXPECT_EQ(status["verified"], true) << status.dump();
}

// ---------------------------------------------------------------------------------------------------------
// 4. Logs: nothing secret in what the agents and the controller write at debug level.

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// argv run with its stderr appended to `log` (PeerProcess keeps only stdout).
std::vector<std::string> logged(const std::filesystem::path& log, std::vector<std::string> argv) {
  std::vector<std::string> wrapped{"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>>" + shell_quote(log.string())};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return wrapped;
}

// A debug-level agent on loopback with its log in `dir`.
class LoggedAgent {
 public:
  LoggedAgent(const std::filesystem::path& dir, const std::string& name, const std::filesystem::path& token)
      : data_(dir / name), log_(dir / (name + ".log")) {
    std::filesystem::create_directories(data_);
    process_ = std::make_unique<PeerProcess>(
        logged(log_, {conduit::testing::built_binary("conduit-agent"), "--listen", "127.0.0.1:0",
                      "--providers", "tcp", "--bind-address", "127.0.0.1", "--token-file", token.string(),
                      "--data-dir", data_.string(), "--memory-cap", "1GiB", "--import-socket",
                      (dir / (name + ".sock")).string(), "--log-level", "debug"}));
    while (auto line = process_->read_line(30s)) {
      if (line->starts_with("listening ")) {
        url_ = "http://" + line->substr(10);
        break;
      }
    }
  }
  const std::string& url() const { return url_; }
  const std::filesystem::path& data_dir() const { return data_; }
  const std::filesystem::path& log() const { return log_; }
  void stop() {
    ::kill(process_->pid(), SIGTERM);
    process_->wait();
  }

 private:
  std::filesystem::path data_;
  std::filesystem::path log_;
  std::unique_ptr<PeerProcess> process_;
  std::string url_;
};

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The strings that would give a grant's key away: the key as JSON, and its rail keys and base where they are
// long enough to be told apart from any other number in a log (tcp's keys are small counters).
std::set<std::string> secrets_of(const json& key) {
  std::set<std::string> out{key.dump()};
  for (const auto& rail : key.value("rails", json::array())) {
    const std::string k = rail.value("key", "");
    if (k.size() >= 6) out.insert(k);
    out.insert("\"key\":\"" + k + "\"");
  }
  if (const std::string base = key.value("base", "0"); base.size() >= 6) out.insert(base);
  return out;
}

TEST(Logs, NeitherTheTokenNorAGrantKeyAppearsInDebugLogsOfAWholeJob) {
  const std::filesystem::path controller_bin = conduit::testing::built_binary("conduit-controller");
  ASSERT_TRUE(std::filesystem::exists(controller_bin)) << controller_bin;
  testing::LocalModeDir dir("conduit-log-secrets");
  const std::string token = "log-secret-token-5f3a9c1e7b2d4f60";
  dir.write_token(token);
  LoggedAgent a(dir.path(), "node-a", dir.token_file());
  LoggedAgent b(dir.path(), "node-b", dir.token_file());
  ASSERT_FALSE(a.url().empty() || b.url().empty());

  testing::write_seeded(a.data_dir() / "weights.bin", 16 * MiB, 8);
  // 8 MiB/s: two seconds, time to see the grant the controller takes on node-b.
  std::ofstream(dir.jobs() / "weights.yaml")
      << "apiVersion: conduit.dev/v1alpha1\nkind: TransferJob\nmetadata:\n  name: weights\nspec:\n"
         "  source: {node: node-a, file: weights.bin}\n  targets:\n    - node: node-b\n      region: "
         "weights\n"
         "      create: {bytes: 16777216}\n  verify: crc32c\n  maxBytesPerSecond: 8388608\n";
  const auto controller_log = dir.path() / "controller.log";
  PeerProcess controller(logged(
      controller_log, dir.controller(a.url(), b.url(), {"--once-job", "weights"}, /*log_level=*/"debug")));

  // Collect the keys of the grants the job holds while it runs.
  std::set<std::string> secrets{token};
  httplib::Client b_client(b.url());
  b_client.set_bearer_token_auth(token);
  std::atomic<bool> finished{false};
  std::optional<std::string> outcome;
  std::thread reader([&] {
    outcome = controller.read_line(60s);  // --once-job prints one line when the job ends
    finished = true;
  });
  int polls = 0;
  std::string last_answer;
  while (!finished) {
    auto res = b_client.Get("/v1/grants");
    ++polls;
    last_answer = res ? std::to_string(res->status) + " " + res->body : "no answer";
    if (res && res->status == 200) {
      const json body = json::parse(res->body, nullptr, false);
      for (const auto& g : body.value("items", json::array())) {
        for (const auto& s : secrets_of(g["key"])) secrets.insert(s);
      }
    }
    std::this_thread::sleep_for(50ms);
  }
  reader.join();
  ASSERT_TRUE(outcome.has_value()) << read_text(controller_log);
  EXPECT_NE(outcome->find("Succeeded"), std::string::npos) << *outcome;
  EXPECT_EQ(controller.wait(), 0);
  ASSERT_GT(secrets.size(), 1u) << "never saw the job's grant on node-b in " << polls
                                << " polls; last answer: " << last_answer;
  a.stop();
  b.stop();

  for (const auto* log : {&a.log(), &b.log(), &controller_log}) {
    const std::string text = read_text(*log);
    // Debug level really was on: the agents log every request, the controller each step.
    EXPECT_NE(text.find("level=debug"), std::string::npos) << *log << " has no debug lines";
    for (const auto& secret : secrets) {
      EXPECT_EQ(text.find(secret), std::string::npos) << *log << " contains \"" << secret << "\"";
    }
  }
}

}  // namespace
}  // namespace conduit
