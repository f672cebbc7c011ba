// fn(0), ..., fn(n - 1) at once, for calls that wait on agents, not on a CPU.
#pragma once

#include <cstddef>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

namespace conduit::controller {

// A thread each but the first (n is a job's nodes or targets: at most 17), answers in index order. A thread
// that cannot start runs its call here.
template <typename T, typename F>
std::vector<T> in_parallel(std::size_t n, const F& fn) {
  std::vector<std::optional<T>> answers(n);
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < n; ++i) {
    try {
      threads.emplace_back([&answers, &fn, i] { answers[i].emplace(fn(i)); });
    } catch (const std::system_error&) {
      answers[i].emplace(fn(i));
    }
  }
  if (n > 0) answers[0].emplace(fn(0));
  for (auto& t : threads) t.join();
  std::vector<T> out;
  out.reserve(n);
  for (auto& a : answers) out.push_back(std::move(*a));
  return out;
}

}  // namespace conduit::controller
