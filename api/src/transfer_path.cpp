#include "conduit/api/transfer_path.h"

namespace conduit::api {

using nlohmann::json;

namespace {

std::optional<std::uint64_t> optional_count(const json& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<std::uint64_t>();
}

}  // namespace

TransferPath TransferPath::from_json(const json& body) {
  TransferPath p;
  if (!body.is_object()) return p;
  p.verdict = body.value("verdict", "");
  p.message = body.value("message", "");
  p.counted = body.value("counted", "");
  const auto nics = body.find("nics");
  if (nics == body.end() || !nics->is_array()) return p;
  for (const json& n : *nics) {
    if (!n.is_object()) continue;
    NicPath nic;
    nic.nic = n.value("nic", "");
    nic.kind = n.value("kind", "");
    nic.planned = n.value("planned", false);
    nic.planned_bytes = n.value("plannedBytes", std::uint64_t{0});
    nic.window_bytes = n.value("windowBytes", std::uint64_t{0});
    nic.verdict = n.value("verdict", "");
    nic.message = n.value("message", "");
    if (const auto d = n.find("counterDelta"); d != n.end() && d->is_object()) {
      nic.counter_delta = NicPath::Delta{.tx_bytes = d->value("txBytes", std::uint64_t{0}),
                                         .rx_bytes = d->value("rxBytes", std::uint64_t{0}),
                                         .rdma_write_bytes = optional_count(*d, "rdmaWriteBytes"),
                                         .rdma_read_bytes = optional_count(*d, "rdmaReadBytes"),
                                         .send_bytes = optional_count(*d, "sendBytes"),
                                         .recv_bytes = optional_count(*d, "recvBytes")};
    }
    p.nics.push_back(std::move(nic));
  }
  return p;
}

json TransferPath::to_json() const {
  json nic_list = json::array();
  for (const NicPath& n : nics) {
    json entry{{"nic", n.nic},
               {"kind", n.kind},
               {"planned", n.planned},
               {"plannedBytes", n.planned_bytes},
               {"windowBytes", n.window_bytes},
               {"verdict", n.verdict}};
    if (!n.message.empty()) entry["message"] = n.message;
    if (n.counter_delta) {
      json d{{"txBytes", n.counter_delta->tx_bytes}, {"rxBytes", n.counter_delta->rx_bytes}};
      if (n.counter_delta->rdma_write_bytes) d["rdmaWriteBytes"] = *n.counter_delta->rdma_write_bytes;
      if (n.counter_delta->rdma_read_bytes) d["rdmaReadBytes"] = *n.counter_delta->rdma_read_bytes;
      if (n.counter_delta->send_bytes) d["sendBytes"] = *n.counter_delta->send_bytes;
      if (n.counter_delta->recv_bytes) d["recvBytes"] = *n.counter_delta->recv_bytes;
      entry["counterDelta"] = std::move(d);
    }
    nic_list.push_back(std::move(entry));
  }
  json out{{"verdict", verdict}, {"counted", counted}, {"nics", std::move(nic_list)}};
  if (!message.empty()) out["message"] = message;
  return out;
}

}  // namespace conduit::api
