"""The Kubernetes deployment (``deploy/kubernetes``) and its images (``deploy/docker``), checked
without a cluster or a registry:

* every object against the Kubernetes OpenAPI schemas bundled with ``kubernetes-validate``
  (strict: an unknown field fails), for the oldest Kubernetes minor the manifests are for and
  the newest one the package has, and against what the API server checks beyond the schema
  (selectors, mounts, named ports, requests and limits, service accounts, namespaces);
* the ServiceMonitor, a custom resource no bundled schema covers, field by field against the
  prometheus-operator CRD's ``monitoring.coreos.com/v1`` fields (checked by hand here: no CRD
  schema is available offline), and against the Service and pods it must find;
* the DaemonSet's and the validator's args through the real argument parser
  (:func:`nodewarden.cli.build_parser`) and the agent's configuration, against the mounts, the
  port, the probes (served by the real HTTP server) and the measured footprint;
* the relabelling that gives the dashboards their ``job`` and ``node`` labels, through a real
  Prometheus (Debian's ``prometheus``; it has no Kubernetes discovery, so the targets carry the
  discovery's ``__meta_kubernetes_*`` labels as static labels);
* the Dockerfiles parsed (``dockerfile-parse``): every COPY source in the build context and
  not ignored, the entrypoints, the base images, the exposed port.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import socket
import subprocess
import threading
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser

from tests import envneeds

from dashboards.mixin import config as mixin_config
from nodewarden import __version__, cli, exitcodes
from nodewarden.agent import config as agent_config
from nodewarden.agent.schedule import REPORT_FILE
from nodewarden.agent.server import AgentHTTPServer

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
DOCKER = ROOT / "deploy" / "docker"
# kubectl apply -f deploy/kubernetes/ (not recursive) applies these, in name order.
APPLIED = sorted(KUBE.glob("*.yaml"))
EXAMPLES = sorted((KUBE / "examples").glob("*.yaml"))
OPERATOR = sorted((KUBE / "prometheus-operator").glob("*.yaml"))
SCRAPE_CONFIG = KUBE / "prometheus" / "scrape-config.yaml"
# The oldest Kubernetes minor the manifests are for (a Job's podFailurePolicy is GA in 1.31)
# and the newest one whose schemas kubernetes-validate bundles.
K8S_VERSIONS = ("1.31", kubernetes_validate.latest_version())
NODE = "gpu-node-001"
GPUS_PER_NODE = 8


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


OBJECTS: list[tuple[Path, dict[str, Any]]] = [(p, d) for p in APPLIED + EXAMPLES for d in documents(p)]


def obj(kind: str, name: str | None = None) -> dict[str, Any]:
    """The one object of ``kind`` (and ``name``: metadata.name or generateName) in the manifests."""
    found = [d for _, d in OBJECTS + [(p, d) for p in OPERATOR for d in documents(p)]
             if d["kind"] == kind and name in (None, d["metadata"].get("name"), d["metadata"].get("generateName"))]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name!r}"
    return found[0]


def pod_template(o: dict[str, Any]) -> dict[str, Any]:
    """The pod template of a DaemonSet, Job or CronJob."""
    spec = o["spec"]["jobTemplate"]["spec"] if o["kind"] == "CronJob" else o["spec"]
    return spec["template"]


def pod_spec(o: dict[str, Any]) -> dict[str, Any]:
    return pod_template(o)["spec"]


def container(o: dict[str, Any]) -> dict[str, Any]:
    (c,) = pod_spec(o)["containers"]
    return c


def mount_of(o: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volumeMount, volume) of the mount at ``path`` or the nearest one above it."""
    c, spec = container(o), pod_spec(o)
    mounts = [m for m in c.get("volumeMounts", [])
              if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts, f"{o['kind']}: nothing mounted at or above {path}"
    m = max(mounts, key=lambda m: len(m["mountPath"]))
    (v,) = [v for v in spec["volumes"] if v["name"] == m["name"]]
    return m, v


def expand(args: list[str], env: list[dict[str, Any]]) -> list[str]:
    """``args`` with ``$(VAR)`` replaced as the kubelet does, by the container's env; a
    ``fieldRef`` to ``spec.nodeName`` stands for :data:`NODE`. Raises KeyError for an
    undefined variable (the kubelet would leave it unexpanded)."""
    values = {}
    for e in env:
        if "value" in e:
            values[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            values[e["name"]] = NODE
    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: values[m.group(1)], a) for a in args]


# ---------------------------------------------------------------------------------------------
# Schemas

