#include "data_plane_flags.h"

#include <cstdlib>

namespace conduit::bench {

namespace po = boost::program_options;

void add_data_plane_flags(po::options_description& desc) {
  for (const DataPlaneSetting& s : data_plane_settings()) {
    const std::string help =
        std::string(s.help) + " (env " + environment_name(s.name) + ", default " + s.default_text + ")";
    desc.add_options()(s.name, po::value<std::string>()->value_name(s.value_name), help.c_str());
  }
}

Result<DataPlaneFlags> read_data_plane_flags(const po::variables_map& vm) {
  DataPlaneFlags out;
  for (const DataPlaneSetting& s : data_plane_settings()) {
    const std::string var = environment_name(s.name);
    std::string value;
    std::string source;
    if (vm.count(s.name) > 0) {
      value = vm[s.name].as<std::string>();
      source = std::string("--") + s.name;
      out.given.insert(out.given.end(), {source, value});
    } else if (const char* env = std::getenv(var.c_str()); env != nullptr && *env != '\0') {
      value = env;
      source = var;
    } else {
      continue;
    }
    if (auto status = s.apply(out.settings, value); !status) {
      return make_error(ErrorCode::InvalidArgument, source + ": " + status.error().message);
    }
  }
  return out;
}

}  // namespace conduit::bench
