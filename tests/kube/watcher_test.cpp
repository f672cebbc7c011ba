// The LIST+WATCH state machine, one path per test, driven step by step over a scripted source: no network.
#include "controller/kube/watcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>

namespace conduit::kube {
namespace {

using controller::ObjectKey;

using nlohmann::json;

json job(const std::string& name, const std::string& rv) {
  return {{"apiVersion", "conduit.dev/v1alpha1"},
          {"kind", "TransferJob"},
          {"metadata", {{"namespace", "ns"}, {"name", name}, {"resourceVersion", rv}}}};
}
WatchEvent event(WatchEvent::Type type, json object) { return WatchEvent{type, std::move(object)}; }
WatchEvent added(const std::string& name, const std::string& rv) {
  return event(WatchEvent::Type::Added, job(name, rv));
}
WatchEvent modified(const std::string& name, const std::string& rv) {
  return event(WatchEvent::Type::Modified, job(name, rv));
}
WatchEvent deleted(const std::string& name, const std::string& rv) {
  return event(WatchEvent::Type::Deleted, job(name, rv));
}
WatchEvent bookmark(const std::string& rv) {
  return event(WatchEvent::Type::Bookmark,
               {{"kind", "TransferJob"}, {"metadata", {{"resourceVersion", rv}}}});
}
WatchEvent error_event(int code, const std::string& message) {
  return event(WatchEvent::Type::Error, {{"kind", "Status"}, {"code", code}, {"message", message}});
}
ObjectKey key(const std::string& name) { return {"ns", name}; }

// Plays back scripted LISTs and watch streams; records where each watch started. With no stream left, a
// watch blocks until stopped, as a quiet real stream does.
class ScriptedSource : public ListWatchSource {
 public:
  struct Stream {
    std::vector<WatchEvent> events;
    kube_client::WatchEnd end;
  };
  std::deque<Result<ListResult>> lists;
  std::deque<Stream> streams;
  std::vector<std::string> watched_from;
  std::atomic<int> list_calls{0};

  Result<ListResult> list() override {
    ++list_calls;
    if (lists.empty()) return make_error(ErrorCode::Unavailable, "no list scripted");
    auto r = std::move(lists.front());
    lists.pop_front();
    return r;
  }

  kube_client::WatchEnd watch(const std::string& rv, const std::function<bool(const WatchEvent&)>& on_event,
                              std::stop_token stop) override {
    watched_from.push_back(rv);
    if (streams.empty()) {
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      cv.wait(lock, stop, [] { return false; });
      return {kube_client::WatchEnd::Kind::Stopped, 0, {}};
    }
    Stream s = std::move(streams.front());
    streams.pop_front();
    for (const auto& ev : s.events) {
      if (!on_event(ev)) return {kube_client::WatchEnd::Kind::Stopped, 200, {}};
    }
    return s.end;
  }
};

kube_client::WatchEnd closed() { return {kube_client::WatchEnd::Kind::Closed, 200, {}}; }

class WatcherTest : public ::testing::Test {
 protected:
  WatcherTest()
      : watcher_(
            source_,
            [this](const std::vector<ObjectKey>& keys) {
              notified_.insert(notified_.end(), keys.begin(), keys.end());
            },
            fast_options()) {}

  void expect_rewatch_from_11_without_relisting();

  static WatcherOptions fast_options() {
    WatcherOptions o;
    o.initial_backoff = std::chrono::milliseconds(1);
    o.max_backoff = std::chrono::milliseconds(2);
    o.min_healthy_stream = std::chrono::milliseconds(0);
    return o;
  }
  void script_list(std::vector<json> items, const std::string& rv) {
    source_.lists.push_back(ListResult{std::move(items), rv});
  }
  void script_stream(std::vector<WatchEvent> events, kube_client::WatchEnd end = closed()) {
    source_.streams.push_back({std::move(events), std::move(end)});
  }
  std::vector<ObjectKey> take_notified() { return std::exchange(notified_, {}); }

