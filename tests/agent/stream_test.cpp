// Pipelined transfers through real conduit-agent processes on loopback, driven over HTTP as the controller
// drives them (docs/pipelines.md): a file read as it goes out, segments reported landed, verified and saved
// at the target as they land, a file target through a bounded ring, and the errors a user can act on.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "agent_process.h"
#include "conduit/crc32c.h"
#include "file_bytes.h"
#include "page_cache.h"

namespace conduit {
namespace {

using namespace std::chrono_literals;
using testing::AgentOptions;
using testing::AgentProcess;
using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr std::uint64_t MiB = 1 << 20;

AgentOptions options(std::vector<std::string> extra = {}) {
  AgentOptions o;
  o.extra_args = std::move(extra);
  return o;
}

using testing::cached_share;
using testing::make_cold;
using testing::read_file;

using testing::write_seeded;

// Files in DIR whose name has ".tmp-": a save that did not clean up.
std::vector<std::string> temporaries(const fs::path& dir) { return testing::files_named_with(dir, ".tmp-"); }

json target_of(const json& grant, const AgentProcess& b, bool save) {
  json t{{"grant", grant["key"]}, {"url", b.url()}, {"grantId", grant["id"]}};
  if (grant.contains("landing") && grant["landing"].value("ring", false)) t["ringBytes"] = grant["length"];
  if (save) t["save"] = true;
  return t;
}

class Stream : public testing::TwoAgents {
 protected:
  Stream() : TwoAgents(options(), options({"--pipeline-bytes", "4MiB"})) {}
};

// 40 MiB + 1 byte (not a multiple of the chunk) from a file on node-a to a file on node-b that has no
// region: the target holds a 4 MiB ring, the bytes are verified as they land and the file appears whole,
// written around the target's page cache.
TEST_F(Stream, FileToFileThroughARingArrivesIntactAndVerified) {
  ASSERT_TRUE(a.started() && b.started());
  const std::uint64_t size = 40 * MiB + 1;
  const auto source = write_seeded(a.data_dir() / "ckpt/model.bin", size, 21);
  auto g = b.post("/v1/grants", {{"ttlSeconds", 60}, {"save", {{"file", "in/model.bin"}, {"bytes", size}}}});
  ASSERT_EQ(g.status, 201) << g.body.dump();
  EXPECT_EQ(g.body["length"], 4 * MiB) << "the ring is --pipeline-bytes, not the file's size";
  EXPECT_EQ(g.body["landing"]["ring"], true);

  auto started = a.post("/v1/transfers", {{"source", {{"file", "ckpt/model.bin"}}},
                                          {"targets", {target_of(g.body, b, true)}},
                                          {"verify", "crc32c"}});
  ASSERT_EQ(started.status, 202) << started.body.dump();
  const json done = a.wait_transfer(started.body["id"]);
  ASSERT_EQ(done["state"], "Succeeded") << done.dump();
  EXPECT_EQ(done["bytesDone"], size);
  EXPECT_EQ(done["verified"], true);
  EXPECT_GT(done["stages"]["readSeconds"].get<double>(), 0);
  EXPECT_GT(done["stages"]["landSeconds"].get<double>(), 0);
  // The ring's whole blocks went to the disk around the page cache (files/save_file.h), where the file
  // system lets them: the saved checkpoint does not fill the target's memory.
  testing::write_file(b.data_dir() / "probe.bin", std::vector<std::byte>(4096));
  if (const auto why = make_cold(b.data_dir() / "probe.bin"); !why.empty()) {
    std::cerr << "not checked that the saved file is out of the page cache: " << why << "\n";
  } else {
    EXPECT_LT(cached_share(b.data_dir() / "in/model.bin"), 0.01)
        << "the saved file was left in the page cache";
    EXPECT_EQ(b.metric("conduit_agent_file_write_bytes_total{path=\"direct\"}"), 40.0 * MiB);
    EXPECT_EQ(b.metric("conduit_agent_file_write_bytes_total{path=\"page_cache\"}"), 1) << "the last byte";
  }
  EXPECT_TRUE(read_file(b.data_dir() / "in/model.bin") == source) << "the saved file differs from the source";
  EXPECT_EQ(temporaries(b.data_dir()), std::vector<std::string>{});
  auto after = b.get("/v1/grants/" + g.body["id"].get<std::string>());
  EXPECT_EQ(after.body["landing"]["committed"], true) << after.body.dump();
  EXPECT_EQ(after.body["landing"]["savedBytes"], size);
  ASSERT_EQ(b.del("/v1/grants/" + g.body["id"].get<std::string>()).status, 204);
  EXPECT_TRUE(fs::exists(b.data_dir() / "in/model.bin")) << "revoking a committed grant removed its file";
}

// A file into a region that is saved as it lands: the region and the file both hold the source's bytes.
TEST_F(Stream, FileToRegionSavedAsItLands) {
  ASSERT_TRUE(a.started() && b.started());
  const std::uint64_t size = 24 * MiB + 4097;
  const auto source = write_seeded(a.data_dir() / "w.bin", size, 5);
  ASSERT_EQ(b.post("/v1/regions", {{"name", "w"}, {"bytes", size}}).status, 201);
  auto g = b.post("/v1/regions/w/grants", {{"access", "write"}, {"save", {{"file", "w-copy.bin"}}}});
  ASSERT_EQ(g.status, 201) << g.body.dump();
  json target = target_of(g.body, b, true);
  target["region"] = "w";
  auto started = a.post("/v1/transfers", {{"source", {{"file", "w.bin"}}},
                                          {"targets", {target}},
                                          {"chunkBytes", 256 * 1024},
                                          {"verify", "crc32c"}});
  ASSERT_EQ(started.status, 202) << started.body.dump();
  const json done = a.wait_transfer(started.body["id"]);
  ASSERT_EQ(done["state"], "Succeeded") << done.dump();
  EXPECT_TRUE(read_file(b.data_dir() / "w-copy.bin") == source);
  // What the region holds, as its agent checksums it, is the source file too.
  auto sums = b.get("/v1/regions/w/checksum?slice=" + std::to_string(size));
  ASSERT_EQ(sums.status, 200) << sums.body.dump();
  EXPECT_EQ(sums.body["crc32c"][0].get<std::uint32_t>(), crc32c(source));
}

// A source file the page cache does not hold is read around it (O_DIRECT: whole blocks into the read-ahead
// slots, the last one past the end of the file included); once the page cache holds the file, out of the
// cache. Both arrive intact, and the agent's metrics say which way the bytes came.
TEST_F(Stream, ASourceFileThePageCacheDoesNotHoldIsReadAroundIt) {
  ASSERT_TRUE(a.started() && b.started());
  const std::uint64_t size = 40 * MiB + 4097;  // more than two segments, the last not a whole block
  const fs::path path = a.data_dir() / "cold.bin";
  const auto source = write_seeded(path, size, 33);
  if (const auto why = make_cold(path); !why.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(b.post("/v1/regions", {{"name", "cold"}, {"bytes", size}}).status, 201);
  auto copy = [&] {
    auto g = b.post("/v1/regions/cold/grants", {{"access", "write"}});
    ASSERT_EQ(g.status, 201) << g.body.dump();
    json target = target_of(g.body, b, false);
    target["region"] = "cold";
    auto started = a.post("/v1/transfers",
                          {{"source", {{"file", "cold.bin"}}}, {"targets", {target}}, {"verify", "crc32c"}});
    ASSERT_EQ(started.status, 202) << started.body.dump();
    const json done = a.wait_transfer(started.body["id"]);
    ASSERT_EQ(done["state"], "Succeeded") << done.dump();
    auto sums = b.get("/v1/regions/cold/checksum?slice=" + std::to_string(size));
    ASSERT_EQ(sums.status, 200) << sums.body.dump();
    EXPECT_EQ(sums.body["crc32c"][0].get<std::uint32_t>(), crc32c(source));
    ASSERT_EQ(b.del("/v1/grants/" + g.body["id"].get<std::string>()).status, 204);
  };
  const std::string direct = "conduit_agent_file_read_bytes_total{path=\"direct\"}";
  const std::string cached = "conduit_agent_file_read_bytes_total{path=\"page_cache\"}";
  copy();
  EXPECT_EQ(a.metric(direct), static_cast<double>(size)) << "a file out of the page cache is read around it";
  EXPECT_EQ(a.metric(cached), 0);
  EXPECT_LT(cached_share(path), 0.5) << "reading around the page cache left the file out of it";

  EXPECT_TRUE(read_file(path) == source);  // the page cache holds it now
  copy();
  EXPECT_EQ(a.metric(direct), static_cast<double>(size));
  EXPECT_EQ(a.metric(cached), static_cast<double>(size)) << "a file in the page cache is read out of it";
}

// A file source's read-ahead slots count against its agent's memory cap while the transfer runs: past the cap
// the transfer fails saying so, and once a transfer ended its slots are no longer counted.
TEST_F(Stream, AFileSourcesReadAheadCountsAgainstTheMemoryCap) {
  ASSERT_TRUE(a.started() && b.started());
  const std::uint64_t size = 8 * MiB + 3;
  ASSERT_EQ(b.post("/v1/regions", {{"name", "cap"}, {"bytes", size}}).status, 201);
  auto g = b.post("/v1/regions/cap/grants", {{"access", "write"}});
  ASSERT_EQ(g.status, 201) << g.body.dump();
  json target = target_of(g.body, b, false);
  target["region"] = "cap";

  // 64 MiB of read-ahead (--pipeline-bytes) on an agent allowed 32 MiB.
  AgentOptions tight = options();
  tight.memory_cap = "32MiB";
  AgentProcess small(tight);
  ASSERT_TRUE(small.started());
  write_seeded(small.data_dir() / "s.bin", size, 3);
  auto refused = small.post("/v1/transfers", {{"source", {{"file", "s.bin"}}}, {"targets", {target}}});
  ASSERT_EQ(refused.status, 202) << refused.body.dump();
  const json failed = small.wait_transfer(refused.body["id"]);
  EXPECT_EQ(failed["state"], "Failed") << failed.dump();
  const std::string why = failed.value("message", "");
  EXPECT_NE(why.find("read-ahead"), std::string::npos) << why;
  EXPECT_NE(why.find("memory cap"), std::string::npos) << why;

  // Within the cap the same transfer lands, and leaves nothing counted once it ended.
  const auto source = write_seeded(a.data_dir() / "s.bin", size, 3);
  auto started = a.post("/v1/transfers", {{"source", {{"file", "s.bin"}}}, {"targets", {target}}});
  ASSERT_EQ(started.status, 202) << started.body.dump();
  ASSERT_EQ(a.wait_transfer(started.body["id"])["state"], "Succeeded");
  EXPECT_EQ(a.get("/v1/node").body["memory"]["used"], 0) << "the read-ahead was still counted after the end";
  auto sums = b.get("/v1/regions/cap/checksum?slice=" + std::to_string(size));
  ASSERT_EQ(sums.status, 200) << sums.body.dump();
  EXPECT_EQ(sums.body["crc32c"][0].get<std::uint32_t>(), crc32c(source));
}

// A file source that shrinks while it is read fails the transfer with SourceFileChanged, and the target's
// file never appears under its final name.
TEST_F(Stream, ASourceFileThatShrinksFailsWithSourceFileChanged) {
  ASSERT_TRUE(a.started() && b.started());
  const std::uint64_t size = 64 * MiB;
  write_seeded(a.data_dir() / "grow.bin", size, 9);
  auto g = b.post("/v1/grants", {{"save", {{"file", "grow-copy.bin"}, {"bytes", size}}}});
  ASSERT_EQ(g.status, 201) << g.body.dump();
  auto started = a.post("/v1/transfers", {{"source", {{"file", "grow.bin"}}},
                                          {"targets", {target_of(g.body, b, true)}},
                                          {"maxBytesPerSecond", 16 * MiB}});  // about 4 s
  ASSERT_EQ(started.status, 202) << started.body.dump();
  std::this_thread::sleep_for(500ms);
  fs::resize_file(a.data_dir() / "grow.bin", 8 * MiB);
  const json done = a.wait_transfer(started.body["id"], 30s);
  EXPECT_EQ(done["state"], "Failed") << done.dump();
  EXPECT_EQ(done["reason"], "SourceFileChanged") << done.dump();
  EXPECT_FALSE(fs::exists(b.data_dir() / "grow-copy.bin"));
  ASSERT_EQ(b.del("/v1/grants/" + g.body["id"].get<std::string>()).status, 204);
  EXPECT_EQ(temporaries(b.data_dir()), std::vector<std::string>{}) << "revoking left the temporary file";
}

// A region's version moves once per write that committed every byte (docs/python.md, Versions): a waiter
// blocked in a long-poll wakes with it and the writer's name; writes without a grant id, a cancelled write
// and an early commit leave it where it was.
TEST_F(Stream, ARegionsVersionMovesOncePerCompleteWriteAndWakesItsWaiters) {
  ASSERT_TRUE(a.started() && b.started());
  const std::uint64_t size = 8 * MiB + 5;
  write_seeded(a.data_dir() / "w.bin", size, 7);
  ASSERT_EQ(a.post("/v1/regions", {{"name", "src"}, {"file", "w.bin"}, {"mode", "load"}}).status, 201);
  ASSERT_EQ(b.post("/v1/regions", {{"name", "w"}, {"bytes", size}}).status, 201);
  auto version = [&] { return b.get("/v1/regions/w").body.value("version", std::uint64_t{99}); };
  EXPECT_EQ(version(), 0u);

  // Waits in a thread of its own, on its own connection, before anything is written.
  json woke;
  std::thread waiter([&] {
    httplib::Client c(b.url());
    c.set_bearer_token_auth(b.token());
    c.set_read_timeout(40, 0);
    auto r = c.Get("/v1/regions/w/version?after=0&timeoutSeconds=30");
    if (r && r->status == 200) woke = json::parse(r->body);
  });
  auto write = [&](const std::string& writer, const std::string& verify, bool with_id) {
    auto g = b.post("/v1/regions/w/grants", {{"access", "write"}, {"writer", writer}});
    EXPECT_EQ(g.status, 201) << g.body.dump();
    json target = target_of(g.body, b, false);
    if (!with_id) target.erase("grantId");
    auto started =
        a.post("/v1/transfers", {{"source", {{"region", "src"}}}, {"targets", {target}}, {"verify", verify}});
    EXPECT_EQ(started.status, 202) << started.body.dump();
    const json done = a.wait_transfer(started.body["id"]);
    EXPECT_EQ(done["state"], "Succeeded") << done.dump();
    b.del("/v1/grants/" + g.body["id"].get<std::string>());
  };
  write("team-a/step-1", "none", true);
  waiter.join();
  EXPECT_EQ(woke["version"], 1) << woke.dump();
  EXPECT_EQ(woke["updatedBy"], "team-a/step-1") << woke.dump();
  EXPECT_EQ(version(), 1u);
  write("team-a/step-2", "crc32c", true);
  EXPECT_EQ(version(), 2u);
  auto now = b.get("/v1/regions/w/version?after=1");
  EXPECT_EQ(now.body["version"], 2) << "a waiter that comes after the update sees it at once";
  EXPECT_EQ(now.body["updatedBy"], "team-a/step-2");
  write("no-id", "none", false);
  EXPECT_EQ(version(), 2u) << "a write whose target gave no grant id is not reported, so not counted";

  // A write cancelled half way, and a commit before the bytes landed: no new version.
  auto g = b.post("/v1/regions/w/grants", {{"access", "write"}, {"writer", "cancelled"}});
  json target = target_of(g.body, b, false);
  auto slow = a.post("/v1/transfers", {{"source", {{"region", "src"}}},
                                       {"targets", {target}},
                                       {"chunkBytes", 65536},
                                       {"maxBytesPerSecond", 2 * MiB}});
  ASSERT_EQ(slow.status, 202) << slow.body.dump();
  std::this_thread::sleep_for(500ms);
  a.del("/v1/transfers/" + slow.body["id"].get<std::string>());
  EXPECT_EQ(a.wait_transfer(slow.body["id"])["state"], "Cancelled");
  auto early = b.post("/v1/grants/" + g.body["id"].get<std::string>() + "/commit", {{"bytes", size}});
  EXPECT_EQ(early.status, 409) << early.body.dump();
  EXPECT_EQ(version(), 2u);

  // A long-poll with nothing new answers the current version when its time is up.
  const auto t0 = std::chrono::steady_clock::now();
  auto idle = b.get("/v1/regions/w/version?after=2&timeoutSeconds=1");
  EXPECT_EQ(idle.status, 200);
  EXPECT_EQ(idle.body["version"], 2);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 900ms);
  EXPECT_EQ(b.get("/v1/regions/w/version?timeoutSeconds=61").status, 400);
  EXPECT_EQ(b.get("/v1/regions/w/version?since=1").status, 400);
  EXPECT_EQ(b.get("/v1/regions/nope/version").status, 404);
}

// A saving writer keeps two reports in flight (agent/src/transfer/run_stream.cpp): the later one, told the
// earlier is still out, waits for it instead of being refused, through a mismatch and its re-report, and the
// file still gets its bytes in order. Told nothing, or with nothing coming before it, it is refused.
TEST_F(Stream, ASaveWaitsForTheReportBeforeItWhenToldItIsOut) {
  ASSERT_TRUE(a.started() && b.started());
  const std::uint64_t size = 8 * MiB;
  const auto data = write_seeded(b.data_dir() / "two.bin", size, 21);
  ASSERT_EQ(b.post("/v1/regions", {{"name", "two"}, {"file", "two.bin"}, {"mode", "load"}}).status, 201);
  auto grant = [&](const std::string& file) {
    auto g = b.post("/v1/regions/two/grants", {{"access", "write"}, {"save", {{"file", file}}}});
    EXPECT_EQ(g.status, 201) << g.body.dump();
    return "/v1/grants/" + g.body["id"].get<std::string>();
  };
  const std::string g = grant("copy.bin");
  const std::uint32_t first = crc32c(std::span(data).first(4 * MiB));
  const std::uint32_t second = crc32c(std::span(data).subspan(4 * MiB));

  // The second half's report, on a connection of its own, before the first half's.
  json later;
  int later_status = 0;
  std::thread waiter([&] {
    httplib::Client c(b.url());
    c.set_bearer_token_auth(b.token());
    c.set_read_timeout(30, 0);
    auto r = c.Post(g + "/landed",
                    json{{"offset", 4 * MiB},
                         {"length", 4 * MiB},
                         {"slice", 4 * MiB},
                         {"crc32c", {second}},
                         {"waitForPrevious", true}}
                        .dump(),
                    "application/json");
    if (!r) return;
    later_status = r->status;
    later = json::parse(r->body);
  });
  std::this_thread::sleep_for(300ms);
  // The first half differs once (the writer re-sends it), then lands clean.
  auto wrong =
      b.post(g + "/landed", {{"offset", 0}, {"length", 4 * MiB}, {"slice", MiB}, {"crc32c", {1, 2, 3, 4}}});
  ASSERT_EQ(wrong.status, 200) << wrong.body.dump();
  EXPECT_EQ(wrong.body["mismatched"], json::array({0, 1, 2, 3}));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(later_status, 0) << "the second half was answered before the first was saved: " << later.dump();
  auto right =
      b.post(g + "/landed", {{"offset", 0}, {"length", 4 * MiB}, {"slice", 4 * MiB}, {"crc32c", {first}}});
  ASSERT_EQ(right.status, 200) << right.body.dump();
  EXPECT_EQ(right.body["saved"], true);
  waiter.join();
  EXPECT_EQ(later_status, 200) << later.dump();
  EXPECT_EQ(later["saved"], true) << later.dump();
  ASSERT_EQ(b.post(g + "/commit", {{"bytes", size}}).status, 200);
  EXPECT_EQ(read_file(b.data_dir() / "copy.bin"), data);

  // Nothing before it: refused once the wait is up, saying why.
  const std::string alone = grant("alone.bin");
  const auto t0 = std::chrono::steady_clock::now();
  auto gap = b.post(alone + "/landed", {{"offset", 4 * MiB}, {"length", MiB}, {"waitForPrevious", true}});
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 4s);
  EXPECT_EQ(gap.status, 409) << gap.body.dump();
  EXPECT_NE(gap.body["error"]["message"].get<std::string>().find("in order"), std::string::npos);
}

// A node not yet upgraded: its agent refuses waitForPrevious as an unknown field. The writer then sends it
// one report at a time, and the file arrives whole. The older agent is b behind a proxy that renames the
// field to one b does not know either, so b's own field check answers as that agent would.
TEST_F(Stream, ATargetAgentFromBeforeWaitForPreviousGetsOneReportAtATime) {
  ASSERT_TRUE(a.started() && b.started());
  const std::string field = "waitForPrevious", unknown = "waitForPreviouz";
  std::atomic<int> reports{0}, refused{0};
  httplib::Server older;
  older.Post(".*", [&](const httplib::Request& req, httplib::Response& res) {
    std::string body = req.body;
    if (const auto at = body.find(field); at != std::string::npos) body.replace(at, field.size(), unknown);
    httplib::Client c(b.url());
    c.set_default_headers({{"Authorization", req.get_header_value("Authorization")}});
    c.set_read_timeout(30, 0);
    auto r = c.Post(req.path, body, "application/json");
    if (!r) {
      res.status = 502;
      return;
    }
    std::string answer = r->body;
    if (const auto at = answer.find(unknown); at != std::string::npos) {
      answer.replace(at, unknown.size(), field);
      ++refused;
    }
    if (req.path.ends_with("/landed")) ++reports;
    res.status = r->status;
    res.set_content(answer, "application/json");
  });
  older.set_keep_alive_max_count(1);  // stop() does not wait out a kept-alive connection
  const int port = older.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { older.listen_after_bind(); });

