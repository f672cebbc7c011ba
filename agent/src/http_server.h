// cpp-httplib's Server with the limits a hostile client calls for, which cpp-httplib 0.11 lacks:
//  - a deadline for receiving each request (request line, headers and body): httplib's read timeout applies
//    to each read, so a client sending a byte every few seconds held a worker thread for ever (slowloris);
//  - more worker threads than httplib's max(8, cores - 1), so it takes that many slow clients at once to
//    delay others, and then only until the deadline cuts them;
//  - a listen backlog of SOMAXCONN instead of httplib's 5, so a burst of connections waits in the kernel's
//    queue instead of having its SYNs dropped and retried seconds later.
// Plain HTTP only: an SSLServer keeps httplib's own connection handling (per-read timeout only).
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>

namespace conduit::agent {

struct HttpLimits {
  std::chrono::milliseconds request_deadline{10000};  // first byte of a request to the end of its body
  std::size_t threads = 64;
};

// Ends the connection once the current response is written. cpp-httplib 0.11 closes only on the request's
// own "Connection: close", so a refused request's unread body would be parsed as the next request. Called
// by handlers on the worker thread serving the request; a no-op under any other server.
void close_after_response();

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(HttpLimits limits = {});

  // After bind_to_port / bind_to_any_port: re-listens with a backlog of SOMAXCONN. False if not bound.
  bool raise_backlog();

 private:
  bool process_and_close_socket(socket_t sock) override;

  HttpLimits limits_;
};

}  // namespace conduit::agent
