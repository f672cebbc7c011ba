// A transfer's settings travel as one body (conduit/api/transfer.h) from the controller to the source
// agent's run, and from there to each Chain hop: these check that nothing is lost or renamed on the way.
// The controller's half (TransferJob spec -> body) is
// ReconcilerTest.EachTransferSettingOfTheSpecReachesTheAgentsBody.
#include "transfer/chain_hop.h"

#include <gtest/gtest.h>

#include <string>

#include "conduit/remote_key.h"
#include "transfer/request.h"

namespace conduit::agent {
namespace {

using json = nlohmann::json;
constexpr std::uint64_t MiB = 1ULL << 20;

api::TransferTarget hop(const std::string& node, const std::string& grant_id) {
  const RemoteKey key{"tcp;ofi_rxm", 0, 64 * MiB, {RailKey{{std::byte{1}, std::byte{2}}, 7}}};
  return {.grant = key.to_json(),
          .url = "http://" + node + ":7070",
          .region = "w",
          .grant_id = grant_id,
          .release_grant = true};
}

// A Chain body as the controller sends one, every setting away from its default.
api::TransferRequest chain_body() {
  api::TransferRequest r;
  r.source_region = "weights";
  r.length = 48 * MiB;
  r.targets = {hop("node-b", "g-000000000000000b"), hop("node-c", "g-000000000000000c"),
               hop("node-d", "g-000000000000000d")};
  r.chunk_bytes = 256 * 1024;
  r.window = 7;
  r.verify = api::Verify::Crc32c;
  r.deadline_seconds = 900;
  r.max_bytes_per_second = 3 * MiB;
  r.chain = true;
  r.ns = "team-a";
  return r;
}

TEST(TransferBody, ReachesTheRunAsTheCallerSentIt) {
  const api::TransferRequest sent = chain_body();
  auto read = ResolvedRequest::from_json(sent.to_json());
  ASSERT_TRUE(read) << read.error().message;
  EXPECT_EQ(read->wire.to_json(), sent.to_json()) << "every field, under the name it was sent with";
  EXPECT_EQ(read->wire.chunk_bytes, 256u * 1024);
  EXPECT_EQ(read->wire.window, 7u);
  EXPECT_EQ(read->wire.verify, api::Verify::Crc32c);
  EXPECT_EQ(read->wire.max_bytes_per_second, 3 * MiB);
  ASSERT_EQ(read->grants.size(), 3u) << "one key read per target";
  EXPECT_EQ(read->grants[2].length, 64 * MiB);
}

TEST(TransferBody, AChainHopForwardsTheBodyWithOnlyItsSourceAndTargetChanged) {
  auto read = ResolvedRequest::from_json(chain_body().to_json());
  ASSERT_TRUE(read) << read.error().message;
  const api::TransferRequest& chain = read->wire;
  // Hop 1 fed its bytes onward to hop 2, which already holds 4 MiB; 600 s of the deadline left.
  const api::TransferRequest ask = hop_request(chain, 1, 2, chain.length, 4 * MiB, 600);

  EXPECT_EQ(ask.source_region, "w") << "the feeder's region";
  EXPECT_EQ(ask.follow_grant, "g-000000000000000c") << "read as it lands through the feeder's grant";
  EXPECT_FALSE(ask.chain);
  ASSERT_EQ(ask.targets.size(), 1u);
  EXPECT_EQ(ask.targets[0].url, "http://node-d:7070");
  EXPECT_EQ(ask.targets[0].grant, chain.targets[2].grant);
  EXPECT_EQ(ask.targets[0].grant_id, "g-000000000000000d");
  EXPECT_EQ(ask.targets[0].resume_offset, 4 * MiB);
  EXPECT_FALSE(ask.targets[0].release_grant) << "the source releases the hops' grants, once";
  EXPECT_EQ(ask.deadline_seconds, 600u);
  EXPECT_TRUE(ask.ns.empty()) << "tenancy was checked at the source; the hop's transfer is the agent's";

  // Everything else as the caller sent it, including fields this test does not know by name.
  json forwarded = ask.to_json(), received = chain.to_json();
  for (const char* changed : {"source", "targets", "strategy", "deadlineSeconds", "namespace"}) {
    forwarded.erase(changed);
    received.erase(changed);
  }
  EXPECT_EQ(forwarded, received);

  // And the hop's agent takes it.
  auto taken = ResolvedRequest::from_json(ask.to_json());
  ASSERT_TRUE(taken) << taken.error().message;
  EXPECT_EQ(taken->wire.to_json(), ask.to_json());
}

}  // namespace
}  // namespace conduit::agent
