// Files of the data directory, as a job plans around them: a file's size before its targets are planned. A
// POST with the path in the body: a path of 1,024 bytes does not fit the request line's limit once
// percent-encoded.
#include "conduit/api/wire.h"
#include "rest/routes.h"

namespace conduit::agent::rest {
namespace {

void stat_file(Call& c) {
  const auto stat = c.body(api::StatFile::from_json);
  if (!stat) return;
  if (c.out_of_scope(stat->ns) || c.file_out_of_reach(stat->path, stat->ns)) return;
  auto file = c.state.regions.open_file(stat->path, c.files_of(stat->ns));
  if (!file) return c.fail_file(file.error());
  c.reply(200, {{"path", stat->path}, {"bytes", file->bytes()}});
}

}  // namespace

void install_file_routes(Router& r) { r.post("/v1/files/stat", stat_file); }

}  // namespace conduit::agent::rest
