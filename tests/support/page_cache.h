// The page cache as a test sees it: whether a file system takes O_DIRECT reads, how much of a file the
// page cache holds, and a file dropped from it (as one nobody has read lately).
#pragma once

#include <filesystem>
#include <string>

namespace conduit::testing {

// Whether `path` can be opened with O_DIRECT and its first block read so.
bool takes_direct_reads(const std::filesystem::path& path);
// The share of `path`'s pages the page cache holds (0 to 1); -1 when it cannot be told.
double cached_share(const std::filesystem::path& path);
// `path` written back and dropped from the page cache.
void drop_from_page_cache(const std::filesystem::path& path);
// `path` dropped from the page cache, as a file nobody has read lately; "" when it is, otherwise why this
// file system cannot make one (it takes no O_DIRECT reads, or keeps files in memory): a test's skip reason.
std::string make_cold(const std::filesystem::path& path);

}  // namespace conduit::testing
