"""Pure core: time, numbers, JSON, and the manifests the run creates."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import os
import re
import sys
import typing
import urllib.parse
from pathlib import Path
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple

from .constants import (
    _QUANTITY,
    _QUANTITY_SUFFIXES,
    _RFC3339,
    APP_LABEL_VALUE,
    ARTIFACTS_DIR,
    ARTIFACTS_ENV,
    CLOCK_RESOLUTION,
    CONFIGMAP_NAME,
    CONFIGMAP_OBJECT_LIMIT,
    CONFIGMAP_REQUEST_LIMIT,
    CONTAINER_NAME,
    DEFAULT_EPHEMERAL_STORAGE,
    DEFAULT_MAX_ARTIFACT_BYTES,
    DEFAULT_WORKSPACE_SIZE,
    EPHEMERAL_STORAGE,
    EXIT_CLUSTER,
    EXIT_USAGE,
    FIGURE_CLOCKS,
    INFRA_RETRIES_INSTEAD,
    JOB_FIELD_NEEDS,
    JOB_NAME,
    KUEUE_GROUP,
    KUEUE_VERSIONS,
    LAUNCHER_KEY,
    LEGACY_UID_LABEL,
    LOCAL_QUEUE_NAME,
    MAX_ARTIFACT_BYTES_ENV,
    POD_LIMITS,
    POD_REQUESTS,
    PRIVATE_FIELDS_ENV,
    PSA_ENFORCE_LABEL,
    QUEUE_NAME_LABEL,
    RUN_LABEL,
    TASKS_KEY,
    UID_LABEL,
    WORKSPACE_VOLUME,
    __version__,
)
from .errors import DemoError
from .records import JsonObject, KubeObject, PhaseStats, RunSettings

# Pure core: time, numbers, JSON ###############################################
# Timestamps, percentiles, quantities and JSON read strictly; no I/O from here to the timeline
# picture. Uses the constants.


def dig(obj: Any, *keys: str) -> Any:
    """obj[k1][k2]..., where a missing or empty level reads as {}: what `(obj.get(k1) or {}).get(k2)`
    spells, for the loose JSON of Kubernetes objects."""
    value = obj
    for key in keys[:-1]:
        value = value.get(key) or {}
    return value.get(keys[-1])


def parse_timestamp(text: str) -> float:
    """Kubernetes RFC 3339 time (usually whole seconds, 'Z') to epoch seconds."""
    match = re.match(_RFC3339, text.strip())
    if not match:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    fraction = float(match.group(7)) if match.group(7) else 0.0
    zone = match.group(8)
    offset = 0
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        offset = sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    moment = datetime.datetime(year, month, day, hour, minute, second, tzinfo=datetime.timezone.utc)
    return moment.timestamp() + fraction - offset


def optional_timestamp(text: Optional[str]) -> Optional[float]:
    return parse_timestamp(text) if text else None


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks, exactly as the guide's script computes it."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    index = (len(ordered) - 1) * q
    low, high = math.floor(index), math.ceil(index)
    return ordered[low] + (ordered[high] - ordered[low]) * (index - low)


def summarise(values: Iterable[Optional[float]]) -> Optional[PhaseStats]:
    """p50/p95/max of the known values; None when no episode has the figure."""
    known = [value for value in values if value is not None]
    if not known:
        return None
    return {"samples": len(known), "p50": percentile(known, 0.5), "p95": percentile(known, 0.95), "max": max(known)}


def difference(later: Optional[float], earlier: Optional[float]) -> Optional[float]:
    if later is None or earlier is None:
        return None
    return later - earlier


def max_known(values: Iterable[Optional[float]]) -> Optional[float]:
    """The largest of the values that are known; None when none is."""
    return max((value for value in values if value is not None), default=None)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent as a float, refused where a float cannot hold it
    (1e400 would be read as infinity, which no JSON file can carry on)."""
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text[:40]} is beyond the range of a double")
    return number


def finite_number(value: Any) -> Optional[float]:
    """A finite JSON number as a float, else None: never a boolean, never an overflow."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def json_number(value: object) -> Optional[float]:
    """A JSON number as it is (an integer stays one), else None: never a boolean."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def json_stat(stats: Optional[Mapping[str, object]], name: str) -> Optional[float]:
    """One number of a record (a phase's p50, ...), or None when the record or the number is absent."""
    return json_number(stats.get(name)) if stats else None


