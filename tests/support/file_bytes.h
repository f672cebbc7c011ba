// Whole files as bytes, for tests that compare what an agent wrote with what it was given.
#pragma once

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace conduit::testing {

// Writes `data` to `p`, creating its directories.
inline void write_file(const std::filesystem::path& p, const std::vector<std::byte>& data) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), std::ssize(data));
}

// Everything in `p`; empty when it cannot be read.
inline std::vector<std::byte> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

}  // namespace conduit::testing
