// fn(0), ..., fn(n - 1) at once, for calls that wait on agents, not on a CPU.
#pragma once

#include <atomic>
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

// The same for n that may be large (a Reshard job's batches: sources x targets): at most `width` threads,
// each taking the next index until none is left.
template <typename T, typename F>
std::vector<T> in_parallel_bounded(std::size_t n, std::size_t width, const F& fn) {
  if (n <= width) return in_parallel<T>(n, fn);
  std::vector<std::optional<T>> answers(n);
  std::atomic<std::size_t> next{0};
  auto work = [&answers, &fn, &next, n] {
    for (std::size_t i = next++; i < n; i = next++) answers[i].emplace(fn(i));
  };
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < width; ++i) {
    try {
      threads.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (auto& t : threads) t.join();
  std::vector<T> out;
  out.reserve(n);
  for (auto& a : answers) out.push_back(std::move(*a));
  return out;
}

}  // namespace conduit::controller