def is_int(value: Any, expected: Optional[int] = None) -> bool:
    """An integer exactly (a JSON true or 1.0 is not one), equal to expected when given."""
    return type(value) is int and (expected is None or value == expected)


def json_memory(value: Any) -> int:
    """About how many bytes of memory a parsed JSON value takes: what a pod's short text can
    grow into once parsed (`[[]]` nested in a list takes about 30 times its bytes)."""
    total, pending = 0, [value]
    while pending:  # a loop, not recursion: the value may be nested as deeply as the parser allows
        item = pending.pop()
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            pending += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            pending += item
    return total


def short_repr(value: Any, limit: int = 60) -> str:
    """A pod's value for a message: repr-escaped (no control character survives), and short."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_kind(value: Any) -> str:
    kinds = ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (list, "a list"), (dict, "an object"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "null")


@functools.cache
def schema_shape(schema: Any) -> Tuple[str, Any]:
    """What a schema type asks of a JSON value, worked out once per type: ("any", None),
    ("optional", X), ("record", (fields, required keys)) for a TypedDict, ("list", X),
    ("dict", X), or the scalar's name ("int", "float", "str", "bool")."""
    if schema is Any:
        return "any", None
    origin, args = typing.get_origin(schema), typing.get_args(schema)
    if origin is typing.Union:  # Optional[X], the schema's only union
        return "optional", next(arg for arg in args if arg is not type(None))
    if hasattr(schema, "__required_keys__"):
        return "record", (typing.get_type_hints(schema), schema.__required_keys__)
    if origin in (list, dict):
        return origin.__name__, args[-1]
    return schema.__name__, None


def schema_problem(value: Any, schema: Any) -> str:
    """Where JSON read back departs from its record type (a TypedDict above), "" where it does not:
    the first missing key or value of the wrong type, by its path (pods[3].image_pull.state), so a
    hand-edited or foreign file is named, never a traceback. Keys the schema does not know are
    left alone, for they are never read."""
    problem = _departure(value, schema)
    return "" if problem is None else f"{problem[0] or 'the top level'} {problem[1]}"


def _departure(value: Any, schema: Any) -> Optional[Tuple[str, str]]:
    """(path, what is wrong there) of the first departure; the path is built only then."""
    shape, inner = schema_shape(schema)
    if shape == "any" or (shape == "optional" and value is None):
        return None
    if shape == "optional":
        return _departure(value, inner)
    if shape in ("record", "dict", "list") and not isinstance(value, list if shape == "list" else dict):
        return "", f"is {json_kind(value)}, not {'a list' if shape == 'list' else 'an object'}"
    if shape == "record":
        fields, required = inner
        for name, kind in fields.items():
            problem = _departure(value[name], kind) if name in value else None
            if problem is None and name not in value and name in required:
                problem = "", "is missing"
            if problem is not None:
                return _within(name, problem)
        return None
    if shape in ("list", "dict"):
        for name, item in enumerate(value) if shape == "list" else value.items():
            problem = _departure(item, inner)
            if problem is not None:
                return _within(f"[{name if shape == 'list' else short_repr(name)}]", problem)
        return None
    if shape == "float":
        fits = finite_number(value) is not None
    elif shape == "int" and is_int(value) and finite_number(value) is None:  # figures are computed from it
        return "", "is an integer beyond a float's range"
    else:
        fits = is_int(value) if shape == "int" else type(value).__name__ == shape  # str, bool
    if fits:
        return None
    expected = {"int": "an integer", "float": "a finite number", "str": "a string", "bool": "true or false"}[shape]
    return "", f"is {json_kind(value)}, not {expected}"


def _within(segment: str, problem: Tuple[str, str]) -> Tuple[str, str]:
    path, text = problem
    return segment + ("." if path[:1] not in ("", "[") else "") + path, text


def parse_quantity(text: str) -> float:
    """A Kubernetes resource quantity ('250m', '768Mi', '64') as a plain number."""
    match = re.match(_QUANTITY, str(text).strip())
    if not match or match.group(2) not in _QUANTITY_SUFFIXES:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(match.group(1)) * _QUANTITY_SUFFIXES[match.group(2)]