def test_every_manifest_is_checked() -> None:
    """Every YAML file under deploy/kubernetes is a manifest checked here, the ServiceMonitor or
    the Prometheus scrape job: a new file cannot escape the checks."""
    every = set(KUBE.rglob("*.yaml"))
    assert every == set(APPLIED) | set(EXAMPLES) | set(OPERATOR) | {SCRAPE_CONFIG}
    kinds = sorted(d["kind"] for _, d in OBJECTS)
    assert kinds == sorted(["Namespace", "ServiceAccount", "DaemonSet", "NetworkPolicy", "Service",
                            "CronJob", "Job", "ClusterRole", "ClusterRoleBinding", "ConfigMap"])


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_validates_against_the_kubernetes_schema(version: str) -> None:
    problems = []
    for path, d in OBJECTS:
        try:
            kubernetes_validate.validate(d, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            where = ".".join(str(p) for p in e.path)
            problems.append(f"{path.relative_to(ROOT)}: {d['kind']}: {where}: {e.message}")
    assert not problems, "\n".join(problems)


def test_the_strict_schema_refuses_an_unknown_field_and_a_wrong_type() -> None:
    ds = copy.deepcopy(obj("DaemonSet"))
    container(ds)["readinessProbes"] = container(ds).pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinessProbes"):
        kubernetes_validate.validate(ds, K8S_VERSIONS[0], strict=True)
    cj = copy.deepcopy(obj("CronJob"))
    cj["spec"]["concurrencyPolicy"] = ["Forbid"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(cj, K8S_VERSIONS[0], strict=True)


# ---------------------------------------------------------------------------------------------
# What the API server checks beyond the schema

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|Ki|Mi|Gi|Ti|M|G|T)?$")
_FACTORS = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
            "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def quantity(q: str | int | float) -> float:
    """A Kubernetes resource quantity (``10m``, ``64Mi``, ``"1"``, ``8``) as a number (cores,
    bytes). Raises ValueError for a form this parser does not know (exponents)."""
    m = _QUANTITY.match(str(q))
    if not m:
        raise ValueError(f"not a quantity this test reads: {q!r}")
    return float(m.group(1)) * _FACTORS[m.group(2)]


def api_problems(objects: list[dict[str, Any]]) -> list[str]:
    """What the API server or the kubelet would refuse in ``objects`` that their schemas
    allow: a workload selector that does not select its pods, a mount of an undefined volume,
    a probe or policy naming a port the container lacks, a limit below its request, an
    extended resource (nvidia.com/gpu) without an equal limit, a variable that args use but env
    does not define, privileged beside allowPrivilegeEscalation: false, a podFailurePolicy
    without restartPolicy Never or naming another container, a service account or namespace
    that does not exist, a privileged or host-path pod in a namespace whose Pod Security level
    refuses it. Each problem names the object."""
    out: list[str] = []
    namespaces = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Namespace"}
    accounts = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "ServiceAccount"}
    for o in objects:
        kind, meta = o["kind"], o["metadata"]
        what = f"{kind} {meta.get('name') or meta.get('generateName')}"
        if kind not in ("Namespace", "ClusterRole", "ClusterRoleBinding") and meta.get("namespace") not in namespaces:
            out.append(f"{what}: namespace {meta.get('namespace')!r} is not created here")
        if kind not in ("DaemonSet", "Job", "CronJob"):
            continue
        template, spec = pod_template(o), pod_spec(o)
        labels = template["metadata"].get("labels", {})
        selector = o["spec"].get("selector", {}).get("matchLabels", {})
        if kind == "DaemonSet" and (not selector or any(labels.get(k) != v for k, v in selector.items())):
            out.append(f"{what}: selector {selector} does not select the pod template's labels {labels}")
        ns = namespaces.get(meta.get("namespace"), {"metadata": {}})
        level = ns["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce", "privileged")
        sa = spec.get("serviceAccountName", "default")
        if sa != "default" and (meta.get("namespace"), sa) not in accounts:
            out.append(f"{what}: service account {sa!r} is not created here")
        volumes = [v["name"] for v in spec.get("volumes", [])]
        if len(set(volumes)) != len(volumes):
            out.append(f"{what}: volume names repeat: {volumes}")
        if level != "privileged" and any("hostPath" in v for v in spec.get("volumes", [])):
            out.append(f"{what}: hostPath volumes, refused by Pod Security level {level!r}")
        names = [c["name"] for c in spec["containers"]]
        for c in spec["containers"]:
            cwhat = f"{what}: container {c['name']}"
            ports = {p.get("name") for p in c.get("ports", [])} - {None}
            numbers = {p["containerPort"] for p in c.get("ports", [])}
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    out.append(f"{cwhat}: mounts undefined volume {m['name']!r}")
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                port = c.get(probe, {}).get("httpGet", {}).get("port")
                if isinstance(port, str) and port not in ports or isinstance(port, int) and port not in numbers:
                    out.append(f"{cwhat}: {probe} port {port!r} is not a container port")
            res = c.get("resources", {})
            requests, limits = res.get("requests", {}), res.get("limits", {})
            for r, q in requests.items():
                if "/" in r and not r.startswith(("kubernetes.io/", "requests.")):
                    if r not in limits or quantity(limits[r]) != quantity(q):
                        out.append(f"{cwhat}: extended resource {r} needs a limit equal to its request")
                elif r in limits and quantity(limits[r]) < quantity(q):
                    out.append(f"{cwhat}: {r} limit {limits[r]} below its request {q}")
            env = {e["name"] for e in c.get("env", [])}
            for a in c.get("args", []) + c.get("command", []):
                for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
                    if var not in env:
                        out.append(f"{cwhat}: args use $({var}), which env does not define")
            sc = c.get("securityContext", {})
            if sc.get("privileged") and sc.get("allowPrivilegeEscalation") is False:
                out.append(f"{cwhat}: privileged with allowPrivilegeEscalation: false is refused")
            if sc.get("privileged") and level != "privileged":
                out.append(f"{cwhat}: privileged, refused by Pod Security level {level!r}")
        job = o["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else o["spec"]
        for rule in job.get("podFailurePolicy", {}).get("rules", []):
            if spec.get("restartPolicy") != "Never":
                out.append(f"{what}: podFailurePolicy needs restartPolicy Never")
            cname = rule.get("onExitCodes", {}).get("containerName")
            if cname is not None and cname not in names:
                out.append(f"{what}: podFailurePolicy names container {cname!r}, not one of {names}")
    for o in objects:
        if o["kind"] == "NetworkPolicy":
            pods = [p for p in objects if p["kind"] == "DaemonSet" and all(
                pod_template(p)["metadata"]["labels"].get(k) == v
                for k, v in o["spec"]["podSelector"]["matchLabels"].items())]
            ports = {p.get("name") for d in pods for p in container(d).get("ports", [])}
            for rule in o["spec"].get("ingress", []):
                for p in rule.get("ports", []):
                    if isinstance(p["port"], str) and p["port"] not in ports:
                        out.append(f"NetworkPolicy {o['metadata']['name']}: port {p['port']!r} "
                                   "names no port of its pods")
    return out


def test_the_api_server_would_accept_every_object() -> None:
    assert api_problems([d for _, d in OBJECTS]) == []


@pytest.mark.parametrize("break_it, expected", [
    (lambda objs: container(objs["DaemonSet"])["volumeMounts"].append({"name": "nope", "mountPath": "/x"}),
     "mounts undefined volume 'nope'"),
    (lambda objs: container(objs["CronJob"])["resources"]["limits"].pop("nvidia.com/gpu"),
     "extended resource nvidia.com/gpu needs a limit"),
    (lambda objs: container(objs["DaemonSet"])["env"].pop(0), "args use $(NODE_NAME)"),
    (lambda objs: container(objs["DaemonSet"])["securityContext"].update(allowPrivilegeEscalation=False),
     "privileged with allowPrivilegeEscalation: false"),
    (lambda objs: objs["DaemonSet"]["spec"]["selector"]["matchLabels"].update(x="y"), "does not select"),
    (lambda objs: container(objs["DaemonSet"])["livenessProbe"]["httpGet"].update(port="http"),
     "livenessProbe port 'http'"),
    (lambda objs: objs["Namespace"]["metadata"]["labels"].update({"pod-security.kubernetes.io/enforce": "baseline"}),
     "refused by Pod Security level 'baseline'"),
    (lambda objs: objs["ServiceAccount"]["metadata"].update(name="other"), "service account 'nodewarden'"),
])
def test_api_problems_finds_a_planted_mistake(break_it, expected: str) -> None:
    objs = {d["kind"]: copy.deepcopy(d) for _, d in OBJECTS}
    break_it(objs)
    problems = api_problems(list(objs.values()))
    assert any(expected in p for p in problems), problems


# ---------------------------------------------------------------------------------------------
# The agent's DaemonSet

def agent_settings(tmp_path: Path) -> agent_config.AgentConfig:
    """The agent's configuration from the DaemonSet's args, as `nodewarden agent` resolves it
    (no config file)."""
    c = container(obj("DaemonSet"))
    ns = cli.build_parser().parse_args(["agent", *expand(c["args"], c["env"])])
    return agent_config.resolve(ns, default_path=str(tmp_path / "absent.toml"))


def test_the_daemonset_args_are_the_agents_flags_and_match_its_mounts(tmp_path: Path) -> None:
    ds = obj("DaemonSet")
    c, spec = container(ds), pod_spec(ds)
    cfg = agent_settings(tmp_path)
    host, port = agent_config.parse_listen(cfg.listen)
    assert (host, port) == ("0.0.0.0", 9764)
    assert [p["containerPort"] for p in c["ports"] if p["name"] == "metrics"] == [port]
    assert cfg.hostname == NODE  # the node's name, from the downward API
    assert not cfg.validator.enabled  # the CronJob validates
    assert cfg.enabled_collectors == list(agent_config.COLLECTORS)
    for path, host_path, writable in ((cfg.sysfs, "/sys", False), (cfg.procfs, "/proc", False),
                                      (cfg.state_dir, "/var/lib/nodewarden", True),
                                      (cfg.kmsg, "/dev/kmsg", False)):
        m, v = mount_of(ds, path)
        assert m["mountPath"] == path, f"{path} is inside the mount {m['mountPath']}, not the mount"
        assert v["hostPath"]["path"] == host_path, path
        assert m.get("readOnly", False) is not writable, f"{path}: readOnly should be {not writable}"
    assert mount_of(ds, cfg.kmsg)[1]["hostPath"]["type"] == "CharDevice"
    assert not spec.get("hostNetwork", False) and not spec.get("hostPID", False)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # NVML of every GPU through the NVIDIA runtime, no GPU taken from the device plugin
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert spec["runtimeClassName"] == "nvidia"
    assert not any("nvidia.com/gpu" in r for r in c["resources"].values())
    # one agent per state directory (agent.lock): an update never runs two on a node
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 0


def test_a_wrong_flag_in_the_daemonset_would_be_refused(capsys) -> None:
    """The parser the test relies on refuses what the agent does not know."""
    c = container(obj("DaemonSet"))
    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args(["agent", *expand(c["args"], c["env"]), "--sys-fs=/host/sys"])
    assert e.value.code == exitcodes.USAGE
    assert "--sys-fs" in capsys.readouterr().err


def _port(ds: dict[str, Any], port: str | int) -> int:
    if isinstance(port, int):
        return port
    (n,) = [p["containerPort"] for p in container(ds)["ports"] if p["name"] == port]
    return n


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture
def agent_http() -> Iterator[tuple[AgentHTTPServer, dict[str, bool]]]:
    """The agent's real HTTP server on a free loopback port; ``health["ok"]`` is what its
    /healthz reports."""
    health = {"ok": True}
    srv = AgentHTTPServer(("127.0.0.1", 0), lambda: b"nodewarden_build_info 1\n", lambda: dict(health))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv, health
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)


