// How the agent runs every transfer: retries, segment and read-ahead sizes, the stall timeout, how long
// finished ones are kept (agent flags, config.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace conduit::agent {

struct TransferOptions {
  std::uint32_t max_segment_retries = 3;
  std::uint64_t segment_bytes = 64u << 20;   // unit of retry and resume
  std::uint64_t pipeline_bytes = 64u << 20;  // a file source's read-ahead slots together (--pipeline-bytes)
  std::chrono::milliseconds stall_timeout{30000};
  // Finished transfers kept for GET: the newest `history` always, any younger than `history_min_age` too
  // (a controller polling many jobs late must still find how each ended: 1,000 jobs at once outran a
  // plain count of 256), and never more than `history_max`.
  std::size_t history = 256;
  std::chrono::seconds history_min_age{600};
  std::size_t history_max = 16384;
  // --namespace-files: a job's source file is opened beneath its namespace's directory (tenancy.h).
  bool namespace_files = false;
};

}  // namespace conduit::agent