  ScriptedSource source_;
  std::vector<ObjectKey> notified_;
  Watcher watcher_;
};

TEST_F(WatcherTest, EmptyListsThenWatchesFromTheListsResourceVersion) {
  script_list({job("a", "5"), job("b", "6")}, "10");
  script_stream({added("c", "11")});
  EXPECT_EQ(watcher_.state(), WatchState::Empty);
  EXPECT_FALSE(watcher_.synced());

  EXPECT_EQ(watcher_.step(), WatchState::Listed);
  EXPECT_TRUE(watcher_.synced());
  EXPECT_EQ(watcher_.resource_version(), "10");
  EXPECT_EQ(take_notified(), (std::vector<ObjectKey>{key("a"), key("b")}));

  EXPECT_EQ(watcher_.step(), WatchState::Watching);
  EXPECT_EQ(source_.watched_from, std::vector<std::string>{"10"});
  EXPECT_EQ(take_notified(), std::vector<ObjectKey>{key("c")});
  EXPECT_EQ(watcher_.objects().size(), 3u);
  EXPECT_EQ(watcher_.resource_version(), "11");
}

TEST_F(WatcherTest, ModifiedAndDeletedUpdateTheCache) {
  script_list({job("a", "5")}, "10");
  script_stream({modified("a", "12"), added("b", "13"), deleted("a", "14")});
  watcher_.step();
  watcher_.step();
  EXPECT_FALSE(watcher_.get(key("a")).has_value());
  ASSERT_TRUE(watcher_.get(key("b")).has_value());
  EXPECT_EQ(watcher_.resource_version(), "14");
}

TEST_F(WatcherTest, DisconnectRewatchesFromTheLastEventsResourceVersion) {
  script_list({}, "10");
  script_stream({added("a", "11"), added("b", "12")});  // the server ends the stream (its timeout)
  script_stream({modified("a", "13")});
  watcher_.step();
  EXPECT_EQ(watcher_.step(), WatchState::Watching);
  EXPECT_EQ(watcher_.step(), WatchState::Watching);
  EXPECT_EQ(source_.watched_from, (std::vector<std::string>{"10", "12"}));
  EXPECT_EQ(source_.list_calls, 1);  // a normal end never relists
  EXPECT_EQ(watcher_.stats().failures, 0u);
}

TEST_F(WatcherTest, BookmarkResourceVersionIsRememberedForTheReconnect) {
  script_list({}, "10");
  script_stream({added("a", "11"), bookmark("40")});
  script_stream({});
  watcher_.step();
  watcher_.step();
  EXPECT_EQ(take_notified(), std::vector<ObjectKey>{key("a")});  // a bookmark changes no object
  EXPECT_EQ(watcher_.resource_version(), "40");
  watcher_.step();
  EXPECT_EQ(source_.watched_from, (std::vector<std::string>{"10", "40"}));
  EXPECT_EQ(watcher_.stats().bookmarks, 1u);
  EXPECT_EQ(watcher_.stats().last_watch_rv, "40");
}

// After a list at "10" and one event at "11", the stream ended by a failure that is not 410: the watcher
// counts the failure and watches again from "11" without listing again.
void WatcherTest::expect_rewatch_from_11_without_relisting() {
  watcher_.step();
  EXPECT_EQ(watcher_.step(), WatchState::Watching);
  EXPECT_EQ(watcher_.stats().failures, 1u);
  watcher_.step();
  EXPECT_EQ(source_.watched_from, (std::vector<std::string>{"10", "11"}));
  EXPECT_EQ(source_.list_calls, 1);
}

TEST_F(WatcherTest, TransportFailureRewatchesFromTheLastResourceVersion) {
  script_list({}, "10");
  script_stream({added("a", "11")},
                kube_client::WatchEnd{kube_client::WatchEnd::Kind::Transport, 0, "connection reset"});
  script_stream({});
  expect_rewatch_from_11_without_relisting();
}

TEST_F(WatcherTest, HttpGoneRelistsAndReportsOnlyWhatDiffers) {
  script_list({job("keep", "5"), job("change", "6"), job("vanish", "7")}, "10");
  script_stream(
      {}, kube_client::WatchEnd{kube_client::WatchEnd::Kind::HttpError, 410, "too old resource version"});
  script_list({job("keep", "5"), job("change", "20"), job("new", "21")}, "30");
  script_stream({});
  watcher_.step();
  take_notified();

  EXPECT_EQ(watcher_.step(), WatchState::Relisting);
  EXPECT_EQ(watcher_.stats().gone, 1u);
  EXPECT_EQ(watcher_.step(), WatchState::Listed);
  EXPECT_EQ(source_.list_calls, 2);
  EXPECT_EQ(watcher_.stats().relists, 1u);
  auto changed = take_notified();
  std::sort(changed.begin(), changed.end());
  EXPECT_EQ(changed, (std::vector<ObjectKey>{key("change"), key("new"), key("vanish")}));
  EXPECT_FALSE(watcher_.get(key("vanish")).has_value());
  EXPECT_EQ(watcher_.resource_version(), "30");

  watcher_.step();
  EXPECT_EQ(source_.watched_from, (std::vector<std::string>{"10", "30"}));
}

TEST_F(WatcherTest, ErrorEventWithCode410Relists) {
  script_list({}, "10");
  // What the API server sends when the watch starts below its watch cache's window; nothing after it counts.
  script_stream({error_event(410, "too old resource version: 10 (50)"), added("late", "60")});
  script_list({job("a", "55")}, "60");
  watcher_.step();
  EXPECT_EQ(watcher_.step(), WatchState::Relisting);
  EXPECT_FALSE(watcher_.get(key("late")).has_value());
  EXPECT_EQ(watcher_.step(), WatchState::Listed);
  EXPECT_TRUE(watcher_.get(key("a")).has_value());
  EXPECT_EQ(watcher_.stats().gone, 1u);
}

TEST_F(WatcherTest, ErrorEventWithOtherCodeRewatchesWithoutRelisting) {
  script_list({}, "10");
  script_stream({added("a", "11"), error_event(500, "internal error")});
  script_stream({});
  expect_rewatch_from_11_without_relisting();
}

TEST_F(WatcherTest, FailedListStaysEmptyAndRetries) {
  source_.lists.push_back(make_error(ErrorCode::PeerUnreachable, "connection refused"));
  script_list({job("a", "5")}, "10");
  EXPECT_EQ(watcher_.step(), WatchState::Empty);
  EXPECT_FALSE(watcher_.synced());
  EXPECT_EQ(watcher_.step(), WatchState::Listed);
  EXPECT_EQ(watcher_.stats().failures, 1u);
}

TEST_F(WatcherTest, FailedRelistKeepsTheOldCacheAndRetries) {
  script_list({job("a", "5")}, "10");
  script_stream({}, kube_client::WatchEnd{kube_client::WatchEnd::Kind::HttpError, 410, "gone"});
  source_.lists.push_back(Error{ErrorCode::Unavailable, "503"});
  script_list({job("a", "5")}, "20");
  watcher_.step();
  watcher_.step();
  EXPECT_EQ(watcher_.step(), WatchState::Relisting);
  EXPECT_TRUE(watcher_.get(key("a")).has_value());
  EXPECT_EQ(watcher_.step(), WatchState::Listed);
  EXPECT_EQ(watcher_.resource_version(), "20");
}

TEST(WatcherThread, StopsPromptlyWhileAWatchIsBlocked) {
  ScriptedSource source;
  source.lists.push_back(ListResult{{}, "1"});
  Watcher watcher(source, nullptr);
  watcher.start();
  ASSERT_TRUE(watcher.wait_synced(std::chrono::seconds(5)));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (watcher.state() != WatchState::Watching && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(watcher.state(), WatchState::Watching);
  auto t0 = std::chrono::steady_clock::now();
  watcher.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
}

TEST(WatcherThread, StopsPromptlyDuringBackoff) {
  ScriptedSource source;  // no list scripted: every LIST fails and the watcher backs off
  WatcherOptions options;
  options.initial_backoff = std::chrono::seconds(30);
  Watcher watcher(source, nullptr, options);
  watcher.start();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (source.list_calls == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  auto t0 = std::chrono::steady_clock::now();
  watcher.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
}

TEST(WatchEventParsing, ReadsTypeAndObjectAndRefusesJunk) {
  auto ev = parse_watch_event(R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7"}}})");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->type, WatchEvent::Type::Bookmark);
  EXPECT_EQ(ev->object["metadata"]["resourceVersion"], "7");
  auto err = parse_watch_event(R"({"type":"ERROR","object":{"kind":"Status","code":410}})");
  ASSERT_TRUE(err);
  EXPECT_EQ(err->type, WatchEvent::Type::Error);
  EXPECT_FALSE(parse_watch_event("not json"));
  EXPECT_FALSE(parse_watch_event(R"({"type":"SOMETHING","object":{}})"));
  EXPECT_FALSE(parse_watch_event(R"({"type":"ADDED"})"));
}

}  // namespace
}  // namespace conduit::kube
