# shellcheck shell=bash
# proc_running PID: the process exists and is not a zombie. One that exited but that init (its parent once the
# script that started it ended) has not reaped yet still answers kill -0, and holds nothing.
proc_running() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}
