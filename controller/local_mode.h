// Local mode of conduit-controller: TransferJobs are the YAML files of a directory (LocalStore), the agents
// those --agents names, reconciled by the same ControlLoop and Reconciler as Kubernetes mode. With
// --once-job it exits when that job's outcome is written: 0 Succeeded, 1 Failed (or deleted once seen).
#pragma once

#include <signal.h>

#include "config.h"

namespace conduit::controller {

// Runs until SIGTERM/SIGINT (blocked in the caller and passed in) or the --once-job outcome; returns the
// exit code (130 for a signal before the --once-job outcome).
int run_local_mode(const ControllerConfig& config, const sigset_t& signals);

}  // namespace conduit::controller
