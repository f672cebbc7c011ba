// The pieces under the reconciler: the spec as the CRD defines it (defaults, and the checks an apiserver
// would make), status strings, RFC 3339, YAML <-> JSON, and the directory store local mode runs on.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <limits>
#include <thread>

#include "reconcile/clock.h"
#include "reconcile/job_status.h"
#include "reconcile/transfer_job.h"
#include "store/local_store.h"
#include "store/yaml_json.h"
#include "temp_dir.h"

namespace conduit::controller {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

json minimal() {
  return {{"source", {{"node", "node-a"}, {"region", "weights"}}},
          {"targets", {{{"node", "node-b"}, {"region", "weights"}}}}};
}

TEST(TransferJobSpec, DefaultsAreTheCrds) {
  auto spec = TransferJobSpec::parse(minimal());
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->strategy, Strategy::PointToPoint);
  EXPECT_EQ(spec->transport, TransportType::Auto);
  EXPECT_FALSE(spec->allow_fallback);
  EXPECT_EQ(spec->chunk_bytes, 1u << 20);
  EXPECT_EQ(spec->window, 16U);
  EXPECT_TRUE(spec->verify);
  EXPECT_EQ(spec->backoff_limit, 3U);
  EXPECT_FALSE(spec->active_deadline_seconds);
  EXPECT_FALSE(spec->ttl_seconds_after_finished);
  EXPECT_FALSE(spec->suspend);
  EXPECT_EQ(spec->max_bytes_per_second, 0U);
}

TEST(TransferJobSpec, RejectsWhatTheCrdRejectsWithItsMessages) {
  struct Case {
    json patch;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{{"chunkBytes", 1024}}, "spec.chunkBytes: 1024 is below the minimum 4096"},
      {{{"window", 0}}, "spec.window: 0 is below the minimum 1"},
      {{{"backoffLimit", 21}}, "spec.backoffLimit: 21 is above the maximum 20"},
      {{{"verify", "md5"}}, "spec.verify: \"md5\" is not one of none, crc32c"},
      {{{"chunkbytes", 4096}}, "spec.chunkbytes: unknown field"},
      {{{"targets", {{{"node", "node-b"}, {"region", "Weights"}}}}}, "is not a valid region name"},
      {{{"source", {{"node", "node-a"}, {"region", "w"}, {"file", "w.bin"}}}},
       "exactly one of region or file"},
      {{{"source", {{"node", "node-a"}, {"region", nullptr}, {"file", "../etc/passwd"}}}}, "without '..'"},
      {{{"targets", {{{"node", "node-b"}, {"region", "a"}}, {{"node", "node-c"}, {"region", "b"}}}}},
       "strategy PointToPoint needs exactly one target"},
      {{{"strategy", "Fanout"}}, "strategy Fanout needs at least 2 targets"},
      {{{"targets", {{{"node", "node-a"}, {"region", "weights"}}}}}, "may not be the source region itself"},
      {{{"strategy", "Fanout"},
        {"targets", {{{"node", "node-b"}, {"region", "a"}}, {{"node", "node-b"}, {"region", "a"}}}}},
       "targets must be unique by node and region"},
      {{{"transport", {{"type", "shm"}}}},
       "transport shm needs source.node and every target on the source's node"},
      {{{"targets", {{{"node", "node-b"}, {"region", "a"}, {"create", {{"bytes", 1}, {"memory", "gpu"}}}}}}},
       "must be \"host\" or \"cuda:N\""},
      {{{"suspend", "yes"}}, "spec.suspend: must be true or false"},
  };
  for (const auto& c : cases) {
    json spec = minimal();
    spec.merge_patch(c.patch);
    auto parsed = TransferJobSpec::parse(spec);
    ASSERT_FALSE(parsed.ok()) << c.patch.dump();
    EXPECT_EQ(parsed.error().code, ErrorCode::InvalidArgument);
    EXPECT_NE(parsed.error().message.find(c.message), std::string::npos)
        << c.patch.dump() << " -> " << parsed.error().message;
  }
  json pod = minimal();
  pod["source"] = {{"podSelector", {{"matchLabels", {{"app", "trainer"}}}}}, {"region", "w"}};
  ASSERT_TRUE(TransferJobSpec::parse(pod)) << "pods are resolved when the job starts (pods_test.cpp)";
  EXPECT_TRUE(TransferJobSpec::parse(pod)->selects_pods());
}

