#include "event_recorder.h"

#include <ctime>

#include "conduit/common/time.h"
#include "kube_client/log.h"

namespace conduit::kube {

using nlohmann::json;

namespace {
constexpr std::size_t kMaxSeen = 4096;          // repeats are found among this many recent distinct events
constexpr std::size_t kMaxMessageBytes = 1024;  // what kubectl describe shows sensibly; the rest is noise
}  // namespace

void EventRecorder::report_failure(const std::string& message) {
  // Loud once (missing RBAC for events is a deployment bug), quiet after (an outage is reported elsewhere).
  bool first = !warned_.exchange(true);
  kube_client::log(first ? kube_client::LogLevel::Warn : kube_client::LogLevel::Debug,
                   "event not recorded: " + message);
}

EventRecorder::EventRecorder(kube_client::KubeClient& client, std::string component, std::string instance)
    : client_(client), component_(std::move(component)), instance_(std::move(instance)) {}

void EventRecorder::record(const json& involved, const std::string& type, const std::string& reason,
                           const std::string& message) {
  std::string ns = kube_client::meta_string(involved, "namespace");
  std::string name = kube_client::meta_string(involved, "name");
  const std::string involved_ns = ns;
  if (ns.empty()) ns = "default";  // events about cluster-scoped objects live in default, as kubectl's do
  std::string text = message.size() > kMaxMessageBytes ? message.substr(0, kMaxMessageBytes) : message;
  std::string uid = kube_client::meta_string(involved, "uid");
  std::string kind = involved.is_object() ? involved.value("kind", "") : "";
  std::string key = ns + "\n" + kind + "\n" + name + "\n" + uid + "\n" + type + "\n" + reason + "\n" + text;
  auto now = std::chrono::system_clock::now();

  std::unique_lock lock(mutex_);
  auto seen = seen_.find(key);
  if (seen != seen_.end()) {
    Seen s = seen->second;
    lock.unlock();
    json patch = {{"count", s.count + 1}, {"lastTimestamp", format_rfc3339(now)}};
    auto patched = client_.merge_patch(kube_client::resources::events(), ns, s.name, patch);
    if (patched) {
      std::lock_guard relock(mutex_);
      seen_[key].count = s.count + 1;
      return;
    }
    if (patched.error().code != ErrorCode::NotFound) {
      report_failure(patched.error().message);
      return;
    }
    // The Event expired (the API server keeps them an hour): write a fresh one below.
    lock.lock();
  }
  if (seen_.size() >= kMaxSeen) seen_.clear();
  lock.unlock();

  char suffix[24];
  std::snprintf(suffix, sizeof suffix, "%llx",
                static_cast<unsigned long long>(
                    std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count()));
  std::string event_name = name + "." + suffix;
  json involved_ref = {{"apiVersion", involved.is_object() ? involved.value("apiVersion", "") : ""},
                       {"kind", kind},
                       {"name", name},
                       {"namespace", involved_ns}};
  if (!uid.empty()) involved_ref["uid"] = uid;
  if (std::string rv = kube_client::meta_string(involved, "resourceVersion"); !rv.empty())
    involved_ref["resourceVersion"] = rv;
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", event_name}, {"namespace", ns}}},
                {"involvedObject", involved_ref},
                {"reason", reason},
                {"message", text},
                {"type", type},
                {"count", 1},
                {"firstTimestamp", format_rfc3339(now)},
                {"lastTimestamp", format_rfc3339(now)},
                {"source", {{"component", component_}}},
                {"reportingComponent", component_},
                {"reportingInstance", instance_}};
  auto created = client_.create(kube_client::resources::events(), ns, event);
  if (!created) {
    report_failure(created.error().message);
    return;
  }
  std::lock_guard relock(mutex_);
  seen_[key] = Seen{event_name, 1};
}

}  // namespace conduit::kube
