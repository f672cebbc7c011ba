// Which way a one-sided op moves bytes. One enum from the REST body (`"op": "write" | "read"`) down to the
// transport's Op, so the agent passes the caller's choice through without translating it.
#pragma once

#include <cstdint>

namespace conduit {

// Write: local -> remote. Read: remote -> local.
enum class OpKind : std::uint8_t { Write, Read };

}  // namespace conduit
