// The data-plane settings an operator may set, each with one name, one range and one error wherever it is
// read: conduit-agent's options (flag, CONDUIT_* variable, config key) and conduit-bench's flags both parse
// them through this table. Parsed once, at start-up; the transports take the values (TransportConfig,
// cuda::set_driver_library) and read no environment themselves.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "conduit/common/result.h"
#include "conduit/cuda_device.h"
#include "conduit/transport.h"
#include "conduit/verbs_options.h"

namespace conduit {

struct DataPlaneSettings {
  ProgressMode progress = ProgressMode::Auto;  // libfabric rails (TransportConfig::progress)
  verbs::VerbsOptions ibverbs;                 // the native ibverbs backend (TransportConfig::ibverbs)
  std::string cuda_driver = cuda::kDefaultDriverLibrary;  // cuda::set_driver_library, once per process

  // `config` with these settings in it: what each transport is opened with.
  TransportConfig applied_to(TransportConfig config) const;
};

struct DataPlaneSetting {
  // The flag and config key ("ib-sq-depth"); the environment variable is environment_name() of it
  // (CONDUIT_IB_SQ_DEPTH), the spelling these settings had before they were options.
  const char* name;
  const char* value_name;  // "N", "LIST", ...
  const char* help;
  const char* default_text;
  // Sets the field from its text. InvalidArgument saying what is wanted ("want an integer in 2..32768, got
  // \"1\""); the caller names the setting and where the text came from.
  Status (*apply)(DataPlaneSettings& settings, const std::string& text);
};

// Every setting, in the order --help lists them.
std::span<const DataPlaneSetting> data_plane_settings();

// "ib-sq-depth" -> "CONDUIT_IB_SQ_DEPTH": CONDUIT_ and the name in upper snake case.
std::string environment_name(std::string_view setting);

}  // namespace conduit