TEST(TransferJobSpec, Names) {
  EXPECT_TRUE(is_dns1123_label("node-a1"));
  EXPECT_FALSE(is_dns1123_label("-a"));
  EXPECT_FALSE(is_dns1123_label(std::string(64, 'a')));
  EXPECT_TRUE(is_dns1123_subdomain("ip-10-0-0-1.ec2.internal"));
  EXPECT_FALSE(is_dns1123_subdomain("a..b"));
  EXPECT_TRUE(is_relative_path_inside("ckpt/step-1.bin"));
  EXPECT_TRUE(is_relative_path_inside("a..b/c"));
  EXPECT_FALSE(is_relative_path_inside("/etc/passwd"));
  EXPECT_FALSE(is_relative_path_inside("a/../../b"));
}

TEST(JobStatus, PrinterColumnStrings) {
  EXPECT_EQ(format_progress(0, 100), "0%");
  EXPECT_EQ(format_progress(42, 100), "42%");
  EXPECT_EQ(format_progress(995, 1000), "99.5%");
  EXPECT_EQ(format_progress(9999, 10000), "99.9%") << "never 100% before the last byte";
  EXPECT_EQ(format_progress(100, 100), "100%");
  EXPECT_EQ(format_throughput(0), "");
  EXPECT_EQ(format_throughput(5.2e9), "5.2 GB/s");
  EXPECT_EQ(format_throughput(950e6), "950 MB/s");
  EXPECT_EQ(format_throughput(12), "12 B/s");
}

TEST(JobStatus, StagesAreNeverNegativeSoTheStatusStaysWritable) {
  // The CRD refuses a negative stage (a 1,000-job run once left two jobs Running for good on -2e-5 s).
  api::TransferStatus t;
  t.stages.wire = 0.25;
  t.stages.land = -2.0e-5;
  t.stages.read = std::nan("");
  json status = json::object();
  set_stages(status, t);
  EXPECT_EQ(status["stages"]["landSeconds"], 0.0);
  EXPECT_EQ(status["stages"]["readSeconds"], 0.0);
  EXPECT_EQ(status["stages"]["wireSeconds"], 0.25);
  EXPECT_EQ(status["slowestStage"], "wire 0.25 s");
}