def parse_json_documents(text: str) -> List[KubeObject]:
    """Objects printed one after another (as `kubectl create -o json` does), Lists flattened."""
    decoder = json.JSONDecoder()
    documents: List[KubeObject] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return documents
        document, position = decoder.raw_decode(text, position)
        items = document.get("items") if isinstance(document, dict) and document.get("kind") == "List" else [document]
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ValueError("expected JSON objects")
        documents.extend(items)


def file_fingerprint() -> str:
    """A short hash of this very file, so every copy of the tool is identifiable."""
    try:
        import hashlib  # noqa: PLC0415 - only --version and results need it; keeps --help fast

        return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    except OSError:
        return "unknown"


def release_and_fingerprint() -> str:
    """The version results, receipts and reports record: the release and this file's hash."""
    return f"{__version__}+{file_fingerprint()}"


# Pure core: manifests #########################################################
# The objects a run creates (namespace, ConfigMap, Job) and the inputs they carry (worker, tasks),
# checked. Uses the sections above.


def new_run_id() -> str:
    """12 random hex digits: the run's identity in its namespace name and labels."""
    return os.urandom(6).hex()


def job_name_for(round_number: int, rounds: int) -> str:
    return JOB_NAME if rounds == 1 else f"{JOB_NAME}-{round_number}"


# Where `kubectl create --raw PATH -f -` POSTs each kind the run creates: the object's collection
# (its API group and version, its namespace), asking the API server to validate it strictly, as
# `--validate=strict` would without kubectl's OpenAPI download (apiserver handlers/create.go reads
# fieldValidation from the query; fieldManager names the writer as `kubectl create` does).
_COLLECTIONS = {"Namespace": "/api/v1", "ConfigMap": "/api/v1", "Job": "/apis/batch/v1"}
_RAW_CREATE_QUERY = "?fieldManager=kubectl-create&fieldValidation=Strict"


def create_path(manifest: KubeObject) -> str:
    """The API path a raw create of `manifest` (a Namespace, a ConfigMap or a Job) is sent to."""
    metadata = manifest.get("metadata") or {}
    return collection_path(str(manifest.get("kind")), str(metadata.get("namespace")))


def collection_path(kind: str, namespace: str) -> str:
    """The API path a raw create of any `kind` object in `namespace` is sent to (see create_path)."""
    prefix = _COLLECTIONS[kind]
    resource = kind.lower() + "s"
    if kind == "Namespace":
        return f"{prefix}/{resource}{_RAW_CREATE_QUERY}"
    return f"{prefix}/namespaces/{url_segment(namespace)}/{resource}{_RAW_CREATE_QUERY}"


def url_segment(name: str) -> str:
    """A name as one segment of a raw request's path: a name the tool did not make (a RuntimeClass
    from --runtime) can neither leave its segment nor add a query."""
    return urllib.parse.quote(name, safe="")


def namespace_manifest(namespace: str, run_id: str) -> KubeObject:
    """The run's own namespace; the restricted Pod Security level makes the cluster itself
    guarantee that episodes stay unprivileged."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace,
            "labels": {
                RUN_LABEL: run_id,
                "app.kubernetes.io/managed-by": APP_LABEL_VALUE,
                PSA_ENFORCE_LABEL: "restricted",
            },
        },
    }


def configmap_manifest(
    namespace: str,
    run_id: str,
    worker_source: str,
    tasks: Optional[Sequence[JsonObject]] = None,
    launcher_source: str = "",
) -> KubeObject:
    """The worker (the built-in one unless --worker), with --worker its launcher, and with
    --tasks every task: one object."""
    manifest: KubeObject = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP_NAME, "namespace": namespace, "labels": {RUN_LABEL: run_id}},
        "data": {"episode.py": worker_source},
    }
    if launcher_source:
        manifest["data"][LAUNCHER_KEY] = launcher_source
    if tasks is not None:
        manifest["data"][TASKS_KEY] = tasks_text(tasks)
    return manifest


def local_queue_manifest(namespace: str, run_id: str, cluster_queue: str, version: str) -> KubeObject:
    """--queue: the run's Kueue LocalQueue in its own namespace, pointing at the ClusterQueue given
    (spec.clusterQueue, in v1beta1 and v1beta2 alike), so that Kueue manages the run's Jobs."""
    return {
        "apiVersion": f"{KUEUE_GROUP}/{version}",
        "kind": "LocalQueue",
        "metadata": {
            "name": LOCAL_QUEUE_NAME,
            "namespace": namespace,
            "labels": {RUN_LABEL: run_id, "app.kubernetes.io/managed-by": APP_LABEL_VALUE},
        },
        "spec": {"clusterQueue": cluster_queue},
    }


