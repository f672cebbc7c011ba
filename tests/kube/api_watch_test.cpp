// LIST+WATCH against a real kube-apiserver: events arrive as they happen, a stream the server closes is
// resumed from the last resourceVersion without a relist, and stop() is prompt.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>

#include "controller/kube/kube_list_watch.h"
#include "controller/kube/watcher.h"
#include "kube_api_env.h"

namespace conduit::kube::testing {
namespace {

using controller::ObjectKey;

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

class KubeWatchApi : public KubeApiTest {
 protected:
  void record(const std::vector<ObjectKey>& keys) {
    std::lock_guard lock(mutex_);
    notified_.insert(keys.begin(), keys.end());
  }
  bool was_notified(const std::string& name) {
    std::lock_guard lock(mutex_);
    return notified_.contains(ObjectKey{ns_, name});
  }

  std::mutex mutex_;
  std::set<ObjectKey> notified_;
};

TEST_F(KubeWatchApi, ListAndWatchSeeACreatedTransferJob) {
  ASSERT_TRUE(client_->create(jobs(), ns_, example("point-to-point.yaml", ns_, "before")));
  KubeListWatch source(*client_, jobs(), ns_, {}, /*timeout_seconds=*/60);
  Watcher watcher(source, [this](const std::vector<ObjectKey>& keys) { record(keys); });
  watcher.start();
  ASSERT_TRUE(watcher.wait_synced(seconds(10)));
  EXPECT_TRUE(watcher.get({ns_, "before"}).has_value()) << "the LIST fills the cache";
  // The LIST's keys are handed to on_change on the watch thread just after the cache counts as synced.
  EXPECT_TRUE(eventually([&] { return was_notified("before"); }, seconds(5)));

  ASSERT_TRUE(client_->create(jobs(), ns_, example("fanout.yaml", ns_, "after")));
  ASSERT_TRUE(eventually([&] { return watcher.get({ns_, "after"}).has_value(); }, seconds(10)));
  // As for the LIST: the event lands in the cache first, then its key goes to on_change.
  EXPECT_TRUE(eventually([&] { return was_notified("after"); }, seconds(5)));
  auto cached = watcher.get({ns_, "after"});
  EXPECT_EQ((*cached)["spec"]["strategy"], "Fanout");
  EXPECT_EQ((*cached)["apiVersion"], "conduit.dev/v1alpha1");

  ASSERT_TRUE(client_->merge_patch(jobs(), ns_, "after", {{"status", {{"phase", "Running"}}}}, "status"));
  ASSERT_TRUE(eventually(
      [&] {
        auto j = watcher.get({ns_, "after"});
        return j && j->value("/status/phase"_json_pointer, "") == "Running";
      },
      seconds(10)));

  ASSERT_TRUE(client_->delete_object(jobs(), ns_, "before"));
  ASSERT_TRUE(eventually([&] { return !watcher.get({ns_, "before"}).has_value(); }, seconds(10)));
  EXPECT_EQ(watcher.stats().relists, 0u);
}

TEST_F(KubeWatchApi, WatchSurvivesTheServerClosingTheStream) {
  // timeoutSeconds=2: the server ends every stream after 2 s, as it does after 5–10 minutes in production.
  KubeListWatch source(*client_, jobs(), ns_, {}, /*timeout_seconds=*/2);
  Watcher watcher(source, [this](const std::vector<ObjectKey>& keys) { record(keys); });
  watcher.start();
  ASSERT_TRUE(watcher.wait_synced(seconds(10)));
  std::string list_rv = watcher.resource_version();

  ASSERT_TRUE(client_->create(jobs(), ns_, example("point-to-point.yaml", ns_, "first")));
  ASSERT_TRUE(eventually([&] { return watcher.get({ns_, "first"}).has_value(); }, seconds(10)));
  EXPECT_NE(watcher.resource_version(), list_rv) << "the event's resourceVersion is remembered";

  // Two server-side closes later the watcher is on its third stream, resumed from where it was.
  ASSERT_TRUE(eventually([&] { return watcher.stats().watches >= 3; }, seconds(15)));
  auto stats = watcher.stats();
  EXPECT_NE(stats.last_watch_rv, list_rv);
  EXPECT_FALSE(stats.last_watch_rv.empty());

  ASSERT_TRUE(client_->create(jobs(), ns_, example("point-to-point.yaml", ns_, "second")));
  ASSERT_TRUE(eventually([&] { return watcher.get({ns_, "second"}).has_value(); }, seconds(10)));
  EXPECT_TRUE(eventually([&] { return was_notified("second"); }, seconds(5)));
  stats = watcher.stats();
  EXPECT_EQ(stats.lists, 1u) << "a closed stream is resumed, never relisted";
  EXPECT_EQ(stats.gone, 0u);
  EXPECT_EQ(stats.failures, 0u);
}

TEST_F(KubeWatchApi, StopIsPromptWhileTheStreamIsQuiet) {
  KubeListWatch source(*client_, jobs(), ns_, {}, /*timeout_seconds=*/120);
  Watcher watcher(source, nullptr);
  watcher.start();
  ASSERT_TRUE(watcher.wait_synced(seconds(10)));
  ASSERT_TRUE(eventually([&] { return watcher.state() == WatchState::Watching; }, seconds(5)));
  std::this_thread::sleep_for(milliseconds(300));  // the stream is open and blocked in a read
  auto t0 = std::chrono::steady_clock::now();
  watcher.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000));
}

TEST_F(KubeWatchApi, ClientWatchDeliversLinesAsTheyArrive) {
  auto list = client_->list(jobs(), ns_);
  ASSERT_TRUE(list);
  kube_client::WatchOptions options;
  options.resource_version = (*list)["metadata"]["resourceVersion"];
  options.timeout_seconds = 30;
  std::atomic<bool> seen{false};
  std::stop_source stop;
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_TRUE(client_->create(jobs(), ns_, example("point-to-point.yaml", ns_, "streamed")));
  });
  auto t0 = std::chrono::steady_clock::now();
  kube_client::WatchEnd end = client_->watch(
      jobs(), ns_, options,
      [&](std::string_view line) {
        auto ev = parse_watch_event(line);
        EXPECT_TRUE(ev) << line;
        if (ev && ev->type == WatchEvent::Type::Added && ev->object["metadata"]["name"] == "streamed") {
          seen = true;
          return false;
        }
        return true;
      },
      stop.get_token());
  writer.join();
  EXPECT_TRUE(seen);
  EXPECT_EQ(end.kind, kube_client::WatchEnd::Kind::Stopped);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, seconds(10)) << "the event came long before the timeout";
}

}  // namespace
}  // namespace conduit::kube::testing
