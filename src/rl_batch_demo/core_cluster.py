"""Pure core: what the cluster reports (Job and pod status), and the pods' logs and events."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .constants import (
    ARTIFACT_FRAME_DATA,
    ARTIFACT_FRAMES_LIMIT,
    ARTIFACT_NAME_DEPTH_LIMIT,
    ARTIFACT_NAME_LIMIT,
    CONTAINER_NAME,
    EVENT_LINE_LIMIT,
    EVENTS_PER_EPISODE_LIMIT,
    EXIT_CLUSTER,
    EXIT_EPISODE,
    FAILURE_EPISODE,
    FAILURE_INFRASTRUCTURE,
    INDEX_ANNOTATION,
    INDEX_LABEL,
    KEPT_EVENT_BYTES_LIMIT,
    KEPT_EVENTS,
    LOG_SELECTOR_PODS,
    MAX_COUNT_LARGE,
    POD_DEADLINE_REASON,
    TERMINATION_MESSAGE_LIMIT,
    WORKSPACE_VOLUME,
)
from .core_basics import (
    _reject_constant,
    dig,
    finite_number,
    is_int,
    json_kind,
    optional_timestamp,
    parse_timestamp,
    pod_belongs_to,
    short_repr,
)
from .errors import DemoError, EpisodeInvalid, EventParseError
from .records import ArtifactFrame, JsonObject, KubeObject, LogBudgets, LostAttempt, PodLog, RoundObservation

# Pure core: what the cluster reports ##########################################
# Conditions, pod failures, indexes and sightings, read out of the API server's objects. Uses
# the sections above.


def creation_time(obj: KubeObject, what: str) -> float:
    """An object's creationTimestamp as epoch seconds; unreadable means the cluster's answer is wrong."""
    text = dig(obj, "metadata", "creationTimestamp")
    try:
        return parse_timestamp(str(text))
    except ValueError:
        raise DemoError(f"{what} has no readable creationTimestamp ({text!r})", EXIT_CLUSTER) from None


def _container_status(pod: KubeObject) -> KubeObject:
    for status in pod.get("status", {}).get("containerStatuses", []) or []:
        if status.get("name") == CONTAINER_NAME:
            return dict(status)
    return {}


def container_runtime_name(container_status: KubeObject) -> Optional[str]:
    """The CRI runtime that ran a container, as the kubelet names it in `containerID`
    (`<runtime>://<id>`: kubelet/container/runtime.go ContainerID.String, the type being the
    runtime's own RuntimeName from its Version call): containerd, cri-o, ... (None if absent)."""
    match = re.match(r"^([a-z0-9][a-z0-9._-]{0,62})://", str(container_status.get("containerID") or ""))
    return match.group(1) if match else None


def _true_condition(obj: KubeObject, types: Tuple[str, ...]) -> KubeObject:
    """The first of the object's conditions that is True and of one of these types, or {}."""
    for condition in obj.get("status", {}).get("conditions", []) or []:
        if condition.get("type") in types and condition.get("status") == "True":
            return dict(condition)
    return {}


def _condition_time(obj: KubeObject, condition_type: str) -> Optional[float]:
    return optional_timestamp(_true_condition(obj, (condition_type,)).get("lastTransitionTime"))


# The job controller's decision comes before its terminal condition: since Kubernetes 1.31 it
# writes SuccessCriteriaMet or FailureTarget first, and Complete or Failed only once every pod has
# terminated (job_controller.go, delayTerminalCondition and enactJobFinished; kubernetes/kubernetes
# #125510), so a pod that ignores SIGTERM holds Failed back by its whole grace period. The first of
# the two is final: the tool decides on it.
SUCCESS_CONDITIONS = ("Complete", "SuccessCriteriaMet")
FAILURE_CONDITIONS = ("Failed", "FailureTarget")


def job_condition(job: KubeObject) -> Optional[str]:
    """The job controller's decision, "Complete" or "Failed" (see SUCCESS_CONDITIONS); None before it."""
    condition = _true_condition(job, SUCCESS_CONDITIONS + FAILURE_CONDITIONS)
    if not condition:
        return None
    return "Complete" if condition["type"] in SUCCESS_CONDITIONS else "Failed"


def failed_condition_text(job: KubeObject) -> str:
    """The Job's Failed (or FailureTarget) condition for a sentence: its reason and message."""
    condition = _true_condition(job, FAILURE_CONDITIONS)
    if not condition:
        return "no Failed condition"
    reason = condition.get("reason") or "unknown reason"
    return f"{reason}: {condition['message']}" if condition.get("message") else str(reason)


def failed_condition_reason(job: KubeObject) -> Optional[str]:
    """The Job's Failed (or FailureTarget) condition's reason alone, to decide on (e.g.
    FailedIndexes); None without one."""
    condition = _true_condition(job, FAILURE_CONDITIONS)
    if not condition:
        return None
    return condition["reason"] if isinstance(condition.get("reason"), str) else ""


# Queues. Kueue's webhook creates a Job suspended (spec.suspend) and its controller resumes it once
# the Job's Workload is admitted, perhaps never (Kueue docs, "Run a Kubernetes Job"; "Troubleshooting
# Jobs"); the job controller then writes the Suspended condition False (reason JobResumed) and sets
# startTime anew, from which activeDeadlineSeconds counts (job_controller.go, syncJob). MultiKueue
# hands the Job to another controller through spec.managedBy (GA in 1.35), and the job controller
# leaves a Job managed by another alone. A mutating webhook may add a sidecar or change what a
# container runs.
JOB_CONTROLLER_NAME = "kubernetes.io/job-controller"  # spec.managedBy of a Job the job controller runs


def watched_object_problem(obj: Any) -> str:
    """What in a watched Job or pod has a shape the API server never sends ("" if nothing): the
    fields the waiter reads (metadata, spec, status, its conditions and counts) must be what
    the API's types say (batch/v1 Job, core/v1 Pod), else the watch cannot be trusted to say when
    the Job ends, and the waiter polls instead."""
    if not isinstance(obj, dict):
        return f"the object is {json_kind(obj)}"
    for field in ("metadata", "spec", "status"):
        if not isinstance(obj.get(field, {}), dict):
            return f"its {field} is {json_kind(obj[field])}"
    metadata, status = obj.get("metadata", {}), obj.get("status", {}) or {}
    if not isinstance(metadata.get("name"), str) or not isinstance(metadata.get("labels", {}), dict):
        return "its metadata lacks a name, or its labels are not an object"
    conditions = status.get("conditions", [])
    if not isinstance(conditions or [], list) or not all(isinstance(each, dict) for each in conditions or []):
        return "its status.conditions is not a list of objects"
    for condition in conditions or []:
        if not all(isinstance(condition.get(key, ""), str) for key in ("type", "status", "reason", "message")):
            return "a condition's type, status, reason or message is not a string"
    counts = ("active", "succeeded", "failed", "ready", "terminating")
    if not all(status.get(key) is None or is_int(status.get(key)) for key in counts):
        return "a count in its status is not an integer"
    if not isinstance(status.get("phase", ""), str):
        return "its status.phase is not a string"
    return ""


def job_suspended(job: KubeObject) -> bool:
    return dig(job, "spec", "suspend") is True


def job_admission_time(job: KubeObject) -> Optional[float]:
    """When the job controller let a suspended Job run (its clock, whole seconds): the Suspended
    condition's turn to False, else the startTime it set on resuming; None while it says neither."""
    for condition in dig(job, "status", "conditions") or []:
        if condition.get("type") == "Suspended" and condition.get("status") == "False":
            return optional_timestamp(condition.get("lastTransitionTime"))
    return None if job_suspended(job) else optional_timestamp(dig(job, "status", "startTime"))


def foreign_manager(job: KubeObject) -> Optional[str]:
    """The controller named by the Job's spec.managedBy when it is not the job controller (MultiKueue's
    kueue.x-k8s.io/multikueue): that one runs the Job, elsewhere, and the tool cannot measure it."""
    managed_by = dig(job, "spec", "managedBy")
    return str(managed_by) if managed_by not in (None, "", JOB_CONTROLLER_NAME) else None


# Fields a webhook may add to a securityContext that loosen it (any field the run set counts if changed).
_LOOSENING = {"privileged": True, "allowPrivilegeEscalation": True, "runAsUser": 0, "runAsGroup": 0}
_UNCONFINED = ("seccompProfile", "appArmorProfile")


def _security_changes(where: str, ours: Any, theirs: Any) -> List[str]:
    """What a webhook changed in a securityContext: a field the run set with another value or
    removed, or a field added that loosens it (privileged, privilege escalation, root, added
    capabilities, an unconfined profile, an unmasked /proc). A field added that only confines
    more (a RuntimeDefault seccomp profile, SELinux labels, procMount Default) is no change: managed
    clusters add them to every pod."""
    ours = dict(ours) if isinstance(ours, dict) else {}
    theirs = dict(theirs) if isinstance(theirs, dict) else {}
    changes = [
        f"{where}.{key} {short_repr(value)} became {short_repr(theirs.get(key))}"
        for key, value in ours.items()
        if theirs.get(key) != value
    ]
    added = [(key, value) for key, value in theirs.items() if key not in ours and _loosens(key, value)]
    changes += [f"{where}.{key} {short_repr(value)} was added" for key, value in added]
    return changes


def _loosens(key: str, value: Any) -> bool:
    """Whether a securityContext field the run did not set loosens it when added (see _security_changes)."""
    if key in _LOOSENING:
        wanted = _LOOSENING[key]
        return type(value) is type(wanted) and value == wanted  # True is not the user ID 1, nor 0 False
    if key == "capabilities":
        return isinstance(value, dict) and bool(value.get("add"))
    if key in _UNCONFINED:
        return isinstance(value, dict) and value.get("type") == "Unconfined"
    return key == "procMount" and value != "Default"


def template_changes(submitted: KubeObject, stored: KubeObject) -> List[str]:
    """What differs between the pod spec the run submitted and one the cluster stored (the Job's
    template, or a pod's spec) in what runs: containers added or removed (a sidecar), a container's
    image, command or args, its or the pod's securityContext loosened (_security_changes), the
    runtimeClassName. Fields the API server defaults (pull policy, termination message path, ...)
    are not compared."""
    changes = []
    for key in ("initContainers", "containers"):
        ours = {c.get("name"): c for c in submitted.get(key) or []}
        theirs = {c.get("name"): c for c in stored.get(key) or [] if isinstance(c, dict)}
        changes += [f"{key} {short_repr(name)} added" for name in theirs if name not in ours]
        changes += [f"{key} {short_repr(name)} removed" for name in ours if name not in theirs]
        for name, container in ours.items():
            other = theirs.get(name)
            if other is None:
                continue
            changes += [
                f"container {name}'s {field} {short_repr(container.get(field))} became {short_repr(other.get(field))}"
                for field in ("image", "command", "args")
                if container.get(field) != other.get(field)
            ]
            where = f"container {name}'s securityContext"
            changes += _security_changes(where, container.get("securityContext"), other.get("securityContext"))
    changes += _security_changes(
        "the pod's securityContext", submitted.get("securityContext"), stored.get("securityContext")
    )
    if submitted.get("runtimeClassName") != stored.get("runtimeClassName"):
        changes.append(
            f"runtimeClassName {short_repr(submitted.get('runtimeClassName'))} became "
            f"{short_repr(stored.get('runtimeClassName'))}"
        )
    return changes


_INDEX = r"^(0|[1-9][0-9]{0,8})$"
_INDEX_RANGE = r"^(0|[1-9][0-9]{0,8})-(0|[1-9][0-9]{0,8})$"


def parse_index_set(text: Any) -> List[int]:
    """An Indexed Job's status.failedIndexes or completedIndexes ("1,3-5"), sorted; ValueError if malformed."""
    if text is None or text == "":
        return []
    if not isinstance(text, str):
        raise ValueError(f"an index list is a string, not {short_repr(text)}")
    indexes: List[int] = []
    for part in text.split(","):
        single, span = re.match(_INDEX, part), re.match(_INDEX_RANGE, part)
        if single:
            indexes.append(int(part))
        elif span and int(span.group(1)) <= int(span.group(2)) <= int(span.group(1)) + MAX_COUNT_LARGE:
            indexes.extend(range(int(span.group(1)), int(span.group(2)) + 1))
        else:
            raise ValueError(f"{short_repr(part)} is not an index or a range of indexes")
    return sorted(set(indexes))


def pod_index(pod: KubeObject, count: int, inspect: str) -> int:
    """An Indexed Job's pod's completion index, from its annotation: a decimal in [0, count)."""
    text = dig(pod, "metadata", "annotations", INDEX_ANNOTATION)
    if not isinstance(text, str) or not re.match(_INDEX, text) or not int(text) < count:
        raise EpisodeInvalid(
            str(pod["metadata"]["name"]),
            f"its {INDEX_ANNOTATION} annotation is {short_repr(text)}, not an index in 0..{count - 1}",
            inspect,
        )
    return int(text)


FAILED_MESSAGE_LIMIT = 200  # characters of a failed container's last message line kept in its cause


def _phase_failure(pod: KubeObject) -> str:
    """A pod that did not succeed, in one clause: its phase, exit code and reason, and the last
    line of a failed container's termination message (the worker's own words for why, such as
    the template's missing task fields: untrusted, so bounded and escaped)."""
    status = pod.get("status", {})
    terminated = _container_status(pod).get("state", {}).get("terminated") or {}
    detail = f"exit code {terminated['exitCode']}" if "exitCode" in terminated else "no exit code"
    reason = status.get("reason") or terminated.get("reason")
    text = f"the pod ended in phase {status.get('phase')} ({detail}{', ' + reason if reason else ''})"
    message = terminated.get("message")
    lines = [line for line in message.splitlines() if line.strip()] if isinstance(message, str) else []
    if status.get("phase") == "Failed" and lines and not lines[-1].lstrip().startswith("{"):  # words, not events
        last = lines[-1][-FAILED_MESSAGE_LIMIT:]
        text += f"; its termination message ends {short_repr(last, FAILED_MESSAGE_LIMIT + 20)}"
    return text


def _deleted_after_the_job_failed(metadata: KubeObject, job: KubeObject) -> bool:
    """Whether a pod's deletion was asked for no earlier than the second the Job failed (both
    whole-second stamps of the API server); False when either is unknown."""
    try:
        failed = [_condition_time(job, kind) for kind in FAILURE_CONDITIONS]
        deleted = optional_timestamp(metadata.get("deletionTimestamp"))
        grace = finite_number(metadata.get("deletionGracePeriodSeconds")) or 0.0
        known = [at for at in failed if at is not None]
    except (TypeError, ValueError):
        return False
    return deleted is not None and bool(known) and deleted - grace >= min(known)


def pod_failure(pod: KubeObject, job: Optional[KubeObject] = None) -> Tuple[int, str]:
    """Why the pod cannot be a valid episode, by the first rule it breaks, with the rule's rank
    (0 evicted, 1 failed on its own, 2 deleted or replaced mid-run: a failed Job's controller
    deletes the others); (3, "") for a pod that broke none of them. `job`, the Job as last read:
    a pod whose deletion was asked for (deletionTimestamp less deletionGracePeriodSeconds) once
    the Job had failed, without a DisruptionTarget condition, was deleted by the job controller
    with the Job's other active pods (job_controller.go, deleteActivePods), and its rule says so,
    with the Job's condition; one deleted before may have failed the Job itself."""
    status, metadata = pod.get("status", {}), pod["metadata"]
    deleted = metadata.get("deletionTimestamp")
    own_disk = own_disk_eviction(pod)
    if own_disk:
        return 1, (
            f"the pod was evicted for its own disk use ({own_disk.strip()}): the episode's own failure, not the "
            "infrastructure's (--ephemeral-storage, --workspace-size)"
        )
    if status.get("reason") == "Evicted":
        return 0, f"the pod was evicted ({status.get('message', 'no message')})"
    if status.get("phase") == "Failed" and not deleted and status.get("reason") == POD_DEADLINE_REASON:
        deadline = dig(pod, "spec", "activeDeadlineSeconds")
        return 1, (
            f"it ran past its own deadline of {short_repr(deadline)} s (--episode-timeout: the pod's "
            f"activeDeadlineSeconds; {_phase_failure(pod)})"
        )
    if status.get("phase") == "Failed" and not deleted:
        return 1, _phase_failure(pod)
    if deleted:
        disruption = [
            f"{c.get('reason')}: {c.get('message')}"
            for c in status.get("conditions", []) or []
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        ]
        detail = f"; {disruption[0]}" if disruption else ""
        if not disruption and job is not None and _deleted_after_the_job_failed(metadata, job):
            return 2, (
                f"the pod was deleted mid-run by the job controller because the Job failed "
                f"({failed_condition_text(job)}; deletionTimestamp {deleted})"
            )
        return 2, f"the pod was deleted mid-run (deletionTimestamp {deleted}{detail})"
    return 3, ""


def pod_count_problem(pods: List[KubeObject], count: int, inspect: str, replaced: int = 0) -> Optional[DemoError]:
    """The error when the Job's pods are not one per requested episode, else None. `pods`: each
    episode's last attempt; `replaced`: the pods lost to the infrastructure before them
    (--infra-retries), which episode_attempts accounted for one by one."""
    if len(pods) == count:
        return None
    names = ", ".join(sorted(pod["metadata"]["name"] for pod in pods)) or "none"
    besides = f" besides the {replaced} it replaced after the infrastructure lost them" if replaced else ""
    return DemoError(
        f"the Job has {len(pods)} pods{besides} but {count} episodes were requested "
        f"(pods: {names}); a pod was added, replaced or lost; inspect {inspect}",
        EXIT_EPISODE,
    )


INFRA_CAUSE_LIMIT = 300  # characters of a lost pod's condition message kept in its cause

# A node whose kubelet stopped answering. Nothing sets its pods' phase: the node lifecycle
# controller marks the Node Ready Unknown (after the node-monitor grace period) and its pods Ready
# False (pkg/controller/util/node/controller_utils.go MarkPodsNotReady: the condition alone, no
# reason), the taint manager deletes them only after their tolerationSeconds for the unreachable
# or not-ready taint, 300 s by default (plugin/pkg/admission/defaulttolerationseconds), and PodGC
# marks them Failed only when the Node object is deleted or tainted out-of-service
# (pkg/controller/podgc/gc_controller.go gcOrphaned, gcTerminating, markFailedAndDeletePodWithCondition).
# With a podFailurePolicy the job controller replaces a pod only once it is Failed
# (pkg/controller/job/job_controller.go isPodFailed, onlyReplaceFailedPods): until then the episode
# is neither finished nor retried.
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
LOST_NODE_RULE = (
    "a pod of a node that stopped answering stays Running (no kubelet sets its phase), so the job controller "
    "neither counts nor replaces it until PodGC marks it Failed, which it does only once the Node is deleted or "
    f"tainted {OUT_OF_SERVICE_TAINT} (`kubectl taint nodes NODE {OUT_OF_SERVICE_TAINT}=nodeshutdown:NoExecute`, "
    "for a node known to be down)"
)


def unanswered_node(pod: KubeObject) -> str:
    """The node of a pod whose kubelet seems to have stopped answering, else "": a pod bound to a
    node, not terminal, whose episode container runs yet whose Ready condition is False without
    the kubelet's reason (the node lifecycle controller's MarkPodsNotReady; the episode has no
    readiness probe, so its own kubelet would say ContainersNotReady), or that the taint manager
    is deleting (DisruptionTarget DeletionByTaintManager) while it still runs."""
    status: KubeObject = pod["status"] if isinstance(pod.get("status"), dict) else {}
    spec: KubeObject = pod["spec"] if isinstance(pod.get("spec"), dict) else {}
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node or status.get("phase") in ("Succeeded", "Failed"):
        return ""
    running = bool(dig(_container_status(pod), "state", "running"))
    for condition in status.get("conditions") or []:
        if not isinstance(condition, dict):
            continue
        kind, state, reason = condition.get("type"), condition.get("status"), condition.get("reason")
        if kind == "Ready" and state == "False" and running and reason != "ContainersNotReady":
            return node
        if kind == "DisruptionTarget" and state == "True" and reason == "DeletionByTaintManager":
            return node
    return ""


def node_state(name: str, node: Optional[KubeObject], failure: str = "") -> str:
    """A node's state in words, as the run names it: its Ready condition (NotReady, Unknown: the
    kubelet stopped posting its status) with reason and time, the out-of-service taint; gone when
    the Node object was deleted; unknown when it could not be read (`failure`)."""
    if failure:
        return f"node {name}: state unknown (cannot read it: {failure})"
    if node is None:
        return f"node {name}: deleted"
    status: KubeObject = node["status"] if isinstance(node.get("status"), dict) else {}
    ready = next((c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"), {})
    state = {"True": "Ready", "False": "NotReady"}.get(str(ready.get("status")), "Unknown")
    detail = ", ".join(str(ready[key]) for key in ("reason", "message") if ready.get(key))
    since = f" since {ready['lastTransitionTime']}" if ready.get("lastTransitionTime") else ""
    taints = [t for t in dig(node, "spec", "taints") or [] if isinstance(t, dict)]
    out = ", tainted out-of-service" if any(t.get("key") == OUT_OF_SERVICE_TAINT for t in taints) else ""
    text = f"node {name}: {state}{since}{' (' + detail + ')' if detail else ''}{out}"
    return re.sub(r"[\x00-\x1f\x7f]", "?", text[:INFRA_CAUSE_LIMIT])


def lost_node_note(lost_pods: Dict[str, str], node_states: Dict[str, str]) -> str:
    """The words a progress line or a failure adds for the pods on nodes that stopped answering
    (`lost_pods`: pod -> node; `node_states`: node -> node_state), "" when there are none."""
    if not lost_pods:
        return ""
    by_node: Dict[str, List[str]] = {}
    for pod, node in sorted(lost_pods.items()):
        by_node.setdefault(node, []).append(pod)
    parts = [
        f"{node_states.get(node, f'node {node}')}, its pod{'s' if len(pods) > 1 else ''} {', '.join(pods)} "
        f"still Running there"
        for node, pods in sorted(by_node.items())
    ]
    return "; ".join(parts)


# The kubelet's words for an eviction over the pod's own disk use (kubernetes/kubernetes
# pkg/kubelet/eviction/helpers.go: podEphemeralStorageMessageFmt, containerEphemeralStorageMessageFmt,
# emptyDirMessageFmt, set by eviction_manager.go localStorageEviction without DisruptionTarget; and
# evictionMessage's containerMessageFmt, "Container %s was using %s, request is %s, ..." (before
# 1.32: "..., which exceeds its request of %s"), which a node-pressure eviction's message and its
# DisruptionTarget condition carry for each container over its request). The container and the
# volume are the run's own names; a pod cannot write its status, so none of this is the pod's text.
_OWN_DISK_USE = (
    "Pod ephemeral local storage usage exceeds the total limit of containers",
    f"Container {CONTAINER_NAME} exceeded its local ephemeral storage limit",
    f'Usage of EmptyDir volume "{WORKSPACE_VOLUME}" exceeds the limit',
)
_NODE_LOW_ON_DISK = ("The node was low on resource: ephemeral-storage.", "The node was low on resource: inodes.")
_OWN_USE_OVER_REQUEST = f"Container {CONTAINER_NAME} was using "


def own_disk_eviction(pod: KubeObject) -> str:
    """The kubelet's message when it evicted this pod for its own use of the disk: over its
    ephemeral-storage limit, over /workspace's sizeLimit, or, when the node ran low on disk, for
    the episode container's use beyond its request; "" for any other pod. Such an eviction is the
    episode's own failure, never a loss of the infrastructure (infra_loss): a retry would be one
    the agent bought by filling the disk."""
    status = pod.get("status")
    if not isinstance(status, dict):
        return ""
    messages = [status.get("message")] if status.get("reason") == "Evicted" else []
    messages += [
        condition.get("message")
        for condition in status.get("conditions") or []
        if isinstance(condition, dict) and condition.get("type") == "DisruptionTarget"
    ]
    for message in messages:
        if not isinstance(message, str):
            continue
        own = any(message.startswith(words) for words in _OWN_DISK_USE)
        if own or (message.startswith(_NODE_LOW_ON_DISK) and _OWN_USE_OVER_REQUEST in message):
            return re.sub(r"[\x00-\x1f\x7f]", "?", message[:INFRA_CAUSE_LIMIT])
    return ""


def infra_loss(pod: KubeObject) -> str:
    """Why the infrastructure lost this failed pod, in the cluster's words: its DisruptionTarget
    condition (eviction, preemption, the taint manager or PodGC deleting it with its node: the
    condition's reason says which), its status reason Evicted (the kubelet's node-pressure
    eviction, on clusters without the condition), or the kubelet's admission refusal (a status
    reason, and no container ever ran); "" for a pod that did not fail, or failed any other way
    (its own exit code, a deletion by someone else, an eviction for its own disk use:
    own_disk_eviction)."""
    status = pod.get("status")
    if not isinstance(status, dict) or status.get("phase") != "Failed" or own_disk_eviction(pod):
        return ""
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and (condition.get("type"), condition.get("status")) == (
            "DisruptionTarget",
            "True",
        ):
            text = f"DisruptionTarget {condition.get('reason')}: {condition.get('message')}"
            return re.sub(r"[\x00-\x1f\x7f]", "?", text[:INFRA_CAUSE_LIMIT])
    if status.get("reason") == "Evicted":
        return re.sub(r"[\x00-\x1f\x7f]", "?", f"evicted: {status.get('message', 'no message')}"[:INFRA_CAUSE_LIMIT])
    # refused by the kubelet's admission; never the pod's own activeDeadlineSeconds (the kubelet's
    # DeadlineExceeded, pkg/kubelet/active_deadline.go), which counts from its admission and is the episode's
    if status.get("reason") and status.get("reason") != POD_DEADLINE_REASON and not _container_ran(status):
        text = f"rejected by the kubelet before any container ran ({status.get('reason')}: {status.get('message')})"
        return re.sub(r"[\x00-\x1f\x7f]", "?", text[:INFRA_CAUSE_LIMIT])
    return ""


def whose_failure(pod: Optional[KubeObject]) -> str:
    """Whose a failed episode's failure is: FAILURE_INFRASTRUCTURE only when the pod's status proves
    a loss (infra_loss: DisruptionTarget, Evicted, the kubelet refusing it at admission; or a
    deletion, which the episode cannot have asked for: its pod carries no ServiceAccount token),
    else FAILURE_EPISODE: its exit code, a kill, its events, its own deadline, a pod never seen.
    The episode's by default, so that no failure is masked unless the cluster says it lost it."""
    if not isinstance(pod, dict):
        return FAILURE_EPISODE
    status = pod.get("status")
    metadata = pod.get("metadata")
    if infra_loss(pod) or (isinstance(status, dict) and status.get("reason") == "Evicted"):
        return FAILURE_INFRASTRUCTURE
    if isinstance(metadata, dict) and metadata.get("deletionTimestamp"):
        return FAILURE_INFRASTRUCTURE
    return FAILURE_EPISODE


def _container_ran(status: KubeObject) -> bool:
    """Whether any container of the pod started (running, or terminated now or before). A pod the
    kubelet refused at admission (pkg/kubelet/kubelet.go rejectPod: phase Failed, the admit
    handler's reason such as OutOfcpu, NodeAffinity or UnexpectedAdmissionError) ran none, so
    nothing of the episode's own doing failed it: retrying it cannot bias the rewards."""
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if not isinstance(container, dict):
            return True  # unreadable: not proven unstarted
        states = [container.get("state") or {}, container.get("lastState") or {}]
        if container.get("started") or any(state.get("running") or state.get("terminated") for state in states):
            return True
    return False


INDEX_FAILURE_COUNT_ANNOTATION = "batch.kubernetes.io/job-index-failure-count"  # on each pod, with backoffLimitPerIndex


def _attempt_order(pod: KubeObject) -> Tuple[int, str, str]:
    """An index's pods in the order the job controller made them: by the index's failures before
    each (the annotation it sets on every pod of a Job with backoffLimitPerIndex, job_controller.go
    addIndexFailureCountAnnotation), then creationTimestamp (whole seconds: two attempts of a
    second tie there), then name."""
    metadata = pod["metadata"]
    count = dig(metadata, "annotations", INDEX_FAILURE_COUNT_ANNOTATION)
    failures = int(count) if isinstance(count, str) and re.fullmatch(r"[0-9]{1,6}", count) else 0
    return failures, str(metadata.get("creationTimestamp") or ""), str(metadata["name"])


def episode_attempts(
    pods: List[KubeObject], count: int, infra_retries: int, inspect: str
) -> Tuple[List[KubeObject], Dict[str, List[LostAttempt]]]:
    """--infra-retries K: each episode's last attempt (in the listing's order) and, by its pod's
    name, the pods of its completion index that the Job replaced before it. Every replaced pod
    must be one the infrastructure lost (infra_loss), at most K of them per index, all created
    no later than the last attempt; otherwise the round fails naming the pod, since a retried
    failure of the episode's own doing would bias the rewards. With K = 0, the pods as they are.

    The last attempt is the index's one pod that was not lost; when all were lost (more losses
    than K allowed), the latest of them, which analyse_round then fails with the losses' causes."""
    if not infra_retries:
        return pods, {}
    groups: Dict[int, List[KubeObject]] = {}
    for pod in pods:
        name = str(pod["metadata"]["name"])
        groups.setdefault(pod_index(pod, count, f"{inspect} ({name})"), []).append(pod)
    last: Dict[str, List[LostAttempt]] = {}
    for index, group in groups.items():
        kept = sorted((pod for pod in group if not infra_loss(pod)), key=_attempt_order)
        lost = sorted((pod for pod in group if infra_loss(pod)), key=_attempt_order)
        if len(kept) > 1:  # name one that did not succeed: the one the Job should not have replaced
            first = next((pod for pod in kept if dig(pod, "status", "phase") != "Succeeded"), kept[0])
            then = next(pod for pod in kept if pod is not first)
            rule = pod_failure(first)[1] or f"it ended in phase {dig(first, 'status', 'phase')}"
            raise EpisodeInvalid(
                str(first["metadata"]["name"]),
                f"{rule}, and the Job ran its index {index} again (pod {then['metadata']['name']}); only a pod lost "
                "to the infrastructure (DisruptionTarget, Evicted) may be retried, never an episode's own failure",
                inspect,
            )
        final = kept[0] if kept else lost.pop()
        late = [pod for pod in lost if _attempt_order(pod)[:2] > _attempt_order(final)[:2]]
        if late:
            raise EpisodeInvalid(
                str(late[0]["metadata"]["name"]),
                f"it was created after pod {final['metadata']['name']}, the last attempt of index {index}",
                inspect,
            )
        if len(lost) > infra_retries:
            raise EpisodeInvalid(
                str(final["metadata"]["name"]),
                f"the Job replaced {len(lost)} pods of its index {index}, more than --infra-retries {infra_retries}",
                inspect,
            )
        counted = _attempt_order(final)[0]  # the failures of the index the job controller counted before it
        if counted > len(lost):  # gone before the pod watch could show them: nothing proves them lost
            raise EpisodeInvalid(
                str(final["metadata"]["name"]),
                f"the job controller counted {counted} failed pod(s) of its index {index} before it, and the run saw "
                f"{len(lost)}: the others were gone before the pod watch could prove them lost to the infrastructure",
                inspect,
            )
        last[str(final["metadata"]["name"])] = [
            {"pod": str(pod["metadata"]["name"]), "cause": infra_loss(pod), "created_at": creation_time(pod, "a pod")}
            for pod in lost
        ]
    finals = [pod for pod in pods if str(pod["metadata"]["name"]) in last]
    return finals, last


def vanished_attempts(observation: RoundObservation, pods: List[KubeObject], job_uid: str) -> List[KubeObject]:
    """The Job's pods the watch last saw Failed and lost to the infrastructure that the listing
    no longer has: a preempted pod, or one evicted through the eviction API, is deleted, and
    goes once the job controller has counted it (its finalizer removed), so only the watch still
    knows the attempt (as it was last seen)."""
    listed = {pod["metadata"]["name"] for pod in pods}
    return [
        pod
        for name, pod in observation.last_pods.items()
        if name not in listed and pod_belongs_to(pod, job_uid) and infra_loss(pod)
    ]


def episode_failure(
    pod: KubeObject, lost: Sequence[LostAttempt], infra_retries: int, job: Optional[KubeObject] = None
) -> Tuple[int, str]:
    """pod_failure, told of the episode's attempts (and of the Job, `job`): a last attempt that the
    infrastructure lost too used up --infra-retries; one that failed otherwise says which attempt it was."""
    rank, rule = pod_failure(pod, job)
    if rule and infra_retries and infra_loss(pod):
        causes = "; ".join(attempt["cause"] for attempt in lost)
        rule = (
            f"{rule}, the last of its {len(lost) + 1} attempts, all lost to the infrastructure: more than "
            f"--infra-retries {infra_retries} allows{' (before: ' + causes + ')' if causes else ''}"
        )
    elif rule and lost:
        rule = f"{rule} (its attempt {len(lost) + 1}, after {len(lost)} lost to the infrastructure)"
    return rank, rule


def termination_message(pod: KubeObject) -> str:
    terminated = _container_status(pod).get("state", {}).get("terminated") or {}
    return str(terminated.get("message") or "")


def split_pods_and_events(
    items: List[KubeObject], job: Optional[KubeObject]
) -> Tuple[List[KubeObject], List[KubeObject]]:
    """From one `get pods,events` listing: the Job's pods (by its UID label, in creation order)
    and every event of the namespace."""
    uid = job["metadata"]["uid"] if job else None
    pods = [
        item
        for item in items
        if item.get("kind") == "Pod"
        and isinstance(item.get("metadata"), dict)
        and isinstance(item["metadata"].get("name"), str)
        and uid
        and pod_belongs_to(item, uid)
    ]
    pods.sort(key=lambda pod: (pod["metadata"].get("creationTimestamp", ""), pod["metadata"]["name"]))
    events = [item for item in items if item.get("kind") == "Event"]
    return pods, events


def pod_list(pods: List[KubeObject]) -> KubeObject:
    return {"apiVersion": "v1", "kind": "List", "items": pods}


def record_pod_sighting(sightings: Dict[str, Dict[str, Any]], pod: Any, wall: float) -> None:
    """Stamp a pod's first sighting and each phase's first sighting with the client's clock."""
    name = (dig(pod, "metadata", "name") if isinstance(pod, dict) else None) or ""
    if not name:
        return
    record = sightings.setdefault(name, {"first_seen_at": wall})
    phase = pod.get("status", {}).get("phase") or "Pending"
    record["phase"] = phase
    record.setdefault(phase, wall)


JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"


def final_pods_from_watch(observation: RoundObservation, job_uid: str) -> Optional[List[KubeObject]]:
    """The Job's pods in their final state as the pod watch delivered them, when that provably
    is their final state; else None, and the caller lists them.

    The proof: the Job is Complete and has counted every pod (succeeded + failed equals the pods
    seen, nothing left in uncountedTerminatedPods); every pod was last seen terminal (Succeeded
    or Failed: a terminal pod's status never changes again), not being deleted, and, where the
    cluster tracks Job pods with a finalizer, with that finalizer removed (the controller's last
    write to it); no pod was deleted during the watch."""
    job = observation.job
    status = job.get("status") or {}
    if observation.condition != "Complete" or observation.pod_deleted or not observation.last_pods:
        return None
    uncounted = status.get("uncountedTerminatedPods") or {}
    if any(bool(uncounted.get(key)) for key in ("succeeded", "failed")):
        return None
    counts: List[Any] = [status.get("succeeded"), status.get("failed")]
    counted = sum(value for value in counts if is_int(value))
    pods = list(observation.last_pods.values())
    if counted != len(pods):
        return None
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if not pod_belongs_to(pod, job_uid) or metadata.get("deletionTimestamp"):
            return None
        if JOB_TRACKING_FINALIZER in (metadata.get("finalizers") or []):
            return None
        if dig(pod, "status", "phase") not in ("Succeeded", "Failed"):
            return None
    pods.sort(key=lambda pod: (pod["metadata"].get("creationTimestamp", ""), pod["metadata"]["name"]))
    return pods


def stopped_round_pods(observation: RoundObservation, job_uid: str) -> Tuple[List[KubeObject], List[KubeObject]]:
    """A round stopped early (JOB_STOPPED): the Job's pods that had ended as the watch last showed
    them (terminal, not being deleted: a terminal pod's status never changes again, so each is
    final), and the others, which the Job's deletion stops; each list in creation order."""
    ended: List[KubeObject] = []
    stopped: List[KubeObject] = []
    for pod in observation.last_pods.values():
        if not pod_belongs_to(pod, job_uid):
            continue
        final = dig(pod, "status", "phase") in ("Succeeded", "Failed")
        (ended if final and not dig(pod, "metadata", "deletionTimestamp") else stopped).append(pod)
    for pods in (ended, stopped):
        pods.sort(key=lambda pod: (pod["metadata"].get("creationTimestamp", ""), pod["metadata"]["name"]))
    return ended, stopped


def ended_pods_selector(selector: str, ended: List[KubeObject], stopped: List[KubeObject]) -> Optional[str]:
    """A label selector that matches exactly the `ended` pods of a stopped round, and no pod it
    stopped, by their completion-index label (`SELECTOR,INDEX in (0,2,5)`); None when a pod lacks
    the label or an index has a stopped pod too (--infra-retries' replacement), so that read_logs
    reads each pod by name."""
    indexes = [dig(pod["metadata"], "labels", INDEX_LABEL) for pod in ended]
    others = {dig(pod["metadata"], "labels", INDEX_LABEL) for pod in stopped}
    if not indexes or not all(isinstance(index, str) and index.isdigit() for index in indexes):
        return None
    if others & set(indexes) or None in others:
        return None
    return f"{selector},{INDEX_LABEL} in ({','.join(sorted(set(indexes), key=int))})"


def unread_pods_selector(selector: str, unread: List[KubeObject], read: List[KubeObject]) -> Optional[str]:
    """The selector for read_logs of the pods whose logs no read while they ran brought, when
    others' did (`read`, with a stopped round's stopped pods): up to LOG_SELECTOR_PODS, one that
    matches exactly them by their completion indexes (ended_pods_selector); beyond, the Job's own,
    which read_logs narrows to sets of their indexes. None, so that each is read by name, when one
    lacks the label or shares its index with a pod of `read` (--infra-retries' replacement)."""
    exact = ended_pods_selector(selector, unread, read)
    if exact is None or len(unread) <= LOG_SELECTOR_PODS:
        return exact
    return selector


def first_to_end(
    ended: List[KubeObject], known: Dict[str, bool], limit: int
) -> Tuple[List[KubeObject], List[KubeObject]]:
    """--stop-after K (`limit`): of a round's ended pods, those it keeps and those it stops.

    Kept: every pod with a line already (`known`, by pod: whether its line is a standing reward;
    a failure line stays too, it counts in no reward), then, while fewer than K rewards stand, the
    others in the order their containers ended (finishedAt, the node's clock to the second; then
    creation and name). The rest are stopped with no line. This is what keeps exactly K when the
    Job completes before the stop takes effect and the pod watch lags the Job's: their lines
    were never written, so the listing's pods are chosen here, not by the lines."""

    def ended_at(pod: KubeObject) -> Tuple[float, str, str]:
        finished: Optional[float] = None  # its last container's end: unknown sorts last
        for status in dig(pod, "status", "containerStatuses") or []:
            text = dig(status, "state", "terminated", "finishedAt") if isinstance(status, dict) else None
            with contextlib.suppress(ValueError):  # the cluster's text; unreadable is unknown
                stamp = optional_timestamp(text) if isinstance(text, str) else None
                finished = stamp if finished is None or stamp is None else max(finished, stamp)
        metadata = pod.get("metadata") or {}
        created = metadata.get("creationTimestamp")
        return (
            finished if finished is not None else float("inf"),
            created if isinstance(created, str) else "",
            str(metadata.get("name")),
        )

    room = max(0, limit - sum(1 for standing in known.values() if standing))
    kept, stopped = [], []
    for pod in sorted(ended, key=ended_at):
        name = pod["metadata"]["name"]
        if name in known:
            kept.append(pod)
        elif room:
            room -= 1
            kept.append(pod)
        else:
            stopped.append(pod)
    order = {id(pod): place for place, pod in enumerate(ended)}
    return sorted(kept, key=lambda pod: order[id(pod)]), sorted(stopped, key=lambda pod: order[id(pod)])


def pod_counts(sightings: Dict[str, Dict[str, Any]], job: KubeObject) -> Dict[str, int]:
    """Progress counts from the pod watch, or from the Job's status when no pod was seen."""
    if sightings:
        phases = [record.get("phase") for record in sightings.values()]
        return {
            "created": len(sightings),
            "running": phases.count("Running"),
            "succeeded": phases.count("Succeeded"),
            "failed": phases.count("Failed"),
        }
    status = job.get("status", {})
    active, succeeded, failed = (int(status.get(key, 0) or 0) for key in ("active", "succeeded", "failed"))
    return {
        "created": active + succeeded + failed,
        "running": int(status.get("ready", 0) or 0),
        "succeeded": succeeded,
        "failed": failed,
    }


def latest_warning(events: List[KubeObject], names: Iterable[str]) -> str:
    """The newest Warning event about the Job or its pods, e.g. a FailedCreate from Pod Security
    admission, so a stuck Job's error says why; empty when there is none."""
    wanted = set(names)
    warnings = [
        event
        for event in events
        if event.get("type") == "Warning"
        and dig(event, "involvedObject", "name") in wanted
        and event.get("reason") not in ("DeadlineExceeded", "BackoffLimitExceeded")  # the outcome, not a cause
    ]
    if not warnings:
        return ""
    newest = max(warnings, key=lambda e: e.get("lastTimestamp") or e["metadata"].get("creationTimestamp") or "")
    message = " ".join(str(newest.get("message", "")).split())
    return f"; latest warning: {newest.get('reason')}: {message}"


# Pure core: logs and events ###################################################
# A pod's output (untrusted) scanned for the worker's events, line by line, bounded. Uses the
# constants, errors, records and numbers above.


def parse_event_line(text: str) -> Optional[JsonObject]:
    """One line of a pod's output: its event, None for noise, or EventParseError.

    Lines that are not JSON event objects (a warning from Python or the runtime, a structured
    log line without an "event" key) are noise; a line that mentions "event" but is broken
    (including NaN, Infinity, nesting too deep, an integer too long), or an event without a
    finite numeric time, is an error."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        event = json.loads(stripped, parse_constant=_reject_constant)
    except (RecursionError, ValueError) as error:  # JSONDecodeError, NaN or Infinity, an integer of too many digits
        if '"event"' not in stripped:
            return None
        detail = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
        detail = "nested too deeply" if isinstance(error, RecursionError) else detail[:120]
        raise EventParseError(f"is a malformed JSON event ({detail})") from None
    if not isinstance(event, dict) or "event" not in event:
        return None
    if not isinstance(event["event"], str):
        raise EventParseError("has an 'event' that is not a name")
    if finite_number(event.get("at")) is None:
        raise EventParseError(f"({short_repr(event['event'])}) has no finite numeric 'at' time")
    return event


class EventScanner:
    """Finds the worker's events in one episode's output, line by line, keeping only the first
    line of each of KEPT_EVENTS as bytes and counting the rest, so memory stays bounded whatever
    the pod prints (`budget`: the run's memory for kept lines, shared by every pod)."""

    def __init__(self, budget: Optional[LogBudgets] = None) -> None:
        self.kept: Dict[str, bytes] = {}
        self.counts: Dict[str, int] = {}
        self.budget = budget
        self.error = ""  # the first bad event line; later lines are only counted
        self.lines = 0
        self.long_lines = 0  # lines over EVENT_LINE_LIMIT, ignored as noise

    def line(self, raw: bytes) -> bool:
        """Scan one line; True when it is kept (the first of its kind of KEPT_EVENTS)."""
        self.lines += 1
        if self.error:
            return False
        if len(raw) > EVENT_LINE_LIMIT:
            self.long_lines += 1
            return False
        try:
            event = parse_event_line(raw.decode("utf-8", "replace"))
        except EventParseError as error:
            self.error = f"line {self.lines} {error}"
            return False
        if event is None:
            return False
        if sum(self.counts.values()) >= EVENTS_PER_EPISODE_LIMIT:
            self.error = f"has more than {EVENTS_PER_EPISODE_LIMIT} events"
            return False
        name = event["event"] if event["event"] in KEPT_EVENTS else "other"
        self.counts[name] = self.counts.get(name, 0) + 1
        if name == "other" or name in self.kept:
            return False
        if self.budget is not None and not self.budget.take_memory(len(raw)):
            self.error = f"line {self.lines} is past the run's {KEPT_EVENT_BYTES_LIMIT:,} bytes for kept event lines"
            return False
        self.kept[name] = bytes(raw)
        return True

    def long_line(self) -> None:
        self.lines += 1
        self.long_lines += 1

    def pod_log(self, saved_bytes: int = 0, dropped_bytes: int = 0) -> PodLog:
        return PodLog(self.kept, self.counts, self.error, self.lines, self.long_lines, saved_bytes, dropped_bytes)


def scan_text(text: str) -> PodLog:
    """A whole text's events (a termination message), read as a log is: split on newlines only,
    as kubectl splits a log, so a carriage return or U+2028 inside a line cannot start another
    event."""
    scanner = EventScanner()
    for raw in text.encode("utf-8", "surrogatepass").split(b"\n"):
        scanner.line(raw)
    return scanner.pod_log()


def logged_events(log: PodLog) -> List[JsonObject]:
    """The kept events, parsed again: each as many times as the pod printed one of its name (the
    first one's fields stand for the others, which no rule reads), ready before reward."""
    events = []
    for name in KEPT_EVENTS:
        raw = log.kept.get(name)
        event = parse_event_line(raw.decode("utf-8", "replace")) if raw is not None else None
        events += [event] * log.counts.get(name, 0) if event is not None else []
    return events


def parse_events(text: str) -> List[JsonObject]:
    """The kept events of a whole text, or EventParseError for its first bad event line."""
    log = scan_text(text)
    if log.error:
        raise EventParseError(log.error)
    return logged_events(log)


_ARTIFACT_FRAME = rb"rl-demo-artifact 1 ([0-9]{1,9}) ([0-9]{1,9}) ([0-9a-f]{64}) ([A-Za-z0-9_-]+=*) ([A-Za-z0-9+/]*=*)"


def artifact_name_key(name: str) -> str:
    """The name as a filesystem that ignores case or Unicode normalisation sees it (macOS's APFS
    and HFS+, Windows' NTFS): Unicode's canonical caseless match, NFD(casefold(NFD(name)))."""
    import unicodedata  # noqa: PLC0415 - only a run whose pods send artifacts needs it

    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", name).casefold())


def artifact_directories(names: Iterable[str]) -> List[str]:
    """The directories under DIR/artifacts/<pod>/ that these artifact names make, each once."""
    made = {"/".join(parts[:depth]) for parts in (name.split("/") for name in names) for depth in range(1, len(parts))}
    return sorted(made)


def artifact_name_problem(name: str, earlier: Iterable[str] = ()) -> str:
    """What makes an artifact's name unsafe to save under DIR/artifacts/<pod>/ ("" if nothing):
    it must be relative, "/"-separated, at most ARTIFACT_NAME_DEPTH_LIMIT segments, without empty,
    `.` or `..` segments, backslashes, or a segment that starts with `-` (a shell loop's `rm $f`
    takes it for an option), at most ARTIFACT_NAME_LIMIT bytes of UTF-8, and without a character
    that hides or disguises what a file browser shows: control characters, Unicode's format
    characters (Cf: the right-to-left override U+202E, zero-width U+200B, the BOM) and its line and
    paragraph separators (U+2028, U+2029). `earlier`: the names of the same episode before it; a
    name one filesystem would store as the same file as an earlier one, or whose directory it
    would take for an earlier one's (case-insensitive, or NFC against NFD), is refused, so no
    artifact overwrites another."""
    import unicodedata  # noqa: PLC0415 - only a run whose pods send artifacts needs it

    if not name:
        return "is empty"
    if len(name.encode("utf-8", "surrogatepass")) > ARTIFACT_NAME_LIMIT:
        return f"is longer than {ARTIFACT_NAME_LIMIT} bytes"
    if any(char < " " or "\x7f" <= char <= "\x9f" or "\ud800" <= char <= "\udfff" for char in name):
        return "has a control character"
    hidden = next((char for char in name if unicodedata.category(char) in ("Cf", "Zl", "Zp")), None)
    if hidden is not None:
        return (
            f"has U+{ord(hidden):04X} ({unicodedata.name(hidden, 'a format character')}), which file browsers and "
            "terminals do not show as itself"
        )
    if name.startswith("/"):
        return "is absolute"
    if "\\" in name:
        return "has a backslash"
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, '.' or '..' segment"
    if len(parts) > ARTIFACT_NAME_DEPTH_LIMIT:
        return f"has {len(parts)} segments, more than {ARTIFACT_NAME_DEPTH_LIMIT}"
    if any(part.startswith("-") for part in parts):
        return "has a segment that starts with '-', which a command would take for an option"
    taken: Dict[str, str] = {}
    for other in earlier:
        other_parts = other.split("/")
        for depth in range(1, len(other_parts) + 1):
            prefix = "/".join(other_parts[:depth])
            taken.setdefault(artifact_name_key(prefix), prefix)
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        same = taken.get(artifact_name_key(prefix))
        if same is not None and same != prefix:
            return (
                f"would be stored as {short_repr(same)} on a filesystem that ignores case or Unicode normalisation "
                "(macOS, Windows), the path of an earlier artifact"
            )
    return ""


def parse_artifact_frame(raw: bytes) -> ArtifactFrame:
    """A frame line (ARTIFACT_FRAME_TAG ...), checked alone; ValueError says how it is malformed.
    Whether it fits its neighbours (order, total, hash) is ArtifactSink's to check."""
    import binascii  # noqa: PLC0415 - only a run whose pods send artifacts needs it

    match = re.fullmatch(_ARTIFACT_FRAME, raw)
    if not match:
        raise ValueError("is not a well-formed artifact frame")
    seq, total = int(match.group(1)), int(match.group(2))
    if not seq < total <= ARTIFACT_FRAMES_LIMIT:
        raise ValueError(f"says it is frame {seq} of {total} (frames count from 0, at most {ARTIFACT_FRAMES_LIMIT})")
    encoded_name, encoded_data = match.group(4), match.group(5)
    try:
        if len(encoded_name) % 4 or len(encoded_data) % 4:
            raise binascii.Error("incorrect padding")
        name_bytes = binascii.a2b_base64(encoded_name.replace(b"-", b"+").replace(b"_", b"/"))
        data = binascii.a2b_base64(encoded_data)
    except binascii.Error:
        raise ValueError("is not well-formed base64") from None
    try:
        name = name_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"names an artifact that is not UTF-8 ({short_repr(name_bytes)})") from None
    problem = artifact_name_problem(name)
    if problem:
        raise ValueError(f"names an artifact {short_repr(name)} that {problem}")
    if len(data) > ARTIFACT_FRAME_DATA:
        raise ValueError(f"carries {len(data):,} bytes, more than a frame's {ARTIFACT_FRAME_DATA:,}")
    return ArtifactFrame(name, seq, total, match.group(3).decode(), data)


def declares_artifacts(message: str) -> bool:
    """Whether a termination message's reward event lists artifacts: then its pod's log must be
    read, whatever the count, for the frames travel only there."""
    log = scan_text(message)
    reward = log.kept.get("reward")
    if log.error or reward is None:
        return False
    event = parse_event_line(reward.decode("utf-8", "replace"))
    return bool(event and event.get("artifacts"))


def message_cut_at_front(message: str) -> bool:
    """Whether the kubelet may have cut the termination message's beginning: it keeps the last
    TERMINATION_MESSAGE_LIMIT bytes a container wrote (kuberuntime_container.go
    getTerminationMessage -> tail.ReadAtMost), so a message of that length may start mid-line (a
    character it cut through arrives as U+FFFD, three bytes each)."""
    return len(message.encode("utf-8", "surrogatepass")) >= TERMINATION_MESSAGE_LIMIT


def message_needs_log(message: str) -> bool:
    """A termination message that cannot carry the episode's events alone: empty (some runtimes
    never share the file), or possibly cut at the front."""
    return not message.strip() or message_cut_at_front(message)


def with_watched_pods(pods: List[KubeObject], observation: RoundObservation, job: KubeObject) -> List[KubeObject]:
    """The listed pods and, as the watch last saw them, the Job's pods the listing no longer has
    (deleted since: a failed Job's stopped pods, a preempted one), in creation order."""
    listed = {pod["metadata"]["name"] for pod in pods}
    uid = str(job["metadata"]["uid"])
    gone = [pod for name, pod in observation.last_pods.items() if name not in listed and pod_belongs_to(pod, uid)]
    if not gone:
        return pods
    return sorted(
        [*pods, *gone], key=lambda pod: (str(pod["metadata"].get("creationTimestamp") or ""), pod["metadata"]["name"])
    )


def log_wanted(pod: KubeObject) -> bool:
    """Beyond the cross-check limit, whether a pod's log is read: its termination message cannot
    carry its events, or it lists artifacts (their frames travel in the log alone)."""
    message = termination_message(pod)
    return message_needs_log(message) or declares_artifacts(message)


def complete_lines(message: str) -> str:
    """A message cut at the front without its first line, which may be the end of a longer one."""
    return message.partition("\n")[2]


def comparable_events(events: List[JsonObject]) -> List[str]:
    """Events without the test output, which the termination message may have trimmed, each as
    its canonical JSON: compared so, `true`, `1` and `1.0` differ, as they do to every rule and
    every reader of rewards.jsonl (Python's `==` holds True == 1 == 1.0)."""
    ignored = ("tests_output", "tests_output_truncated")
    return [canonical_json({k: v for k, v in event.items() if k not in ignored}) for event in events]


def canonical_json(value: Any) -> str:
    """One JSON text per value, whatever the key order: `true`, `1` and `1.0` stay three."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def describe_event_difference(log_events: List[JsonObject], message_events: List[JsonObject]) -> str:
    """What differs between the log's events and the termination message's, in words."""
    log_side, message_side = log_events, message_events
    names = sorted({str(e.get("event")) for e in log_side} | {str(e.get("event")) for e in message_side})
    for name in names:
        in_log = sum(1 for e in log_side if e.get("event") == name)
        in_message = sum(1 for e in message_side if e.get("event") == name)
        if in_log != in_message:
            return f"the log has {in_log} {short_repr(name)} events, the termination message {in_message}"
    ignored = ("tests_output", "tests_output_truncated")
    for log_event, message_event in zip(log_side, message_side):
        if log_event.get("event") != message_event.get("event"):
            return "the two report the same events in a different order"
        for key in sorted((set(log_event) | set(message_event)) - set(ignored)):
            if canonical_json(log_event.get(key, "(absent)")) != canonical_json(message_event.get(key, "(absent)")):
                return (
                    f"their {short_repr(log_event.get('event'))} events differ in {short_repr(key)}: the log has "
                    f"{short_repr(log_event.get(key, '(absent)'))}, the termination message "
                    f"{short_repr(message_event.get(key, '(absent)'))}"
                )
    return "they differ"
