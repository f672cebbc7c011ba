// How a watch stream ended: what KubeClient::watch returns, and what the controller's watchers act on.
#pragma once

#include <string>

namespace conduit::kube_client {

// How a watch stream ended.
struct WatchEnd {
  enum class Kind {
    Closed,     // the server ended the stream (its timeout): re-watch from the last resourceVersion
    Stopped,    // the stop token fired, or the consumer asked to stop
    HttpError,  // the server refused the watch with a status (410 Gone: the resourceVersion is too old)
    Transport,  // connection, TLS or read failure, or a line that is not an event
  };
  Kind kind = Kind::Closed;
  int http_status = 0;
  std::string message;
};

}  // namespace conduit::kube_client
