// Doubles for the controller's two seams: an in-memory ObjectStore (merge patches as an apiserver applies
// them, every status write counted) and fake agents whose transfers move only when a test says so.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "reconcile/agent_api.h"
#include "reconcile/clock.h"
#include "store/object_store.h"

namespace conduit::controller::testing {

using json = nlohmann::json;

class ManualClock {
 public:
  TimePoint now() const { return now_; }
  void advance(std::chrono::milliseconds d) { now_ += d; }
  Clock clock() {
    return [this] { return now_; };
  }

 private:
  TimePoint now_ = std::chrono::system_clock::from_time_t(1'800'000'000);
};

class MemoryStore : public ObjectStore {
 public:
  explicit MemoryStore(ManualClock& clock) : clock_(clock) {}

  void put(json job) {
    auto& meta = job["metadata"];
    if (!meta.contains("namespace")) meta["namespace"] = "default";
    jobs[{meta["namespace"], meta["name"]}] = std::move(job);
  }
  json& job(const std::string& name) { return jobs.at({"default", name}); }
  bool exists(const std::string& name) const { return jobs.count({"default", name}) > 0; }

  Result<std::vector<json>> list_jobs() override {
    std::vector<json> out;
    for (const auto& [k, v] : jobs) out.push_back(v);
    return out;
  }
  Result<json> get_job(const ObjectKey& key) override {
    auto it = jobs.find(key);
    if (it == jobs.end()) return make_error(ErrorCode::NotFound, "gone");
    return it->second;
  }
  Result<json> patch_job_status(const ObjectKey& key, const json& status) override {
    auto it = jobs.find(key);
    if (it == jobs.end()) return make_error(ErrorCode::NotFound, "gone");
    if (fail_writes) return make_error(ErrorCode::Io, "store down");
    if (!it->second.contains("status")) it->second["status"] = json::object();
    it->second["status"].merge_patch(status);
    status_writes.push_back(clock_.now());
    return it->second;
  }
  Result<json> patch_job_metadata(const ObjectKey& key, const json& metadata) override {
    auto it = jobs.find(key);
    if (it == jobs.end()) return make_error(ErrorCode::NotFound, "gone");
    if (fail_writes) return make_error(ErrorCode::Io, "store down");
    if (it->second["metadata"].contains("deletionTimestamp") && metadata.contains("finalizers")) {
      // As an apiserver: no new finalizer on an object being deleted (the whole patch is refused).
      const json have = it->second["metadata"].value("finalizers", json::array());
      for (const auto& f : metadata["finalizers"]) {
        if (std::find(have.begin(), have.end(), f) == have.end())
          return make_error(ErrorCode::Conflict,
                            "no new finalizers can be added if the object is being deleted");
      }
    }
    it->second["metadata"].merge_patch(metadata);
    ++metadata_writes;
    json result = it->second;
    const auto& meta = it->second["metadata"];
    // As an apiserver: a deleted object goes once its last finalizer does.
    if (meta.contains("deletionTimestamp") && (!meta.contains("finalizers") || meta["finalizers"].empty())) {
      jobs.erase(it);
    }
    return result;
  }
  Status delete_job(const ObjectKey& key) override {
    auto it = jobs.find(key);
    if (it == jobs.end()) return make_error(ErrorCode::NotFound, "gone");
    auto& meta = it->second["metadata"];
    if (meta.contains("finalizers") && !meta["finalizers"].empty()) {
      meta["deletionTimestamp"] = format_rfc3339(clock_.now());
    } else {
      jobs.erase(it);
    }
    ++deletes;
    return {};
  }
  Status upsert_node(const std::string& name, const json&, const json& status) override {
    node_status[name] = status;
    return {};
  }
  std::map<std::string, json> node_status;  // FabricNode status by node, as last written
  void record_event(const ObjectKey&, const std::string& type, const std::string& reason,
                    const std::string&) override {
    events.push_back(type + "/" + reason);
  }
  std::vector<ObjectKey> wait_for_changes(std::chrono::milliseconds) override { return {}; }

