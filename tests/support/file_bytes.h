// Whole files as bytes, for tests that compare what an agent wrote with what it was given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "conduit/pattern.h"

namespace conduit::testing {

// Writes `data` to `p`, creating its directories.
inline void write_file(const std::filesystem::path& p, const std::vector<std::byte>& data) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), std::ssize(data));
}

// `bytes` of the seeded pattern (conduit/pattern.h) written to `p`, creating its directories; returns them,
// so the test knows every byte of the file.
inline std::vector<std::byte> write_seeded(const std::filesystem::path& p, std::uint64_t bytes,
                                           std::uint64_t seed) {
  std::vector<std::byte> data(bytes);
  fill_pattern(data, seed);
  write_file(p, data);
  return data;
}

// Everything in `p`; empty when it cannot be read.
inline std::vector<std::byte> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

// Every file under `dir` (recursively) whose name holds `part`: how a test finds the temporaries a save left
// behind, by the part their names are made with.
inline std::vector<std::string> files_named_with(const std::filesystem::path& dir, std::string_view part) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().find(part) != std::string::npos) out.push_back(e.path().string());
  }
  return out;
}

}  // namespace conduit::testing
