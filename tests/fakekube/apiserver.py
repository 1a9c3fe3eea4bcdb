"""What the fake API server does to objects besides storing them: defaulting and validation
on create (Namespace, ConfigMap, Job, as v1.32 does them), the ``restricted`` Pod Security
checks, RBAC answers, and the objects a fresh cluster starts with (namespaces, nodes,
RuntimeClasses)."""

from __future__ import annotations

import json
import re

from .common import (
    DEFAULT_SERVER_VERSION,
    FAKE_USER,
    RUNTIME_NAME,
    RUNTIME_VERSION,
    KubectlError,
    ResType,
    deep_copy,
    now_ts,
)

# typing for the annotations only (postponed, never evaluated): not imported by each kubectl call (2 ms)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
MAX_CONFIGMAP_BYTES = 1048576


# --------------------------------------------------------------------------- a fresh cluster


def new_namespace(name: str, labels: Optional[dict] = None) -> dict:
    lab = dict(labels or {})
    lab["kubernetes.io/metadata.name"] = name
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": lab},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def make_runtimeclass(name: str, spec: dict) -> dict:
    rc = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": spec.get("handler", name),
    }
    for field in ("overhead", "scheduling"):
        if field in spec:
            rc[field] = deep_copy(spec[field])
    return rc


def make_node(spec: dict) -> dict:
    """A Node object from a full object or the shorthand
    ``{"name", "allocatable", "unschedulable", "labels", "ready", "taints", "kubelet_version"}``."""
    if "metadata" in spec:
        node = deep_copy(spec)
        node.setdefault("apiVersion", "v1")
        node.setdefault("kind", "Node")
        return node
    name = spec["name"]
    alloc = dict(spec.get("allocatable") or {"cpu": "64", "memory": "256Gi", "pods": "110"})
    # a kubelet always reports its root filesystem as ephemeral-storage (pkg/kubelet/nodestatus/
    # setters.go MachineInfo, from the rootfs' capacity less the reserved): a shorthand without it gets 100Gi
    alloc.setdefault("ephemeral-storage", "100Gi")
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    labels.update(spec.get("labels") or {})
    ready = spec.get("ready", True)
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": True} if spec.get("unschedulable") else {},
        "status": {
            "allocatable": alloc,
            "capacity": dict(alloc),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "kubelet is posting ready status" if ready else "not ready",
                    "lastHeartbeatTime": now_ts(),
                    "lastTransitionTime": now_ts(),
                }
            ],
            "nodeInfo": {
                "kubeletVersion": spec.get("kubelet_version", DEFAULT_SERVER_VERSION),
                "containerRuntimeVersion": f"{RUNTIME_NAME}://{RUNTIME_VERSION}",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }
    if spec.get("taints"):
        node["spec"]["taints"] = deep_copy(spec["taints"])
    return node


def make_running_pod(spec: dict) -> dict:
    """A Running pod of another workload, bound to a node, from the shorthand ``{"name",
    "namespace" (default "default"), "node", "requests": {"cpu", "memory"}, "phase" (default
    Running)}``: the scheduler counts its requests against its node (the fake's controller.py
    node_usage, and the tool's --parallelism auto). The API server has already defaulted its
    requests as it stores a pod (pkg/apis/core/v1/defaults.go SetDefaults_Pod)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": spec["name"], "namespace": spec.get("namespace", "default"), "labels": {"app": "other"}},
        "spec": {
            "nodeName": spec["node"],
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": dict(spec["requests"])}}],
        },
        "status": {"phase": spec.get("phase", "Running")},
    }


# --------------------------------------------------------------------------- the serviceaccounts controller
# kube-controller-manager's serviceaccounts controller creates a fresh namespace's ``default``
# ServiceAccount soon after the namespace (pkg/controller/serviceaccount/serviceaccounts_controller.go,
# syncNamespace); until then ServiceAccount admission refuses the namespace's pods
# (plugin/pkg/admission/serviceaccount/admission.go, getServiceAccount: up to 10 live lookups,
# 100-200 ms apart, then "error looking up service account NS/default: serviceaccount "default"
# not found"). Fault ``serviceaccount_delay`` (seconds) is how late it comes; without it, it is
# created with the namespace. The fake has no controller-manager process: a pending account is
# created by whoever looks for it first once it is due (settle_serviceaccounts).

PENDING_SERVICEACCOUNTS = "serviceaccounts.json"  # {namespace: unix time its default account appears}


def serviceaccount_object(namespace: str, t: float) -> dict:
    from .common import new_uid

    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": namespace, "uid": new_uid(), "creationTimestamp": now_ts(t)},
    }


def default_serviceaccount_later(state: str, namespace: str, at: float) -> None:
    """Record that ``namespace``'s default ServiceAccount appears at ``at``."""
    import os

    from .common import read_json, write_json_atomic

    path = os.path.join(state, PENDING_SERVICEACCOUNTS)
    pending = read_json(path, {}) or {}
    pending[namespace] = at
    write_json_atomic(path, pending)


