// The target side of conduit-bench. Its CPU only drives libfabric progress (on the rails' threads);
// the control API over HTTP hands out the key and checks what landed.
#include <httplib.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "conduit/crc32c.h"
#include "conduit/pattern.h"
#include "cpu_time.h"
#include "options.h"

namespace conduit::bench {

namespace {

bool split_host_port(const std::string& s, std::string& host, int& port) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos) return false;
  host = s.substr(0, colon);
  try {
    port = std::stoi(s.substr(colon + 1));
  } catch (const std::exception&) {
    return false;
  }
  return port >= 0 && port < 65536;
}

}  // namespace

int serve(const Options& options, const std::string& listen) {
  std::string host;
  int port = 0;
  if (!split_host_port(listen, host, port)) {
    std::cerr << "conduit-bench: --listen wants HOST:PORT, got \"" << listen << "\"\n";
    return 2;
  }
  TransportConfig config = options.data_plane.applied_to({});
  config.provider = options.provider;
  config.rails = options.rails;
  config.bind_address = options.bind;
  auto transport = open_transport(config);
  if (!transport) {
    std::cerr << "conduit-bench serve: " << transport.error().message << "\n";
    return 1;
  }
  auto region = MemoryRegion::allocate_host(options.size);
  if (!region) {
    std::cerr << "conduit-bench serve: " << region.error().message << "\n";
    return 1;
  }
  fill_pattern(region->bytes(), /*seed=*/2);
  auto reg = (*transport)->register_memory(*region, Access::RemoteReadWrite);
  if (!reg) {
    std::cerr << "conduit-bench serve: " << reg.error().message << "\n";
    return 1;
  }

  httplib::Server server;
  server.Get("/key", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(reg->remote_key().to_string(), "application/json");
  });
  server.Get("/crc", [&](const httplib::Request& req, httplib::Response& res) {
    const std::uint64_t off = req.has_param("offset") ? std::stoull(req.get_param_value("offset")) : 0;
    const std::uint64_t len =
        req.has_param("length") ? std::stoull(req.get_param_value("length")) : region->size() - off;
    if (off > region->size() || len > region->size() - off) {
      res.status = 400;
      res.set_content(R"({"error":{"code":"OutOfRange","message":"range outside the region"}})",
                      "application/json");
      return;
    }
    res.set_content(nlohmann::json{{"crc32c", crc32c(region->bytes().subspan(off, len))}}.dump(),
                    "application/json");
  });
  server.Get("/stats", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(nlohmann::json{{"cpuSeconds", cpu_seconds()}, {"hugePages", region->huge_pages()}}.dump(),
                    "application/json");
  });
  server.Post("/quit", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
    server.stop();
  });
  const int bound = port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    std::cerr << "conduit-bench serve: cannot listen on " << listen << "\n";
    return 1;
  }
  std::cout << "listening " << bound << std::endl;
  server.listen_after_bind();
  return 0;
}

}  // namespace conduit::bench
