"""Throwaway certificates for scenarios that serve HTTPS: a CA made per run and certificates it signs, with the
``openssl`` CLI only (no Python package).

    ca = CA(work / "tls")                                   # WORK/tls/ca.crt, ca.key (EC P-256)
    a = ca.issue("node-a", ips=["127.0.0.1"])               # a.cert, a.key: SAN DNS:node-a, IP:127.0.0.1
    old = ca.issue("node-old", ips=["127.0.0.1"], expired=True)  # valid from 2 days ago until yesterday
    agents.start("node-a", "--tls-cert", str(a.cert), "--tls-key", str(a.key))
    requests.get(url, verify=str(ca.cert)); ssl.create_default_context(cafile=ca.cert) == ca.context()

Every certificate is signed with ``openssl ca`` and explicit start and end dates (OpenSSL 3.0's ``x509 -req``
has no way to set a start date in the past), so an expired certificate is an ordinary one whose dates both lie
in the past, not one whose end precedes its start.
"""

from __future__ import annotations

import datetime
import os
import ssl
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# The CA's own validity, from now: longer than any run.
CA_DAYS = 2


@dataclass(frozen=True)
class Issued:
    """A certificate (PEM, the leaf only) and its private key (PEM, unencrypted, mode 0600)."""

    cert: Path
    key: Path


def openssl(*args: str | os.PathLike[str], cwd: Path | None = None) -> None:
    """Runs ``openssl ARGS``; RuntimeError with its output when it fails."""
    r = subprocess.run(["openssl", *map(os.fspath, args)], cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(map(str, args[:2]))} failed: {(r.stderr or r.stdout).strip()}")


def _stamp(t: datetime.datetime) -> str:
    """The YYYYMMDDHHMMSSZ form openssl ca's -startdate and -enddate take."""
    return t.astimezone(datetime.timezone.utc).strftime("%Y%m%d%H%M%SZ")


_CONFIG = """\
[ ca ]
default_ca = this_ca

[ this_ca ]
dir = {dir}
database = $dir/index.txt
new_certs_dir = $dir/issued
serial = $dir/serial
certificate = $dir/ca.crt
private_key = $dir/ca.key
default_md = sha256
policy = any_name
unique_subject = no
email_in_dn = no
copy_extensions = none

[ any_name ]
commonName = supplied
"""


class CA:
    """A certificate authority in DIRECTORY (created): ``ca.crt`` (trust this), ``ca.key``, and what
    ``openssl ca`` keeps (index.txt, serial, issued/)."""

    def __init__(self, directory: Path, name: str = "conduit-test-ca") -> None:
        self.dir = Path(directory)
        (self.dir / "issued").mkdir(parents=True, exist_ok=True)
        self.cert = self.dir / "ca.crt"
        self.key = self.dir / "ca.key"
        self.config = self.dir / "ca.cnf"
        (self.dir / "index.txt").write_text("")
        (self.dir / "serial").write_text("1000\n")
        self.config.write_text(_CONFIG.format(dir=self.dir))
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", self.key, "-out", self.cert, "-days", str(CA_DAYS), "-subj", f"/CN={name}",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        self.key.chmod(0o600)

    def issue(self, name: str, *, dns: Iterable[str] = (), ips: Iterable[str] = (), expired: bool = False,
              days: int = 1, client: bool = False) -> Issued:
        """A certificate for NAME (its CN and a DNS SAN) and the extra DNS names and IP addresses given, valid
        from an hour ago for DAYS days; with ``expired``, valid from 2 days ago until 1 day ago. Written to
        DIR/NAME.crt and DIR/NAME.key (NAME may not contain a slash). ``client``: usable as a client
        certificate too."""
        if "/" in name or not name:
            raise ValueError(f"not a certificate name: {name!r}")
        now = datetime.datetime.now(datetime.timezone.utc)
        if expired:
            start, end = now - datetime.timedelta(days=2), now - datetime.timedelta(days=1)
        else:
            start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=days)
        key, csr, cert = self.dir / f"{name}.key", self.dir / f"{name}.csr", self.dir / f"{name}.crt"
        ext = self.dir / f"{name}.ext"
        sans = [f"DNS:{n}" for n in (name, *dns)] + [f"IP:{a}" for a in ips]
        ext.write_text(f"subjectAltName={','.join(sans)}\n"
                       "basicConstraints=critical,CA:FALSE\n"
                       "keyUsage=critical,digitalSignature\n"
                       f"extendedKeyUsage=serverAuth{',clientAuth' if client else ''}\n")
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
        key.chmod(0o600)
        openssl("ca", "-batch", "-notext", "-config", self.config, "-in", csr, "-out", cert,
                "-startdate", _stamp(start), "-enddate", _stamp(end), "-extfile", ext)
        return Issued(cert, key)

    def context(self) -> ssl.SSLContext:
        """A client context that trusts this CA only (and checks host names and IP addresses)."""
        return ssl.create_default_context(cafile=os.fspath(self.cert))


def server_certificate(directory: Path, name: str = "agent", ips: Iterable[str] = ("127.0.0.1",),
                       dns: Iterable[str] = ("localhost",)) -> tuple[CA, Issued]:
    """A fresh CA in DIRECTORY and one server certificate it signed (by default for 127.0.0.1 and localhost)."""
    ca = CA(directory)
    return ca, ca.issue(name, dns=dns, ips=ips)