def settle_serviceaccounts(store: object) -> None:
    """Create every default ServiceAccount that is due, in a namespace that still exists."""
    import os
    import time

    from .common import read_json, write_json_atomic

    path = os.path.join(store.state, PENDING_SERVICEACCOUNTS)  # type: ignore[attr-defined]
    pending = read_json(path, {}) or {}
    now = time.time()
    due = sorted(ns for ns, at in pending.items() if at <= now)
    if not due:
        return
    with store.tx() as tx:  # type: ignore[attr-defined]
        pending = read_json(path, {}) or {}
        for namespace in due:
            if namespace not in pending:
                continue  # settled by another process meanwhile
            del pending[namespace]
            ns_obj = tx.get("Namespace", None, namespace)
            live = ns_obj is not None and not ns_obj["metadata"].get("deletionTimestamp")
            if live and tx.get("ServiceAccount", namespace, "default") is None:
                tx.put(serviceaccount_object(namespace, tx.now))
        write_json_atomic(path, pending)


# --------------------------------------------------------------------------- RBAC


def is_forbidden(cluster: dict, verb: str, resource: str) -> bool:
    """Whether cluster.json's ``forbidden`` list denies ``verb`` on ``resource`` ("pods/log")."""
    res = resource.split("/")
    base = res[0].split(".")[0]
    full = base + ("/" + res[1] if len(res) > 1 else "")
    for fverb, fres in cluster.get("forbidden") or []:
        fparts = fres.split("/")
        fbase = fparts[0].split(".")[0]
        ffull = fbase + ("/" + fparts[1] if len(fparts) > 1 else "")
        if fverb in (verb, "*") and ffull in (full, "*"):
            return True
    return False


def forbidden_text(verb: str, resource: str, rt: Optional[ResType], name: str, namespace: str) -> str:
    base = rt.qualified if rt else resource
    what = f'{base} "{name}"' if name else base
    group = rt.group if rt else ""
    namespaced = rt.namespaced if rt else True
    scope = f'in the namespace "{namespace}"' if namespaced and namespace else "at the cluster scope"
    return f'{what} is forbidden: User "{FAKE_USER}" cannot {verb} resource "{resource}" in API group "{group}" {scope}'


# --------------------------------------------------------------------------- validation


def invalid(kind: str, name: str, problems: List[str]) -> KubectlError:
    if len(problems) == 1:
        return KubectlError(f'The {kind} "{name}" is invalid: {problems[0]}')
    return KubectlError(f'The {kind} "{name}" is invalid: \n' + "\n".join(f"* {p}" for p in problems))


