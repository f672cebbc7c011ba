"""HTTP to one conduit-agent: its URL, token and TLS, and the agent's refusals as exceptions. The modules of the
SDK talk to an agent through this; :class:`~conduit.Agent` is a :class:`Client` with the API's methods on top.

    c = Client("https://node-a:7070", token_file="/etc/conduit/token", ca_cert="/etc/conduit/ca.crt")
    node = c.request("GET", "/v1/node")

Defaults come from the environment, as listed in :mod:`conduit.agent`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests
import requests.adapters

from .errors import Unauthorized, Unavailable, error_from_response

DEFAULT_URL = "http://127.0.0.1:7070"


class _NamedTlsAdapter(requests.adapters.HTTPAdapter):
    """Checks the agent's certificate against a name instead of the address in the URL (and sends it as SNI)."""

    def __init__(self, server_name: str) -> None:
        self._server_name = server_name
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["assert_hostname"] = self._server_name
        kwargs["server_hostname"] = self._server_name
        super().init_poolmanager(*args, **kwargs)


class Client:
    """One agent's HTTP API: :meth:`request` raises a :class:`~conduit.errors.ConduitError` subclass with the
    agent's code and message when the agent refuses, and :class:`~conduit.errors.Unavailable` when it does not
    answer."""

    def __init__(self, url: str | None = None, token: str | None = None, token_file: str | os.PathLike[str] |
                 None = None, *, timeout: float = 30.0, ca_cert: str | os.PathLike[str] | None = None,
                 tls_server_name: str | None = None,
                 client_cert: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None) -> None:
        self.url = (url or os.environ.get("CONDUIT_AGENT_URL") or os.environ.get("CONDUIT_AGENT")
                    or DEFAULT_URL).rstrip("/")
        if token is None and token_file is None:
            token = os.environ.get("CONDUIT_TOKEN") or None
            token_file = os.environ.get("CONDUIT_TOKEN_FILE") or None
        self._token = token
        self._token_file = Path(token_file) if token_file is not None else None
        self.timeout = timeout
        self._session = requests.Session()
        ca = ca_cert if ca_cert is not None else os.environ.get("CONDUIT_CA_CERT")
        # An https agent's certificate is checked against this CA (the CLI's --ca-cert, the same file). Given
        # with each request: a session's own setting loses to REQUESTS_CA_BUNDLE in the environment.
        self._verify: bool | str = os.fspath(ca) if ca else True
        name = tls_server_name if tls_server_name is not None else os.environ.get("CONDUIT_TLS_SERVER_NAME")
        if name and self.url.startswith("https://"):
            self._session.mount("https://", _NamedTlsAdapter(name))
        if client_cert is None and os.environ.get("CONDUIT_CLIENT_CERT"):
            client_cert = (os.environ["CONDUIT_CLIENT_CERT"], os.environ.get("CONDUIT_CLIENT_KEY", ""))
        if client_cert is not None:
            cert, key = (os.fspath(client_cert[0]), os.fspath(client_cert[1]))
            if not cert or not key:
                raise ValueError("client_cert wants (certificate file, key file)")
            self._session.cert = (cert, key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def _bearer(self) -> str | None:
        if self._token is not None:
            return self._token
        if self._token_file is not None:
            # Read at every request: the agent's token file rotates (common/), and a read is cheap.
            try:
                return self._token_file.read_text().strip()
            except OSError as e:
                raise Unauthorized(f"cannot read the token file {self._token_file}: {e.strerror or e}",
                                   "Unauthorized", agent=self.url) from e
        return None

    def request(self, method: str, path: str, body: Any = None, *, params: Mapping[str, Any] | None = None,
                timeout: float | None = None) -> Any:
        """METHOD PATH on the agent; the JSON answer (None for 204). Errors as described on the class."""
        headers = {"Accept": "application/json"}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            r = self._session.request(method, f"{self.url}{path}", json=body, params=params, headers=headers,
                                      timeout=timeout if timeout is not None else self.timeout,
                                      verify=self._verify)
        except requests.RequestException as e:
            raise Unavailable(f"{method} {self.url}{path}: the agent did not answer: {e}", "Unavailable",
                              agent=self.url) from e
        if r.status_code >= 400:
            raise error_from_response(r, self.url)
        return r.json() if r.content else None
