// The pod sandbox's first process (containerd's sandbox_image): holds the pod's namespaces open and reaps
// the orphans that land on it as PID 1 of a shared PID namespace. Built statically by scripts/kube-images.sh
// into localhost/conduit-pause, because the node has no registry to pull registry.k8s.io/pause from.
// Exits 0 on SIGTERM or SIGINT (the runtime's stop), so a sandbox stops at once instead of after a kill
// timeout.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
  sigset_t wanted;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGTERM);
  sigaddset(&wanted, SIGINT);
  sigaddset(&wanted, SIGCHLD);
  // Blocked, then taken one at a time with sigwait: no signal handler, so nothing runs concurrently with the
  // reaping loop.
  if (sigprocmask(SIG_BLOCK, &wanted, NULL) != 0) {
    fprintf(stderr, "pause: sigprocmask: %s\n", strerror(errno));
    return 1;
  }
  if (getpid() != 1) fprintf(stderr, "pause: not PID 1 (pid %d): orphans are not reaped here\n", getpid());
  for (;;) {
    int sig = 0;
    if (sigwait(&wanted, &sig) != 0) continue;
    if (sig == SIGCHLD) {
      while (waitpid(-1, NULL, WNOHANG) > 0) {
      }
      continue;
    }
    return 0;
  }
}
