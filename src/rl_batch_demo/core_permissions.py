"""Pure core: permissions and capacity, and the ownership proof that cleanup relies on."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from .constants import (
    APP_LABEL_VALUE,
    CAPACITY_PERMISSIONS,
    DEFAULT_COUNT,
    DEFAULT_EPHEMERAL_STORAGE,
    EPHEMERAL_STORAGE,
    JOB_NAME,
    KUBELET_METRICS_PERMISSIONS,
    KUEUE_GROUP,
    KUEUE_VERSIONS,
    LOCALQUEUE_PERMISSIONS,
    NODE_LIST_PERMISSION,
    POD_REQUESTS,
    REQUIRED_PERMISSIONS,
    RULES_REVIEW_REASON,
    RUN_LABEL,
    RUNTIMECLASS_LIST_PERMISSION,
    RUNTIMECLASS_PERMISSION,
    SERVICEACCOUNT_PERMISSIONS,
    SERVICEACCOUNT_WAIT,
)
from .core_basics import dig, parse_quantity, served_kueue_version, short_repr
from .records import Finding, KubeObject, Read, Receipt, ReceiptJob

# Pure core: permissions and capacity ##########################################
# What `check` and the preflight decide from access reviews, nodes and the RuntimeClass. Uses
# the records and the numbers above.


def permission_name(verb: str, resource: str, group: str, subresource: str, *_: object) -> str:
    name = f"{resource}.{group}" if group else resource
    return f"{verb} {name}/{subresource}" if subresource else f"{verb} {name}"


def access_review_list(
    namespace: str,
    with_runtimeclass: bool,
    kubelet_metrics: bool = False,
    lists_nodes: bool = False,
    capacity: bool = False,
    local_queue: bool = False,
) -> KubeObject:
    """One SelfSubjectAccessReview per permission the command needs (`lists_nodes`: `run --warmup`
    and `check` list the nodes; `capacity`: `run --parallelism auto` reads the nodes' room;
    `local_queue`: --queue creates, reads and deletes a LocalQueue), each asked once."""
    runtimeclass = RUNTIMECLASS_LIST_PERMISSION if capacity else RUNTIMECLASS_PERMISSION
    permissions = list(REQUIRED_PERMISSIONS) + ([runtimeclass] if with_runtimeclass else [])
    permissions += list(SERVICEACCOUNT_PERMISSIONS)
    permissions += list(KUBELET_METRICS_PERMISSIONS) if kubelet_metrics else []
    permissions += [permission for permission in CAPACITY_PERMISSIONS if capacity and permission not in permissions]
    permissions += [NODE_LIST_PERMISSION] if lists_nodes and NODE_LIST_PERMISSION not in permissions else []
    permissions += list(LOCALQUEUE_PERMISSIONS) if local_queue else []
    items = []
    for verb, resource, group, subresource, namespaced in permissions:
        attributes = {"verb": verb, "resource": resource, "group": group}
        if subresource:
            attributes["subresource"] = subresource
        if namespaced:
            attributes["namespace"] = namespace
        items.append(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes},
            }
        )
    return {"apiVersion": "v1", "kind": "List", "items": items}


def rules_review(namespace: str) -> KubeObject:
    """The SelfSubjectRulesReview of the run's namespace: every rule the context holds there, in
    one request (`create --raw`, no discovery), where the access reviews take one request each."""
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }


def _rule_grants(rule: Any, verb: str, resource: str, group: str, subresource: str) -> bool:
    """Whether one resource rule of a rules review allows the request, as RBAC matches a rule
    (kubernetes/kubernetes pkg/apis/rbac/v1/evaluation_helpers.go: VerbMatches, APIGroupMatches,
    ResourceMatches, ResourceNameMatches): the verb or `*`; the group or `*`; `*`, the resource
    (`resource/subresource` for a subresource) or `*/subresource`; and no resourceNames, since a
    rule limited to names never allows a request without one (every request reviewed here has none)."""
    if not isinstance(rule, dict) or rule.get("resourceNames"):
        return False

    def listed(key: str) -> Set[str]:
        values = rule.get(key)
        return {value for value in values if isinstance(value, str)} if isinstance(values, list) else set()

    asked = f"{resource}/{subresource}" if subresource else resource
    wanted = {"*", asked} | ({f"*/{subresource}"} if subresource else set())
    return (
        bool({"*", verb} & listed("verbs"))
        and bool({"*", group} & listed("apiGroups"))
        and bool(wanted & listed("resources"))
    )


def granted_by_rules(answer: Optional[KubeObject], reviews: KubeObject) -> Optional[List[KubeObject]]:
    """The access reviews (access_review_list) answered allowed, when the rules review's answer
    proves every one of them; else None, and the access reviews themselves decide.

    A rule proves only what it would allow to the access review itself: the answer must be
    complete (`incomplete` false, no evaluationError: an authorizer that cannot list its rules,
    such as a webhook, may also deny what another one's rules allow), and each permission
    matched by one rule as RBAC matches it (_rule_grants). The review is of the run's namespace,
    which does not exist yet, so no RoleBinding can be in it (namespace lifecycle admission
    refuses objects in a namespace that does not exist): every rule it lists is a cluster-wide
    one, which holds for the cluster-scoped permissions (namespaces, nodes, RuntimeClasses) too."""
    status = (answer or {}).get("status")
    if not isinstance(status, dict) or status.get("incomplete") is not False or status.get("evaluationError"):
        return None
    rules = status.get("resourceRules")
    if not isinstance(rules, list):
        return None
    answered = []
    for review in reviews.get("items") or []:
        attributes = dig(review, "spec", "resourceAttributes") or {}
        verb, resource = str(attributes.get("verb", "")), str(attributes.get("resource", ""))
        group, subresource = str(attributes.get("group", "")), str(attributes.get("subresource", ""))
        if not verb or not resource or not any(_rule_grants(r, verb, resource, group, subresource) for r in rules):
            return None
        answered.append({**review, "status": {"allowed": True, "reason": RULES_REVIEW_REASON}})
    return answered


def kueue_findings(context: str, queue: str, kueue: Optional[Read], cluster_queue: Optional[Read]) -> List[Finding]:
    """--queue: whether the API server serves Kueue's LocalQueue in a version this tool writes
    (`kueue`: GET /apis/kueue.x-k8s.io), and whether the ClusterQueue exists (`cluster_queue`:
    the object, None when absent; a refused read says the run cannot tell, and is no problem)."""
    findings: List[Finding] = []
    version = served_kueue_version(kueue.value) if kueue is not None and not kueue.failure else None
    if kueue is not None:
        if version is None:
            why = kueue.failure or f"it serves none of {', '.join(KUEUE_VERSIONS)}"
            findings.append(
                Finding(
                    "Kueue",
                    False,
                    f"not served ({why})",
                    problem=f"--queue needs Kueue's API ({KUEUE_GROUP}), which the cluster does not serve ({why})",
                    stop=f"--queue needs Kueue's API ({KUEUE_GROUP} {', '.join(KUEUE_VERSIONS)}), which context "
                    f"{context} does not serve ({why}); install Kueue, or run without --queue (nothing was created)",
                )
            )
        else:
            findings.append(Finding("Kueue", True, f"{KUEUE_GROUP}/{version} (the run's LocalQueue is written so)"))
    if cluster_queue is not None:
        name = f"ClusterQueue {queue}"
        if cluster_queue.failure:
            findings.append(Finding(name, True, f"cannot tell whether it exists ({cluster_queue.failure})"))
        elif cluster_queue.value is None:
            findings.append(
                Finding(
                    name,
                    False,
                    "missing",
                    problem=f"ClusterQueue {queue!r} does not exist",
                    stop=f"ClusterQueue {queue!r} does not exist in context {context}, so Kueue would never admit the "
                    "run's Jobs; list them with `kubectl get clusterqueues`, or pass another --queue (nothing was "
                    "created)",
                )
            )
        else:
            findings.append(Finding(name, True, "exists"))
    return findings


def denied_permissions(reviews: List[KubeObject]) -> List[str]:
    denied = [review for review in reviews if review.get("status", {}).get("allowed") is not True]
    asked = [review.get("spec", {}).get("resourceAttributes", {}) for review in denied]
    return sorted(
        permission_name(a.get("verb", "?"), a.get("resource", "?"), a.get("group", ""), a.get("subresource", ""))
        for a in asked
    )


def _tolerates(taint: KubeObject, tolerations: List[KubeObject]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def named_runtimeclass(items: List[KubeObject], name: str) -> Optional[KubeObject]:
    """The RuntimeClass `name` of a listing of several kinds (`kind` on each item), or None where
    it has none: what `get runtimeclass NAME --ignore-not-found` would have said."""
    for item in items:
        if item.get("kind") == "RuntimeClass" and dig(item, "metadata", "name") == name:
            return item
    return None


def eligible_nodes(nodes: List[KubeObject], runtimeclass: Optional[KubeObject]) -> List[KubeObject]:
    """Ready, schedulable nodes that the RuntimeClass's scheduling rules admit."""
    scheduling = (runtimeclass or {}).get("scheduling") or {}
    selector = scheduling.get("nodeSelector") or {}
    tolerations = scheduling.get("tolerations") or []
    eligible = []
    for node in nodes:
        if node.get("spec", {}).get("unschedulable"):
            continue
        conditions = {c.get("type"): c.get("status") for c in node.get("status", {}).get("conditions", []) or []}
        if conditions.get("Ready", "True") != "True":
            continue
        labels = node.get("metadata", {}).get("labels", {}) or {}
        if any(labels.get(key) != value for key, value in selector.items()):
            continue
        taints = [
            t for t in node.get("spec", {}).get("taints", []) or [] if t.get("effect") in ("NoSchedule", "NoExecute")
        ]
        if all(_tolerates(taint, tolerations) for taint in taints):
            eligible.append(node)
    return eligible


# The resources the scheduler's NodeResourcesFit counts that an episode requests. A node that
# reports no allocatable ephemeral-storage has none for a pod that requests some
# (pkg/scheduler/framework/plugins/noderesources/fit.go fitsRequest: "Insufficient ephemeral-storage").
_RESOURCES = ("cpu", "memory", EPHEMERAL_STORAGE)


def episode_requests(ephemeral_storage: str, runtimeclass: Optional[KubeObject]) -> Dict[str, float]:
    """What one episode's pod requests of each resource: the container's requests (with
    --ephemeral-storage) plus the RuntimeClass's Pod overhead."""
    overhead = dig(runtimeclass or {}, "overhead", "podFixed") or {}
    asked = {**POD_REQUESTS, EPHEMERAL_STORAGE: ephemeral_storage}
    return {
        resource: parse_quantity(asked[resource]) + parse_quantity(str(overhead.get(resource, "0")))
        for resource in _RESOURCES
    }


def _gib(value: float) -> str:
    return f"{value / 2**30:.1f} GiB"


def pod_requests(pod: KubeObject) -> Dict[str, float]:
    """The CPU, memory and ephemeral storage a pod holds on its node, as the scheduler counts it: its containers'
    requests summed, or what its init containers need if that is more (a sidecar, an init
    container with restartPolicy Always, counts for the pod's whole life), the pod-level requests
    where they are set, then the RuntimeClass's overhead (spec.overhead). As kubernetes/kubernetes
    staging/src/k8s.io/component-helpers/resource/helpers.go PodRequests computes it."""
    spec = pod.get("spec") or {}

    def requested(resources: Any) -> Dict[str, float]:
        asked = (resources or {}).get("requests") or {} if isinstance(resources, dict) else {}
        return {resource: parse_quantity(str(asked.get(resource, "0"))) for resource in _RESOURCES}

    total = dict.fromkeys(_RESOURCES, 0.0)
    for container in spec.get("containers") or []:
        total = {resource: total[resource] + value for resource, value in requested(container.get("resources")).items()}
    sidecars, init_peak = dict.fromkeys(_RESOURCES, 0.0), dict.fromkeys(_RESOURCES, 0.0)
    for container in spec.get("initContainers") or []:
        own = requested(container.get("resources"))
        if container.get("restartPolicy") == "Always":
            total = {resource: total[resource] + own[resource] for resource in _RESOURCES}
            sidecars = {resource: sidecars[resource] + own[resource] for resource in _RESOURCES}
            using = sidecars
        else:
            using = {resource: own[resource] + sidecars[resource] for resource in _RESOURCES}
        init_peak = {resource: max(init_peak[resource], using[resource]) for resource in _RESOURCES}
    total = {resource: max(total[resource], init_peak[resource]) for resource in _RESOURCES}
    pod_level = (dig(spec, "resources", "requests") or {}) if isinstance(spec.get("resources"), dict) else {}
    total.update(
        {resource: parse_quantity(str(pod_level[resource])) for resource in _RESOURCES if resource in pod_level}
    )
    overhead = spec.get("overhead") or {}
    return {resource: total[resource] + parse_quantity(str(overhead.get(resource, "0"))) for resource in _RESOURCES}


def episode_room(
    runtimeclass: Optional[KubeObject],
    nodes: List[KubeObject],
    pods: Optional[List[KubeObject]],
    ephemeral_storage: str = DEFAULT_EPHEMERAL_STORAGE,
) -> Tuple[int, str]:
    """How many episodes the eligible nodes can start at once, and the sum in words: on each node,
    its allocatable CPU, memory, ephemeral storage and pod slots less what its pods that are not
    terminated request (`pods` None: unknown, nothing subtracted), in whole episodes of the Job's
    requests (`ephemeral_storage`: --ephemeral-storage) plus the RuntimeClass's overhead; the
    nodes' rooms added up (a pod runs on one node, never across two). `check` and
    `run --parallelism auto` both read this."""
    need = episode_requests(ephemeral_storage, runtimeclass)
    eligible = eligible_nodes(nodes, runtimeclass)
    names = {str(dig(node, "metadata", "name")) for node in eligible}
    used: Dict[str, Dict[str, float]] = {name: dict.fromkeys(_RESOURCES, 0.0) for name in names}
    running = dict.fromkeys(names, 0)
    for pod in pods or []:
        node_name = str(dig(pod, "spec", "nodeName") or "")
        if node_name in names and dig(pod, "status", "phase") not in ("Succeeded", "Failed"):
            running[node_name] += 1
            used[node_name] = {r: used[node_name][r] + v for r, v in pod_requests(pod).items()}
    room = 0
    have = dict.fromkeys(_RESOURCES, 0.0)
    for node in eligible:
        name = str(dig(node, "metadata", "name"))
        allocatable = dig(node, "status", "allocatable") or {}
        free = {
            resource: parse_quantity(allocatable.get(resource, "0")) - used[name][resource] for resource in _RESOURCES
        }
        have = {resource: have[resource] + parse_quantity(allocatable.get(resource, "0")) for resource in _RESOURCES}
        fits = min(math.floor(free[resource] / need[resource] + 1e-9) for resource in _RESOURCES)
        if "pods" in allocatable:
            fits = min(fits, int(parse_quantity(allocatable["pods"])) - running[name])
        room += max(fits, 0)
    taken = {resource: sum(node_used[resource] for node_used in used.values()) for resource in _RESOURCES}
    there = (
        " (before what already runs there)"
        if pods is None
        else f", {taken['cpu']:.1f} CPU, {_gib(taken['memory'])} and {_gib(taken[EPHEMERAL_STORAGE])} of ephemeral "
        f"storage of it requested by {sum(running.values())} pod{'s' if sum(running.values()) != 1 else ''} "
        "already there"
    )
    text = (
        f"{len(eligible)} eligible node{'s have' if len(eligible) != 1 else ' has'} {have['cpu']:.1f} CPU, "
        f"{_gib(have['memory'])} and {_gib(have[EPHEMERAL_STORAGE])} of ephemeral storage allocatable{there}: "
        f"room for {room} episode{'s' if room != 1 else ''} at once, each {need['cpu']:.2f} CPU and "
        f"{need['memory'] / 2**30:.2f} GiB with the RuntimeClass's overhead, and "
        f"{need[EPHEMERAL_STORAGE] / 2**30:.2f} GiB of ephemeral storage (--ephemeral-storage)"
    )
    return room, text


def capacity_verdict(
    count: int,
    runtimeclass: Optional[KubeObject],
    nodes: List[KubeObject],
    pods: Optional[List[KubeObject]] = None,
    ephemeral_storage: str = DEFAULT_EPHEMERAL_STORAGE,
) -> Tuple[bool, str]:
    """Whether N episodes fit the eligible nodes at once (episode_room), in words."""
    overhead = dig(runtimeclass or {}, "overhead", "podFixed") or {}
    need = {resource: count * value for resource, value in episode_requests(ephemeral_storage, runtimeclass).items()}
    room, room_text = episode_room(runtimeclass, nodes, pods, ephemeral_storage)
    text = (
        f"{count} pods need {need['cpu']:.1f} CPU and {_gib(need['memory'])} including "
        f"{_gib(count * parse_quantity(str(overhead.get('memory', '0'))))} of RuntimeClass overhead, and "
        f"{_gib(need[EPHEMERAL_STORAGE])} of ephemeral storage; {room_text}"
    )
    return room >= count, text


def preflight_findings(
    *,
    context: str,
    server: Optional[str],
    runtime: Optional[str],
    runtimeclass: Optional[Read] = None,
    reviews: Optional[Read] = None,
    version: Optional[Read] = None,
    nodes: Optional[Read] = None,
    pods: Optional[Read] = None,
    image: Optional[str] = None,
    count: int = DEFAULT_COUNT,
    kubelet_metrics: bool = False,
    capacity: bool = False,
    parallelism: Optional[int] = None,
    ephemeral_storage: str = DEFAULT_EPHEMERAL_STORAGE,
    queue: Optional[str] = None,
    kueue: Optional[Read] = None,
    cluster_queue: Optional[Read] = None,
) -> List[Finding]:
    """Everything the reads say about running the batch, in `check`'s order. A read that a
    command did not make (None) gives no finding; `run` reads only the RuntimeClass and the
    access reviews (with --parallelism auto, `capacity`: whether it may read the nodes' room).
    The capacity is planned as `run` runs the batch: `parallelism` episodes at once (the
    default: all `count`), or with --parallelism auto (`capacity` in `check`) as many as there
    is room for, which needs room for one."""

    def failed(what: str, read: Read) -> Finding:
        return Finding(
            what,
            False,
            f"failed: {read.failure}",
            problem=f"cannot {what} ({read.failure})",
            stop=f"cannot {what} in context {context} ({read.failure}); `check` shows every finding "
            "(nothing was created)",
        )

    findings = [Finding("context", True, f"{context} (API server {server or 'unknown'})")]
    if version is not None:
        if version.failure:
            findings.append(failed("read the server version", version))
        else:
            git_version = dig(version.value or {}, "serverVersion", "gitVersion")
            findings.append(Finding("server version", True, "unknown" if git_version is None else str(git_version)))
    runtimeclass_known = runtime is None
    if runtime is None:
        findings.append(Finding("runtime", True, "none (the cluster's default runtime; no RuntimeClass)"))
    elif runtimeclass is not None:
        if runtimeclass.failure:
            findings.append(failed(f"read RuntimeClass {runtime}", runtimeclass))
        elif runtimeclass.value is None:
            findings.append(
                Finding(
                    f"RuntimeClass {runtime}",
                    False,
                    "missing",
                    problem=f"RuntimeClass {runtime!r} does not exist",
                    stop=f"RuntimeClass {runtime!r} does not exist in context {context}; list them with "
                    "`kubectl get runtimeclass`, pass --runtime NAME, or --runtime none for the default runtime",
                )
            )
        else:
            runtimeclass_known = True
            scheduling = runtimeclass.value.get("scheduling") or {}
            overhead = json.dumps(dig(runtimeclass.value, "overhead", "podFixed") or {}, sort_keys=True)
            selector = json.dumps(scheduling.get("nodeSelector") or {}, sort_keys=True)
            detail = f"handler {runtimeclass.value.get('handler')}, overhead {overhead}, nodeSelector {selector}, "
            tolerations = f"tolerations {len(scheduling.get('tolerations') or [])}"
            findings.append(Finding(f"RuntimeClass {runtime}", True, detail + tolerations))
    if image is not None:
        findings.append(Finding("image", True, f"{image} (pulled by the nodes; not checked from here)"))
    if nodes is not None:
        if nodes.failure:
            findings.append(failed("list nodes", nodes))
        elif runtimeclass_known:
            running = pods.value if pods is not None and not pods.failure else None
            chosen = runtimeclass.value if runtimeclass else None
            try:
                if capacity:  # --parallelism auto: run starts as many as fit now, and needs one
                    room, room_text = episode_room(chosen, nodes.value, running, ephemeral_storage)
                    fits = room >= 1
                    text = (
                        f"--parallelism auto would run {min(room, count)} of {count} episodes at once; {room_text}"
                        if fits
                        else f"--parallelism auto: not even one episode fits now; {room_text}"
                    )
                else:
                    at_once = count if parallelism is None else min(parallelism, count)
                    fits, text = capacity_verdict(at_once, chosen, nodes.value, running, ephemeral_storage)
                    if at_once < count:
                        text = f"{at_once} of {count} episodes at once (--parallelism {at_once}): {text}"
            except ValueError as error:
                fits, text = False, f"cannot be computed ({error})"
            if pods is not None and pods.failure:
                text += f"; what runs there is unknown (cannot list the pods of every namespace: {pods.failure})"
            findings.append(
                Finding("capacity", fits, text, problem="not enough allocatable capacity on eligible nodes")
            )
    if queue is not None:
        findings += kueue_findings(context, queue, kueue, cluster_queue)
    if reviews is not None:
        if reviews.failure:
            findings.append(failed("review permissions", reviews))
        else:
            kubelet_reviews = [r for r in reviews.value if kubelet_metrics and _asks(r, KUBELET_METRICS_PERMISSIONS)]
            capacity_reviews = [r for r in reviews.value if capacity and _is_capacity_review(r)]
            account_reviews = [r for r in reviews.value if _asks(r, SERVICEACCOUNT_PERMISSIONS)]
            others = [r for r in reviews.value if r not in kubelet_reviews + capacity_reviews + account_reviews]
            denied = denied_permissions(others)
            findings.append(
                Finding(
                    "permissions",
                    not denied,
                    "all granted" if not denied else "denied: " + ", ".join(denied),
                    problem="missing permissions: " + ", ".join(denied),
                    stop=f"context {context} lacks permissions this run needs: {', '.join(denied)}; "
                    "ask the cluster admin or use another context (nothing was created)",
                )
            )
            findings.append(serviceaccount_finding(account_reviews))
            if kubelet_metrics:
                findings.append(kubelet_metrics_finding(context, kubelet_reviews))
            if capacity:
                findings.append(capacity_permissions_finding(context, capacity_reviews))
    return findings


def _asks(review: KubeObject, permissions: Sequence[Tuple[str, str, str, str, bool]]) -> bool:
    """Whether an access review asks for one of these permissions."""
    attributes = dig(review, "spec", "resourceAttributes") or {}
    return any(
        (attributes.get("verb"), attributes.get("resource"), attributes.get("subresource", "")) == (verb, resource, sub)
        for verb, resource, _, sub, _ in permissions
    )


def serviceaccount_finding(reviews: List[KubeObject]) -> Finding:
    """Whether the run may watch for the namespace's default ServiceAccount before its first Job;
    never a problem: without it the run only skips that wait."""
    denied = denied_permissions(reviews) if reviews else [permission_name(*p) for p in SERVICEACCOUNT_PERMISSIONS]
    return Finding(
        SERVICEACCOUNT_WAIT,
        True,
        "granted: list, watch serviceaccounts (the first Job waits for the namespace's default ServiceAccount)"
        if not denied
        else f"denied: {', '.join(denied)}; a run creates its first Job without waiting for the namespace's default "
        "ServiceAccount, so that Job's figures may include the wait for it",
    )


def _is_capacity_review(review: KubeObject) -> bool:
    """A review of what --parallelism auto reads: list nodes, list pods in every namespace."""
    attributes = dig(review, "spec", "resourceAttributes") or {}
    asked = (attributes.get("verb"), attributes.get("resource"), "namespace" in attributes)
    return any(asked == (verb, resource, False) for verb, resource, *_ in CAPACITY_PERMISSIONS)


def capacity_permissions_finding(context: str, reviews: List[KubeObject]) -> Finding:
    """Whether --parallelism auto may read the nodes and what runs on them: list nodes, and list
    pods in every namespace (the requests of other namespaces' pods take room too)."""
    denied = denied_permissions(reviews) if reviews else [permission_name(*p) for p in CAPACITY_PERMISSIONS]
    named = ", ".join(f"{name} (every namespace)" if name == "list pods" else name for name in denied)
    return Finding(
        "parallelism auto",
        not denied,
        "granted: list nodes, list pods in every namespace" if not denied else f"denied: {named}",
        problem=f"--parallelism auto lacks: {named}",
        stop=f"--parallelism auto needs {named} in context {context} (what the nodes hold and what already runs "
        "there); pass --parallelism P instead, or ask the cluster admin (nothing was created)",
    )


def kubelet_metrics_finding(context: str, reviews: List[KubeObject]) -> Finding:
    """Whether --kubelet-metrics may read the kubelets' /metrics: get nodes/proxy (a powerful
    permission: it also allows exec into any pod on the node) and list nodes."""
    denied = denied_permissions(reviews) if reviews else [permission_name(*p) for p in KUBELET_METRICS_PERMISSIONS]
    return Finding(
        "kubelet metrics",
        not denied,
        "granted: get nodes/proxy (powerful: it also allows exec into pods on the node), list nodes"
        if not denied
        else "denied: " + ", ".join(denied),
        problem="--kubelet-metrics lacks: " + ", ".join(denied),
        stop=f"--kubelet-metrics needs {', '.join(denied)} in context {context} (the kubelets' /metrics through "
        "the API server); run without --kubelet-metrics, or ask the cluster admin (nothing was created)",
    )


# Pure core: ownership proof ##################################################
# What cleanup may delete, decided from the receipt and live reads alone. Uses the records and
# the numbers above.


@dataclasses.dataclass(frozen=True)
class CleanupPlan:
    """What cleanup may delete, or why it must refuse; decided from the receipt and live reads only."""

    refusal: Optional[str] = None  # set: delete nothing, exit EXIT_REFUSED with this sentence
    namespace_absent: bool = False
    adopted_namespace_uid: Optional[str] = None  # the receipt lacked it; the run's labels prove it
    jobs: Tuple[str, ...] = ()  # live Jobs proven to be the run's, deleted in this order
    local_queue: Optional[str] = (
        None  # --queue: the live LocalQueue proven to be the run's, deleted before the namespace
    )


def receipt_jobs(receipt: Receipt, job_json_uid: Optional[str]) -> List[ReceiptJob]:
    """The Jobs a receipt names; a guide-era receipt names the one Job by its job_uid or job.json."""
    if receipt["jobs"]:
        return list(receipt["jobs"])
    return [{"name": JOB_NAME, "uid": receipt.get("job_uid") or job_json_uid}]


# Anchored by \Z, for `$` also matches before a final newline: "rollout\n" is no name of this tool's.
_RUN_NAMESPACE = r"^agc-rl-[0-9a-f]{12}\Z"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z"


def receipt_names_problem(receipt: Receipt) -> str:
    """Why a receipt's names cannot be this tool's (they go into kubectl's argument lists), or ""."""
    if not re.match(_RUN_NAMESPACE, receipt["namespace"]):
        named = short_repr(receipt["namespace"])
        return f"the receipt names namespace {named}, not one this tool creates (agc-rl-<12 hex>)"
    for job in receipt["jobs"]:
        if not re.match(_DNS_LABEL, job["name"]):
            return f"the receipt names Job {short_repr(job['name'])}, not a name this tool gives"
    return ""


def plan_cleanup(
    receipt: Receipt,
    jobs: List[ReceiptJob],
    current_context: Optional[str],
    current_server: Optional[str],
    live_namespace: Optional[KubeObject],
    live_jobs: Dict[str, Optional[KubeObject]],
    live_local_queue: Optional[KubeObject] = None,
) -> CleanupPlan:
    """Prove that the namespace, every live Job and the live LocalQueue (--queue) are this run's:
    the same API server, the namespace's UID and run label, each Job's and the LocalQueue's UID
    (or, without one recorded, its run label)."""
    namespace = receipt["namespace"]
    if receipt["server"] and current_server != receipt["server"]:
        return CleanupPlan(
            refusal=f"refusing to clean up: the run used the API server {receipt['server']}, but context "
            f"{current_context} now points at {current_server}; use the kubeconfig the run used (--kubeconfig); "
            "nothing was deleted"
        )
    if live_namespace is None:
        return CleanupPlan(namespace_absent=True)
    live_uid = dig(live_namespace, "metadata", "uid")
    labels = dig(live_namespace, "metadata", "labels") or {}
    live_label = labels.get(RUN_LABEL)
    recorded_uid = receipt.get("uid")
    adopted = None
    if not recorded_uid:
        # The run stopped while creating the namespace. Its random run id in the label, set by
        # this tool, proves the namespace is the run's; anything else is refused.
        if live_label != receipt["run_id"] or labels.get("app.kubernetes.io/managed-by") != APP_LABEL_VALUE:
            return CleanupPlan(
                refusal=f"namespace {namespace} exists but the receipt has no namespace UID and the namespace "
                f"lacks this run's labels, so ownership cannot be proven; nothing was deleted; inspect "
                f"`kubectl get namespace {namespace} -o yaml`"
            )
        adopted = recorded_uid = live_uid
    if live_uid != recorded_uid or live_label != receipt["run_id"]:
        return CleanupPlan(
            refusal=f"refusing to clean up namespace {namespace}: its UID {live_uid} / label "
            f"{RUN_LABEL}={live_label} do not match the receipt ({recorded_uid} / {receipt['run_id']}); "
            "nothing was deleted"
        )
    doomed = []
    for job in jobs:
        live_job = live_jobs.get(job["name"])
        if live_job is None:
            continue
        job_uid = dig(live_job, "metadata", "uid")
        job_label = dig(live_job, "metadata", "labels", RUN_LABEL)
        if not (job_uid == job["uid"] if job["uid"] else job_label == receipt["run_id"]):
            return CleanupPlan(
                refusal=f"refusing to clean up: Job {namespace}/{job['name']} has UID {job_uid}, not the "
                f"one this run recorded ({job['uid']}); nothing was deleted"
            )
        doomed.append(job["name"])
    queue = receipt.get("local_queue")
    if queue is not None and live_local_queue is not None:
        queue_uid = dig(live_local_queue, "metadata", "uid")
        queue_label = dig(live_local_queue, "metadata", "labels", RUN_LABEL)
        if not (queue_uid == queue["uid"] if queue["uid"] else queue_label == receipt["run_id"]):
            return CleanupPlan(
                refusal=f"refusing to clean up: LocalQueue {namespace}/{queue['name']} has UID {queue_uid} and label "
                f"{RUN_LABEL}={queue_label}, not this run's ({queue['uid']} / {receipt['run_id']}); nothing was deleted"
            )
    local_queue = queue["name"] if queue is not None and live_local_queue is not None else None
    return CleanupPlan(adopted_namespace_uid=adopted, jobs=tuple(doomed), local_queue=local_queue)
