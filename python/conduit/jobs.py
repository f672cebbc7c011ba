"""TransferJobs (crds/README.md): build one, hand it to conduit-controller, wait for it.

Two stores, one interface (``apply``, ``get``, ``status``, ``wait``, ``delete``):

- :class:`LocalJobs`: the controller in local mode (``conduit-controller --local-dir DIR``): a job is the file
  ``DIR/<name>.yaml``, and the controller writes its status back into it.
- :class:`KubeJobs`: TransferJob objects in a Kubernetes API server (the official ``kubernetes`` client,
  ``pip install 'conduit[kube]'``).

    job = TransferJob("weights-7", source_node="node-a", source_region="weights",
                      targets=[JobTarget("node-b", "weights"), JobTarget("node-c", "weights")],
                      strategy="Chain")
    jobs = LocalJobs("/var/lib/conduit/jobs")
    jobs.wait(jobs.apply(job), timeout=120)      # TransferFailed with the Failed condition's reason
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConduitError, Conflict, InvalidArgument, NotFound, TransferFailed, Unauthorized, Unavailable

GROUP = "conduit.dev"
VERSION = "v1alpha1"
PLURAL = "transferjobs"
API_VERSION = f"{GROUP}/{VERSION}"
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass(frozen=True)
class JobTarget:
    """One target of a job: NODE, and a REGION, a FILE (saved under the agent's data directory) or both.
    CREATE_BYTES makes the job allocate the region first (in MEMORY: ``host`` or ``cuda:N``)."""

    node: str
    region: str | None = None
    file: str | None = None
    create_bytes: int | None = None
    memory: str = "host"

    def to_dict(self) -> dict[str, Any]:
        t: dict[str, Any] = {"node": self.node}
        if self.region is not None:
            t["region"] = self.region
        if self.file is not None:
            t["file"] = self.file
        if self.create_bytes is not None:
            t["create"] = {"bytes": self.create_bytes, "memory": self.memory}
        return t


@dataclass(frozen=True)
class TransferJob:
    """A TransferJob object (``to_dict()``): from SOURCE_REGION or SOURCE_FILE on SOURCE_NODE to TARGETS.
    Fields left None are left out (the CRD's defaults apply); EXTRA adds spec fields as the CRD spells them
    (``{"suspend": True}``)."""

    name: str
    source_node: str
    targets: list[JobTarget]
    source_region: str | None = None
    source_file: str | None = None
    strategy: str = "PointToPoint"
    verify: str | None = None
    transport: str | None = None
    allow_fallback: bool | None = None
    chunk_bytes: int | None = None
    window: int | None = None
    backoff_limit: int | None = None
    max_bytes_per_second: int | None = None
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    tensors: list[str] | None = None  # names or globs of the source's tensors: only those move
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        source: dict[str, Any] = {"node": self.source_node}
        if self.source_region is not None:
            source["region"] = self.source_region
        if self.source_file is not None:
            source["file"] = self.source_file
        spec: dict[str, Any] = {"source": source, "targets": [t.to_dict() for t in self.targets],
                                "strategy": self.strategy}
        if self.transport is not None or self.allow_fallback is not None:
            spec["transport"] = {k: v for k, v in (("type", self.transport), ("allowFallback", self.allow_fallback))
                                 if v is not None}
        for key, value in (("verify", self.verify), ("chunkBytes", self.chunk_bytes), ("window", self.window),
                           ("backoffLimit", self.backoff_limit), ("maxBytesPerSecond", self.max_bytes_per_second),
                           ("activeDeadlineSeconds", self.active_deadline_seconds),
                           ("ttlSecondsAfterFinished", self.ttl_seconds_after_finished),
                           ("tensors", self.tensors)):
            if value is not None:
                spec[key] = value
        spec.update(self.extra)
        return {"apiVersion": API_VERSION, "kind": "TransferJob", "metadata": {"name": self.name}, "spec": spec}


JobLike = TransferJob | Mapping[str, Any]


def _as_dict(job: JobLike) -> dict[str, Any]:
    d = job.to_dict() if isinstance(job, TransferJob) else dict(job)
    name = (d.get("metadata") or {}).get("name")
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.match(name):
        raise InvalidArgument(f"job name {name!r} is not a DNS-1123 subdomain", "InvalidArgument")
    d.setdefault("apiVersion", API_VERSION)
    d.setdefault("kind", "TransferJob")
    return d


def condition(job: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    """JOB's status condition of TYPE (Accepted, Running, Complete, Failed, Suspended), or None."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == type_:
            return c
    return None


def finished(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """JOB's status once it Succeeded; None while it is not finished; TransferFailed (the Failed condition's
    reason and message) once it Failed."""
    status = dict(job.get("status") or {})
    phase = status.get("phase")
    if phase == "Succeeded":
        return status
    if phase == "Failed":
        c = condition(job, "Failed") or {}
        name = (job.get("metadata") or {}).get("name", "?")
        raise TransferFailed(str(c.get("message") or f"TransferJob {name} Failed"),
                             str(c.get("reason") or "Failed"), status)
    return None


class LocalJobs:
    """TransferJobs as the YAML files of a local-mode controller's directory (``--local-dir DIRECTORY``)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def __repr__(self) -> str:
        return f"LocalJobs({os.fspath(self.directory)!r})"

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.yaml"

    def apply(self, job: JobLike) -> str:
        """Write the job as ``<name>.yaml`` (whole or not at all: the controller never reads half a file);
        its name. Conflict when a job of that name exists (a job's spec does not change)."""
        d = _as_dict(job)
        name = d["metadata"]["name"]
        tmp = self.directory / f".{name}.{os.getpid()}.tmp"  # not *.yaml: the controller skips it
        tmp.write_text(yaml.safe_dump(d, sort_keys=False))
        try:
            os.link(tmp, self.path(name))  # atomic, and fails rather than replace a job of that name
        except FileExistsError:
            raise Conflict(f"TransferJob {name} exists ({self.path(name)}): delete it first",
                           "AlreadyExists") from None
        finally:
            tmp.unlink()
        return str(name)

    def get(self, name: str) -> dict[str, Any]:
        """The job as stored (with the status the controller wrote). NotFound when there is no such file."""
        try:
            text = self.path(name).read_text()
        except FileNotFoundError:
            raise NotFound(f"no TransferJob {name} in {self.directory}", "NotFound") from None
        doc = yaml.safe_load(text)
        if not isinstance(doc, dict):
            raise ConduitError(f"{self.path(name)} does not hold a TransferJob object")
        return doc

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.get(name).get("status") or {})

    def wait(self, name: str, timeout: float | None = None, interval: float = 0.1) -> dict[str, Any]:
        """Poll the job's file until it Succeeded (its status) or Failed (TransferFailed with the Failed
        condition's reason and message); TimeoutError after TIMEOUT s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # The controller replaces the file by a rename: a read sees the old or the new one, whole.
            done = finished(self.get(name))
            if done is not None:
                return done
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"TransferJob {name} not finished after {timeout:g} s "
                                   f"(phase {self.status(name).get('phase') or 'none yet'})")
            time.sleep(interval)

    def delete(self, name: str) -> None:
        """Remove the job (the controller cancels it if it still runs). NotFound when there is none."""
        try:
            self.path(name).unlink()
        except FileNotFoundError:
            raise NotFound(f"no TransferJob {name} in {self.directory}", "NotFound") from None


def _kubernetes() -> Any:
    try:
        import kubernetes
    except ImportError as e:
        raise ImportError("KubeJobs needs the Kubernetes client: pip install 'conduit[kube]' (or kubernetes)") from e
    return kubernetes


def _api_error(e: Any, what: str) -> ConduitError:
    """The apiserver's refusal (an ApiException with a Status body) as a ConduitError."""
    reason, message = str(getattr(e, "reason", "") or ""), str(e)
    try:
        body = json.loads(e.body)
        reason, message = str(body.get("reason") or reason), str(body.get("message") or message)
    except (TypeError, ValueError, AttributeError):
        pass
    status = getattr(e, "status", None)
    cls: type[ConduitError] = {401: Unauthorized, 403: Unauthorized, 404: NotFound, 409: Conflict,
                               422: InvalidArgument, 503: Unavailable}.get(status or 0, ConduitError)
    return cls(f"{what}: {message}", reason, status)


def _api_client(k: Any, kubeconfig: str | os.PathLike[str] | None, context: str | None) -> Any:
    """An ApiClient from the kubeconfig (or the default ones, then in-cluster); InvalidArgument saying why not."""
    try:
        try:
            return k.config.new_client_from_config(
                config_file=os.fspath(kubeconfig) if kubeconfig is not None else None, context=context)
        except k.config.ConfigException:
            if kubeconfig is not None or context is not None:
                raise
            k.config.load_incluster_config()
            return k.client.ApiClient()
    # The client raises ConfigException, and for a broken file also OSError, YAML or type errors.
    except (k.config.ConfigException, OSError, ValueError, TypeError, AttributeError, yaml.YAMLError) as e:
        where = f"kubeconfig {os.fspath(kubeconfig)}" if kubeconfig is not None else "default kubeconfig, in-cluster"
        if context is not None:
            where += f", context {context}"
        raise InvalidArgument(f"KubeJobs: no Kubernetes client ({where}): {e}", "InvalidKubeconfig") from e


class KubeJobs:
    """TransferJobs in NAMESPACE of a Kubernetes API server (CustomObjectsApi, conduit.dev/v1alpha1).

    API_CLIENT: a ``kubernetes.client.ApiClient``; else one from KUBECONFIG (a path) and CONTEXT (default: its
    current one), else from $KUBECONFIG or ~/.kube/config, else the in-cluster service account. A
    configuration that gives no client (no such file, no such context, not in a cluster) is InvalidArgument
    with the client's reason."""

    def __init__(self, namespace: str = "default", api_client: Any = None,
                 kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None) -> None:
        k = _kubernetes()
        self._k = k
        if api_client is None:
            api_client = _api_client(k, kubeconfig, context)
        self.namespace = namespace
        self.api = k.client.CustomObjectsApi(api_client)

    def __repr__(self) -> str:
        return f"KubeJobs({self.namespace!r})"

    def apply(self, job: JobLike) -> str:
        """Create the job; its name. Conflict (AlreadyExists) when it exists, InvalidArgument (Invalid) when
        the apiserver's schema refuses it (with its message)."""
        d = _as_dict(job)
        name = str(d["metadata"]["name"])
        try:
            self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, d)
        except self._k.client.ApiException as e:
            raise _api_error(e, f"creating TransferJob {self.namespace}/{name}") from e
        return name

    def get(self, name: str) -> dict[str, Any]:
        try:
            return dict(self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name))
        except self._k.client.ApiException as e:
            raise _api_error(e, f"TransferJob {self.namespace}/{name}") from e

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.get(name).get("status") or {})

    def wait(self, name: str, timeout: float | None = None) -> dict[str, Any]:
        """Watch the job until it Succeeded (its status) or Failed (TransferFailed with the Failed condition's
        reason and message); TimeoutError after TIMEOUT s, NotFound when it is deleted meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            obj = self.get(name)
            done = finished(obj)
            if done is not None:
                return done
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"TransferJob {self.namespace}/{name} not finished after {timeout:g} s "
                                   f"(phase {(obj.get('status') or {}).get('phase') or 'none yet'})")
            # Watch from the version just read: no change between the get and the watch is missed.
            seconds = max(1, int(min(left if left is not None else 60, 60)))
            w = self._k.watch.Watch()
            try:
                for event in w.stream(self.api.list_namespaced_custom_object, GROUP, VERSION, self.namespace,
                                      PLURAL, field_selector=f"metadata.name={name}",
                                      resource_version=obj["metadata"]["resourceVersion"],
                                      timeout_seconds=seconds, _request_timeout=seconds + 10):
                    if event["type"] == "DELETED":
                        raise NotFound(f"TransferJob {self.namespace}/{name} was deleted while waited for",
                                       "NotFound")
                    done = finished(event["raw_object"])
                    if done is not None:
                        return done
            except self._k.client.ApiException as e:
                if e.status != 410:  # 410: the version is too old to watch from; get again
                    raise _api_error(e, f"watching TransferJob {self.namespace}/{name}") from e
            finally:
                w.stop()

    def delete(self, name: str) -> None:
        try:
            self.api.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        except self._k.client.ApiException as e:
            raise _api_error(e, f"deleting TransferJob {self.namespace}/{name}") from e