  const std::uint64_t size = 12 * MiB + 3;
  const auto source = write_seeded(a.data_dir() / "old.bin", size, 23);
  auto g = b.post("/v1/grants", {{"save", {{"file", "old-copy.bin"}, {"bytes", size}}}});
  ASSERT_EQ(g.status, 201) << g.body.dump();
  json target = target_of(g.body, b, true);
  target["url"] = "http://127.0.0.1:" + std::to_string(port);
  auto started = a.post("/v1/transfers",
                        {{"source", {{"file", "old.bin"}}}, {"targets", {target}}, {"verify", "crc32c"}});
  ASSERT_EQ(started.status, 202) << started.body.dump();
  const json done = a.wait_transfer(started.body["id"]);
  older.stop();
  serving.join();
  EXPECT_EQ(done["state"], "Succeeded") << done.dump();
  // The report in flight beside the first one refused also carried the field; none after.
  EXPECT_GE(refused.load(), 1) << "the proxy did not stand for an older agent";
  EXPECT_LE(refused.load(), 2) << "the writer kept sending the field after it was refused";
  EXPECT_GT(reports.load(), 4) << "the stream was not several segments";
  EXPECT_EQ(read_file(b.data_dir() / "old-copy.bin"), source);
}

// The landing routes say why they refuse.
TEST_F(Stream, LandingReportsAndCommitsRefuseWhatCannotBeTrue) {
  ASSERT_TRUE(a.started() && b.started());
  ASSERT_EQ(b.post("/v1/regions", {{"name", "r"}, {"bytes", 8 * MiB}}).status, 201);
  auto g = b.post("/v1/regions/r/grants", {{"access", "write"}, {"save", {{"file", "r.bin"}}}});
  ASSERT_EQ(g.status, 201) << g.body.dump();
  const std::string landed = "/v1/grants/" + g.body["id"].get<std::string>() + "/landed";
  const std::string commit = "/v1/grants/" + g.body["id"].get<std::string>() + "/commit";

  // Saves are in order: bytes past a gap are refused.
  auto gap = b.post(landed, {{"offset", 4 * MiB}, {"length", MiB}});
  EXPECT_EQ(gap.status, 409) << gap.body.dump();
  EXPECT_NE(gap.body["error"]["message"].get<std::string>().find("in order"), std::string::npos);
  // One CRC per slice.
  auto count = b.post(landed, {{"offset", 0}, {"length", MiB}, {"slice", 4096}, {"crc32c", {1, 2}}});
  EXPECT_EQ(count.status, 400) << count.body.dump();
  // A wrong CRC names the slice and saves nothing.
  auto wrong = b.post(landed, {{"offset", 0}, {"length", MiB}, {"slice", MiB}, {"crc32c", {12345}}});
  ASSERT_EQ(wrong.status, 200) << wrong.body.dump();
  EXPECT_EQ(wrong.body["mismatched"], json::array({0}));
  EXPECT_EQ(wrong.body["saved"], false);
  // Past the grant.
  auto past = b.post(landed, {{"offset", 8 * MiB}, {"length", 1}});
  EXPECT_EQ(past.status, 400) << past.body.dump();
  // Commit before every byte landed.
  auto early = b.post(commit, {{"bytes", 8 * MiB}});
  EXPECT_EQ(early.status, 409) << early.body.dump();
  EXPECT_NE(early.body["error"]["message"].get<std::string>().find("0 of the grant's"), std::string::npos)
      << early.body.dump();
  EXPECT_FALSE(fs::exists(b.data_dir() / "r.bin"));
  // A read grant takes no reports; a save needs a write grant.
  auto read = b.post("/v1/regions/r/grants", {{"access", "read"}});
  ASSERT_EQ(read.status, 201);
  EXPECT_EQ(
      b.post("/v1/grants/" + read.body["id"].get<std::string>() + "/landed", {{"offset", 0}, {"length", 1}})
          .status,
      409);
  EXPECT_EQ(b.post("/v1/regions/r/grants", {{"access", "read"}, {"save", {{"file", "x.bin"}}}}).status, 400);
  // A ring grant over the memory cap is refused with the cap in the message.
  AgentOptions tiny = options();
  tiny.memory_cap = "2MiB";
  AgentProcess small(tiny);
  ASSERT_TRUE(small.started());
  auto big = small.post("/v1/grants", {{"save", {{"file", "deep/dir/f.bin"}, {"bytes", 64 * MiB}}}});
  EXPECT_EQ(big.status, 422) << big.body.dump();
  EXPECT_NE(big.body["error"]["message"].get<std::string>().find("memory cap"), std::string::npos);
  EXPECT_FALSE(fs::exists(small.data_dir() / "deep")) << "a refused grant left the directories it made";
  // A missing source file is a 404 naming it.
  auto missing = a.post("/v1/transfers",
                        {{"source", {{"file", "nope.bin"}}}, {"targets", {target_of(g.body, b, false)}}});
  EXPECT_EQ(missing.status, 404) << missing.body.dump();
  EXPECT_NE(missing.body["error"]["message"].get<std::string>().find("nope.bin"), std::string::npos);
  auto stat = a.post("/v1/files/stat", {{"path", "nope.bin"}});
  EXPECT_EQ(stat.status, 404);
}

}  // namespace
}  // namespace conduit
