#!/usr/bin/env bash
# Fails, naming the files, when any C++ source differs from what clang-format would write.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cc' '*.hpp')
[ ${#files[@]} -eq 0 ] && exit 0
bad=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: not clang-formatted (run clang-format -i): ${bad[*]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