TEST(JobStatus, ConditionTransitionTimeMovesOnlyWithStatus) {
  const TimePoint t0 = std::chrono::system_clock::from_time_t(1'800'000'000);
  json status = json::object();
  set_condition(status, "Running", true, "TransferStarted", "a", t0, 1);
  set_condition(status, "Running", true, "Retrying", "b", t0 + 5s, 1);
  EXPECT_EQ((*find_condition(status, "Running"))["lastTransitionTime"], format_rfc3339(t0));
  EXPECT_EQ((*find_condition(status, "Running"))["reason"], "Retrying");
  set_condition(status, "Running", false, "Completed", "c", t0 + 9s, 1);
  EXPECT_EQ((*find_condition(status, "Running"))["lastTransitionTime"], format_rfc3339(t0 + 9s));
}

TEST(JobStatus, MergeDiffTakesOneToTheOther) {
  const json from{{"phase", "Running"},
                  {"startTime", "x"},
                  {"targets", {{{"bytes", 1}}}},
                  {"nested", {{"a", 1}, {"b", 2}}}};
  const json to{{"phase", "Running"}, {"targets", {{{"bytes", 2}}}}, {"nested", {{"a", 1}, {"c", 3}}}};
  const json patch = merge_diff(from, to);
  json applied = from;
  applied.merge_patch(patch);
  EXPECT_EQ(applied, to);
  EXPECT_FALSE(patch.contains("phase"));
  EXPECT_TRUE(merge_diff(to, to).empty());
}

TEST(Clock, Rfc3339RoundTrips) {
  const TimePoint t = std::chrono::system_clock::from_time_t(1'800'000'000) + 250ms;
  EXPECT_EQ(format_rfc3339(t), "2027-01-15T08:00:00Z");
  EXPECT_EQ(format_rfc3339(t, TimePrecision::Millis), "2027-01-15T08:00:00.250Z");
  EXPECT_EQ(parse_rfc3339(format_rfc3339(t, TimePrecision::Millis)), t);
  EXPECT_EQ(parse_rfc3339("2027-01-15T09:00:00+01:00"),
            std::chrono::system_clock::from_time_t(1'800'000'000));
  EXPECT_FALSE(parse_rfc3339("yesterday"));
  EXPECT_FALSE(parse_rfc3339("2027-01-15T08:00:00"));
}

TEST(YamlJson, TypesSurviveARoundTrip) {
  const json value{
      {"bytes", 268435456},  {"neg", -3},           {"ratio", 0.5},          {"on", true},
      {"text", "node-a"},    {"looksTrue", "True"}, {"looksNumber", "0123"}, {"yes", "yes"},
      {"empty", ""},         {"nothing", nullptr},  {"pct", "42%"},          {"list", {1, "two", false}},
      {"json", "{\"a\":1}"}, {"multi", "a\nb"}};
  auto back = parse_yaml(to_yaml(value));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, value) << to_yaml(value);
  auto typed = parse_yaml("a: '12'\nb: 12\nc: ~\nd: 0x10\ne: 1e3\nf: False\n");
  ASSERT_TRUE(typed.ok());
  EXPECT_EQ((*typed)["a"], "12");
  EXPECT_EQ((*typed)["b"], 12);
  EXPECT_TRUE((*typed)["c"].is_null());
  EXPECT_EQ((*typed)["d"], 16);
  EXPECT_EQ((*typed)["e"], 1000.0);
  EXPECT_EQ((*typed)["f"], false);
  EXPECT_FALSE(parse_yaml("a: [1, 2").ok());
}

// Found by fuzz/yaml_json_fuzz.cpp: infinity went out as `null` and came back as the string "null"; a
// self-referencing alias recursed until the stack ran out; ten nested aliases expanded without bound; bytes
// that are not UTF-8 went into JSON that cannot be dumped; strings with control characters or edge spaces
// did not survive a round trip.
TEST(YamlJson, HostileDocumentsAreRefusedOrRoundTrip) {
  const json inf{{"up", std::numeric_limits<double>::infinity()},
                 {"down", -std::numeric_limits<double>::infinity()}};
  auto back = parse_yaml(to_yaml(inf));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, inf) << to_yaml(inf);

  EXPECT_FALSE(parse_yaml("&a [*a]").ok());
  std::string laughs = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n";
  for (char c = 'b'; c <= 'g'; ++c) {
    const std::string prev(1, static_cast<char>(c - 1));
    laughs += std::string(1, c) + ": &" + c + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev +
              ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n";
  }
  auto expanded = parse_yaml(laughs);
  ASSERT_FALSE(expanded.ok());
  EXPECT_NE(expanded.error().message.find("values"), std::string::npos) << expanded.error().message;
  EXPECT_FALSE(parse_yaml("name: \"\xf8\x05\"").ok());
  EXPECT_FALSE(parse_yaml("\xff: 1").ok());
  EXPECT_FALSE(parse_yaml("a: \"\xef\xbf\xbf\"").ok());  // U+FFFF: not a YAML character
  // Other noncharacters, as UTF-8 and as the UTF-16 a NUL second byte makes yaml-cpp read (the fuzzer's find:
  // U+FDEA came back U+FFFD).
  EXPECT_FALSE(parse_yaml("a: \"\xef\xb7\xaa\"").ok());      // U+FDEA
  EXPECT_FALSE(parse_yaml("a: \"\xf0\x9f\xbf\xbe\"").ok());  // U+1FFFE
  EXPECT_FALSE(parse_yaml(std::string("\xfa\x00\xea\xfd", 4)).ok());
  EXPECT_TRUE(parse_yaml("a: \"\xef\xb7\xb0\"").ok());  // U+FDF0, a character

  // Strings yaml-cpp wrote plain and read back otherwise (a lone "\r" came back as null).
  const json fragile{{"cr", "\r"},   {"lead", " a"}, {"trail", "a "}, {"tab", "a\tb"}, {"ctl", "\x05"},
                     {"doc", "---"}, {"end", "..."}, {" key", 1},     {"", 2},         {"--- k", 3}};
  auto again = parse_yaml(to_yaml(fragile));
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(*again, fragile) << to_yaml(fragile);
  // A key longer than YAML's 1,024 characters for an implicit key (as written, escapes included) was read
  // back as "illegal map value".
  const json long_keys{{std::string(1100, 'k'), 1}, {std::string(300, '\x1d') + "x", "v"}, {"short", 2}};
  auto read = parse_yaml(to_yaml(long_keys));
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(*read, long_keys);
}

class LocalStoreTest : public ::testing::Test {
 protected:
  static std::string read_all(const std::filesystem::path& path) {
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  void write_job(const std::string& file, const std::string& name) {
    dir.write(file,
              "# keep me\napiVersion: conduit.dev/v1alpha1\nkind: TransferJob\nmetadata:\n  name: " + name +
                  "\nspec:\n  source: {node: a, region: r}\n  targets: [{node: b, region: r}]\n");
  }
  testing::TempDir dir{"conduit-local-store"};
};

TEST_F(LocalStoreTest, ListsJobsAndWritesStatusBackIntoTheFile) {
  write_job("job.yaml", "ckpt");
  dir.write("notes.yaml", "just: notes\n");
  dir.write("broken.yaml", "a: [\n");
  LocalStore store(dir.path(), 20ms);
  auto jobs = store.list_jobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1U);
  EXPECT_EQ((*jobs)[0]["metadata"]["namespace"], "default");

  // The first look reports every job; our own writes are not changes.
  EXPECT_EQ(store.wait_for_changes(100ms), (std::vector<ObjectKey>{{"default", "ckpt"}}));
  ASSERT_TRUE(store.patch_job_status({"default", "ckpt"}, {{"phase", "Running"}, {"progress", "42%"}}).ok());
  ASSERT_TRUE(store.patch_job_metadata({"default", "ckpt"}, {{"finalizers", {"conduit.dev/cleanup"}}}).ok());
  EXPECT_TRUE(store.wait_for_changes(300ms).empty());
  std::ifstream in(dir.path() / "job.yaml");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("# keep me\n", 0), 0U) << text;
  EXPECT_NE(text.find("progress: 42%"), std::string::npos) << text;
  EXPECT_EQ((*store.get_job({"default", "ckpt"}))["status"]["phase"], "Running");

  // A person edits the file: that is a change.
  std::string edited = text;
  edited.replace(edited.find("spec:\n"), 6, "spec:\n  suspend: true\n");
  dir.write("job.yaml", edited);
  EXPECT_EQ(store.wait_for_changes(1s), (std::vector<ObjectKey>{{"default", "ckpt"}}));
  EXPECT_EQ((*store.get_job({"default", "ckpt"}))["spec"]["suspend"], true);
}

TEST_F(LocalStoreTest, RemovingTheFileDeletesThroughTheFinalizer) {
  write_job("job.yaml", "ckpt");
  LocalStore store(dir.path(), 20ms);
  ASSERT_TRUE(store.patch_job_metadata({"default", "ckpt"}, {{"finalizers", {"conduit.dev/cleanup"}}}).ok());
  store.wait_for_changes(50ms);
  std::filesystem::remove(dir.path() / "job.yaml");
  EXPECT_EQ(store.wait_for_changes(1s), (std::vector<ObjectKey>{{"default", "ckpt"}}));
  auto job = store.get_job({"default", "ckpt"});
  ASSERT_TRUE(job.ok());
  EXPECT_TRUE((*job)["metadata"].contains("deletionTimestamp"));
  ASSERT_TRUE(store.patch_job_metadata({"default", "ckpt"}, {{"finalizers", nullptr}}).ok());
  EXPECT_EQ(store.get_job({"default", "ckpt"}).error().code, ErrorCode::NotFound);
}

TEST_F(LocalStoreTest, AJobWhoseFileWasRemovedIsBeingDeletedForTheFirstCallToLook) {
  // Whichever call is the first to find the file gone (no scan in between) sees the job being deleted, not
  // gone: a NotFound here let the controller drop a job its finalizer still held.
  const ObjectKey key{"default", "ckpt"};
  for (int call = 0; call < 3; ++call) {
    write_job("job.yaml", "ckpt");
    LocalStore store(dir.path(), 20ms);
    ASSERT_TRUE(store.patch_job_metadata(key, {{"finalizers", {"conduit.dev/cleanup"}}}).ok());
    std::filesystem::remove(dir.path() / "job.yaml");
    if (call == 0) {
      auto job = store.get_job(key);
      ASSERT_TRUE(job.ok()) << job.error().message;
      EXPECT_TRUE((*job)["metadata"].contains("deletionTimestamp"));
    } else if (call == 1) {
      auto patched = store.patch_job_status(key, {{"phase", "Running"}});
      ASSERT_TRUE(patched.ok()) << patched.error().message;
      EXPECT_TRUE((*patched)["metadata"].contains("deletionTimestamp"));
    } else {
      EXPECT_TRUE(store.delete_job(key).ok());
    }
    ASSERT_TRUE(store.patch_job_metadata(key, {{"finalizers", nullptr}}).ok()) << "call " << call;
    EXPECT_EQ(store.get_job(key).error().code, ErrorCode::NotFound) << "call " << call;
  }
}

TEST_F(LocalStoreTest, StatusWrittenWhileThePersonRemovesOrEditsTheFileUndoesNeither) {
  // The controller writes status many times a second while a job runs; a removal or an edit landing between
  // its read and its write must stand (a plain rename brought the removed file back, and the job ran on).
  const ObjectKey key{"default", "race"};
  const auto path = dir.path() / "race.yaml";
  for (int round = 0; round < 100; ++round) {
    write_job("race.yaml", "race");
    LocalStore store(dir.path(), 20ms);
    ASSERT_TRUE(store.patch_job_metadata(key, {{"finalizers", {"conduit.dev/cleanup"}}}).ok());
    std::atomic<bool> stop{false};
    std::thread writer([&] {
      for (int i = 0; !stop && i < 100000; ++i) (void)store.patch_job_status(key, {{"progress", i}});
    });
    std::this_thread::sleep_for(std::chrono::microseconds(100 * (round % 10)));
    if (round % 2 == 0) {
      std::filesystem::remove(path);
    } else {
      std::string text = read_all(path);
      text.replace(text.find("spec:\n"), 6, "spec:\n  suspend: true\n");
      // How an editor saves: a new file renamed over the old.
      std::ofstream(dir.path() / "race.yaml~") << text;
      std::filesystem::rename(dir.path() / "race.yaml~", path);
    }
    std::this_thread::sleep_for(5ms);
    stop = true;
    writer.join();
    if (round % 2 == 0) {
      ASSERT_FALSE(std::filesystem::exists(path)) << "round " << round << ": the removed file came back";
      auto job = store.get_job(key);
      ASSERT_TRUE(job.ok()) << "round " << round << ": the finalizer holds it";
      EXPECT_TRUE((*job)["metadata"].contains("deletionTimestamp")) << "round " << round;
    } else {
      EXPECT_NE(read_all(path).find("suspend: true"), std::string::npos)
          << "round " << round << ": the edit was lost";
      std::filesystem::remove(path);
    }
  }
}

TEST_F(LocalStoreTest, DeleteJobRemovesTheFileAndNodesGoToTheirOwnFolder) {
  write_job("job.yaml", "ckpt");
  LocalStore store(dir.path(), 20ms);
  ASSERT_TRUE(store.delete_job({"default", "ckpt"}).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "job.yaml"));
  EXPECT_EQ(store.get_job({"default", "ckpt"}).error().code, ErrorCode::NotFound);
  ASSERT_TRUE(store.upsert_node("node-a", {{"nodeName", "node-a"}}, {{"agentVersion", "0.1.0"}}).ok());
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "fabricnodes" / "node-a.yaml"));
  EXPECT_TRUE(store.list_jobs()->empty());
}

}  // namespace
}  // namespace conduit::controller
