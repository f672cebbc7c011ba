#include "fixtures.h"

#include <algorithm>

#include "reconcile/job_status.h"

namespace conduit::controller::testing {

namespace {
constexpr std::uint64_t MiB = 1 << 20;
}  // namespace

json transfer_job(const std::string& name, json spec) {
  return {{"apiVersion", "conduit.dev/v1alpha1"},
          {"kind", "TransferJob"},
          {"metadata", {{"name", name}, {"uid", "uid-" + name}, {"generation", 1}}},
          {"spec", std::move(spec)}};
}

json job(const std::string& name, const json& spec_overrides) {
  json spec{{"source", {{"node", "node-a"}, {"file", "weights.bin"}}},
            {"targets", {{{"node", "node-b"}, {"region", "weights"}, {"create", {{"bytes", 64 * MiB}}}}}}};
  spec.merge_patch(spec_overrides);
  return transfer_job(name, std::move(spec));
}

json fanout_to_b_and_c() {
  return {{"strategy", "Fanout"},
          {"targets",
           {{{"node", "node-b"}, {"region", "weights"}, {"create", {{"bytes", 64 * MiB}}}},
            {{"node", "node-c"}, {"region", "weights"}, {"create", {{"bytes", 64 * MiB}}}}}}};
}

TransferJobSpec parsed(const json& spec) {
  auto parsed = TransferJobSpec::parse(spec);
  EXPECT_TRUE(parsed) << parsed.error().message;
  return *parsed;
}

ReconcilerFixture::ReconcilerFixture(ReconcilerOptions options)
    : reconciler(store, agents, clock.clock(), std::move(options)) {
  for (const char* node : {"node-a", "node-b", "node-c"}) agents.add_node(node);
  agents.nodes["node-a"].files.insert("weights.bin");
}

std::optional<std::chrono::milliseconds> ReconcilerFixture::reconcile(const std::string& name,
                                                                      Reconciler* r) {
  return (r != nullptr ? r : &reconciler)->reconcile({"default", name});
}

json ReconcilerFixture::status(const std::string& name) {
  return store.job(name).value("status", json::object());
}

std::string ReconcilerFixture::phase(const std::string& name) { return status(name).value("phase", ""); }

json ReconcilerFixture::condition(const std::string& name, const std::string& type) {
  const json s = status(name);
  const json* c = find_condition(s, type);
  return c != nullptr ? *c : json();
}

int ReconcilerFixture::events(const std::string& what) {
  return static_cast<int>(std::count(store.events.begin(), store.events.end(), what));
}

void ReconcilerFixture::start(const std::string& name) {
  for (int i = 0; i < 3 && agents.starts == 0; ++i) reconcile(name);
  ASSERT_EQ(phase(name), "Running") << store.job(name).dump(2);
}

}  // namespace conduit::controller::testing
