"""kube-sim: the workloads of a rendered chart run as podman containers of the real image.

What a Kubernetes control plane and kubelet would do, done here by hand (docs/operations.md,
"What the simulation does and does not prove"):

* StatefulSets are expanded into their ordinal pods (``<name>-<i>``, one named volume per
  volumeClaimTemplate and ordinal, kept across restarts); Deployments into ``<name>-<i>``.
* Each pod is one container started with the rendered ``command``/``args`` (Kubernetes'
  ``$(VAR)`` expansion applied), ``env`` and ``envFrom`` ConfigMaps, the downward API values
  the chart asks for (pod name, namespace, IP, node name, pod-index label), its security
  context (user, read-only root, dropped capabilities, no-new-privileges), emptyDirs as tmpfs
  or volumes, Secret volumes as read-only bind mounts of a copy of the files the test gives
  for that Secret (its ``items``, ``defaultMode`` and the pod's ``fsGroup`` as the kubelet
  applies them; a later change of the files is not propagated), and
  ``terminationGracePeriodSeconds`` as the stop timeout.
* Each zone is one podman network (its own bridge and subnet); a pod gets a fixed IP on the
  network of its node's zone and reaches pods of other zones through the host's forwarding
  between the bridges (so an nftables table dropping that forwarding cuts a zone off,
  ``zonecut.py``). Services and the StatefulSets' pod DNS names are ``--add-host`` entries (no
  cluster DNS), the same in every pod whatever its zone; ClusterIP Services resolve to their
  first pod; a pod keeps its MAC across restarts, as it keeps its IP. ``reserve`` plans StatefulSet ordinals beyond ``replicas`` (IP, node, names) so a
  scaled-up pod's name resolves in pods started before it (cluster DNS would serve it).
* Nodes are names only: pods are placed round-robin over the zones' nodes, whose zone labels an
  emulated Kubernetes API serves (so the services' zone discovery runs its real code).
* Deleting a pod is what the kubelet does: the rendered preStop ``exec`` command runs in the
  container, then SIGTERM with what is left of ``terminationGracePeriodSeconds``, then SIGKILL.
* Readiness is the rendered readinessProbe (``httpGet`` or ``tcpSocket``) polled from the host.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENGINE = "podman"
_REF = re.compile(r"\$\(([A-Z_][A-Z0-9_]*)\)")


def podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    proc = subprocess.run(
        [ENGINE, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"{ENGINE} {' '.join(args[:3])}...: {proc.stderr.strip()}")
    return proc.stdout


@dataclass
class SimPod:
    """One pod of a rendered workload, as the simulation runs it."""

    name: str
    workload: dict[str, Any]
    ordinal: int
    ip: str
    node: str
    zone: str
    container: str = ""  # podman container name
    volumes: list[str] = field(default_factory=list)
    running: bool = False  # started and not deleted by the simulation
    starts: int = 0  # how often it was started (a new container each time)
    past_logs: str = ""  # the logs of its containers deleted by ``Simulation.delete``

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.workload["spec"]["template"]["spec"])

    @property
    def main(self) -> dict[str, Any]:
        return dict(self.spec["containers"][0])

    def is_host(self, host: str) -> bool:
        """Whether ``host`` (a registered address's host) names this pod: its IP, or its DNS
        name under a headless Service (what gRPC servers register with internal TLS)."""
        return host == self.ip or host.split(".", 1)[0] == self.name

    def port(self, name_or_number: str | int) -> int:
        if isinstance(name_or_number, int):
            return name_or_number
        for p in self.main.get("ports", []):
            if p["name"] == name_or_number:
                return int(p["containerPort"])
        raise KeyError(f"{self.name}: no port {name_or_number}")


class Simulation:
    """Runs the Deployments and StatefulSets of ``docs`` (a rendered chart) with podman."""

    def __init__(
        self,
        docs: list[dict[str, Any]],
        prefix: str,
        subnets: Mapping[str, str],
        zones: Mapping[str, str],
        namespace: str,
        cluster_domain: str = "cluster.local",
        publish: Mapping[str, int] | None = None,
        reserve: Mapping[str, int] | None = None,
        secrets: Mapping[str, Path] | None = None,
    ) -> None:
        self.docs = docs
        self.prefix = prefix
        self.zones = dict(zones)  # node name -> zone
        self.subnets = {
            z: ipaddress.ip_network(subnets[z]) for z in sorted(set(self.zones.values()))
        }
        self.networks = {z: f"{prefix}-{z}" for z in self.subnets}  # zone -> podman network
        self.bridges: dict[str, str] = {}  # zone -> the host's bridge interface (create_networks)
        self.namespace = namespace
        self.domain = cluster_domain
        self.publish = dict(publish or {})  # workload name -> container port published on host
        self.reserve = dict(reserve or {})  # StatefulSet name -> ordinals planned in all
        self.secrets = dict(secrets or {})  # Secret name -> host folder of its keys' files
        self._secret_root = Path(tempfile.mkdtemp(prefix=f"{prefix}-secrets-"))
        self.pods: list[SimPod] = []
        self.spare: list[SimPod] = []  # planned ordinals beyond replicas (``reserve``)
        self._ips = {z: (str(ip) for ip in list(n.hosts())[9:]) for z, n in self.subnets.items()}
        self.config_maps = {
            d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"
        }
        self._expand()
        self.hosts = self._host_entries()

    def gateway_ip(self, zone: str) -> str:
        """The host's address on ``zone``'s bridge."""
        return str(next(self.subnets[zone].hosts()))

    # ---- planning ---------------------------------------------------------------------
    def _expand(self) -> None:
        nodes = list(self.zones)
        for doc in self.docs:
            if doc["kind"] not in ("StatefulSet", "Deployment"):
                continue
            name = doc["metadata"]["name"]
            replicas = int(doc["spec"].get("replicas", 1))  # an HPA's minimum is 1 here
            for i in range(max(replicas, self.reserve.get(name, 0))):
                node = nodes[i % len(nodes)]
                zone = self.zones[node]
                pod = SimPod(f"{name}-{i}", doc, i, next(self._ips[zone]), node, zone)
                (self.pods if i < replicas else self.spare).append(pod)

    def ordinal(self, workload: str, i: int) -> SimPod:
        """The pod of ordinal ``i`` of a StatefulSet, started or only planned."""
        for pod in self.pods + self.spare:
            if pod.workload["metadata"]["name"] == workload and pod.ordinal == i:
                return pod
        raise KeyError(f"{workload}-{i} is not planned (reserve more ordinals)")

    def _host_entries(self) -> dict[str, str]:
        hosts: dict[str, str] = {}
        for pod in self.pods + self.spare:
            hosts[pod.name] = pod.ip
            service = pod.workload["spec"].get("serviceName")
            if service:
                for name in (f"{pod.name}.{service}", f"{pod.name}.{service}.{self.namespace}"):
                    hosts[name] = pod.ip
                    hosts[f"{name}.svc.{self.domain}"] = pod.ip
        for svc in (d for d in self.docs if d["kind"] == "Service"):
            selector = svc["spec"].get("selector", {})
            chosen = [p for p in self.pods if selector.items() <= self.labels(p).items()]
            if chosen:
                name = svc["metadata"]["name"]
                for host in (name, f"{name}.{self.namespace}"):
                    hosts[host] = chosen[0].ip
                    hosts[f"{host}.svc.{self.domain}"] = chosen[0].ip
        return hosts

    @staticmethod
    def labels(pod: SimPod) -> dict[str, str]:
        labels = dict(pod.workload["spec"]["template"]["metadata"].get("labels", {}))
        if pod.workload["kind"] == "StatefulSet":
            labels["apps.kubernetes.io/pod-index"] = str(pod.ordinal)
            labels["statefulset.kubernetes.io/pod-name"] = pod.name
        return labels

    # ---- one pod ----------------------------------------------------------------------
    def _field(self, pod: SimPod, path: str) -> str:
        values = {
            "metadata.name": pod.name,
            "metadata.namespace": self.namespace,
            "status.podIP": pod.ip,
            "spec.nodeName": pod.node,
        }
        if path in values:
            return values[path]
        m = re.fullmatch(r"metadata\.labels\['(.+)'\]", path)
        if m:
            return self.labels(pod).get(m.group(1), "")
        raise ValueError(f"downward API field {path} is not simulated")

    def env(self, pod: SimPod) -> dict[str, str]:
        c = pod.main
        env: dict[str, str] = {}
        for ref in c.get("envFrom", []):
            env.update(self.config_maps[ref["configMapRef"]["name"]])
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = _expand(str(e["value"]), env)
            else:
                env[e["name"]] = self._field(pod, e["valueFrom"]["fieldRef"]["fieldPath"])
        return env

    def run_args(self, pod: SimPod) -> list[str]:
        c, spec = pod.main, pod.spec
        env = self.env(pod)
        psc = spec.get("securityContext", {})
        csc = c.get("securityContext", {})
        args = [
            "run", "-d", "--name", pod.container, "--hostname", pod.name,
            "--network", self.networks[pod.zone], "--ip", pod.ip, "--mac-address", _mac(pod.ip),
            "--stop-timeout", str(spec.get("terminationGracePeriodSeconds", 30)),
            "--label", f"kafka-py-sim={self.prefix}", "--pull", "never",
        ]  # fmt: skip
        for host, ip in sorted(self.hosts.items()):
            args += ["--add-host", f"{host}:{ip}"]
        if "runAsUser" in psc:
            args += ["--user", f"{psc['runAsUser']}:{psc.get('runAsGroup', psc['runAsUser'])}"]
        if csc.get("readOnlyRootFilesystem"):
            args.append("--read-only")
        if csc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        for cap in csc.get("capabilities", {}).get("drop", []):
            args += ["--cap-drop", cap]
        for key, value in sorted(env.items()):
            args += ["--env", f"{key}={value}"]
        args += self._volume_args(pod)
        name = pod.workload["metadata"]["name"]
        if name in self.publish:
            port = self.publish[name]
            args += ["-p", f"127.0.0.1:{port}:{port}"]
        if "command" in c:
            args += ["--entrypoint", c["command"][0]]
        args.append(c["image"])
        args += [_expand(a, env) for a in c.get("command", [])[1:]]
        args += [_expand(a, env) for a in c.get("args", [])]
        return args

    def _volume_args(self, pod: SimPod) -> list[str]:
        volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
        claims = {
            t["metadata"]["name"] for t in pod.workload["spec"].get("volumeClaimTemplates", [])
        }
        args: list[str] = []
        for mount in pod.main.get("volumeMounts", []):
            vname, path = mount["name"], mount["mountPath"]
            if vname in claims:  # one volume per claim template and ordinal, kept
                volume = f"{self.prefix}-{vname}-{pod.name}"
                args += ["-v", f"{volume}:{path}"]
                pod.volumes.append(volume)
            elif path == "/tmp":
                args += ["--tmpfs", "/tmp:rw,mode=1777"]
            elif "secret" in volumes.get(vname, {}):
                args += ["-v", f"{self._secret_files(pod, volumes[vname])}:{path}:ro"]
            elif "emptyDir" in volumes.get(vname, {}):
                volume = f"{self.prefix}-{vname}-{pod.name}-empty"
                args += ["-v", f"{volume}:{path}"]
                pod.volumes.append(volume)
            else:
                raise ValueError(f"{pod.name}: volume {vname} is not simulated")
        return args

    def _secret_files(self, pod: SimPod, volume: dict[str, Any]) -> Path:
        """The files of a Secret volume as the kubelet lays them out: its ``items`` (all keys
        without), ``defaultMode``, group-owned by the pod's ``fsGroup``."""
        secret = volume["secret"]
        if secret["secretName"] not in self.secrets:
            raise ValueError(f"{pod.name}: Secret {secret['secretName']} is not given")
        source = self.secrets[secret["secretName"]]
        items = secret.get("items") or [
            {"key": f.name, "path": f.name} for f in sorted(source.iterdir()) if f.is_file()
        ]
        target = self._secret_root / pod.name / volume["name"]
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        group = pod.spec.get("securityContext", {}).get("fsGroup")
        for item in items:
            dest = target / item["path"]
            shutil.copyfile(source / item["key"], dest)
            os.chmod(dest, int(secret.get("defaultMode", 0o644)))
            if group is not None:
                os.chown(dest, 0, int(group))
        return target

    # ---- lifecycle --------------------------------------------------------------------
    def create_networks(self) -> None:
        for zone, network in self.networks.items():
            podman("network", "create", "--subnet", str(self.subnets[zone]), network)
            out = podman("network", "inspect", network, "--format", "{{.NetworkInterface}}")
            self.bridges[zone] = out.strip()

    def start(self, pod: SimPod) -> None:
        pod.container = f"{self.prefix}-{pod.name}"
        podman(*self.run_args(pod))
        pod.running = True
        pod.starts += 1

    def delete(self, pod: SimPod) -> float:
        """Delete the pod as the kubelet does (its volumes stay, as a StatefulSet's PVCs do):
        the rendered preStop ``exec`` hook in the container, then SIGTERM and up to what is left
        of the grace period, then SIGKILL. Returns the seconds it took."""
        started = time.monotonic()
        grace = float(pod.spec.get("terminationGracePeriodSeconds", 30))
        hook = pod.main.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
        if hook:
            podman("exec", pod.container, *hook, timeout=grace + 10)
        left = max(1, round(grace - (time.monotonic() - started)))
        podman("stop", "-t", str(left), pod.container, timeout=left + 30)
        pod.past_logs += self.logs(pod)
        podman("rm", pod.container)
        pod.running = False
        return time.monotonic() - started

    def start_all(self, kinds: Iterable[str] | None = None) -> None:
        for pod in self.pods:
            if kinds is None or self.component(pod) in kinds:
                self.start(pod)

    @staticmethod
    def component(pod: SimPod) -> str:
        return str(pod.workload["metadata"]["labels"]["app.kubernetes.io/component"])

    def probe(self, pod: SimPod) -> bool:
        """One run of the pod's readinessProbe from the host."""
        rp = pod.main.get("readinessProbe", {})
        try:
            if "httpGet" in rp:
                port = pod.port(rp["httpGet"]["port"])
                url = f"http://{pod.ip}:{port}{rp['httpGet']['path']}"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    return 200 <= resp.status < 400
            if "tcpSocket" in rp:
                with socket.create_connection((pod.ip, pod.port(rp["tcpSocket"]["port"])), 2):
                    return True
        except (OSError, urllib.error.URLError):
            return False
        raise ValueError(f"{pod.name}: no readinessProbe to simulate")

    def wait_ready(self, pods: Iterable[SimPod], timeout: float) -> None:
        waiting = list(pods)
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            waiting = [p for p in waiting if not self.probe(p)]
            if waiting:
                time.sleep(0.5)
        if waiting:
            logs = {p.name: self.logs(p)[-1500:] for p in waiting}
            raise AssertionError(f"not ready after {timeout}s: {logs}")

    def logs(self, pod: SimPod) -> str:
        proc = subprocess.run(
            [ENGINE, "logs", pod.container], capture_output=True, text=True, check=False
        )
        return proc.stdout + proc.stderr

    def teardown(self) -> None:
        ids = podman("ps", "-aq", "--filter", f"label=kafka-py-sim={self.prefix}", check=False)
        if ids.split():
            podman("rm", "-f", "-t", "5", *ids.split(), check=False, timeout=300)
        volumes = sorted({v for p in self.pods + self.spare for v in p.volumes})
        if volumes:
            podman("volume", "rm", "-f", *volumes, check=False)
        for network in self.networks.values():
            podman("network", "rm", "-f", network, check=False)
        shutil.rmtree(self._secret_root, ignore_errors=True)


def _mac(ip: str) -> str:
    """A fixed, locally administered MAC per pod IP: a pod started again on its IP keeps its
    MAC, so the neighbour caches of the host and the other pods stay right (a new MAC on the
    same IP leaves them pointing at the old one until their entries go stale)."""
    return "02:42:" + ":".join(f"{int(octet):02x}" for octet in ip.split("."))


def _expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion in command, args and env values."""
    return _REF.sub(lambda m: env.get(m.group(1), m.group(0)), text)
