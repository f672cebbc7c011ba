// Scatter-gather transfers through real conduit-agent processes on loopback (docs/kv-cache.md): many ops
// in one request, as one batch, into a long-lived grant; completion answered to the request that waits.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "agent_process.h"
#include "conduit/api/transfer.h"
#include "conduit/common/base64.h"
#include "conduit/crc32c.h"
#include "conduit/pattern.h"
#include "file_bytes.h"
#include "kube_client/kube_config.h"

namespace conduit {
namespace {

using namespace std::chrono_literals;
using testing::AgentOptions;
using testing::AgentProcess;
using json = nlohmann::json;
using api::kMaxScatterRuns;
namespace fs = std::filesystem;

constexpr std::uint64_t KiB = 1 << 10;
constexpr std::uint64_t MiB = 1 << 20;

AgentOptions options() {
  AgentOptions o = testing::small_tcp_agent();
  o.extra_args = {"--log-level", "warn"};
  return o;
}

struct Op {
  std::uint64_t source = 0, target = 0, length = 0;
};

// `count` ops of 1 byte to 16 KiB at random, non-overlapping places in both `bytes`-byte ranges.
std::vector<Op> random_layout(std::size_t count, std::uint64_t bytes, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Op> ops;
  const std::uint64_t cell = bytes / count;  // each op in a cell of its own, on each side
  std::vector<std::uint64_t> sources(count), targets(count);
  for (std::size_t i = 0; i < count; ++i) sources[i] = targets[i] = i;
  std::shuffle(sources.begin(), sources.end(), rng);
  std::shuffle(targets.begin(), targets.end(), rng);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t length = 1 + rng() % std::min<std::uint64_t>(16 * KiB, cell);
    ops.push_back({sources[i] * cell + rng() % (cell - length + 1),
                   targets[i] * cell + rng() % (cell - length + 1), length});
  }
  return ops;
}

json ops_json(const std::vector<Op>& ops) {
  json out = json::array();
  for (const Op& op : ops)
    out.push_back({{"sourceOffset", op.source}, {"targetOffset", op.target}, {"length", op.length}});
  return out;
}

// The same ops as `opsPacked`: little-endian uint64 triples, base64.
std::string ops_packed(const std::vector<Op>& ops) {
  std::string raw;
  for (const Op& op : ops) {
    for (std::uint64_t v : {op.source, op.target, op.length}) {
      for (int b = 0; b < 8; ++b) raw.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
    }
  }
  return base64_encode(raw);
}

// Ranges of a grant (offset, length) as POST /v1/grants/{id}/checksum takes them: little-endian uint64
// pairs, base64.
std::string ranges_packed(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges) {
  std::string raw;
  for (const auto& [offset, length] : ranges) {
    for (std::uint64_t v : {offset, length}) {
      for (int b = 0; b < 8; ++b) raw.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
    }
  }
  return base64_encode(raw);
}

// What the region holds, saved by its agent.
std::vector<std::byte> region_bytes(AgentProcess& agent, const std::string& region) {
  const std::string file = "saved-" + region + ".bin";
  EXPECT_EQ(agent.post("/v1/regions/" + region + "/save", {{"file", file}}).status, 200);
  auto bytes = testing::read_file(agent.data_dir() / file);
  fs::remove(agent.data_dir() / file);
  return bytes;
}

std::size_t entries(const std::string& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

class Scatter : public testing::TwoAgents {
 protected:
  Scatter() : TwoAgents(options(), options()) {}
  void SetUp() override {
    ASSERT_TRUE(a.started() && b.started());
    source = testing::write_seeded(a.data_dir() / "src.bin", kBytes, 11);
    ASSERT_EQ(a.post("/v1/regions", {{"name", "src"}, {"file", "src.bin"}, {"mode", "load"}}).status, 201);
    ASSERT_EQ(b.post("/v1/regions", {{"name", "dst"}, {"bytes", kBytes}}).status, 201);
  }
  json grant(const std::string& access, std::uint64_t ttl = 86400) {
    return testing::region_grant(b, "dst", {{"access", access}, {"ttlSeconds", ttl}});
  }
  // POST /v1/transfers?waitSeconds=30 with these ops (in `field`: ops or opsPacked): the answer once the
  // transfer ended.
  AgentProcess::Reply run(const json& g, const json& ops, const std::string& op = "write",
                          const std::string& field = "ops") {
    return a.post(
        "/v1/transfers?waitSeconds=30",
        {{"source", {{"region", "src"}}}, {"targets", {{{"grant", g["key"]}}}}, {"op", op}, {field, ops}});
  }
  // Random ops written from node-a's region into node-b's, then others read back, sent as `field` in the
  // form `encode` gives: every byte on both sides where the ops say.
  void write_then_read(const std::string& field, const std::function<json(const std::vector<Op>&)>& encode,
                       std::uint32_t seed) {
    const json g = grant("write");
    const auto ops = random_layout(2000, kBytes, seed);
    auto done = run(g, encode(ops), "write", field);
    ASSERT_EQ(done.status, 200) << done.body.dump();
    EXPECT_EQ(done.body["state"], "Succeeded") << done.body.dump();
    std::uint64_t total = 0;
    std::vector<std::byte> want(kBytes);  // the region starts zeroed
    for (const Op& op : ops) {
      std::copy_n(source.begin() + static_cast<std::ptrdiff_t>(op.source), op.length,
                  want.begin() + static_cast<std::ptrdiff_t>(op.target));
      total += op.length;
    }
    EXPECT_EQ(done.body["bytesDone"], total);
    EXPECT_TRUE(region_bytes(b, "dst") == want) << "a scattered write put bytes elsewhere than its ops said";

    // Read (pull): the ops now take from node-b's region into node-a's, at other places.
    const json r = grant("read");
    const auto back = random_layout(1000, kBytes, seed + 1);
    auto pulled = run(r, encode(back), "read", field);
    ASSERT_EQ(pulled.status, 200) << pulled.body.dump();
    EXPECT_EQ(pulled.body["state"], "Succeeded") << pulled.body.dump();
    std::vector<std::byte> mine = source;
    for (const Op& op : back) {
      std::copy_n(want.begin() + static_cast<std::ptrdiff_t>(op.target), op.length,
                  mine.begin() + static_cast<std::ptrdiff_t>(op.source));
    }
    EXPECT_TRUE(region_bytes(a, "src") == mine) << "a scattered read put bytes elsewhere than its ops said";
  }
  static constexpr std::uint64_t kBytes = 8 * MiB;
  std::vector<std::byte> source;
};

TEST_F(Scatter, RandomLayoutsLandByteExactWrittenAndRead) { write_then_read("ops", ops_json, 5); }

// A run of blocks that follow one another on both sides (listed out of order) goes as one write, and lands
// as the ops said.
TEST_F(Scatter, AdjacentBlocksInAnyOrderLandWhereTheirOpsSay) {
  const json g = grant("write");
  std::vector<Op> ops;
  for (std::uint64_t i = 0; i < 256; ++i) ops.push_back({i * 4096, MiB + i * 4096, 4096});
  ops.push_back({2 * MiB, 6 * MiB, 100});  // and one apart from the run
  std::shuffle(ops.begin(), ops.end(), std::mt19937_64(3));
  auto done = run(g, ops_json(ops));
  ASSERT_EQ(done.status, 200) << done.body.dump();
  ASSERT_EQ(done.body["state"], "Succeeded") << done.body.dump();
  std::vector<std::byte> want(kBytes);
  for (const Op& op : ops) {
    std::copy_n(source.begin() + static_cast<std::ptrdiff_t>(op.source), op.length,
                want.begin() + static_cast<std::ptrdiff_t>(op.target));
  }
  EXPECT_TRUE(region_bytes(b, "dst") == want);
}

TEST_F(Scatter, BadOpListsAreRefusedBeforeAnythingIsSent) {
  const json g = grant("write");
  auto refused = [&](const json& ops, const std::string& says) {
    auto r = run(g, ops);
    EXPECT_EQ(r.status, 400) << r.body.dump();
    const std::string message = r.body["error"].value("message", "");
    EXPECT_NE(message.find(says), std::string::npos) << message;
  };
  refused(json::array({{{"sourceOffset", 0}, {"targetOffset", 0}, {"length", 4096}},
                       {{"sourceOffset", 8192}, {"targetOffset", 100}, {"length", 4096}}}),
          "ops[1] overlaps ops[0] in the target");
  refused(json::array({{{"sourceOffset", 0}, {"targetOffset", 0}, {"length", 1}},
                       {{"sourceOffset", 0}, {"targetOffset", kBytes - 10}, {"length", 11}}}),
          "ops[1]: target");
  refused(json::array({{{"sourceOffset", kBytes}, {"targetOffset", 0}, {"length", 1}}}), "ops[0]: source");
  refused(json::array({{{"sourceOffset", 0}, {"targetOffset", 0}, {"length", 0}}}), "ops[0].length");
  refused(json::array(), "ops: must hold 1 to 65536");
  json many = json::array();
  for (int i = 0; i < 65537; ++i) many.push_back({{"sourceOffset", i}, {"targetOffset", i}, {"length", 1}});
  auto big = run(g, many);
  EXPECT_TRUE(big.status == 400 || big.status == 413) << big.status;  // past the op count or the body limit
  // Verified ops need the grant whose agent sums them.
  auto with_verify = a.post(
      "/v1/transfers", {{"source", {{"region", "src"}}},
                        {"targets", {{{"grant", g["key"]}, {"url", b.url()}, {"region", "dst"}}}},
                        {"verify", "crc32c"},
                        {"ops", json::array({{{"sourceOffset", 0}, {"targetOffset", 0}, {"length", 1}}})}});
  EXPECT_EQ(with_verify.status, 400) << with_verify.body.dump();
  EXPECT_NE(with_verify.body.dump().find("targets[0].grantId: is required when ops are verified"),
            std::string::npos)
      << with_verify.body.dump();
  auto grant_id_alone = a.post(
      "/v1/transfers", {{"source", {{"region", "src"}}},
                        {"targets", {{{"grant", g["key"]}, {"url", b.url()}, {"grantId", g["id"]}}}},
                        {"ops", json::array({{{"sourceOffset", 0}, {"targetOffset", 0}, {"length", 1}}})}});
  EXPECT_EQ(grant_id_alone.status, 400) << "a grantId with neither releaseGrant nor verify crc32c";
  // Nothing was sent: node-b's region is still all zeroes.
  EXPECT_TRUE(region_bytes(b, "dst") == std::vector<std::byte>(kBytes));
}

// opsPacked carries the same ops as arrays of numbers do: the writes and reads land where the triples say,
// and a malformed or breaking list is refused with the op named, before anything is sent.
TEST_F(Scatter, PackedOpsLandWhereTheirTriplesSayAndBadOnesAreRefused) {
  const json g = grant("write");
  auto refused = [&](const json& packed, const std::string& says) {
    auto r = run(g, packed, "write", "opsPacked");
    EXPECT_EQ(r.status, 400) << r.body.dump();
    const std::string message = r.body["error"].value("message", "");
    EXPECT_NE(message.find(says), std::string::npos) << message;
  };
  refused(ops_packed({{0, 0, 4096}, {8192, 100, 4096}}), "ops[1] overlaps ops[0] in the target");
  refused(ops_packed({{kBytes, 0, 1}}), "ops[0]: source");
  refused(ops_packed({{0, 0, 1}, {1, 1, 0}}), "ops[1].length: must be at least 1");
  refused(base64_encode(std::string(25, '\0')), "whole ops of 24 bytes");
  refused("", "whole ops of 24 bytes");
  refused("not base64!", "opsPacked: invalid base64");
  refused(json::array({1, 2, 3}), "opsPacked: must be a base64 string");
  auto both = a.post("/v1/transfers?waitSeconds=30", {{"source", {{"region", "src"}}},
                                                      {"targets", {{{"grant", g["key"]}}}},
                                                      {"ops", ops_json({{0, 0, 1}})},
                                                      {"opsPacked", ops_packed({{0, 0, 1}})}});
  EXPECT_EQ(both.status, 400) << both.body.dump();
  EXPECT_TRUE(region_bytes(b, "dst") == std::vector<std::byte>(kBytes)) << "a refused list sent bytes";

  write_then_read(
      "opsPacked", [](const std::vector<Op>& ops) { return json(ops_packed(ops)); }, 7);
}

// verify crc32c: once every op landed the source's sum of its ranges in op order is compared with the one
// the grant's agent makes of the grant's ranges; the status says verified. Written and read back, as ops and
// as opsPacked, through long-lived grants and through one released at the end.
TEST_F(Scatter, VerifiedOpsLandAndSayVerified) {
  auto verified = [&](const json& g, const std::string& field, const json& ops, const std::string& op,
                      bool release = false) {
    json target{{"grant", g["key"]}, {"url", b.url()}, {"grantId", g["id"]}};
    if (release) target["releaseGrant"] = true;
    auto done = a.post("/v1/transfers?waitSeconds=30", {{"source", {{"region", "src"}}},
                                                        {"targets", {target}},
                                                        {"op", op},
                                                        {"verify", "crc32c"},
                                                        {field, ops}});
    EXPECT_EQ(done.status, 200) << done.body.dump();
    EXPECT_EQ(done.body["state"], "Succeeded") << done.body.dump();
    EXPECT_EQ(done.body.value("verified", false), true) << done.body.dump();
    EXPECT_EQ(done.body["targets"][0]["state"], "Succeeded") << done.body.dump();
    return done.body;
  };
  const json g = grant("write");
  const auto ops = random_layout(2000, kBytes, 13);
  verified(g, "opsPacked", ops_packed(ops), "write");
  std::vector<std::byte> want(kBytes);
  for (const Op& op : ops) {
    std::copy_n(source.begin() + static_cast<std::ptrdiff_t>(op.source), op.length,
                want.begin() + static_cast<std::ptrdiff_t>(op.target));
  }
  EXPECT_TRUE(region_bytes(b, "dst") == want);
  verified(g, "ops", ops_json(random_layout(300, kBytes, 14)), "write");

  const json r = grant("read");
  const auto back = random_layout(500, kBytes, 15);
  verified(r, "opsPacked", ops_packed(back), "read");
  std::vector<std::byte> mine = source;
  want = region_bytes(b, "dst");
  for (const Op& op : back) {
    std::copy_n(want.begin() + static_cast<std::ptrdiff_t>(op.target), op.length,
                mine.begin() + static_cast<std::ptrdiff_t>(op.source));
  }
  EXPECT_TRUE(region_bytes(a, "src") == mine);

  // A grant made for the one call, released at its end.
  const json once = grant("write", 600);
  verified(once, "ops", ops_json({{0, 0, MiB}}), "write", /*release=*/true);
  EXPECT_EQ(b.get("/v1/grants/" + once["id"].get<std::string>()).status, 404)
      << "the grant outlived the call";

  // verify none: no sums, and the status says so.
  auto plain = run(g, ops_json({{0, 0, 4096}}));
  EXPECT_EQ(plain.body["state"], "Succeeded");
  EXPECT_EQ(plain.body.value("verified", true), false) << plain.body.dump();
}

// POST /v1/grants/{id}/checksum, the route the source above asks: one CRC32C over ranges of the grant in the
// order given, the same sum GET .../checksum gives over the same bytes, offsets into the granted range;
// ranges outside the grant are refused naming the range.
TEST_F(Scatter, AGrantsChecksumIsTheSumOfItsRangesEndToEnd) {
  ASSERT_EQ(run(grant("write"), ops_json({{0, 0, kBytes}})).body["state"], "Succeeded");  // dst = src
  // A grant on [1 MiB, +2 MiB) of node-b's region.
  const json part = testing::region_grant(
      b, "dst", {{"access", "read"}, {"offset", MiB}, {"length", 2 * MiB}, {"ttlSeconds", 600}});
  const std::string route = "/v1/grants/" + part["id"].get<std::string>() + "/checksum";
  auto sum = [&](const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges) {
    return b.post(route, {{"rangesPacked", ranges_packed(ranges)}});
  };

  auto one = sum({{4096, 65536}});
  ASSERT_EQ(one.status, 200) << one.body.dump();
  const auto whole = b.get("/v1/regions/dst/checksum?offset=" + std::to_string(MiB + 4096) + "&length=65536" +
                           "&slice=65536");
  ASSERT_EQ(whole.status, 200) << whole.body.dump();
  EXPECT_EQ(one.body["crc32c"], whole.body["crc32c"][0]) << "GET checksum over the same bytes";
  EXPECT_EQ(one.body["ranges"], 1);
  EXPECT_EQ(one.body["bytes"], 65536);
  EXPECT_EQ(one.body["grant"], part["id"]);

  const std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges{
      {MiB, 100}, {0, 1}, {2 * MiB - 7, 7}, {12345, 70000}};
  std::vector<std::byte> end_to_end;
  for (const auto& [offset, length] : ranges) {
    const auto at = source.begin() + static_cast<std::ptrdiff_t>(MiB + offset);
    end_to_end.insert(end_to_end.end(), at, at + static_cast<std::ptrdiff_t>(length));
  }
  auto several = sum(ranges);
  ASSERT_EQ(several.status, 200) << several.body.dump();
  EXPECT_EQ(several.body["crc32c"].get<std::uint32_t>(), crc32c(end_to_end));
  EXPECT_EQ(several.body["bytes"], 100 + 1 + 7 + 70000);

  auto refused = [&](const json& body, const std::string& says) {
    auto r = b.post(route, body);
    EXPECT_EQ(r.status, 400) << r.body.dump();
    EXPECT_NE(r.body.dump().find(says), std::string::npos) << r.body.dump();
  };
  refused({{"rangesPacked", ranges_packed({{0, 1}, {2 * MiB - 10, 11}})}},
          "range 1 [2097142, +11) is outside the grant's 2097152 bytes");
  refused({{"rangesPacked", ranges_packed({{2 * MiB, 1}})}}, "range 0 [2097152, +1) is outside");
  refused({{"rangesPacked", ranges_packed({{0, 0}})}}, "range 0: length must be at least 1");
  refused({{"rangesPacked", base64_encode(std::string(20, '\0'))}}, "whole ranges of 16 bytes");
  refused({{"rangesPacked", base64_encode(std::string(24, '\0'))}}, "must start with the v2 header");
  refused({{"rangesPacked", "not base64!"}}, "rangesPacked: invalid base64");
  refused({{"ranges", json::array()}}, "ranges");
  EXPECT_EQ(b.post("/v1/grants/g-none/checksum", {{"rangesPacked", ranges_packed({{0, 1}})}}).status, 404);
}

// A strided op (docs/kv-cache.md): count runs of length bytes, each side advancing by its stride, as a
// column piece of a row-major matrix is. Two column pieces interleaved in the target, one in JSON and one in
// the v2 opsPacked layout, land run by run and verify; a strided read comes back; a grant's checksum over a
// strided range is the sum of its runs; bad strides, extents and interleavings are refused naming the op.
struct Strided {
  std::uint64_t source = 0, target = 0, length = 0, count = 1, source_stride = 0, target_stride = 0;
};

// The v2 layout as the spec writes it: "COPS", uint32 2, then six little-endian uint64 an op.
std::string ops_packed_v2(const std::vector<Strided>& ops,
                          const std::string& header = {'C', 'O', 'P', 'S', 2, 0, 0, 0}) {
  std::string raw = header;
  for (const Strided& op : ops) {
    for (std::uint64_t v : {op.source, op.target, op.length, op.count, op.source_stride, op.target_stride}) {
      for (int b = 0; b < 8; ++b) raw.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
    }
  }
  return base64_encode(raw);
}

json strided_json(const Strided& op) {
  return {
      {"sourceOffset", op.source}, {"targetOffset", op.target},        {"length", op.length},
      {"count", op.count},         {"sourceStride", op.source_stride}, {"targetStride", op.target_stride}};
}

// Applies `op` from `from` to `to` run by run (a write; a read swaps the roles and offsets).
void apply(const Strided& op, const std::vector<std::byte>& from, std::vector<std::byte>& to) {
  for (std::uint64_t k = 0; k < op.count; ++k) {
    std::copy_n(from.begin() + static_cast<std::ptrdiff_t>(op.source + k * op.source_stride), op.length,
                to.begin() + static_cast<std::ptrdiff_t>(op.target + k * op.target_stride));
  }
}

TEST_F(Scatter, StridedOpsLandRunByRunVerifiedAndBadOnesAreRefused) {
  const json g = grant("write");
  // The source's [512, 1024] byte matrix at 1 MiB; the target's [512, 512] at 2 MiB takes its columns
  // [100, 356) and [700, 956) side by side: two strided ops whose runs interleave in the target.
  const Strided left{MiB + 100, 2 * MiB, 256, 512, 1024, 512};
  const Strided right{MiB + 700, 2 * MiB + 256, 256, 512, 1024, 512};
  const Strided plain{0, 0, 4096};  // a count-1 op beside them, in the v2 layout too
  auto verified = [&](const json& grant_json, const std::string& field, const json& ops,
                      const std::string& op) {
    json target{{"grant", grant_json["key"]}, {"url", b.url()}, {"grantId", grant_json["id"]}};
    auto done = a.post("/v1/transfers?waitSeconds=30", {{"source", {{"region", "src"}}},
                                                        {"targets", {target}},
                                                        {"op", op},
                                                        {"verify", "crc32c"},
                                                        {field, ops}});
    EXPECT_EQ(done.status, 200) << done.body.dump();
    EXPECT_EQ(done.body["state"], "Succeeded") << done.body.dump();
    EXPECT_EQ(done.body.value("verified", false), true) << done.body.dump();
    return done.body;
  };
  auto json_done = verified(g, "ops", json::array({strided_json(left)}), "write");
  EXPECT_EQ(json_done["bytesDone"], 256 * 512) << "bytes are the runs', not the op's extent";
  verified(g, "opsPacked", ops_packed_v2({right, plain}), "write");
  std::vector<std::byte> want(kBytes);
  apply(left, source, want);
  apply(right, source, want);
  apply(plain, source, want);
  EXPECT_TRUE(region_bytes(b, "dst") == want) << "a strided op put bytes elsewhere than its runs";

  // Read: the target's [512, 512] matrix's columns [0, 128) into the local region at 6 MiB, rows 300 apart.
  const json r = grant("read");
  const Strided pull{6 * MiB, 2 * MiB, 128, 512, 300, 512};  // source: local; target: the grant
  verified(r, "opsPacked", ops_packed_v2({pull}), "read");
  std::vector<std::byte> mine = source;
  for (std::uint64_t k = 0; k < pull.count; ++k) {
    std::copy_n(want.begin() + static_cast<std::ptrdiff_t>(pull.target + k * pull.target_stride), pull.length,
                mine.begin() + static_cast<std::ptrdiff_t>(pull.source + k * pull.source_stride));
  }
  EXPECT_TRUE(region_bytes(a, "src") == mine) << "a strided read put bytes elsewhere than its runs";

  // The grant's checksum over a strided range (v2 rangesPacked: "CRNG", 2, then offset, length, count,
  // stride) is the sum of its runs end to end.
  std::string raw{'C', 'R', 'N', 'G', 2, 0, 0, 0};
  for (std::uint64_t v : {2 * MiB + 256, std::uint64_t{256}, std::uint64_t{512}, std::uint64_t{512}})
    for (int k = 0; k < 8; ++k) raw.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
  auto sum = b.post("/v1/grants/" + g["id"].get<std::string>() + "/checksum",
                    {{"rangesPacked", base64_encode(raw)}});
  ASSERT_EQ(sum.status, 200) << sum.body.dump();
  std::vector<std::byte> runs;
  for (std::uint64_t k = 0; k < 512; ++k) {
    const auto at = source.begin() + static_cast<std::ptrdiff_t>(right.source + k * right.source_stride);
    runs.insert(runs.end(), at, at + 256);
  }
  EXPECT_EQ(sum.body["crc32c"].get<std::uint32_t>(), crc32c(runs));
  EXPECT_EQ(sum.body["bytes"], 256 * 512);

  auto refused = [&](const json& ops, const std::string& says, const std::string& field = "ops") {
    auto reply = run(g, ops, "write", field);
    EXPECT_EQ(reply.status, 400) << reply.body.dump();
    const std::string message = reply.body["error"].value("message", "");
    EXPECT_NE(message.find(says), std::string::npos) << message;
  };
  refused(json::array({strided_json({0, 0, 256, 4, 1024, 200})}),
          "ops[0].targetStride: must be at least the op's length (256) when count is above 1, got 200");
  refused(json::array({{{"sourceOffset", 0}, {"targetOffset", 0}, {"length", 8}, {"count", 2}}}),
          "ops[0].sourceStride");
  refused(
      json::array({strided_json({0, kBytes - 4096, 256, 5, 256, 1024})}),
      "ops[0]: target 5 runs of 256 bytes 1024 apart from 8384512 reaches outside the 8388608-byte grant");
  // (count - 1) * stride past 2^64: refused, not wrapped around into the region.
  refused(json::array({strided_json({0, 0, 1, 3, 1, 1ULL << 63})}), "ops[0]: target 3 runs");
  // Interleaved, but one column on top of the other's.
  refused(json::array(
              {strided_json({0, 0, 256, 8, 256, 1024}), strided_json({0, 3 * 1024 + 100, 64, 2, 64, 4096})}),
          "ops[1] overlaps ops[0] in the target at [3172, +64)");
  refused(json::array({strided_json({0, 0, 1, kMaxScatterRuns, 1, 2}), strided_json({0, 1, 1, 2, 1, 2})}),
          "ops: more than " + std::to_string(kMaxScatterRuns) + " runs in all (up to ops[1], count 2)");
  refused(ops_packed_v2({{0, 0, 8, 0, 8, 8}}), "ops[0].count: must be at least 1", "opsPacked");
  refused(ops_packed_v2({{0, 0, 8}}, {'C', 'O', 'P', 'S', 3, 0, 0, 0}), "v2 header", "opsPacked");
  EXPECT_TRUE(region_bytes(b, "dst") == want) << "a refused list sent bytes";
}

TEST_F(Scatter, ARevokedLongLivedGrantStopsWorkingAtOnce) {
  const json g = grant("write");
  const json one = json::array({{{"sourceOffset", 0}, {"targetOffset", 0}, {"length", 64 * KiB}}});
  ASSERT_EQ(run(g, one).body["state"], "Succeeded");
  EXPECT_GE(g["registrationSeconds"].get<double>(), 0.0) << g.dump();
  // Renewed: a new expiry, the same key, still working.
  const std::string renew = "/v1/grants/" + g["id"].get<std::string>() + "/renew";
  auto renewed = b.post(renew, {{"ttlSeconds", 60}});
  ASSERT_EQ(renewed.status, 200) << renewed.body.dump();
  EXPECT_NE(renewed.body["expiresAt"], g["expiresAt"]);
  EXPECT_EQ(renewed.body["key"], g["key"]);
  EXPECT_EQ(b.post(renew, {{"ttlSeconds", 0}}).status, 400);
  ASSERT_EQ(run(g, one).body["state"], "Succeeded");
  ASSERT_EQ(b.del("/v1/grants/" + g["id"].get<std::string>()).status, 204);
  EXPECT_EQ(b.post(renew, {{"ttlSeconds", 60}}).status, 404) << "a revoked grant came back";
  const auto t0 = std::chrono::steady_clock::now();
  auto after = run(g, one);
  EXPECT_EQ(after.body["state"], "Failed") << after.body.dump();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "a revoked key should fail fast, not stall";
}

// Several callers waiting on one transfer (the request that started it and two more asking with
// ?waitSeconds) are each answered at its end: the end wakes one of them, which settles it and passes it on.
TEST_F(Scatter, EveryCallerWaitingOnATransferIsAnsweredAtItsEnd) {
  const json g = grant("write");
  // The target agent stopped: the last write's delivery cannot complete until it runs again.
  ASSERT_EQ(::kill(b.process().pid(), SIGSTOP), 0);
  auto client = [this] {
    auto c = std::make_unique<httplib::Client>(a.url());
    c->set_bearer_token_auth(a.token());
    c->set_read_timeout(60, 0);
    return c;
  };
  const json body = {{"source", {{"region", "src"}}},
                     {"targets", {{{"grant", g["key"]}}}},
                     {"ops", ops_json(random_layout(200, kBytes, 5))}};
  auto started = client()->Post("/v1/transfers", body.dump(), "application/json");
  ASSERT_TRUE(started && started->status == 202) << (started ? started->body : "no answer");
  const std::string id = json::parse(started->body)["id"];
  std::vector<std::thread> callers;
  std::vector<int> status(3, 0);
  std::vector<std::string> state(3);
  std::vector<std::chrono::steady_clock::duration> took(3);
  for (int i = 0; i < 3; ++i) {
    callers.emplace_back([&, i] {
      auto c = client();
      const auto t0 = std::chrono::steady_clock::now();
      auto r = c->Get(("/v1/transfers/" + id + "?waitSeconds=20").c_str());
      took[i] = std::chrono::steady_clock::now() - t0;
      if (!r) return;
      status[i] = r->status;
      state[i] = json::parse(r->body, nullptr, false).value("state", "");
    });
  }
  std::this_thread::sleep_for(500ms);  // every caller waiting
  ASSERT_EQ(::kill(b.process().pid(), SIGCONT), 0);
  for (auto& t : callers) t.join();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(status[i], 200) << "caller " << i;
    EXPECT_EQ(state[i], "Succeeded") << "caller " << i;
    EXPECT_LT(took[i], 10s) << "caller " << i << " waited out its long poll, not woken by the end";
  }
}

// 10,000 transfers into one long-lived grant: no registration after the first, and no thread, fd or
// registration left behind.
TEST_F(Scatter, TenThousandSmallTransfersRegisterOnceAndLeaveNothingBehind) {
  const json g = grant("write");
  const json one = json::array({{{"sourceOffset", 4096}, {"targetOffset", 0}, {"length", 16 * KiB}}});
  ASSERT_EQ(run(g, one).body["state"], "Succeeded");  // the first registers the source region
  const std::string proc = "/proc/" + std::to_string(a.process().pid());
  const double registrations = a.metric("conduit_agent_registration_duration_seconds_count");
  const std::size_t threads = entries(proc + "/task");
  const std::size_t fds = entries(proc + "/fd");
  int succeeded = 0;
  for (int i = 0; i < 10000; ++i) {
    json ops = json::array({{{"sourceOffset", (i * 4096) % (kBytes - 16 * KiB)},
                             {"targetOffset", (i * 16 * KiB) % kBytes},
                             {"length", 16 * KiB}}});
    auto r = run(g, ops);
    if (r.status == 200 && r.body["state"] == "Succeeded") ++succeeded;
  }
  EXPECT_EQ(succeeded, 10000);
  EXPECT_EQ(a.metric("conduit_agent_registration_duration_seconds_count"), registrations)
      << "a transfer into a long-lived grant registered memory";
  // Nothing more than before (fewer is fine: a connection counted before, such as the metrics request's, may
  // have closed since); one the client reopened meanwhile may take a moment to close on the agent's side.
  for (int i = 0; i < 50 && (entries(proc + "/task") > threads || entries(proc + "/fd") > fds); ++i) {
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_LE(entries(proc + "/task"), threads) << "threads left behind";
  EXPECT_LE(entries(proc + "/fd"), fds) << "fds left behind";
  EXPECT_EQ(a.get("/v1/regions/src").body["users"], 0) << "a transfer still holds the source region";
}

}  // namespace
}  // namespace conduit
