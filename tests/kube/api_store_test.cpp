// KubeObjectStore against a real kube-apiserver: what the reconciler sees and writes.
#include <gtest/gtest.h>

#include "controller/kube/kube_store.h"
#include "kube_api_env.h"

namespace conduit::kube::testing {
namespace {

using controller::ObjectKey;

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

class KubeStoreApi : public KubeApiTest {
 protected:
  std::unique_ptr<KubeObjectStore> make_store() {
    KubeStoreOptions options;
    options.namespaces = {ns_};
    options.instance = "test-pod";
    auto store = std::make_unique<KubeObjectStore>(*client_, options);
    store->start();
    EXPECT_TRUE(store->wait_synced(seconds(10)));
    return store;
  }
  // Waits until `key` is among the changes the store reports.
  bool change_reported(KubeObjectStore& store, const ObjectKey& key) {
    auto deadline = std::chrono::steady_clock::now() + seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      for (const auto& k : store.wait_for_changes(milliseconds(200))) {
        if (k == key) return true;
      }
    }
    return false;
  }
};

TEST_F(KubeStoreApi, JobsAreListedWatchedPatchedAndDeleted) {
  auto store = make_store();
  ObjectKey key{ns_, "job"};
  ASSERT_TRUE(client_->create(jobs(), ns_, example("point-to-point.yaml", ns_, "job")));
  ASSERT_TRUE(change_reported(*store, key));

  auto listed = store->list_jobs();
  ASSERT_TRUE(listed) << listed.error().message;
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0]["metadata"]["name"], "job");
  auto got = store->get_job(key);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ((*got)["kind"], "TransferJob");

  json status = {{"phase", "Running"}, {"bytesTransferred", 1024}, {"progress", "0%"}};
  auto patched = store->patch_job_status(key, status);
  ASSERT_TRUE(patched) << patched.error().message;
  EXPECT_EQ((*patched)["status"]["phase"], "Running");
  // A second write right away may start from a cache that has not seen the first (the 409 path re-reads).
  auto again = store->patch_job_status(key, {{"phase", "Succeeded"}, {"progress", "100%"}});
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ((*again)["status"]["phase"], "Succeeded");
  EXPECT_EQ((*again)["status"]["bytesTransferred"], 1024) << "a merge patch keeps what it does not name";

  auto finalized = store->patch_job_metadata(key, {{"finalizers", {"conduit.dev/transfer"}}});
  ASSERT_TRUE(finalized) << finalized.error().message;
  EXPECT_EQ((*finalized)["metadata"]["finalizers"], json({"conduit.dev/transfer"}));

  ASSERT_TRUE(store->delete_job(key));
  ASSERT_TRUE(eventually(
      [&] {
        auto j = store->get_job(key);
        return j && (*j)["metadata"].contains("deletionTimestamp");
      },
      seconds(10)))
      << "the finalizer holds the job";
  ASSERT_TRUE(store->patch_job_metadata(key, {{"finalizers", nullptr}}));
  ASSERT_TRUE(eventually([&] { return !store->get_job(key).ok(); }, seconds(10)));
  EXPECT_EQ(store->get_job(key).error().code, ErrorCode::NotFound);
  EXPECT_TRUE(store->delete_job(key)) << "deleting what is gone is done";
}

