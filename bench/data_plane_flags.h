// conduit-bench's data-plane flags (--progress, --cuda-driver, --ib-*): the table the agent's options come
// from (conduit/data_plane_settings.h), each flag else its CONDUIT_* variable, as the agent reads them, so
// a benchmark runs the transports exactly as an agent with the same settings would.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "conduit/common/result.h"
#include "conduit/data_plane_settings.h"

namespace conduit::bench {

void add_data_plane_flags(boost::program_options::options_description& desc);

struct DataPlaneFlags {
  DataPlaneSettings settings;
  std::vector<std::string> given;  // "--name", "value" of each flag given: what a child process is passed
};

// Each setting from its flag, else its environment variable, else its default. InvalidArgument naming the
// flag or variable and what it wants.
Result<DataPlaneFlags> read_data_plane_flags(const boost::program_options::variables_map& vm);

}  // namespace conduit::bench