def served_kueue_version(group: Any) -> Optional[str]:
    """Of the LocalQueue versions this tool writes (KUEUE_VERSIONS), the one the API server's
    discovery document of the kueue.x-k8s.io group (GET /apis/kueue.x-k8s.io, an APIGroup) prefers,
    else the newest it serves; None when it serves none of them."""
    if not isinstance(group, dict):
        return None
    served = [entry.get("version") for entry in group.get("versions") or [] if isinstance(entry, dict)]
    preferred = dig(group, "preferredVersion", "version") if isinstance(group.get("preferredVersion"), dict) else None
    if preferred in KUEUE_VERSIONS and preferred in served:
        return str(preferred)
    return next((version for version in KUEUE_VERSIONS if version in served), None)


def tasks_text(tasks: Sequence[JsonObject]) -> str:
    """/demo/tasks.jsonl: line i (from 0) is index i's task, re-serialised as one ASCII line."""
    return "".join(json.dumps(task, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n" for task in tasks)


def utf8_text(data: bytes, what: str) -> str:
    """An input file's bytes as UTF-8 text; else bad input, naming the first line that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise DemoError(f"{what} line {line} is not UTF-8", EXIT_USAGE) from None


def parse_tasks(data: bytes, where: str) -> List[JsonObject]:
    """A --tasks file: one JSON object per line, nothing else; the error names the line."""
    lines = utf8_text(data, f"--tasks {where}").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    if not lines:
        raise DemoError(f"--tasks {where} is empty; it needs one JSON object per line, one per episode", EXIT_USAGE)
    tasks = []
    for number, line in enumerate(lines, 1):
        try:
            task = json.loads(line, parse_constant=_reject_constant, parse_float=_finite_float)
        except RecursionError:
            raise DemoError(f"--tasks {where} line {number} is nested too deeply", EXIT_USAGE) from None
        except ValueError as error:
            detail = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
            raise DemoError(
                f"--tasks {where} line {number} is not JSON ({detail[:120]}); the file needs one JSON object per line",
                EXIT_USAGE,
            ) from None
        if not isinstance(task, dict):
            raise DemoError(
                f"--tasks {where} line {number} is a JSON {type(task).__name__}, not an object; "
                "the file needs one JSON object per line",
                EXIT_USAGE,
            )
        tasks.append(task)
    return tasks


def task_id_of(task: Optional[JsonObject], index: int) -> Any:
    return task["id"] if task is not None and "id" in task else index


def check_worker_source(data: bytes, where: str) -> str:
    """A --worker file's text, once it decodes as UTF-8 and compiles as Python. It is compiled from
    its bytes, as Python reads a script (a UTF-8 BOM and a coding declaration count), and kept as
    it is, a BOM included, for the pod's Python to read the same way. A file that Python could not
    compile (a NUL byte, nesting deeper than its parser or compiler goes) is bad input, exit 2."""
    source = utf8_text(data, f"--worker {where}")
    nul = data.find(b"\0")
    if nul >= 0:
        line = data[:nul].count(b"\n") + 1
        raise DemoError(f"--worker {where} line {line} has a NUL byte, which Python refuses in source code", EXIT_USAGE)
    try:
        compile(data, where, "exec", dont_inherit=True)
    except SyntaxError as error:
        at = f" line {error.lineno}" if error.lineno else ""
        raise DemoError(f"--worker {where}{at} does not compile as Python: {error.msg}", EXIT_USAGE) from None
    except (RecursionError, MemoryError) as error:  # the parser's or the compiler's stack, by version
        raise DemoError(
            f"--worker {where} is nested too deeply for Python to compile ({type(error).__name__}); "
            "the pod's Python would refuse it too",
            EXIT_USAGE,
        ) from None
    except ValueError as error:
        raise DemoError(f"--worker {where} does not compile as Python: {error}", EXIT_USAGE) from None
    return source


def configmap_size_problem(manifest: KubeObject) -> str:
    """Why the ConfigMap would be refused for its size, or empty. The API server counts what
    ValidateConfigMap counts (pkg/apis/core/validation/validation.go): the bytes of its data's
    values, not its keys nor their JSON-escaped form, at most core.MaxSecretSize (1 MiB). The
    request that carries it, as JSON, must also fit the API server's request body limit
    (MaxRequestBodyBytes, 3 MiB: k8s.io/apiserver pkg/server/config.go)."""
    size = sum(len(str(value).encode("utf-8", "surrogatepass")) for value in (manifest.get("data") or {}).values())
    request = len(json.dumps(manifest, separators=(",", ":")).encode("utf-8"))
    shorten = "shorten the tasks (put large inputs in an image or object storage and reference them)"
    if size > CONFIGMAP_OBJECT_LIMIT:
        return (
            f"the ConfigMap's data, the worker and the tasks, would be {size:,} bytes, over the API server's "
            f"1 MiB ({CONFIGMAP_OBJECT_LIMIT:,} bytes) limit on a ConfigMap's data; {shorten}"
        )
    if request > CONFIGMAP_REQUEST_LIMIT:
        return (
            f"the ConfigMap's create request would be {request:,} bytes as JSON (its data escaped), over the API "
            f"server's 3 MiB ({CONFIGMAP_REQUEST_LIMIT:,} bytes) limit on a request body; {shorten}"
        )
    return ""


def job_manifest(
    *,
    name: str,
    namespace: str,
    run_id: str,
    count: int,
    parallelism: int,
    image: str,
    runtime: Optional[str],
    deadline_seconds: int,
    indexed: bool = False,
    max_failed_episodes: int = 0,
    infra_retries: int = 0,
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
    ephemeral_storage: str = DEFAULT_EPHEMERAL_STORAGE,
    workspace_size: str = DEFAULT_WORKSPACE_SIZE,
    local_queue: Optional[str] = None,
    launcher: bool = False,
    score_failures: bool = False,
    episode_deadline_seconds: Optional[int] = None,
    private_fields: Tuple[str, ...] = (),
) -> KubeObject:
    """The guide's Job: one pod per episode, no retries, unprivileged, bounded in time.

    Its worker is told where to write its artifacts (ARTIFACTS_ENV, in the episode's emptyDir)
    and their budget (MAX_ARTIFACT_BYTES_ENV). Its disk is bounded: an ephemeral-storage request
    and limit (`ephemeral_storage`, --ephemeral-storage) and a sizeLimit on /workspace
    (`workspace_size`, --workspace-size), so a worker that fills them is evicted alone, at its own
    limit, and never drives its node into DiskPressure (see DEFAULT_EPHEMERAL_STORAGE). With
    `local_queue` (--queue) the Job carries Kueue's queue-name label, so Kueue manages it.

    Indexed (with --tasks, --max-failed-episodes or --infra-retries), each pod's completion index
    picks its task. With --max-failed-episodes K, a failed index is never retried
    (backoffLimitPerIndex 0) and the others go on until more than K failed (maxFailedIndexes, at
    most N); backoffLimit is then left out, since it counts every failure of the Job. With
    --infra-retries R, an index whose pod was lost to the infrastructure runs again up to R times
    (backoffLimitPerIndex R, podFailurePolicy: see POD_FAILURE_POLICY), and one whose worker
    failed never does. With --failed-episode-reward (`score_failures`), an episode's own failure
    fails only its index and never stops the others: backoffLimitPerIndex without maxFailedIndexes,
    every index runs (the client counts --max-failed-episodes' infrastructure failures itself).
    `episode_deadline_seconds` (--episode-timeout) is each pod's own activeDeadlineSeconds: the
    kubelet fails a pod past it alone (pkg/kubelet/active_deadline.go), its phase Failed, its
    reason DeadlineExceeded. With --private-fields the worker is told their names (PRIVATE_FIELDS_ENV)."""
    pod_spec: KubeObject = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, "runAsNonRoot": True},
        "containers": [
            {
                "name": CONTAINER_NAME,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                # --worker's pods start the launcher: it runs the worker, then sends what it left
                # under RL_DEMO_ARTIFACTS; it needs the standard library alone, so it skips the
                # image's site-packages and their .pth files (-S). The built-in worker sends its
                # own files and prints the log's end line, so it is the command itself: one
                # interpreter a pod fewer (measured in docs/benchmark.md)
                "command": ["python", "-B", *(["-S", f"/demo/{LAUNCHER_KEY}"] if launcher else ["/demo/episode.py"])],
                "env": [
                    {"name": "EPISODE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": ARTIFACTS_ENV, "value": ARTIFACTS_DIR},
                    {"name": MAX_ARTIFACT_BYTES_ENV, "value": str(max_artifact_bytes)},
                    *([{"name": PRIVATE_FIELDS_ENV, "value": ",".join(private_fields)}] if private_fields else []),
                ],
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "resources": {
                    "requests": {**POD_REQUESTS, EPHEMERAL_STORAGE: ephemeral_storage},
                    "limits": {**POD_LIMITS, EPHEMERAL_STORAGE: ephemeral_storage},
                },
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "volumeMounts": [
                    {"name": "script", "mountPath": "/demo", "readOnly": True},
                    {"name": WORKSPACE_VOLUME, "mountPath": "/workspace"},
                ],
            }
        ],
        "volumes": [
            {"name": "script", "configMap": {"name": CONFIGMAP_NAME}},
            {"name": WORKSPACE_VOLUME, "emptyDir": {"sizeLimit": workspace_size}},
        ],
    }
    if runtime is not None:
        pod_spec["runtimeClassName"] = runtime
    if episode_deadline_seconds is not None:
        pod_spec["activeDeadlineSeconds"] = episode_deadline_seconds
    manifest: KubeObject = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {RUN_LABEL: run_id, "app": APP_LABEL_VALUE}},
        "spec": {
            "completions": count,
            "parallelism": parallelism,
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_seconds,
            "template": {"metadata": {"labels": {"app": APP_LABEL_VALUE, RUN_LABEL: run_id}}, "spec": pod_spec},
        },
    }
    if local_queue is not None:
        manifest["metadata"]["labels"][QUEUE_NAME_LABEL] = local_queue
    spec = manifest["spec"]
    if indexed or max_failed_episodes > 0 or infra_retries > 0 or score_failures:
        spec["completionMode"] = "Indexed"
    if max_failed_episodes > 0 and not score_failures:
        del spec["backoffLimit"]
        spec.update(backoffLimitPerIndex=0, maxFailedIndexes=min(max_failed_episodes, count))
    if score_failures:
        spec.pop("backoffLimit", None)
        spec.update(backoffLimitPerIndex=0)
    if infra_retries > 0:
        spec.pop("backoffLimit", None)
        fail_index = max_failed_episodes > 0 or score_failures
        spec.update(backoffLimitPerIndex=infra_retries, podFailurePolicy=pod_failure_policy(fail_index))
    return manifest


def pod_failure_policy(fail_index: bool) -> KubeObject:
    """--infra-retries' rules, first match first: a pod with DisruptionTarget counts against its
    index's backoffLimitPerIndex (so it is retried, a bounded number of times); any non-zero exit
    code of the episode container fails the Job, or with --max-failed-episodes only its index."""
    return {
        "rules": [
            {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {
                "action": "FailIndex" if fail_index else "FailJob",
                "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "NotIn", "values": [0]},
            },
        ]
    }


def job_parallelism(settings: RunSettings, capacity: Optional[int]) -> int:
    """The Job's parallelism: the settings', or with --parallelism auto the nodes' room (`capacity`,
    as the preflight counted it), at most the count."""
    return settings.parallelism if capacity is None else min(capacity, settings.count)


def round_job_manifest(
    settings: RunSettings, name: str, namespace: str, run_id: str, image: str, parallelism: Optional[int] = None
) -> KubeObject:
    """A measured round's Job: the settings' episodes, running `image` (the pinned digest, if
    any), `parallelism` at once (--parallelism auto's choice; else the settings').

    Always Indexed, whatever the flags: each pod then carries its completion index, as a label
    from Kubernetes 1.28, so the logs of a large round are read by sets of indexes, one process
    per LOG_SELECTOR_PODS pods (read_logs), not one per pod. The pods run as in the guide's
    NonIndexed Job (same template, same backoffLimit 0); the episodes are numbered by the index
    only where it picks the task (RunSettings.indexed)."""
    return job_manifest(
        name=name,
        namespace=namespace,
        run_id=run_id,
        count=settings.count,
        parallelism=settings.parallelism if parallelism is None else parallelism,
        image=image,
        runtime=settings.runtime,
        deadline_seconds=settings.deadline_seconds,
        indexed=True,
        max_failed_episodes=settings.max_failed_episodes,
        infra_retries=settings.infra_retries,
        max_artifact_bytes=settings.max_artifact_bytes,
        ephemeral_storage=settings.ephemeral_storage,
        workspace_size=settings.workspace_size,
        local_queue=LOCAL_QUEUE_NAME if settings.queue is not None else None,
        launcher=bool(settings.launcher_source),
        score_failures=settings.failed_episode_reward is not None,
        episode_deadline_seconds=settings.episode_deadline_seconds,
        private_fields=settings.private_fields,
    )


def one_episode_job_manifest(settings: RunSettings, name: str, namespace: str, run_id: str) -> KubeObject:
    """A Job of one episode (a warm-up or the probe), without tasks, running the image as given, before
    any digest is resolved."""
    one_episode = dataclasses.replace(
        settings, count=1, parallelism=1, tasks=None, max_failed_episodes=0, infra_retries=0, failed_episode_reward=None
    )
    return round_job_manifest(one_episode, name, namespace, run_id, settings.given_image)


_UNKNOWN_FIELD = r'unknown field "([^"]+)"'


def strict_refusal(stderr: str, where: str, infra_retries: bool = False) -> Optional[str]:
    """The one line for a create that strict validation refused because the API server does not
    know a field the tool set (`strict decoding error: unknown field "spec.backoffLimitPerIndex"`:
    a Kubernetes 1.27 API server): which Kubernetes version it needs; None for any other failure.
    `infra_retries`: --infra-retries set the per-index fields (with or without --max-failed-episodes)."""
    if "strict decoding error" not in stderr:
        return None
    fields = sorted(set(re.findall(_UNKNOWN_FIELD, stderr)))
    known = [field for field in fields if field in JOB_FIELD_NEEDS]
    if not known:
        return None
    needs, flags, instead = JOB_FIELD_NEEDS[known[0]]
    if infra_retries and flags.startswith("--max-failed-episodes"):
        flags, instead = "--infra-retries (and --max-failed-episodes, if given)", INFRA_RETRIES_INSTEAD
    these = "these fields, set for {}, need" if len(fields) > 1 else "this field, set for {}, needs"
    return (
        f"the cluster's API server does not know {', '.join(fields)}, so it refused Job {where}; "
        f"{these.format(flags)} {needs}; nothing of this Job was created{instead}"
    )


def required_uid(obj: KubeObject, what: str) -> str:
    """The object's metadata.uid; the tool proves ownership with it, so a missing one is an error."""
    uid = dig(obj, "metadata", "uid") if isinstance(obj, dict) else None
    if not isinstance(uid, str) or not uid:
        raise DemoError(
            f"kubectl returned {what} without metadata.uid; inspect the API server's response", EXIT_CLUSTER
        )
    return uid


def pod_selector(job: KubeObject) -> str:
    """The label selector of the Job's own pods: its UID label, never its name alone."""
    match_labels = dig(job, "spec", "selector", "matchLabels") or {}
    uid = required_uid(job, "a Job")
    for label in (UID_LABEL, LEGACY_UID_LABEL):
        if match_labels.get(label) == uid:
            return f"{label}={uid}"
    return f"{UID_LABEL}={uid}"


def pod_belongs_to(pod: KubeObject, job_uid: str) -> bool:
    labels = pod.get("metadata", {}).get("labels", {})
    return job_uid in (labels.get(UID_LABEL), labels.get(LEGACY_UID_LABEL))


# Pure core: figures as precise as their clocks ################################
# A duration's text by the clocks of its two ends (FIGURE_CLOCKS, CLOCK_RESOLUTION): the summary,
# compare, the CI reports and the budgets' messages all say a figure this way. Uses the constants.


def _number(value: float, decimals: int) -> str:
    """`value` to `decimals` places, without the sign of a value that rounds to zero ("-0.0")."""
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def _seconds(value: Optional[float]) -> str:
    """A duration from a fine clock (the client's, the node's, the kubelet's), to three significant
    digits: milliseconds below a second ("752 ms", "71.1 ms", "0.7 ms"), else seconds ("1.42 s")."""
    if value is None:
        return "-"
    if abs(value) < 0.9995:
        return f"{_number(value * 1000, 0 if abs(value) >= 0.09995 else 1)} ms"
    return f"{_number(value, 2)} s"


Clocks = Tuple[str, str, Optional[str]]  # a FIGURE_CLOCKS entry: start, end, why it can read negative


def _resolution(clocks: Clocks) -> float:
    return max(CLOCK_RESOLUTION[clocks[0]], CLOCK_RESOLUTION[clocks[1]])


def clocked_text(value: Optional[float], clocks: Clocks) -> str:
    """A value as precise as its clocks, never more: whole seconds between two whole-second stamps
    (of one clock or two: "0 s", never "0.0 ms"), tenths of a second where a whole-second stamp meets a finer clock (as
    the guide prints them), 10 ms steps for clock ticks, else _seconds."""
    if value is None:
        return "-"
    resolution = _resolution(clocks)
    if resolution >= 1:
        whole = min(CLOCK_RESOLUTION[clocks[0]], CLOCK_RESOLUTION[clocks[1]]) >= 1  # two whole-second stamps
        return f"{_number(value, 0 if whole else 1)} s"
    if resolution >= 0.01:
        return f"{_number(round(value * 100) * 10.0, 0)} ms" if abs(value) < 0.995 else f"{_number(value, 2)} s"
    return _seconds(value)


def figure_text(value: Optional[float], figure: str) -> str:
    """A figure of FIGURE_CLOCKS as precise as its clocks (clocked_text)."""
    return clocked_text(value, FIGURE_CLOCKS[figure])


def _exact_duration(seconds: float) -> str:
    """A clock's resolution or a histogram bucket's bound, exactly as defined: "0 s", "10 ms", "12.5 ms", "1 s"."""
    return f"{seconds:g} s" if seconds == 0 or seconds >= 1 else f"{seconds * 1000:g} ms"


def clocks_text(clocks: Clocks) -> str:
    """Which clocks a value comes from and the resolution that limits it: "API server, 1 s clock",
    "node clock", or for a value that mixes two clocks "mixed: API server 1 s + node"."""
    start, end, _ = clocks
    if start == end:
        resolution = CLOCK_RESOLUTION[start]
        return f"{start}, {_exact_duration(resolution)} clock" if resolution >= 0.01 else f"{start} clock"
    coarse = _resolution(clocks)
    named = [
        f"{clock} {_exact_duration(coarse)}" if CLOCK_RESOLUTION[clock] == coarse >= 0.01 else clock
        for clock in (start, end)
    ]
    return "mixed: " + " + ".join(named)


def clock_text(figure: str) -> str:
    """The clocks of a figure of FIGURE_CLOCKS (clocks_text)."""
    return clocks_text(FIGURE_CLOCKS[figure])


def below_resolution_text(values: Sequence[Optional[float]], clocks: Clocks) -> Optional[str]:
    """What a row says when every value it has is below its clocks' resolution (a second, or a
    10 ms tick), where the digits carry no information and a negative one only misleads:
    "< 1 s (1 s clock)"; None when a value is not, or the clocks are fine."""
    resolution = _resolution(clocks)
    known = [value for value in values if value is not None]
    if resolution < 0.01 or not known or any(abs(value) >= resolution for value in known):
        return None
    return f"< {_exact_duration(resolution)} ({_exact_duration(resolution)} clock)"