TEST_F(KubeStoreApi, WritesInARowStartFromTheLastWriteNotAStaleCache) {
  auto store = make_store();
  ObjectKey key{ns_, "busy"};
  ASSERT_TRUE(client_->create(jobs(), ns_, example("point-to-point.yaml", ns_, "busy")));
  ASSERT_TRUE(change_reported(*store, key));
  const auto conflicts = client_->conflict_retries();
  // What one reconcile does: the run annotation, then status, then status again, faster than the watch.
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store->patch_job_metadata(key, {{"annotations", {{"conduit.dev/run", std::to_string(i)}}}}));
    ASSERT_TRUE(store->patch_job_status(key, {{"phase", "Running"}, {"bytesTransferred", i}}));
    ASSERT_TRUE(store->patch_job_status(key, {{"progress", std::to_string(i) + "%"}}));
  }
  EXPECT_EQ(client_->conflict_retries(), conflicts) << "each write's precondition was the one before it";

  // Someone else writes in between: our last write is stale now, and the 409 path re-reads.
  ASSERT_TRUE(client_->merge_patch(jobs(), ns_, "busy", {{"metadata", {{"labels", {{"team", "b"}}}}}}, ""));
  auto r = store->patch_job_status(key, {{"phase", "Succeeded"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["status"]["phase"], "Succeeded");
  EXPECT_EQ((*r)["status"]["bytesTransferred"], 4);
  EXPECT_EQ((*r)["metadata"]["labels"]["team"], "b");
  EXPECT_EQ((*r)["metadata"]["annotations"]["conduit.dev/run"], "4");
}

TEST_F(KubeStoreApi, ReadsWorkBeforeStart) {
  KubeStoreOptions options;
  options.namespaces = {ns_};
  KubeObjectStore store(*client_, options);  // never started: reads go to the server
  ASSERT_TRUE(client_->create(jobs(), ns_, example("fanout.yaml", ns_, "direct")));
  auto listed = store.list_jobs();
  ASSERT_TRUE(listed) << listed.error().message;
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0]["kind"], "TransferJob");
  EXPECT_TRUE(store.get_job({ns_, "direct"}));
  EXPECT_EQ(store.get_job({ns_, "absent"}).error().code, ErrorCode::NotFound);
}

TEST_F(KubeStoreApi, FabricNodesAreCreatedThenTheirStatusReplaced) {
  auto store = make_store();
  std::string name = ns_ + "-node";  // cluster-scoped: unique per test
  json spec = {{"nodeName", name}, {"agentEndpoint", "http://127.0.0.1:7070"}};
  json status = {{"agentVersion", "0.1.0"}, {"nicCount", 2}, {"gpuCount", 1}, {"transportSummary", "tcp"}};
  ASSERT_TRUE(store->upsert_node(name, spec, status));
  auto got = client_->get(kube_client::resources::fabric_nodes(), "", name);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ((*got)["spec"], spec);
  EXPECT_EQ((*got)["status"]["nicCount"], 2);
  std::string rv = (*got)["metadata"]["resourceVersion"];

  // Unchanged: no write at all.
  ASSERT_TRUE(store->upsert_node(name, spec, status));
  EXPECT_EQ((*client_->get(kube_client::resources::fabric_nodes(), "", name))["metadata"]["resourceVersion"],
            rv);

  // Replaced, not merged: gpuCount is no longer reported, so it goes.
  json fewer = {{"agentVersion", "0.1.1"}, {"nicCount", 2}, {"transportSummary", "tcp"}};
  ASSERT_TRUE(store->upsert_node(name, spec, fewer));
  got = client_->get(kube_client::resources::fabric_nodes(), "", name);
  ASSERT_TRUE(got);
  EXPECT_EQ((*got)["status"], fewer);
}

TEST_F(KubeStoreApi, RepeatedEventsAreCountedOnOneObject) {
  auto store = make_store();
  ObjectKey key{ns_, "evented"};
  auto created = client_->create(jobs(), ns_, example("point-to-point.yaml", ns_, "evented"));
  ASSERT_TRUE(created);
  ASSERT_TRUE(eventually([&] { return store->get_job(key).ok(); }, seconds(10)));
  ASSERT_TRUE(change_reported(*store, key));
  store->record_event(key, "Warning", "PeerUnreachable", "agent node-b does not answer");
  store->record_event(key, "Warning", "PeerUnreachable", "agent node-b does not answer");
  store->record_event(key, "Normal", "Started", "transfer t-1 started on node-a");

  auto events = client_->list(kube_client::resources::events(), ns_);
  ASSERT_TRUE(events) << events.error().message;
  ASSERT_EQ((*events)["items"].size(), 2u);
  for (const auto& ev : (*events)["items"]) {
    EXPECT_EQ(ev["involvedObject"]["kind"], "TransferJob");
    EXPECT_EQ(ev["involvedObject"]["name"], "evented");
    EXPECT_EQ(ev["involvedObject"]["uid"], (*created)["metadata"]["uid"]);
    EXPECT_EQ(ev["reportingInstance"], "test-pod");
    if (ev["reason"] == "PeerUnreachable") {
      EXPECT_EQ(ev["count"], 2);
      EXPECT_EQ(ev["type"], "Warning");
      EXPECT_EQ(ev["message"], "agent node-b does not answer");
    } else {
      EXPECT_EQ(ev["count"], 1);
    }
  }
}

}  // namespace
}  // namespace conduit::kube::testing
