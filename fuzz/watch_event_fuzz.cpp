// The API server's watch stream: newline-separated JSON events, split as KubeClient::watch splits them,
// each parsed by parse_watch_event and fed to the Watcher state machine (after an empty LIST) the way
// KubeListWatch feeds it. Nothing may throw out of the Watcher's step or crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "controller/kube/kube_list_watch.h"
#include "controller/kube/watcher.h"
#include "kube_client/log.h"

namespace kube = conduit::kube;
namespace kube_client = conduit::kube_client;

namespace {

// LIST returns nothing; WATCH replays the lines of the input as the stream.
class Replay : public kube::ListWatchSource {
 public:
  explicit Replay(std::string_view stream) : stream_(stream) {}

  conduit::Result<kube::ListResult> list() override { return kube::ListResult{{}, "1"}; }

  kube_client::WatchEnd watch(const std::string&,
                              const std::function<bool(const kube::WatchEvent&)>& on_event,
                              std::stop_token) override {
    std::size_t start = 0;
    for (std::size_t nl; (nl = stream_.find('\n', start)) != std::string_view::npos; start = nl + 1) {
      const auto line = stream_.substr(start, nl - start);
      if (line.empty()) continue;
      auto ev = kube::parse_watch_event(line);
      if (!ev) return {kube_client::WatchEnd::Kind::Transport, 200, "not a watch event"};
      if (!on_event(*ev)) return {kube_client::WatchEnd::Kind::Stopped, 200, {}};
    }
    const auto rest = stream_.substr(start);
    if (rest.find_first_not_of(" \r\n\t") != std::string_view::npos) {
      auto ev = kube::parse_watch_event(rest);
      if (!ev) return {kube_client::WatchEnd::Kind::Transport, 200, "not a watch event"};
      on_event(*ev);
    }
    return {kube_client::WatchEnd::Kind::Closed, 200, {}};
  }

 private:
  std::string_view stream_;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kube_client::set_log_sink(
      nullptr);  // the Watcher logs every ERROR event; keep the fuzzer's output readable
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view stream(reinterpret_cast<const char*>(data), size);
  Replay source(stream);
  kube::WatcherOptions options;
  options.initial_backoff = std::chrono::milliseconds(0);
  options.max_backoff = std::chrono::milliseconds(0);
  options.min_healthy_stream = std::chrono::milliseconds(0);
  std::size_t changes = 0;
  kube::Watcher watcher(
      source, [&](const std::vector<conduit::controller::ObjectKey>& keys) { changes += keys.size(); },
      options);
  if (watcher.step() != kube::WatchState::Listed) std::abort();
  const auto state = watcher.step();
  if (state != kube::WatchState::Watching && state != kube::WatchState::Relisting) std::abort();
  (void)watcher.objects();
  return 0;
}
