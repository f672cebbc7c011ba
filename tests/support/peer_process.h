// A real second process for integration tests: spawned with pipes on stdin/stdout, read line by line with
// a timeout, killed and reaped when the test is done (or has failed half way).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace conduit::testing {

class PeerProcess {
 public:
  explicit PeerProcess(const std::vector<std::string>& argv);
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  bool running() const { return pid_ > 0; }
  int pid() const { return pid_; }
  // One line of the peer's stdout without the newline; nullopt on EOF or timeout.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  void send(const std::string& line);
  // Sends `line` and returns the one-line answer.
  std::optional<std::string> ask(const std::string& line,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(60));
  void kill(int signal);  // and reap
  // SIGTERM, then up to `grace` for it to exit (SIGKILL after that). The exit status (128 + signal when a
  // signal ended it), or nullopt when it had to be killed or was not running.
  std::optional<int> terminate(std::chrono::milliseconds grace);
  int wait();  // exit status of a process that exits by itself

 private:
  int pid_ = -1;
  int in_ = -1;   // our end of its stdin
  int out_ = -1;  // our end of its stdout
  std::string buffered_;
};

}  // namespace conduit::testing