  std::map<ObjectKey, json> jobs;
  std::vector<TimePoint> status_writes;
  int metadata_writes = 0;
  int deletes = 0;
  bool fail_writes = false;
  std::vector<std::string> events;

 private:
  ManualClock& clock_;
};

class FakeAgents : public AgentApi {
 public:
  struct Node {
    std::map<std::string, api::Region> regions;
    std::map<std::string, api::Manifest> manifests;  // region -> its named tensors
    std::set<std::string> files;                     // loadable files
    std::map<std::string, std::string> grants;       // id -> region
    bool down = false;
    json info;  // what GET /v1/node answers beyond {"node"}
  };

  std::map<std::string, Node> nodes;
  std::map<std::string, api::TransferStatus> transfers;  // id -> state, on whichever node started it
  std::map<std::string, api::TransferRequest> requests;
  std::vector<std::string> revoked;
  std::vector<std::string> cancelled;
  int starts = 0;
  int waits = 0;                   // wait_transfer calls
  std::function<void()> on_wait;   // what happens at the agent while a wait_transfer waits
  std::function<void()> on_grant;  // what happens elsewhere while a grant is taken
  int grants_made = 0;
  std::uint64_t file_bytes = 64 << 20;

  void add_node(const std::string& name) { nodes[name]; }
  // The transfer started last.
  api::TransferStatus& last() { return transfers.at("t-" + std::to_string(starts)); }
  void progress(std::uint64_t done, double throughput = 1e9) {
    auto& t = last();
    t.state = "Running";
    t.bytes_done = done;
    t.throughput = throughput;
    for (auto& target : t.targets) target.bytes_done = done / t.targets.size();
  }
  void finish(const std::string& state, const std::string& reason = "", const std::string& message = "") {
    auto& t = last();
    t.state = state;
    t.reason = reason;
    t.message = message;
    if (state == "Succeeded") {
      t.bytes_done = t.bytes_total;
      t.verified = true;
    }
    for (auto& target : t.targets) target.state = state;
  }

