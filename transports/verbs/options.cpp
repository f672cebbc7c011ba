#include <charconv>
#include <cstdlib>
#include <string>

#include "conduit/verbs.h"

namespace conduit::verbs {

namespace {

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

template <typename T>
Status read_number(const char* name, T& out, long min, long max) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return {};
  const std::string_view text(env);
  long value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size() || value < min || value > max) {
    return make_error(ErrorCode::InvalidArgument, std::string(name) + "=\"" + std::string(text) +
                                                      "\": want an integer in " + std::to_string(min) + ".." +
                                                      std::to_string(max));
  }
  out = static_cast<T>(value);
  return {};
}

}  // namespace

Result<VerbsOptions> VerbsOptions::from_environment() {
  VerbsOptions o;
  if (const char* env = std::getenv("CONDUIT_IB_DEVICES")) o.devices = split_list(env);
  if (const char* env = std::getenv("CONDUIT_IB_NEAR")) o.near = env;
  if (const char* env = std::getenv("CONDUIT_IB_LISTEN")) o.listen = env;
  for (Status s : {read_number("CONDUIT_IB_PORT", o.port, 1, 255),
                   read_number("CONDUIT_IB_GID_INDEX", o.gid_index, -1, 255),
                   read_number("CONDUIT_IB_QPS_PER_PEER", o.qps_per_peer, 1, 64),
                   read_number("CONDUIT_IB_SQ_DEPTH", o.sq_depth, 2, 32768),
                   read_number("CONDUIT_IB_SIGNAL_EVERY", o.signal_every, 1, 32768),
                   read_number("CONDUIT_IB_TRAFFIC_CLASS", o.traffic_class, 0, 255),
                   read_number("CONDUIT_IB_SL", o.service_level, 0, 15),
                   read_number("CONDUIT_IB_TIMEOUT", o.ack_timeout, 1, 31),
                   read_number("CONDUIT_IB_RETRY_COUNT", o.retry_count, 0, 7)}) {
    if (!s) return s.error();
  }
  if (auto ok = o.validate(); !ok) return ok.error();
  return o;
}

Status VerbsOptions::validate() const {
  auto bad = [](const std::string& why) { return make_error(ErrorCode::InvalidArgument, "ibverbs: " + why); };
  if (port < 1 || port > 255) return bad("port must be 1..255");
  if (gid_index < -1 || gid_index > 255) return bad("gid index must be -1 (automatic) or 0..255");
  if (qps_per_peer < 1 || qps_per_peer > 64) return bad("qps per peer must be 1..64");
  if (sq_depth < 2 || sq_depth > 32768) return bad("send queue depth must be 2..32768");
  if (signal_every < 1) return bad("signal every must be >= 1");
  if (service_level > 15) return bad("service level must be 0..15");
  if (ack_timeout < 1 || ack_timeout > 31) return bad("ack timeout exponent must be 1..31");
  if (retry_count > 7) return bad("retry count must be 0..7");
  return {};
}

}  // namespace conduit::verbs