def validate_metadata(obj: dict, label_name: bool) -> List[str]:
    md = obj["metadata"]
    name = md.get("name", "")
    problems = []
    if not name:
        problems.append("metadata.name: Required value: name or generateName is required")
    elif label_name and (len(name) > 63 or not DNS1123_LABEL.fullmatch(name)):
        problems.append(
            f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 label must '
            "consist of lower case alphanumeric characters or '-', and must start and end "
            "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
            "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        )
    elif len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        problems.append(
            f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain must '
            "consist of lower case alphanumeric characters, '-' or '.', and must start and "
            "end with an alphanumeric character (e.g. 'example.com', regex used for "
            "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
    for v in (md.get("labels") or {}).values():
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.fullmatch(v):
            problems.append(
                f'metadata.labels: Invalid value: "{v}": a valid label must be an empty string '
                "or consist of alphanumeric characters, '-', '_' or '.', and must start "
                "and end with an alphanumeric character"
            )
    return problems


def validate_configmap(obj: dict) -> List[str]:
    """pkg/apis/core/validation/validation.go ValidateConfigMap: the bytes of the data's values
    (Go's len of a string: its UTF-8 bytes), not its keys nor their JSON form, at most
    core.MaxSecretSize."""
    problems = validate_metadata(obj, label_name=False)
    size = sum(len(str(v).encode("utf-8", "surrogatepass")) for v in (obj.get("data") or {}).values())
    if size > MAX_CONFIGMAP_BYTES:
        problems.append(f"[]: Too long: must have at most {MAX_CONFIGMAP_BYTES} bytes")
    return problems


def pod_security_violations(spec: dict) -> List[str]:
    """The checks of the ``restricted`` Pod Security Standard that matter here."""
    psc = spec.get("securityContext") or {}
    found: List[str] = []
    containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    bad_ape, bad_caps, bad_nonroot, bad_seccomp, privileged, root_uid = [], [], [], [], [], []
    for c in containers:
        sc = c.get("securityContext") or {}
        n = c.get("name", "")
        if sc.get("privileged"):
            privileged.append(n)
        if sc.get("allowPrivilegeEscalation") is not False:
            bad_ape.append(n)
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or any(a != "NET_BIND_SERVICE" for a in caps.get("add") or []):
            bad_caps.append(n)
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            bad_nonroot.append(n)
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            root_uid.append(n)
        sp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if sp not in ("RuntimeDefault", "Localhost"):
            bad_seccomp.append(n)

    def names(ns: List[str]) -> str:
        return ", ".join(f'"{x}"' for x in ns)

    if privileged:
        found.append(f"privileged (container {names(privileged)} must not set securityContext.privileged=true)")
    if bad_ape:
        found.append(
            f"allowPrivilegeEscalation != false (container {names(bad_ape)} must set "
            "securityContext.allowPrivilegeEscalation=false)"
        )
    if bad_caps:
        found.append(
            f"unrestricted capabilities (container {names(bad_caps)} must set "
            'securityContext.capabilities.drop=["ALL"])'
        )
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            found.append(f'restricted volume types (volume "{v.get("name")}" uses restricted volume type "hostPath")')
    if bad_nonroot:
        found.append(
            f"runAsNonRoot != true (pod or container {names(bad_nonroot)} must set securityContext.runAsNonRoot=true)"
        )
    if root_uid:
        found.append(f"runAsUser=0 (container {names(root_uid)} must not set runAsUser=0)")
    if bad_seccomp:
        found.append(
            f"seccompProfile (pod or container {names(bad_seccomp)} must set "
            'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
        )
    return found


def namespace_enforces_restricted(ns_obj: Optional[dict]) -> bool:
    labels = (ns_obj or {}).get("metadata", {}).get("labels") or {}
    return labels.get("pod-security.kubernetes.io/enforce") == "restricted"


# --------------------------------------------------------------------------- Jobs


def job_labels(uid: str, name: str, legacy: bool) -> Dict[str, str]:
    """The labels the Job controller puts on a Job's pods (``legacy``: before v1.27)."""
    if legacy:
        return {"controller-uid": uid, "job-name": name}
    return {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }


def default_container(c: dict) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = c.get("image", "")
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
    c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    c.setdefault("resources", {})


def default_pod_spec(spec: dict) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for c in spec.get("initContainers") or []:
        default_container(c)
    for c in spec.get("containers") or []:
        default_container(c)


def prepare_job(
    obj: dict,
    uid: str,
    legacy: bool,
    old_job_api: bool = False,
    no_pod_failure_policy: bool = False,
    knows_fail_index: bool = True,
) -> List[str]:
    """API-server defaulting and validation of a batch/v1 Job; returns problems.

    ``old_job_api``: a server before v1.29 (no backoffLimitPerIndex): it drops the per-index
    fields, silently: a 1.27 server as unknown fields, a 1.28 one (JobBackoffLimitPerIndex alpha,
    off) in pkg/registry/batch/job/strategy.go PrepareForCreate, which then drops the
    podFailurePolicy's FailIndex rules too ("We drop the FailIndex pod failure policy rules
    because JobBackoffLimitPerIndex is disabled"), so a 1.28 server stores the policy without them.
    ``knows_fail_index``: False on a server before 1.28, whose validation knows no FailIndex action
    (pkg/apis/batch/validation/validation.go supportedPodFailurePolicyActions): it refuses the rule.
    ``no_pod_failure_policy``: a server whose JobPodFailurePolicy gate is off (1.25's default, or
    turned off before 1.31): it drops spec.podFailurePolicy (pkg/registry/batch/job/strategy.go,
    dropDisabledFields)."""
    name = obj["metadata"].get("name", "")
    problems = validate_metadata(obj, label_name=True)
    spec = obj.setdefault("spec", {})
    template = spec.setdefault("template", {})
    pspec = template.setdefault("spec", {})
    if old_job_api:  # a server that drops the fields (1.27 without strict validation, 1.28, a gate turned off)
        spec.pop("backoffLimitPerIndex", None)
        spec.pop("maxFailedIndexes", None)
        policy = spec.get("podFailurePolicy")
        if knows_fail_index and isinstance(policy, dict):  # 1.28: PrepareForCreate drops the FailIndex rules
            policy["rules"] = [rule for rule in policy.get("rules") or [] if rule.get("action") != "FailIndex"]
    if no_pod_failure_policy:
        spec.pop("podFailurePolicy", None)
    problems += indexed_job_problems(spec, pspec)
    problems += pod_failure_policy_problems(spec, pspec, knows_fail_index)
    if pspec.get("restartPolicy") not in ("Never", "OnFailure"):
        problems.append('spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"')
    containers = pspec.get("containers") or []
    if not containers:
        problems.append("spec.template.spec.containers: Required value")
    for i, c in enumerate(containers):
        if not c.get("name"):
            problems.append(f"spec.template.spec.containers[{i}].name: Required value")
        if not c.get("image"):
            problems.append(f"spec.template.spec.containers[{i}].image: Required value")
    for field in ("completions", "parallelism", "backoffLimit", "activeDeadlineSeconds"):
        v = spec.get(field)
        if v is not None and (not isinstance(v, int) or v < (1 if field == "activeDeadlineSeconds" else 0)):
            problems.append(
                f"spec.{field}: Invalid value: {json.dumps(v)}: must be greater than or "
                "equal to " + ("1" if field == "activeDeadlineSeconds" else "0")
            )
    if problems:
        return problems
    labels = job_labels(uid, name, legacy)
    sel_key = "controller-uid" if legacy else "batch.kubernetes.io/controller-uid"
    spec["selector"] = {"matchLabels": {sel_key: uid}}
    tmeta = template.setdefault("metadata", {})
    tlabels = dict(tmeta.get("labels") or {})
    tlabels.update(labels)
    tmeta["labels"] = tlabels
    tmeta.setdefault("creationTimestamp", None)
    if not obj["metadata"].get("labels"):
        obj["metadata"]["labels"] = dict(labels)
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    # with backoffLimitPerIndex the Job-wide limit defaults to MaxInt32 (v1.29+)
    spec.setdefault("backoffLimit", 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    # Failed with a podFailurePolicy: a replacement only once the pod is terminal (defaults.go SetDefaults_Job)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    default_pod_spec(pspec)
    obj["metadata"]["generation"] = 1
    obj["status"] = {}
    return []


# Job fields by the first API server minor that knows them (pkg/features/kube_features.go,
# JobBackoffLimitPerIndex: alpha in 1.28, off by default, so a 1.28 server drops the fields; beta and
# on from 1.29). An older server refuses an unknown field under strict validation with the API
# server's decoding error (apiserver handlers: "... cannot be handled as a Job: strict decoding
# error: unknown field ..."), and drops it silently otherwise.
JOB_FIELD_SINCE = {"backoffLimitPerIndex": 28, "maxFailedIndexes": 28}
PER_INDEX_ON_BY_DEFAULT = 29


def server_minor(faults: dict) -> int:
    """The minor of the API server the fake plays (fault ``server_version``, default v1.32)."""
    match = re.match(r"v?1\.(\d+)", str(faults.get("server_version") or DEFAULT_SERVER_VERSION))
    return int(match.group(1)) if match else 32


def unknown_job_fields(obj: dict, minor: int) -> List[str]:
    spec = obj.get("spec") or {}
    return [f"spec.{field}" for field, since in JOB_FIELD_SINCE.items() if field in spec and minor < since]


def strict_decoding_error(fields: List[str], ctx: str = 'error when creating "STDIN": ') -> KubectlError:
    """`ctx`: what kubectl puts before the server's message (a raw create names no file)."""
    unknown = ", ".join(f'unknown field "{field}"' for field in fields)
    return KubectlError(
        f'Error from server (BadRequest): {ctx}Job in version "v1" cannot be handled as a '
        f"Job: strict decoding error: {unknown}"
    )


# Mutating admission of the run's Job, as clusters with a queue or a policy engine do it (fault
# ``admission``): ``queue`` (Kueue's webhook creates the Job suspended, its controller resumes it:
# controller.py tick_suspended), ``managed_by`` (MultiKueue: spec.managedBy kueue.x-k8s.io/multikueue,
# the job controller leaves the Job alone), ``sidecar`` (a container added to the Job's template, as
# Kyverno's auto-generated rules or a service mesh's Job webhook do), ``security_context`` (the
# episode container's securityContext changed), ``pod_sidecar`` (a container added to each pod at
# its creation, as Istio's injector does: controller.py create_pod).
SIDECAR = {"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.24.0", "args": ["proxy", "sidecar"]}
MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def admit_job(obj: dict, faults: dict) -> None:
    admission = faults.get("admission") or []
    spec = obj["spec"]
    pspec = spec["template"]["spec"]
    queue = faults.get("queue")
    labelled = "kueue.x-k8s.io/queue-name" in (obj["metadata"].get("labels") or {})
    # Kueue's webhook suspends only a Job labelled kueue.x-k8s.io/queue-name (Kueue docs, "Run a
    # Kubernetes Job"), and with manageJobsWithoutQueueName an unlabelled one too (Kueue docs,
    # "Setup manageJobsWithoutQueueName"): controller.py tick_suspended admits only the first
    kueue_manages = isinstance(queue, dict) and (labelled or bool(queue.get("manage_jobs_without_queue_name")))
    if "queue" in admission or kueue_manages:
        spec["suspend"] = True
    if "managed_by" in admission:
        spec["managedBy"] = MULTIKUEUE
    if "sidecar" in admission:
        pspec["containers"] = [*pspec["containers"], deep_copy(SIDECAR)]
    if "security_context" in admission:
        context = pspec["containers"][0].setdefault("securityContext", {})
        context["allowPrivilegeEscalation"] = True
        context.pop("capabilities", None)


def indexed_job_problems(spec: dict, pspec: dict) -> List[str]:
    """Validation of completionMode, backoffLimitPerIndex and maxFailedIndexes (v1.32 wording)."""
    problems = []
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("NonIndexed", "Indexed"):
        problems.append(
            f'spec.completionMode: Unsupported value: {json.dumps(mode)}: supported values: "NonIndexed", "Indexed"'
        )
    indexed = mode == "Indexed"
    if indexed and spec.get("completions") is None:
        problems.append("spec.completions: Required value: when completion mode is Indexed")
    per_index = spec.get("backoffLimitPerIndex")
    max_failed = spec.get("maxFailedIndexes")
    for field, v in (("backoffLimitPerIndex", per_index), ("maxFailedIndexes", max_failed)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            problems.append(f"spec.{field}: Invalid value: {json.dumps(v)}: must be greater than or equal to 0")
    if per_index is not None:
        if not indexed:
            problems.append(
                f"spec.backoffLimitPerIndex: Invalid value: {json.dumps(per_index)}: requires indexed completion mode"
            )
        if pspec.get("restartPolicy") != "Never":
            problems.append(
                f"spec.backoffLimitPerIndex: Invalid value: {json.dumps(per_index)}: "
                'requires specifying restartPolicy "Never"'
            )
    if max_failed is not None:
        if per_index is None:
            problems.append(
                "spec.maxFailedIndexes: Invalid value: " + json.dumps(max_failed) + ": "
                "requires specifying backoffLimitPerIndex"
            )
        completions = spec.get("completions")
        if isinstance(completions, int) and isinstance(max_failed, int) and max_failed > completions:
            problems.append(
                f"spec.maxFailedIndexes: Invalid value: {max_failed}: must be less than or equal to completions"
            )
    return problems


def pod_failure_policy_problems(spec: dict, pspec: dict, knows_fail_index: bool = True) -> List[str]:
    """The parts of pkg/apis/batch/validation/validation.go validatePodFailurePolicy that the run's
    Job may meet: restartPolicy Never, known actions (FailIndex from 1.28), FailIndex only with
    backoffLimitPerIndex, one requirement per rule, exit code 0 not with In."""
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return []
    problems = []
    if pspec.get("restartPolicy") != "Never":
        problems.append(
            'spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is supported when '
            "podFailurePolicy is specified"
        )
    for number, rule in enumerate(policy.get("rules") or []):
        where = f"spec.podFailurePolicy.rules[{number}]"
        action = rule.get("action")
        actions = ("Count", "FailIndex", "FailJob", "Ignore") if knows_fail_index else ("Count", "FailJob", "Ignore")
        if action not in actions:
            problems.append(
                f"{where}.action: Unsupported value: {json.dumps(action)}: supported values: "
                + ", ".join(json.dumps(each) for each in actions)
            )
        elif action == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            problems.append(f'{where}.action: Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set')
        if (rule.get("onExitCodes") is None) == (rule.get("onPodConditions") is None):
            problems.append(f"{where}: Invalid value: specifying one of OnExitCodes and OnPodConditions is required")
        codes = rule.get("onExitCodes") or {}
        if codes.get("operator") == "In" and 0 in (codes.get("values") or []):
            problems.append(f"{where}.onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator")
    return problems
