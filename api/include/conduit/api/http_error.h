// cpp-httplib transport errors in words a user acts on, for every client of the agents' REST API (the CLI,
// the controller, agents asking each other). Header-only: only code that already links cpp-httplib uses it.
#pragma once

#include <httplib.h>

#include <string>

namespace conduit::api {

inline std::string describe_http_error(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "could not connect";
    case httplib::Error::ConnectionTimeout:
      return "connection timed out";
    case httplib::Error::Read:
      return "no answer in time (the connection closed or the read timed out)";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed";
    case httplib::Error::SSLServerVerification:
      return "the server's certificate is not trusted";
    default:
      return httplib::to_string(error);
  }
}

}  // namespace conduit::api
