#include "shm_names.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace conduit::fabric {
namespace {

namespace fs = std::filesystem;

class ShmNames : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("conduit-shm-names-" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void touch(const std::string& name) { std::ofstream(dir_ / name) << "x"; }

  // A pid that ran and is gone (reaped), so nothing runs under it now unless the kernel reused it at once.
  static pid_t dead_pid() {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return pid;
  }

  fs::path dir_;
};

TEST_F(ShmNames, NamesAreOursUniqueAndCarryThePid) {
  const std::string a = shm_endpoint_name(), b = shm_endpoint_name();
  EXPECT_NE(a, b);
  EXPECT_TRUE(a.starts_with("conduit_")) << a;
  EXPECT_NE(a.find("_" + std::to_string(::getpid()) + "_"), std::string::npos) << a;
  EXPECT_LT(a.size(), 100u);  // well inside shm's name limit
}

TEST_F(ShmNames, OnlyOurNamespacesFilesOfDeadProcessesAreRemoved) {
  // The prefix of this pid namespace, from a name made here.
  const std::string mine = shm_endpoint_name();
  const std::string prefix = mine.substr(0, mine.find('_', 8) + 1);  // "conduit_<ns>_"
  const pid_t gone = dead_pid();
  touch(prefix + std::to_string(gone) + "_00aa");        // dead: removed
  touch(prefix + std::to_string(gone) + "_00bb");        // dead: removed
  touch(prefix + std::to_string(::getpid()) + "_00cc");  // alive (us): kept
  touch("conduit_1_" + std::to_string(gone) + "_00dd");  // another namespace: kept
  touch(std::to_string(gone) + ":0:0");                  // shm's own default name: kept
  touch(prefix + "notapid_00ee");                        // not ours in shape: kept
  touch(prefix + std::to_string(gone));                  // no random part: kept
  EXPECT_EQ(remove_stale_shm_endpoints(dir_), 2);
  EXPECT_FALSE(fs::exists(dir_ / (prefix + std::to_string(gone) + "_00aa")));
  EXPECT_TRUE(fs::exists(dir_ / (prefix + std::to_string(::getpid()) + "_00cc")));
  EXPECT_TRUE(fs::exists(dir_ / ("conduit_1_" + std::to_string(gone) + "_00dd")));
  EXPECT_TRUE(fs::exists(dir_ / (std::to_string(gone) + ":0:0")));
  EXPECT_EQ(remove_stale_shm_endpoints(dir_), 0);
  EXPECT_EQ(remove_stale_shm_endpoints(dir_ / "missing"), 0);
}

// What the transport asks before it declares an shm rail wedged by a dead peer: a wrong "gone" would let a
// batch's memory go while the provider may still touch it, so only a provably exited process counts.
TEST_F(ShmNames, APeerIsGoneOnlyWhenItsProcessInThisNamespaceExited) {
  const std::string mine = shm_endpoint_name();
  const std::string prefix = mine.substr(0, mine.find('_', 8) + 1);
  const std::string gone = std::to_string(dead_pid());
  EXPECT_FALSE(shm_endpoint_process_gone(mine));
  EXPECT_TRUE(shm_endpoint_process_gone(prefix + gone + "_00aa"));
  EXPECT_TRUE(shm_endpoint_process_gone(prefix + gone + "_00aa" + std::string(1, '\0')));  // fi_getname's NUL
  EXPECT_TRUE(shm_endpoint_process_gone("fi_shm://" + prefix + gone + "_00aa"));
  EXPECT_FALSE(shm_endpoint_process_gone("conduit_1_" + gone + "_00dd"));  // another namespace: cannot judge
  EXPECT_FALSE(shm_endpoint_process_gone(gone + ":0:0"));                  // shm's own default name
  EXPECT_FALSE(shm_endpoint_process_gone(prefix + gone));                  // not our shape
  EXPECT_FALSE(shm_endpoint_process_gone(""));
}

}  // namespace
}  // namespace conduit::fabric
