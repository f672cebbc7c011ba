#include "rest/peer_access.h"

namespace conduit::agent::rest {

std::optional<std::string> peer_refusal(const std::vector<std::shared_ptr<const Grant>>& grants,
                                        const Caller& caller, const std::string& region, Reach reach,
                                        std::uint64_t offset, std::uint64_t length,
                                        std::chrono::system_clock::time_point now) {
  if (caller.role != Role::Agent) return std::nullopt;
  const std::uint64_t end = offset + length;
  const bool overflows = end < offset;
  bool any_on_region = false;
  for (const auto& grant : grants) {
    const RegionPtr& granted = grant->region.get();
    if (!granted || granted->name() != region || !caller.acts_for(grant->peer)) continue;
    if (grant->expires_at() <= now)
      continue;  // the expiry timer has not dropped it yet: it is gone all the same
    any_on_region = true;
    if (reach == Reach::Write && !allows(grant->access, Access::RemoteWrite)) continue;
    if (!overflows && offset >= grant->offset && end <= grant->offset + grant->length) return std::nullopt;
  }
  const std::string range =
      "bytes [" + std::to_string(offset) + ", +" + std::to_string(length) + ") of region \"" + region + "\"";
  const char* verb = reach == Reach::Write ? "write" : "read";
  if (!any_on_region) return std::string("no grant on region \"") + region + "\" is made for it";
  return std::string("no grant made for it lets it ") + verb + " " + range +
         (reach == Reach::Write ? " (a read grant never lets its agent write)" : "");
}

}  // namespace conduit::agent::rest
