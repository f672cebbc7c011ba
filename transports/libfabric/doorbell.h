// A wake-up call between shm endpoints of one machine. libfabric's shm provider has no completion fd
// (FABRIC-NOTES.md: progress is manual and fi_cq_sread spins), so an idle rail polls its CQ with a backoff
// that grows to 1 ms, and a small write to an idle target waited that long for the target to look (1 ms
// p50 for a 4 KiB write against 1 us on the bare provider). Each shm endpoint therefore also binds an
// abstract Unix datagram socket named after its endpoint name; an initiator that posts to a peer sends it
// one byte, and the peer's idle rail, asleep in poll() on that socket among its other fds, wakes at once.
// Best effort both ways: a peer in another network namespace (abstract sockets are per namespace), or one
// without a doorbell, is simply not woken and is found by its backoff as before.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <optional>
#include <string_view>

namespace conduit::fabric {

class Doorbell {
 public:
  struct Address {
    sockaddr_un un{};
    socklen_t length = 0;
  };
  // The doorbell address of the shm endpoint named `name` (its fi_getname address, which may carry shm's
  // "fi_shm://" scheme and a trailing NUL); nullopt for a name too long for a socket address.
  static std::optional<Address> address_of(std::string_view name);

  // Binds the doorbell of the endpoint named `name`; an unbound doorbell (fd() -1) where that fails.
  explicit Doorbell(std::string_view name);
  Doorbell() = default;
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  int fd() const { return fd_; }
  // Reads every ring that arrived, so the next poll sleeps until a new one.
  void drain() const;
  // Rings `peer`'s doorbell: one datagram, never blocking; false where it could not be sent.
  bool ring(const Address& peer) const;

 private:
  int fd_ = -1;
};

}  // namespace conduit::fabric
