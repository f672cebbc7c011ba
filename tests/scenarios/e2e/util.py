"""Small helpers the e2e scenarios share: the "ok - ..." progress line, a free port, an output's last lines."""

import random
import socket


def ok(what):
    """One passed check, as the bash suites printed it (shown with pytest -s)."""
    print(f"ok - {what}", flush=True)


def last(text, n=1):
    """The last N lines of TEXT on one line, for one-line failure messages."""
    return " ".join(text.strip().splitlines()[-n:])


def free_port(low=20000, span=12000):
    """A port nothing listens on in [LOW, LOW + SPAN). The default range is below the kernel's ephemeral range
    (32768-60999), so no outgoing connection or port-0 listener takes it between now and its use; racy as any
    picked port: a lost race fails the start that uses it, visibly."""
    for _ in range(100):
        p = low + random.randrange(span)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
        return p
    raise RuntimeError("no free port")