  std::optional<std::string> url(const std::string& node) const override {
    if (nodes.count(node) == 0) return std::nullopt;
    return "http://" + node + ":7070";
  }
  Result<json> node_info(const std::string& node) override {
    if (auto e = reach(node)) return *e;
    json info = nodes[node].info.is_object() ? nodes[node].info : json::object();
    info["node"] = node;
    return info;
  }
  Result<api::Region> create_region(const std::string& node, const api::CreateRegion& region) override {
    std::lock_guard lock(mu_);  // the reconciler creates a job's target regions at once
    if (auto e = reach(node)) return *e;
    auto& n = nodes[node];
    if (n.regions.count(region.name) > 0)
      return make_error(ErrorCode::AlreadyExists, "AlreadyExists: " + region.name);
    api::Region made{region.name, region.bytes, region.memory};
    made.ns = region.ns;
    if (region.manifest) {
      made.tensors = region.manifest->tensors.size();
      n.manifests[region.name] = *region.manifest;
    }
    return n.regions[region.name] = made;
  }
  // Convenience for tests that make a region by hand.
  Result<api::Region> create_region(const std::string& node, const std::string& name, std::uint64_t bytes,
                                    const std::string& memory, const std::string& ns) {
    return create_region(node, api::CreateRegion{.name = name, .bytes = bytes, .memory = memory, .ns = ns});
  }
  Result<api::Manifest> manifest(const std::string& node, const std::string& name) override {
    std::lock_guard lock(mu_);  // a Reshard job reads its pods' manifests at once
    if (auto e = reach(node)) return *e;
    auto& n = nodes[node];
    auto it = n.manifests.find(name);
    if (it == n.manifests.end())
      return make_error(ErrorCode::NotFound, "NotFound: region " + name + " has no manifest");
    return it->second;
  }
  Result<api::Region> get_region(const std::string& node, const std::string& name) override {
    std::lock_guard lock(mu_);  // a Reshard job looks its targets up at once
    if (auto e = reach(node)) return *e;
    auto& n = nodes[node];
    if (n.regions.count(name) == 0) return make_error(ErrorCode::NotFound, "NotFound: region " + name);
    return n.regions[name];
  }
  Result<api::Region> load_file(const std::string& node, const std::string& name, const std::string& file,
                                const std::string& ns) override {
    if (auto e = reach(node)) return *e;
    auto& n = nodes[node];
    if (n.files.count(file) == 0) return make_error(ErrorCode::NotFound, "NotFound: file " + file);
    if (n.regions.count(name) > 0) return make_error(ErrorCode::AlreadyExists, "AlreadyExists: " + name);
    api::Region made{name, file_bytes, "host"};
    made.ns = ns;
    return n.regions[name] = made;
  }
  Status save_region(const std::string& node, const std::string& name, const std::string& file,
                     const std::string&) override {
    if (auto e = reach(node)) return *e;
    if (nodes[node].regions.count(name) == 0) return make_error(ErrorCode::NotFound, "NotFound: region");
    nodes[node].files.insert(file);
    saved.push_back(node + ":" + name + "->" + file);
    return {};
  }
  // As the agent: given a namespace, a region, grant or transfer of another is refused ("": an operator's).
  Status delete_region(const std::string& node, const std::string& name, const std::string& ns) override {
    if (auto e = reach(node)) return *e;
    if (auto it = nodes[node].regions.find(name);
        it != nodes[node].regions.end() && !ns.empty() && it->second.ns != ns)
      return make_error(ErrorCode::Forbidden, "Forbidden: region " + name + " is not of namespace " + ns);
    if (nodes[node].regions.erase(name) == 0) return make_error(ErrorCode::NotFound, "NotFound");
    deleted_regions.push_back(node + ":" + name);
    return {};
  }
  Result<std::uint64_t> file_size(const std::string& node, const std::string& file,
                                  const std::string&) override {
    if (auto e = reach(node)) return *e;
    if (nodes[node].files.count(file) == 0) return make_error(ErrorCode::NotFound, "NotFound: file " + file);
    return file_bytes;
  }
  Result<api::Grant> grant(const std::string& node, const GrantAsk& ask) override {
    std::lock_guard lock(mu_);  // ... and takes their grants at once
    if (auto e = reach(node)) return *e;
    if (!ask.region.empty() && nodes[node].regions.count(ask.region) == 0)
      return make_error(ErrorCode::NotFound, "NotFound: region");
    if (!ask.provider.empty() && ask.provider != "tcp")
      return make_error(ErrorCode::Unavailable, "Unavailable: " + ask.provider);
    if (on_grant) on_grant();
    const std::string id = "g-" + std::to_string(++grants_made);
    nodes[node].grants[id] = ask.region;
    writers[id] = ask.writer;
    grant_ns[id] = ask.ns;
    api::Grant g{id, json{{"provider", "tcp;ofi_rxm"}, {"grant", id}}, "tcp;ofi_rxm"};
    g.length = ask.region.empty() ? (16u << 20) : ask.length;
    g.landing = json{
        {"ring", ask.region.empty()}, {"streamBytes", ask.length}, {"savedBytes", 0}, {"committed", false}};
    if (!ask.save.empty()) g.landing["file"] = ask.save;
    return g;
  }
  std::map<std::string, std::string> writers;   // grant id -> the writer it was asked with
  std::map<std::string, std::string> grant_ns;  // grant id -> the job's namespace it was asked for
  Status revoke_grant(const std::string& node, const std::string& id, const std::string& ns) override {
    std::lock_guard lock(mu_);  // a release revokes a job's grants at once
    if (auto e = reach(node)) return *e;
    if (nodes[node].grants.count(id) > 0 && !ns.empty() && grant_ns[id] != ns)
      return make_error(ErrorCode::Forbidden, "Forbidden: the grant is not made for namespace " + ns);
    if (nodes[node].grants.erase(id) == 0) return make_error(ErrorCode::NotFound, "NotFound: grant");
    revoked.push_back(id);
    return {};
  }
  // As the agent's versioned commit on a plain write grant: the region moves to `version` only from
  // version - 1 (Conflict naming where it is otherwise).
  Status commit_grant(const std::string& node, const std::string& id, std::uint64_t bytes,
                      std::uint64_t version) override {
    std::lock_guard lock(mu_);  // ... and commits them at once
    if (auto e = reach(node)) return *e;
    auto& n = nodes[node];
    if (n.grants.count(id) == 0) return make_error(ErrorCode::NotFound, "NotFound: grant " + id);
    auto& region = n.regions[n.grants[id]];
    if (bytes == 0 || bytes > region.bytes) return make_error(ErrorCode::InvalidArgument, "bytes");
    if (region.version + 1 != version) {
      return make_error(ErrorCode::Conflict, "Conflict: region " + region.name + " is at version " +
                                                 std::to_string(region.version) + ", not " +
                                                 std::to_string(version - 1));
    }
    region.version = version;
    commits.push_back(node + ":" + region.name + "@" + std::to_string(version));
    return {};
  }
  std::vector<std::string> commits;  // "node:region@version", in order