def test_the_probes_and_the_scrape_annotations_reach_the_agents_endpoints(agent_http) -> None:
    srv, health = agent_http
    ds = obj("DaemonSet")
    c = container(ds)
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    probes = [c[p]["httpGet"] for p in ("startupProbe", "readinessProbe", "livenessProbe")]
    assert {_port(ds, p["port"]) for p in probes} == {9764}
    for p in probes:
        assert _get(base + p["path"])[0] == 200
    health["ok"] = False  # kernel log unreadable or state directory not writable
    for p in probes:
        status, body = _get(base + p["path"])
        assert status == 503 and json.loads(body)["ok"] is False
    ann = pod_template(ds)["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and int(ann["prometheus.io/port"]) == 9764
    status, body = _get(base + ann["prometheus.io/path"])
    assert status == 200 and b"nodewarden_build_info" in body


def test_the_agents_resources_fit_its_measured_footprint() -> None:
    """Requests and limits against bench/results/agent_overhead.json (README "What the agent
    costs", every run recorded there): the memory request holds the highest RSS measured, storm
    included, the limit twice it; the CPU request is at least four times the highest average use
    (the run on a machine whose CPUs ran cold after idle), the CPU limit holds a storm."""
    runs = [json.loads(p.read_text()) for p in sorted((ROOT / "bench" / "results").glob("agent_overhead*.json"))]
    assert len(runs) >= 2 and all("cpu" in r for r in runs)
    rss_mb = max([r["rss_mb"]["agent"]["VmHWM"] for r in runs]
                 + [r["storm"]["agent_rss_mb"]["VmHWM_after"] for r in runs if "storm" in r])
    avg_cores = max(r["cpu"]["agent"]["cpu_seconds_per_hour"] for r in runs) / 3600  # the slowest day's
    storm_cores = max(r["storm"]["agent_cpu_seconds_storm"] / max(r["storm"]["seconds_asked"], r["storm"]["writer_seconds"])
                      for r in runs if "storm" in r)
    res = container(obj("DaemonSet"))["resources"]
    assert quantity(res["requests"]["memory"]) >= rss_mb * 1e6
    assert quantity(res["limits"]["memory"]) >= 2 * rss_mb * 1e6
    assert quantity(res["requests"]["cpu"]) >= 4 * avg_cores
    assert quantity(res["limits"]["cpu"]) >= storm_cores
    # and not the size of a node's workload: a monitoring agent beside the jobs
    assert quantity(res["requests"]["memory"]) <= 256 << 20 and quantity(res["requests"]["cpu"]) <= 0.1


# ---------------------------------------------------------------------------------------------
# The validator's CronJob and Job

VALIDATORS = ["CronJob", "Job"]


@pytest.mark.parametrize("kind", VALIDATORS)
def test_the_validator_args_parse_and_its_report_reaches_the_agent(kind: str) -> None:
    o, ds = obj(kind), obj("DaemonSet")
    c = container(o)
    ns = cli.build_parser().parse_args(["validate", *expand(c["args"], c.get("env", []))])
    assert ns.no_progress
    # validate.json in the agent's state directory on the same node: the agent exports it
    report = Path(ns.json)
    m, v = mount_of(o, str(report))
    _, agent_state = mount_of(ds, "/var/lib/nodewarden")
    assert report.name == REPORT_FILE
    assert m["mountPath"] == str(report.parent)
    assert v["hostPath"]["path"] == agent_state["hostPath"]["path"] and not m.get("readOnly", False)
    m, v = mount_of(o, ns.sysfs)
    assert m["mountPath"] == ns.sysfs and v["hostPath"]["path"] == "/sys" and m["readOnly"] is True
    m, _ = mount_of(o, ns.storage_path)
    assert not m.get("readOnly", False)
    # temporary files and caches on a writable mount: the root file system is read-only
    env = {e["name"]: e["value"] for e in c["env"]}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    for var in ("HOME", "TMPDIR"):
        assert not mount_of(o, env[var])[0].get("readOnly", False)


@pytest.mark.parametrize("kind", VALIDATORS)
def test_the_validator_takes_the_whole_node(kind: str) -> None:
    o = obj(kind)
    c, spec = container(o), pod_spec(o)
    res = c["resources"]
    assert quantity(res["requests"]["nvidia.com/gpu"]) == quantity(res["limits"]["nvidia.com/gpu"]) == GPUS_PER_NODE
    assert "cpu" not in res["limits"] and "memory" not in res["limits"]  # the bandwidth checks use every core
    assert spec["restartPolicy"] == "Never"
    assert not c["securityContext"].get("privileged", False)
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    mount_of(o, "/dev/shm")  # NCCL's transport between the GPUs' processes


def test_the_cronjob_never_overlaps_and_never_retries_a_verdict() -> None:
    cj = obj("CronJob")
    assert cj["spec"]["concurrencyPolicy"] == "Forbid"
    rules = cj["spec"]["jobTemplate"]["spec"]["podFailurePolicy"]["rules"]
    fail = [r for r in rules if r["action"] == "FailJob"]
    assert sorted(v for r in fail for v in r["onExitCodes"]["values"]) == [exitcodes.UNHEALTHY, exitcodes.USAGE]
    assert all(r["onExitCodes"]["operator"] == "In" for r in fail)
    assert exitcodes.INCOMPLETE not in [v for r in rules for v in r.get("onExitCodes", {}).get("values", [])]


def test_the_readmes_per_node_cronjobs_are_valid_and_pinned(tmp_path: Path) -> None:
    """The README's loop (one CronJob per GPU node), run by sh with a kubectl that lists three
    nodes and records what it is asked to apply: three valid CronJobs, each pinned to its node
    and at its own hour, otherwise the CronJob of the manifest."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (loop,) = [b for b in re.findall(r"```sh\n(.*?)```", readme, re.S) if "nodewarden-validate-$node" in b]
    nodes = ["gpu-a", "gpu-b", "gpu-c"]
    kubectl = tmp_path / "bin" / "kubectl"
    kubectl.parent.mkdir()
    kubectl.write_text(f'#!/bin/sh\n[ "$1" = get ] && {{ echo "{" ".join(nodes)}"; exit 0; }}\n'
                       f'{{ cat; echo ---; }} >> "{tmp_path}/applied.yaml"\n')
    kubectl.chmod(0o755)
    env = {**os.environ, "PATH": f"{kubectl.parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["sh", "-eu", "-c", loop], cwd=ROOT, env=env, check=True, timeout=30)
    applied = documents(tmp_path / "applied.yaml")
    assert [d["metadata"]["name"] for d in applied] == [f"nodewarden-validate-{n}" for n in nodes]
    original = obj("CronJob")
    for i, (n, d) in enumerate(zip(nodes, applied, strict=True)):
        kubernetes_validate.validate(d, K8S_VERSIONS[0], strict=True)
        assert len(d["metadata"]["name"]) <= 52
        assert pod_spec(d)["nodeSelector"] == {**pod_spec(original)["nodeSelector"], "kubernetes.io/hostname": n}
        assert d["spec"]["schedule"] == f"0 {i} * * 0"
        assert container(d) == container(original)
        assert {k: v for k, v in d["spec"].items() if k not in ("schedule", "jobTemplate")} == \
            {k: v for k, v in original["spec"].items() if k not in ("schedule", "jobTemplate")}


def test_the_job_example_runs_what_the_cronjob_runs() -> None:
    cj, job = container(obj("CronJob")), container(obj("Job"))
    for key in ("image", "args", "env", "resources", "securityContext", "volumeMounts"):
        assert cj[key] == job[key], key
    assert pod_spec(obj("CronJob"))["volumes"] == pod_spec(obj("Job"))["volumes"]
    assert pod_spec(obj("Job"))["nodeSelector"] == {"kubernetes.io/hostname": NODE}


# ---------------------------------------------------------------------------------------------
# Service, ServiceMonitor and the labels the dashboards select

# The fields of monitoring.coreos.com/v1 ServiceMonitor, as prometheus-operator v0.93.0's CRD
# (example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml) lists them:
# spec, an endpoint, a relabeling; the CRD requires spec.selector and spec.endpoints. A field
# outside these is a typo: kubectl's strict field validation (its default) refuses it, and
# without that the API server drops it unseen (a structural schema prunes unknown fields).
SM_REQUIRED = {"selector", "endpoints"}
SM_SPEC = {"selector", "namespaceSelector", "endpoints", "jobLabel", "targetLabels", "podTargetLabels",
           "sampleLimit", "targetLimit", "labelLimit", "labelNameLengthLimit", "labelValueLengthLimit",
           "attachMetadata", "scrapeProtocols", "keepDroppedTargets", "scrapeClass", "fallbackScrapeProtocol",
           "bodySizeLimit", "selectorMechanism", "nativeHistogramBucketLimit", "nativeHistogramMinBucketFactor",
           "scrapeClassicHistograms", "scrapeNativeHistograms", "convertClassicHistogramsToNHCB",
           "serviceDiscoveryRole"}
SM_ENDPOINT = {"port", "targetPort", "path", "scheme", "params", "interval", "scrapeTimeout", "tlsConfig",
               "bearerTokenFile", "bearerTokenSecret", "authorization", "honorLabels", "honorTimestamps",
               "trackTimestampsStaleness", "basicAuth", "oauth2", "metricRelabelings", "relabelings",
               "proxyUrl", "noProxy", "proxyFromEnvironment", "proxyConnectHeader", "followRedirects",
               "enableHttp2", "filterRunning"}
SM_RELABEL = {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"}
SM_ACTIONS = {"replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep", "lowercase",
              "uppercase", "keepequal", "dropequal"}
# The CRD's pattern of interval and scrapeTimeout
SM_DURATION = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$")


def _seconds(d: str) -> float:
    units = {"y": 31536000, "w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(int(n) * units[u] for n, u in re.findall(r"([0-9]+)(ms|y|w|d|h|m|s)", d))


def service_monitor_problems(sm: dict[str, Any], service: dict[str, Any]) -> list[str]:
    """What is wrong with ``sm`` (a ServiceMonitor) for ``service``: fields the CRD lacks,
    the required ones missing, durations not in its pattern, a timeout past the interval,
    relabel actions it does not know, and a selector, namespace or port that misses the
    Service."""
    out = []
    if sm.get("apiVersion") != "monitoring.coreos.com/v1" or sm.get("kind") != "ServiceMonitor":
        out.append(f"apiVersion/kind: {sm.get('apiVersion')}/{sm.get('kind')}")
    if not sm.get("metadata", {}).get("name"):
        out.append("metadata.name missing")
    spec = sm.get("spec", {})
    out += [f"spec.{k}: not a ServiceMonitor field" for k in set(spec) - SM_SPEC]
    out += [f"spec.{k} is required" for k in sorted(SM_REQUIRED - set(spec))]
    labels = service["metadata"].get("labels", {})
    if any(labels.get(k) != v for k, v in spec.get("selector", {}).get("matchLabels", {}).items()):
        out.append(f"spec.selector does not select the Service's labels {labels}")
    names = spec.get("namespaceSelector", {}).get("matchNames", [sm["metadata"].get("namespace")])
    if service["metadata"]["namespace"] not in names:
        out.append(f"spec.namespaceSelector misses namespace {service['metadata']['namespace']}")
    ports = {p.get("name") for p in service["spec"]["ports"]}
    for i, ep in enumerate(spec.get("endpoints", [])):
        out += [f"endpoints[{i}].{k}: not an endpoint field" for k in set(ep) - SM_ENDPOINT]
        if ep.get("port") not in ports:
            out.append(f"endpoints[{i}].port {ep.get('port')!r} is not a port name of the Service ({ports})")
        for k in ("interval", "scrapeTimeout"):
            if k in ep and not SM_DURATION.match(ep[k]):
                out.append(f"endpoints[{i}].{k} {ep[k]!r} is not a duration")
        if "interval" in ep and "scrapeTimeout" in ep and _seconds(ep["scrapeTimeout"]) > _seconds(ep["interval"]):
            out.append(f"endpoints[{i}].scrapeTimeout is longer than its interval")
        if ep.get("scheme", "http") not in ("http", "https", "HTTP", "HTTPS"):
            out.append(f"endpoints[{i}].scheme {ep['scheme']!r}")
        for j, r in enumerate(ep.get("relabelings", []) + ep.get("metricRelabelings", [])):
            out += [f"endpoints[{i}] relabeling {j}: {k}: not a relabel field" for k in set(r) - SM_RELABEL]
            if r.get("action", "replace").lower() not in SM_ACTIONS:
                out.append(f"endpoints[{i}] relabeling {j}: action {r['action']!r}")
            if r.get("action", "replace").lower() == "replace" and "targetLabel" not in r:
                out.append(f"endpoints[{i}] relabeling {j}: replace needs targetLabel")
    return out


def test_the_service_monitor_fits_the_crd_and_finds_the_agents() -> None:
    sm, svc, ds = obj("ServiceMonitor"), obj("Service"), obj("DaemonSet")
    assert service_monitor_problems(sm, svc) == []
    assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"] == ds["metadata"]["namespace"]
    # the headless Service selects the agent pods, by the port the probes and annotations use
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    pod_labels = pod_template(ds)["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    (port,) = svc["spec"]["ports"]
    assert _port(ds, port["targetPort"]) == port["port"] == 9764


@pytest.mark.parametrize("change, expected", [
    ({"interval": "15 s"}, "is not a duration"),
    ({"scrapeTimeout": "30s"}, "longer than its interval"),
    ({"port": "http"}, "is not a port name"),
    ({"relabeling": [{"sourceLabel": ["x"], "targetLabel": "y"}]}, "relabeling: not an endpoint field"),
])
def test_service_monitor_problems_finds_a_planted_mistake(change: dict[str, Any], expected: str) -> None:
    sm = copy.deepcopy(obj("ServiceMonitor"))
    sm["spec"]["endpoints"][0].update(change)
    assert any(expected in p for p in service_monitor_problems(sm, obj("Service"))), expected


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _snake(r: dict[str, Any]) -> dict[str, Any]:
    """A ServiceMonitor relabeling as a Prometheus relabel_config (what the operator writes)."""
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    out = {keys.get(k, k): v for k, v in r.items()}
    if "action" in out:
        out["action"] = out["action"].lower()
    return out


@pytest.fixture
def prometheus_binary() -> str:
    return envneeds.command("prometheus", "checks the manifests' scrape config (Debian: apt-get install prometheus)")


def test_prometheus_gives_the_agents_the_labels_the_dashboards_select(prometheus_binary: str, tmp_path: Path) -> None:
    """The plain scrape job (prometheus/scrape-config.yaml) and the ServiceMonitor's
    relabelings, run by a real Prometheus over targets labelled as Kubernetes pod and
    endpoints discovery labels them: the agent's pod gets job and node as the dashboards
    select them and its annotated path; a pod without the annotation or another port is
    dropped."""
    ds = obj("DaemonSet")
    ann = pod_template(ds)["metadata"]["annotations"]
    job_value = re.fullmatch(r'job="([^"]+)"', mixin_config.DEFAULT.job_selector).group(1)
    node_label = mixin_config.DEFAULT.node_label

    def pod(node: str, port_name: str, annotations: dict[str, str]) -> dict[str, Any]:
        labels = {"__meta_kubernetes_namespace": ds["metadata"]["namespace"],
                  "__meta_kubernetes_pod_name": f"nodewarden-agent-{node}",
                  "__meta_kubernetes_pod_node_name": node,
                  "__meta_kubernetes_pod_container_port_name": port_name}
        for k, v in annotations.items():
            labels["__meta_kubernetes_pod_annotation_" + re.sub(r"[^a-zA-Z0-9_]", "_", k)] = v
        return {"targets": [f"127.0.0.1:{_free_port()}"], "labels": labels}

    (job,) = yaml.safe_load(SCRAPE_CONFIG.read_text())["scrape_configs"]
    assert job["job_name"] == job_value
    plain = {k: v for k, v in job.items() if k != "kubernetes_sd_configs"}
    plain["static_configs"] = [pod("node-a", "metrics", ann), pod("node-b", "metrics", {}),
                               pod("node-c", "other", ann)]
    (ep,) = obj("ServiceMonitor")["spec"]["endpoints"]
    operator = {"job_name": "serviceMonitor/nodewarden/nodewarden/0", "metrics_path": ep["path"],
                "scrape_interval": ep["interval"], "scrape_timeout": ep["scrapeTimeout"],
                "static_configs": [pod("node-d", "metrics", {})],
                "relabel_configs": [_snake(r) for r in ep["relabelings"]]}
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump({"global": {"scrape_interval": "15s"}, "scrape_configs": [plain, operator]}))
    port = _free_port()
    log = tmp_path / "prometheus.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([prometheus_binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"], cwd=tmp_path, stdout=f,
                                stderr=subprocess.STDOUT)
    try:
        deadline, targets = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                body = json.loads(_get(f"http://127.0.0.1:{port}/api/v1/targets")[1])
                targets = body["data"]
                if len(targets["activeTargets"]) + len(targets["droppedTargets"]) == 4:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        assert targets is not None, log.read_text()[-3000:]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    active = {t["labels"][node_label]: t for t in targets["activeTargets"]}
    assert sorted(active) == ["node-a", "node-d"], targets
    for t in active.values():
        assert t["labels"]["job"] == job_value
        assert t["scrapeUrl"].endswith(ann["prometheus.io/path"])
    dropped = sorted(t["discoveredLabels"]["__meta_kubernetes_pod_node_name"] for t in targets["droppedTargets"])
    assert dropped == ["node-b", "node-c"]


# ---------------------------------------------------------------------------------------------
# Images

def dockerfile(name: str) -> DockerfileParser:
    return DockerfileParser(path=str(DOCKER / name))


def final_stage(df: DockerfileParser) -> list[dict[str, Any]]:
    """The instructions of the last stage (after the last FROM)."""
    s = df.structure
    last = max(i for i, ins in enumerate(s) if ins["instruction"] == "FROM")
    return s[last:]


def copy_sources(df: DockerfileParser) -> list[str]:
    """The build-context sources of every COPY/ADD (not those copied from another stage)."""
    out = []
    for ins in df.structure:
        if ins["instruction"] in ("COPY", "ADD"):
            words = shlex.split(ins["value"])
            if any(w.startswith("--from=") for w in words):
                continue
            paths = [w for w in words if not w.startswith("--")]
            out += paths[:-1]
    return out


def reincluded(ignore: Path) -> set[str]:
    """The paths a deny-all ``.dockerignore`` (``*`` then ``!path`` lines) lets into the context."""
    lines = [ln.strip() for ln in ignore.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*", f"{ignore.name}: expected to start with '*' (deny all, then allow)"
    return {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}


@pytest.mark.parametrize("name, command, image", [
    ("agent.Dockerfile", ["nodewarden", "agent"], "nodewarden-agent"),
    ("validate.Dockerfile", ["nodewarden", "validate"], "nodewarden-validate"),
])
def test_the_dockerfiles_build_from_the_repository(name: str, command: list[str], image: str) -> None:
    df = dockerfile(name)
    allowed = reincluded(DOCKER / f"{name}.dockerignore")
    sources = copy_sources(df)
    assert sources
    for src in sources:
        assert (ROOT / src).exists(), f"{name}: COPY {src}: not in the repository"
        assert src.rstrip("/") in allowed, f"{name}: COPY {src}: left out of the context by {name}.dockerignore"
    # the package builds from what is copied: pyproject's readme and packages are there
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["readme"] in sources and "nodewarden" in sources
    (entry,) = [i for i in final_stage(df) if i["instruction"] == "ENTRYPOINT"]
    assert json.loads(entry["value"]) == command
    assert command[0] in project["scripts"]
    # the manifests run this image, at the package's version, as the header says to build it
    users = [container(o) for o in (obj("DaemonSet"), obj("CronJob"), obj("Job"))]
    tags = {c["image"] for c in users if c["image"].split(":")[0] == image}
    assert tags == {f"{image}:{__version__}"}
    assert f"docker build -f deploy/docker/{name} -t {image}:{__version__} ." in df.content


def test_the_agent_image_is_python_311_slim_non_root_and_exposes_the_port() -> None:
    df = dockerfile("agent.Dockerfile")
    assert set(df.parent_images) == {"python:3.11-slim"}
    final = final_stage(df)
    (user,) = [i["value"] for i in final if i["instruction"] == "USER"]
    assert user.split(":")[0] not in ("0", "root")
    (expose,) = [i["value"] for i in final if i["instruction"] == "EXPOSE"]
    assert int(expose) == 9764 == _port(obj("DaemonSet"), "metrics")


def test_the_validator_image_is_cuda_with_the_torch_the_suite_runs() -> None:
    df = dockerfile("validate.Dockerfile")
    (base,) = df.parent_images
    assert base.startswith("nvidia/cuda:") and "-runtime-" in base
    run_sh = (ROOT / "tests" / "run.sh").read_text()
    (suite_torch,) = set(re.findall(r"torch==([0-9][0-9.]*)", run_sh))
    assert df.args["TORCH_VERSION"] == suite_torch
    installs = " ".join(i["value"] for i in df.structure if i["instruction"] == "RUN")
    assert "[validate]" in installs  # the extra the compute checks need


# ---------------------------------------------------------------------------------------------
# The node condition: the agent's configuration and its RBAC

def test_the_agent_publishes_the_node_condition_with_the_rbac_it_needs(tmp_path: Path) -> None:
    """The ConfigMap's agent.toml, mounted where the agent looks by default, turns the node
    condition on for NODE_NAME (the downward API); the pod mounts its token; the ClusterRole
    allows exactly get nodes and patch nodes/status, bound to the DaemonSet's account."""
    ds, cm = obj("DaemonSet"), obj("ConfigMap", "nodewarden-agent")
    c, spec = container(ds), pod_spec(ds)
    m, v = mount_of(ds, agent_config.DEFAULT_PATH)
    assert m["mountPath"] == agent_config.DEFAULT_PATH and m["subPath"] == "agent.toml" and m["readOnly"]
    assert v["configMap"]["name"] == cm["metadata"]["name"]
    assert cm["metadata"]["namespace"] == ds["metadata"]["namespace"]
    (tmp_path / "agent.toml").write_text(cm["data"][m["subPath"]])
    ns = cli.build_parser().parse_args(["agent", *expand(c["args"], c["env"])])
    cfg = agent_config.resolve(ns, default_path=str(tmp_path / "agent.toml"))
    assert cfg.kubernetes.node_condition and cfg.kubernetes.kubeconfig is None
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert agent_config.node_name(cfg, {"NODE_NAME": NODE}) == NODE
    assert spec["automountServiceAccountToken"] is True
    assert pod_spec(obj("CronJob")).get("automountServiceAccountToken") is False  # the validator has none
    role, binding = obj("ClusterRole", "nodewarden-agent"), obj("ClusterRoleBinding", "nodewarden-agent")
    allowed = {(g, r, verb) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for verb in rule["verbs"]}
    assert allowed == {("", "nodes", "get"), ("", "nodes/status", "patch")}
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"],
                                    "namespace": ds["metadata"]["namespace"]}]
