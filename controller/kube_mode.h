// Kubernetes mode of conduit-controller: TransferJobs from the API server (KubeObjectStore), the same
// ControlLoop and Reconciler as local mode, optional Lease leader election, and a health/metrics endpoint.
#pragma once

#include <signal.h>

#include "config.h"

namespace conduit::controller {

// Runs until SIGTERM/SIGINT (blocked in the caller and passed in) arrives; returns the exit code.
int run_kube_mode(const ControllerConfig& config, const sigset_t& signals);

}  // namespace conduit::controller