  Result<api::TransferStatus> start_transfer(const std::string& node,
                                             const api::TransferRequest& request) override {
    std::lock_guard lock(mu_);  // a Reshard job starts its batches at once
    if (auto e = reach(node)) return *e;
    const bool found = request.source_file.empty() ? nodes[node].regions.count(request.source_region) > 0
                                                   : nodes[node].files.count(request.source_file) > 0;
    if (!found) return make_error(ErrorCode::NotFound, "NotFound");
    api::TransferStatus t;
    t.id = "t-" + std::to_string(++starts);
    t.state = "Running";
    t.bytes_total = request.length * request.targets.size();
    for (const auto& op : request.ops) t.bytes_total += op.length;  // as the agent counts a scatter batch
    t.targets.resize(request.targets.size(), {"Running", 0, ""});
    transfers[t.id] = t;
    requests[t.id] = request;
    return t;
  }
  Result<api::TransferStatus> get_transfer(const std::string& node, const std::string& id,
                                           const std::string& ns) override {
    std::lock_guard lock(mu_);  // ... and looks at them at once
    if (auto e = reach(node)) return *e;
    if (transfers.count(id) == 0) return make_error(ErrorCode::NotFound, "NotFound: transfer");
    if (auto e = not_of(id, ns)) return *e;
    return transfers[id];
  }
  // Nothing moves while a fake waits: it answers at once, and counts the waits asked for.
  Result<api::TransferStatus> wait_transfer(const std::string& node, const std::string& id,
                                            std::chrono::seconds, const std::string& ns) override {
    ++waits;
    if (on_wait) on_wait();
    return get_transfer(node, id, ns);
  }
  Status cancel_transfer(const std::string& node, const std::string& id, const std::string& ns) override {
    std::lock_guard lock(mu_);  // ... and cancels them at once
    if (auto e = reach(node)) return *e;
    if (transfers.count(id) == 0) return make_error(ErrorCode::NotFound, "NotFound: transfer");
    if (auto e = not_of(id, ns)) return *e;
    auto& t = transfers[id];
    if (!t.finished()) {
      t.state = "Cancelled";
      t.reason = "Cancelled";
    }
    cancelled.push_back(id);
    return {};
  }

  // As the agent: a transfer of another namespace than the one given ("": an operator's) is refused.
  std::optional<Error> not_of(const std::string& transfer, const std::string& ns) {
    if (ns.empty() || requests[transfer].ns == ns) return std::nullopt;
    return make_error(ErrorCode::Forbidden, "Forbidden: not of namespace " + ns);
  }

  std::vector<std::string> saved;
  std::vector<std::string> deleted_regions;
  std::size_t live_grants() const {
    std::size_t n = 0;
    for (const auto& [name, node] : nodes) n += node.grants.size();
    return n;
  }

 private:
  std::optional<Error> reach(const std::string& node) {
    auto it = nodes.find(node);
    if (it == nodes.end()) return make_error(ErrorCode::NotFound, "no agent on " + node);
    if (it->second.down)
      return make_error(ErrorCode::PeerUnreachable, "agent on " + node + " did not answer");
    return std::nullopt;
  }
  std::mutex mu_;
};

}  // namespace conduit::controller::testing
