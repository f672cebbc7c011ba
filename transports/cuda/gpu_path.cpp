#include "conduit/transport.h"

namespace conduit {

std::string_view to_string(GpuPath path) {
  switch (path) {
    case GpuPath::None:
      return "none";
    case GpuPath::Dmabuf:
      return "dmabuf";
    case GpuPath::Peermem:
      return "peermem";
    case GpuPath::Staged:
      return "staged";
  }
  return "none";
}

}  // namespace conduit
