// Files are opened where they resolve, not where their names point (issue 32, items 3 and 4): with
// --namespace-files a link out of a namespace's directory is refused (403), a save racing a directory
// swapped for a link out of the data directory never lands outside it, and saved files are the agent's own
// (0600).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "agent_process.h"
#include "file_bytes.h"

namespace conduit {
namespace {

namespace fs = std::filesystem;
using testing::AgentOptions;
using testing::AgentProcess;
using json = nlohmann::json;

AgentOptions options(bool namespace_files) {
  AgentOptions o = testing::small_tcp_agent();
  if (namespace_files) o.extra_args.push_back("--namespace-files");
  return o;
}

using testing::write_seeded;

// Every file under `dir` whose name has ".tmp" in it.
std::vector<std::string> temporaries(const fs::path& dir) { return testing::files_named_with(dir, ".tmp"); }

std::string forbidden_message(const AgentProcess::Reply& r) {
  return r.body.is_object() && r.body.contains("error") ? r.body["error"].value("message", "") : "";
}

// The probe's layout: team-a/bdir -> ../team-b and team-a/link.bin -> ../team-b/b-secret.bin. A team-a job
// reaches neither through them, by any route; a link that stays in team-a/ still works.
TEST(DataDirHttp, ALinkOutOfTheNamespacesDirectoryIsForbidden) {
  AgentProcess a(options(/*namespace_files=*/true));
  ASSERT_TRUE(a.started());
  const fs::path data = a.data_dir();
  write_seeded(data / "team-b" / "b-secret.bin", 8192, 5);
  const auto own = write_seeded(data / "team-a" / "own.bin", 4096, 6);
  fs::create_directory_symlink("../team-b", data / "team-a" / "bdir");
  fs::create_symlink("../team-b/b-secret.bin", data / "team-a" / "link.bin");
  fs::create_symlink("own.bin", data / "team-a" / "inner.bin");

  const auto load =
      a.post("/v1/regions", {{"name", "stolen"}, {"file", "team-a/link.bin"}, {"namespace", "team-a"}});
  EXPECT_EQ(load.status, 403) << load.body.dump();
  EXPECT_NE(forbidden_message(load).find("namespace team-a"), std::string::npos) << load.body.dump();
  EXPECT_EQ(a.get("/v1/regions/stolen").status, 404) << "team-b's bytes were loaded";
  const auto via_dir = a.post(
      "/v1/regions", {{"name", "stolen2"}, {"file", "team-a/bdir/b-secret.bin"}, {"namespace", "team-a"}});
  EXPECT_EQ(via_dir.status, 403) << via_dir.body.dump();

  const auto stat = a.post("/v1/files/stat", {{"path", "team-a/link.bin"}, {"namespace", "team-a"}});
  EXPECT_EQ(stat.status, 403) << stat.body.dump();

  ASSERT_EQ(a.post("/v1/regions", {{"name", "mine"}, {"bytes", 8192}, {"namespace", "team-a"}}).status, 201);
  const auto save = a.post("/v1/regions/mine/save", {{"file", "team-a/bdir/x.bin"}, {"namespace", "team-a"}});
  EXPECT_EQ(save.status, 403) << save.body.dump();
  const auto ring = a.post(
      "/v1/grants", {{"save", {{"file", "team-a/bdir/y.bin"}, {"bytes", 4096}}}, {"namespace", "team-a"}});
  EXPECT_EQ(ring.status, 403) << ring.body.dump();
  const auto land =
      a.post("/v1/regions/mine/grants",
             {{"access", "write"}, {"save", {{"file", "team-a/bdir/z.bin"}}}, {"namespace", "team-a"}});
  EXPECT_EQ(land.status, 403) << land.body.dump();
  // A transfer whose source is the link: refused before a byte of team-b's file is sent.
  const auto g = a.post("/v1/regions/mine/grants", {{"access", "write"}, {"namespace", "team-a"}});
  ASSERT_EQ(g.status, 201) << g.body.dump();
  const json target{{"grant", g.body["key"]}, {"url", a.url()}, {"grantId", g.body["id"]}};
  const auto send =
      a.post("/v1/transfers",
             {{"source", {{"file", "team-a/link.bin"}}}, {"targets", {target}}, {"namespace", "team-a"}});
  EXPECT_EQ(send.status, 403) << send.body.dump();
  std::vector<std::string> in_b;
  for (const auto& e : fs::directory_iterator(data / "team-b")) in_b.push_back(e.path().filename().string());
  EXPECT_EQ(in_b, std::vector<std::string>{"b-secret.bin"}) << "a team-a save wrote into team-b/";

  // Inside team-a/ a link is still followed.
  const auto inner =
      a.post("/v1/regions", {{"name", "inner"}, {"file", "team-a/inner.bin"}, {"namespace", "team-a"}});
  EXPECT_EQ(inner.status, 201) << inner.body.dump();
  EXPECT_EQ(a.get("/v1/regions/inner").body.value("bytes", std::uint64_t{0}), own.size());
}

// A thread swaps d (a directory in the data directory) with d-alt (a link to a directory outside it) as fast
// as it can while saves go to d/: a save lands inside the data directory or is refused with a 4xx, never
// outside, never a 500, and leaves no temporary file.
TEST(DataDirHttp, ASaveRacingADirectorySwappedForALinkNeverLandsOutside) {
  AgentProcess a(options(/*namespace_files=*/false));
  ASSERT_TRUE(a.started());
  const fs::path data = a.data_dir();
  const fs::path outside = data.parent_path() / "outside";
  fs::create_directories(outside);
  fs::create_directories(data / "d");
  fs::create_directory_symlink("../outside", data / "d-alt");
  ASSERT_EQ(a.post("/v1/regions", {{"name", "r"}, {"bytes", 4096}}).status, 201);

  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    const std::string d = (data / "d").string(), alt = (data / "d-alt").string();
    while (!stop.load()) ::renameat2(AT_FDCWD, d.c_str(), AT_FDCWD, alt.c_str(), RENAME_EXCHANGE);
  });
  int saved = 0, refused = 0;
  std::vector<std::string> bad;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  for (int i = 0; i < 300 && std::chrono::steady_clock::now() < deadline; ++i) {
    const auto r = a.post("/v1/regions/r/save", {{"file", "d/f" + std::to_string(i) + ".bin"}});
    if (r.status == 200) {
      ++saved;
    } else if (r.status >= 400 && r.status < 500 && !forbidden_message(r).empty()) {
      ++refused;
    } else {
      bad.push_back(std::to_string(r.status) + " " + r.body.dump());
    }
  }
  stop = true;
  swapper.join();

  EXPECT_EQ(bad, std::vector<std::string>{}) << "answers neither 200 nor a 4xx with a reason";
  std::vector<std::string> escaped;
  for (const auto& e : fs::recursive_directory_iterator(outside)) escaped.push_back(e.path().string());
  EXPECT_EQ(escaped, std::vector<std::string>{}) << "files written outside the data directory";
  EXPECT_EQ(temporaries(data), std::vector<std::string>{});
  EXPECT_GT(saved, 0) << refused << " refused";
  std::printf("%d saved, %d refused\n", saved, refused);
}

TEST(DataDirHttp, SavedFilesAreTheAgentsOwn) {
  AgentProcess a(options(/*namespace_files=*/false));
  ASSERT_TRUE(a.started());
  ASSERT_EQ(a.post("/v1/regions", {{"name", "r"}, {"bytes", 4096}}).status, 201);
  ASSERT_EQ(a.post("/v1/regions/r/save", {{"file", "out/r.bin"}}).status, 200);
  struct stat st {};
  ASSERT_EQ(::stat((a.data_dir() / "out/r.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

}  // namespace
}  // namespace conduit
