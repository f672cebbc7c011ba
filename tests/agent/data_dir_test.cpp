// DataDir over a real directory: a file is opened where it resolves, beneath the data directory or a
// namespace's directory, and a link out of that directory is refused however the path is spelled; a save
// made through it lands in the directory it opened, 0600, and leaves nothing behind when abandoned.
#include "files/data_dir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "conduit/pattern.h"
#include "file_bytes.h"
#include "files/save_file.h"
#include "temp_dir.h"

namespace conduit::agent {
namespace {

namespace fs = std::filesystem;

class DataDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(data / "team-a");
    testing::write_file(data / "team-b" / "b-secret.bin", std::vector<std::byte>(100, std::byte{7}));
    testing::write_file(data / "team-a" / "own.bin", std::vector<std::byte>(10, std::byte{1}));
    fs::create_directory_symlink("../team-b", data / "team-a" / "bdir");
    fs::create_symlink("../team-b/b-secret.bin", data / "team-a" / "link.bin");
    fs::create_symlink("own.bin", data / "team-a" / "inner.bin");
  }

  ErrorCode open_code(const std::string& file, const std::string& ns) {
    auto where = dir.beneath(file, ns);
    if (!where) return where.error().code;
    auto fd = where->open(O_RDONLY);
    return fd ? ErrorCode::Cancelled : fd.error().code;  // Cancelled: it opened
  }

  testing::TempDir tmp{"conduit-data-dir"};
  fs::path data = tmp.path() / "data";
  DataDir dir{data};
};

TEST_F(DataDirTest, ALinkOutOfTheNamespacesDirectoryIsRefusedWhereItIsOpened) {
  EXPECT_EQ(open_code("team-a/link.bin", "team-a"), ErrorCode::Forbidden);
  EXPECT_EQ(open_code("team-a/bdir/b-secret.bin", "team-a"), ErrorCode::Forbidden);
  EXPECT_EQ(open_code("team-b/b-secret.bin", "team-a"), ErrorCode::Forbidden);
  EXPECT_EQ(open_code("team-a/inner.bin", "team-a"), ErrorCode::Cancelled) << "a link inside still works";
  EXPECT_EQ(open_code("team-a/link.bin", ""), ErrorCode::Cancelled)
      << "without a namespace: inside the data dir";
  auto where = dir.beneath("team-a/link.bin", "team-a");
  ASSERT_TRUE(where.ok());
  const auto refused = where->open(O_RDONLY);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("outside namespace team-a's directory"), std::string::npos)
      << refused.error().message;

  // A namespace's directory that is itself a link is not entered.
  fs::create_directory_symlink("team-b", data / "team-c");
  EXPECT_EQ(open_code("team-c/b-secret.bin", "team-c"), ErrorCode::Forbidden);
}

TEST_F(DataDirTest, ALinkOutOfTheDataDirectoryIsRefused) {
  testing::write_file(tmp.path() / "outside" / "x", std::vector<std::byte>(10));
  fs::create_directory_symlink("../outside", data / "out");
  fs::create_directory_symlink(tmp.path() / "outside", data / "abs");
  EXPECT_EQ(open_code("out/x", ""), ErrorCode::InvalidArgument);
  EXPECT_EQ(open_code("abs/x", ""), ErrorCode::InvalidArgument);
  EXPECT_EQ(open_code("../outside/x", ""), ErrorCode::InvalidArgument);
  auto save = dir.beneath("out/new/y.bin", "", true);
  ASSERT_TRUE(save.ok());
  EXPECT_EQ(save->parent(/*make=*/true).error().code, ErrorCode::InvalidArgument);
  EXPECT_FALSE(fs::exists(tmp.path() / "outside" / "new"));
}

TEST_F(DataDirTest, ASaveIsOwnerOnlyAndAnAbandonedOneLeavesNothing) {
  std::vector<std::byte> bytes(5000);
  fill_pattern(bytes, 3);
  {
    auto where = dir.beneath("team-a/deep/er/w.bin", "team-a", true);
    ASSERT_TRUE(where.ok());
    auto parent = where->parent(/*make=*/true);
    ASSERT_TRUE(parent.ok()) << parent.error().message;
    auto save = SaveFile::create(std::move(*parent), "team-a/deep/er/w.bin");
    ASSERT_TRUE(save.ok());
    ASSERT_TRUE(save->append(bytes).ok());
    ASSERT_TRUE(save->commit(bytes.size()).ok());
  }
  EXPECT_EQ(testing::read_file(data / "team-a/deep/er/w.bin"), bytes);
  EXPECT_EQ(fs::status(data / "team-a/deep/er/w.bin").permissions(),
            fs::perms::owner_read | fs::perms::owner_write);

  {
    auto where = dir.beneath("team-d/new/w.bin", "team-d", true);
    ASSERT_TRUE(where.ok());
    auto parent = where->parent(/*make=*/true);
    ASSERT_TRUE(parent.ok()) << parent.error().message;
    auto save = SaveFile::create(std::move(*parent), "team-d/new/w.bin");
    ASSERT_TRUE(save.ok());
    ASSERT_TRUE(save->append(bytes).ok());
    EXPECT_TRUE(fs::exists(data / "team-d" / "new"));
  }
  EXPECT_FALSE(fs::exists(data / "team-d")) << "the directories made for an abandoned save stay";
}

}  // namespace
}  // namespace conduit::agent
