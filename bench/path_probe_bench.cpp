// What the proof of path costs one transfer (docs/path.md), alone: path::Prover's begin() and end() against
// this node's real /sys (the rail's NIC, every interface holding an address, every infiniband device), as
// the agent runs them at a transfer's start and end. Per run, --transfers windows opened and judged one
// after another; median [min, max] over --runs runs of the time per transfer, and how many NICs each sample
// read. The baseline in the same run: the same loop with the prover's window for rails that name no NIC
// (nothing read), i.e. the bookkeeping alone.
//
//   build/bin/conduit-path-probe-bench [--runs 9] [--transfers 1000] [--nic lo]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "path/prover.h"

namespace {

using conduit::NicClass;
using conduit::NicRef;
using conduit::OpKind;
using conduit::agent::path::Planned;
using conduit::agent::path::Prover;
using Clock = std::chrono::steady_clock;

double per_transfer_us(Prover& prover, const std::vector<NicRef>& rails, int transfers, std::size_t* nics) {
  const auto t0 = Clock::now();
  for (int i = 0; i < transfers; ++i) {
    auto window = prover.begin(rails, rails.empty() ? "no NIC" : "");
    if (nics != nullptr) *nics = window.start.size();
    std::vector<Planned> planned;
    for (const NicRef& nic : rails) planned.push_back({nic, 1u << 20});
    const auto judged = prover.end(std::move(window), OpKind::Write, planned);
    if (judged.verdict.empty()) std::abort();
  }
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / transfers;
}

std::string median_range(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  char text[96];
  std::snprintf(text, sizeof text, "%.1f [%.1f, %.1f]", v[v.size() / 2], v.front(), v.back());
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 9;
  int transfers = 1000;
  std::string nic = "lo";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--transfers") == 0) transfers = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--nic") == 0) nic = argv[i + 1];
  }
  auto prover = Prover::for_node("/sys", nullptr);
  const std::vector<NicRef> rails{{nic, NicClass::Net}};
  std::vector<double> with, without;
  std::size_t nics = 0;
  for (int r = 0; r < runs; ++r) {  // interleaved, so the machine's noise falls on both alike
    with.push_back(per_transfer_us(*prover, rails, transfers, &nics));
    without.push_back(per_transfer_us(*prover, {}, transfers, nullptr));
  }
  std::printf("path_probe_bench: %d runs of %d transfers, rail on %s, %zu NICs read per sample\n", runs,
              transfers, nic.c_str(), nics);
  std::printf("  proof of path (begin + end): %s us per transfer\n", median_range(with).c_str());
  std::printf("  baseline, rails with no NIC: %s us per transfer\n", median_range(without).c_str());
  return 0;
}
