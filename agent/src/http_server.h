// cpp-httplib's Server with the limits a hostile client calls for, which cpp-httplib 0.11 lacks. httplib
// gives each connection a worker thread from the moment it is accepted, so a few hundred connections that
// send nothing, or send their headers a byte a second (slowloris), held every worker and the agent answered
// no one, /healthz included. Here:
//  - a gate thread (epoll) holds connections until a request's headers are complete: idle and slow clients
//    cost a socket and a small buffer, never a worker. An idle connection is closed after the keep-alive
//    timeout (5 s), headers not complete within the request deadline (10 s from their first byte) or larger
//    than 16 KiB close it too;
//  - the request deadline also bounds reading the body, which happens on a worker (a slow body needs the
//    token: refused requests are answered before their body is read);
//  - 64 workers, and a listen backlog of SOMAXCONN instead of httplib's 5, so a burst of connections waits in
//    the kernel's queue instead of having its SYNs dropped and retried seconds later.
// With a TlsContext the same gate serves HTTPS: it runs each TLS handshake without blocking (a handshake
// is part of the request deadline) and reads the decrypted headers before a worker is involved, so a
// client stalled mid-handshake or mid-record costs what an idle plain one does. (httplib's own SSLServer
// gives each connection a worker from accept and has per-read timeouts only.)
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "tls_context.h"

namespace conduit::agent {

struct HttpLimits {
  std::chrono::milliseconds request_deadline{10000};  // first byte of a request to the end of its body
  std::size_t threads = 64;
  std::size_t max_waiting = 8192;  // connections the gate holds at once; more are closed on arrival
};

// Ends the connection once the current response is written. cpp-httplib 0.11 closes only on the request's
// own "Connection: close", so a refused request's unread body would be parsed as the next request. Called
// by handlers on the worker thread serving the request; a no-op under any other server.
void close_after_response();

// The certificate the caller of the current request presented and the handshake verified against the client
// CAs (tls_context.h); an empty name for plain HTTP or no certificate. Valid on the
// worker thread serving the request, as close_after_response is.
const PeerCertificate& tls_peer();

class HttpServer : public httplib::Server {
 public:
  // `tls`: serve HTTPS with its (rotating) certificate; none: plain HTTP.
  explicit HttpServer(HttpLimits limits = {}, std::shared_ptr<TlsContext> tls = nullptr);

  // After bind_to_port / bind_to_any_port: re-listens with a backlog of SOMAXCONN. False if not bound.
  bool raise_backlog();

 private:
  class Pool;
  using Clock = std::chrono::steady_clock;

  bool process_and_close_socket(socket_t sock) override;
  // On a worker: serves the request whose headers are in `head` (and any complete one pipelined after it),
  // then hands the connection back to the gate or closes it.
  void serve(socket_t sock, SSL* ssl, std::string head, Clock::time_point first_byte,
             std::size_t requests_left);

  HttpLimits limits_;
  std::shared_ptr<TlsContext> tls_;
  std::atomic<Pool*> pool_{nullptr};  // made by new_task_queue for each listen(), deleted by httplib
};

}  // namespace conduit::agent
