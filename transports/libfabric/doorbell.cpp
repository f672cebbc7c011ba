#include "doorbell.h"

#include <unistd.h>

#include <cstring>
#include <string>

#include "shm_names.h"

namespace conduit::fabric {

std::optional<Doorbell::Address> Doorbell::address_of(std::string_view name) {
  name = shm_endpoint_name_of(name);
  // Abstract namespace: a leading NUL, no file to create or clean up after a killed process.
  const std::string path = std::string(1, '\0') + "conduit-doorbell/" + std::string(name);
  Address a;
  if (name.empty() || path.size() > sizeof(a.un.sun_path)) return std::nullopt;
  a.un.sun_family = AF_UNIX;
  std::memcpy(a.un.sun_path, path.data(), path.size());
  a.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  return a;
}

Doorbell::Doorbell(std::string_view name) {
  const auto address = address_of(name);
  if (!address) return;
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return;
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&address->un), address->length) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

Doorbell::~Doorbell() {
  if (fd_ >= 0) ::close(fd_);
}

void Doorbell::drain() const {
  char buf[64];
  while (fd_ >= 0 && ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT) > 0) {
  }
}

bool Doorbell::ring(const Address& peer) const {
  if (fd_ < 0) return false;
  const char byte = 1;
  return ::sendto(fd_, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&peer.un),
                  peer.length) == 1;
}

}  // namespace conduit::fabric
