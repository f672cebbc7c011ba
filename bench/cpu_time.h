// CPU seconds this process has used (all threads, user + system): what the progress driver costs.
#pragma once

#include <sys/resource.h>

namespace conduit::bench {

inline double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace conduit::bench
