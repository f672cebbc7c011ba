// What the reconciler suites (reconciler_test, preflight_test, pods_test) start from, written once: a
// TransferJob object as the apiserver would hand it over, and the reconciler wired to an in-memory store and
// fake agents (fakes.h) on a manual clock, with the looks a test reads the job through. Each suite adds only
// what is its own (the facts of its nodes, a pod directory).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "fakes.h"
#include "reconcile/reconciler.h"
#include "reconcile/transfer_job.h"

namespace conduit::controller::testing {

// A TransferJob named `name` in the default namespace, at generation 1, with `spec` as it stands.
json transfer_job(const std::string& name, json spec);

// The job most stories tell: node-a's file weights.bin into a new 64 MiB region "weights" on node-b, with
// `spec_overrides` merged in (RFC 7386, as kubectl patch --type merge).
json job(const std::string& name, const json& spec_overrides = json::object());

// The overrides that send job()'s file to node-b and node-c at once, each into a new 64 MiB region
// "weights".
json fanout_to_b_and_c();

// `spec` parsed as the controller parses it; a test's own spec is expected to be valid.
TransferJobSpec parsed(const json& spec);

// The reconciler against a MemoryStore and FakeAgents on node-a, node-b and node-c, node-a holding the file
// job() sends, on a ManualClock. `options` may point at members of the suite's own fixture (FabricFacts, a
// PodDirectory): the reconciler keeps the pointers and uses them from the first reconcile on.
class ReconcilerFixture : public ::testing::Test {
 protected:
  explicit ReconcilerFixture(ReconcilerOptions options = {});

  // One reconcile of the job, by `r` if given (a second controller), else by this fixture's.
  std::optional<std::chrono::milliseconds> reconcile(const std::string& name, Reconciler* r = nullptr);
  json status(const std::string& name);
  std::string phase(const std::string& name);
  // The job's condition of `type`; null when it has none.
  json condition(const std::string& name, const std::string& type);
  // How many events "TYPE/REASON" were recorded.
  int events(const std::string& what);
  // Reconciles until the job's transfer runs (finalizer, regions, grants, start).
  void start(const std::string& name);

  ManualClock clock;
  MemoryStore store{clock};
  FakeAgents agents;
  Reconciler reconciler;
};

}  // namespace conduit::controller::testing
