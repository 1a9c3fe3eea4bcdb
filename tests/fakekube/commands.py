"""The kubectl commands the tool runs, answered from the store the way kubectl v1.32 answers
them (messages, exit codes, JSON layout).

Each command handles exactly the forms rl_batch_demo.py sends and refuses every other form
real kubectl would accept with ``error: fake_kubectl does not support ...``:

* ``config view --minify -o json``
* ``version -o json``
* ``get TYPE[,TYPE...] [NAME...] -o json [-l SEL] [--ignore-not-found]``
* ``get TYPE [NAME] -w -o json --output-watch-events [-l SEL]``
* ``create -f - -o json`` (Namespace, ConfigMap, Job, SelfSubjectAccessReview; one object or a List)
* ``delete job NAME --cascade=foreground [--wait=false]``, ``delete namespace NAME [--wait=false]``
* ``logs -l SEL -c C [--prefix] [--tail N] [--max-log-requests N]`` and ``logs POD -c C``
* ``get --raw /api/v1/nodes/NODE/proxy/metrics`` (a kubelet's /metrics, kubelet.py)

and, in the section at the end, the forms the guide's own script uses (bench/bench.py runs it
side by side): ``config current-context``, ``get runtimeclass NAME`` and
``get events --sort-by=.metadata.creationTimestamp`` in kubectl's default table output.

Every API request goes through ``Invocation.api_call``: injected hang, then injected API
error, then RBAC, then the request itself (an ``after_apply`` error fires after it)."""

from __future__ import annotations

import json
import os
import re
import sys
import time

from .apiserver import forbidden_text, is_forbidden, settle_serviceaccounts
from .common import (
    BY_KIND,
    CLIENT_GIT_VERSION,
    CONTROLLER_ENV,
    CREATABLE,
    DEFAULT_SERVER,
    DEFAULT_SERVER_VERSION,
    ENTRY_SCRIPT,
    FAKE_USER,
    KUSTOMIZE_VERSION,
    POLL_SECONDS,
    RESOURCES,
    STATE_ENV,
    KubectlError,
    ResType,
    deep_copy,
    err,
    go_json,
    log_path,
    lookup_type,
    matches,
    new_uid,
    not_found,
    not_supported,
    now_ts,
    out,
    parse_duration,
    parse_selector,
    print_json,
    query_pairs,
    read_json,
    resolve_type,
    sorted_obj,
    unquoted,
    write_json_atomic,
)
from .containerlog import CONTAINER_LOG_MAX_SIZE, served_log
from .faults import API_ERRORS, FaultCounters, hang_rules, op_matches
from .store import Store, Tx, gone, key_of
from .zygote import kubectl_pid

# typing for the annotations only (postponed, never evaluated): not imported by each kubectl call (2 ms)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

    from .common import Selector

DELETE_WAIT_CAP_SECONDS = 300.0
CLIENT_GO_MAX_RETRIES = 10  # client-go rest/request.go: retries of an answer with Retry-After
# The garbage collector deletes a foreground-deleted Job's pods within the controller manager's
# client rate, kubeAPIQPS 20 (burst 30) by default (pkg/controller/apis/config/v1alpha1/defaults.go),
# at about 3 requests a pod: a live GET of the pod, a live GET of its owner (isDangling), the DELETE
# (pkg/controller/garbagecollector/garbagecollector.go attemptToDeleteItem): the fake lets the
# Job's pods go at 20 / 3 a second, the Job after the last of them.
GC_PODS_PER_SECOND = 20.0 / 3
# The formats real kubectl's printers know; the fake prints only json.
OUTPUT_FORMATS = (
    "custom-columns,custom-columns-file,go-template,go-template-file,json,jsonpath,jsonpath-as-json,"
    "jsonpath-file,name,template,templatefile,wide,yaml"
)


def check_output_json(fmt: str, what: str) -> None:
    if fmt == "json":
        return
    if fmt == "":
        raise not_supported(f"{what} without -o json")
    if fmt.split("=", 1)[0] in OUTPUT_FORMATS.split(","):
        raise not_supported(f"{what} -o {fmt} (only -o json)")
    raise KubectlError(
        f'error: unable to match a printer suitable for the output format "{fmt}", '
        f"allowed formats are: {OUTPUT_FORMATS}"
    )


# --------------------------------------------------------------------------- invocation context


class Invocation:
    """Everything one kubectl process needs: flags, cluster config, store, faults."""

    def __init__(self, state: str, cmdpath: str, flags: Dict[str, Any], faults: dict) -> None:
        self.state = state
        self.cmdpath = cmdpath
        self.flags = flags
        self.faults = faults
        self.store = Store(state)
        self.cluster = read_json(os.path.join(state, "cluster.json"), None)
        if self.cluster is None:
            raise KubectlError(f"error: fake_kubectl: state dir {state!r} is not initialised")
        self.server = self.cluster.get("server", DEFAULT_SERVER)
        self.namespace_flag: Optional[str] = flags.get("namespace")
        self.namespace = self.namespace_flag or "default"
        timeout = flags.get("request-timeout")
        self.request_timeout = parse_duration(timeout) if timeout is not None else None
        self.contexts, self.current_context = self._load_kubeconfig()
        self.install_kueue()

    def install_kueue(self) -> None:
        """Fault ``queue`` installs Kueue: its CRDs served (common.SERVED_KUEUE_VERSIONS) and its
        ClusterQueues (``"cluster_queues"``, default ``["team-a"]``), made by the cluster's admin."""
        from . import common

        common.SERVED_KUEUE_VERSIONS[:] = common.kueue_versions(self.faults)
        if not common.SERVED_KUEUE_VERSIONS:
            return
        names = (self.faults.get("queue") or {}).get("cluster_queues", ["team-a"])
        missing = [name for name in names if self.store.get("ClusterQueue", None, name) is None]
        if not missing:
            return
        with self.store.tx() as tx:
            for name in missing:
                tx.put(
                    {
                        "apiVersion": f"{common.KUEUE_GROUP}/{common.SERVED_KUEUE_VERSIONS[0]}",
                        "kind": "ClusterQueue",
                        "metadata": {"name": name, "uid": new_uid(), "creationTimestamp": now_ts(tx.now)},
                        "spec": {"namespaceSelector": {}},
                    }
                )

    def _load_kubeconfig(self) -> Tuple[List[str], Optional[str]]:
        """The contexts are reachable only through the kubeconfig cluster.json requires (if any).

        An explicit --kubeconfig that does not exist fails every command that talks to the API
        server ("error: stat FILE: ...": client-go tools/clientcmd/loader.go,
        ClientConfigLoadingRules.Load), while `config view` reads it as an empty kubeconfig
        (client-go tools/clientcmd/config.go, PathOptions.GetStartingConfig: os.IsNotExist gives
        NewConfig()); a missing file of $KUBECONFIG's list is skipped by both."""
        required = self.cluster.get("kubeconfig")
        flag = self.flags.get("kubeconfig")
        if flag is not None and flag != "":
            if not os.path.exists(flag):
                if self.cmdpath == "config view":
                    return [], None
                raise KubectlError(f"error: stat {flag}: no such file or directory")
            known = required is None or os.path.realpath(flag) == os.path.realpath(required)
        elif os.environ.get("KUBECONFIG"):
            paths = [p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
            known = required is None or any(os.path.realpath(p) == os.path.realpath(required) for p in paths)
        else:
            known = required is None
        if not known:
            return [], None
        return list(self.cluster.get("contexts") or []), self.cluster.get("current_context")

    def check_context(self, objects: str = "", types: int = 1) -> None:
        """The context to talk to must exist (--context's, else the current one), then the API
        server must answer: what kubectl v1.32.4 prints when one of them fails, by command
        (`objects`: for create, "one" object or a "list" on stdin, else ""; `types`: how many
        resource types a get or delete names).

        A --context the kubeconfig lacks: `version`, `get --raw` and a validating `create` ask
        for the context itself ('context "X" does not exist': client-go
        tools/clientcmd/client_config.go, DirectClientConfig.getContext); the others validate
        the config first ("Error in configuration: context was not found for specified context:
        X": client-go tools/clientcmd/validation.go, errContextNotFound, prefixed by kubectl's
        checkErr, kubectl pkg/cmd/util/helpers.go), as all do for a current context the
        kubeconfig lacks. No context at all: kubectl talks to client-go's default server,
        http://localhost:8080 (clientcmd.ClusterDefaults), where nothing listens."""
        ctx = self.flags.get("context") or ""
        asks_itself = self.cmdpath == "version" or bool(self.flags.get("raw"))
        asks_itself = asks_itself or (objects != "" and self.flags.get("validate", "strict") not in ("false", "ignore"))
        if ctx and ctx not in self.contexts:
            if asks_itself:
                raise KubectlError(f'error: context "{ctx}" does not exist')
            raise KubectlError(f"Error in configuration: context was not found for specified context: {ctx}")
        if not ctx and self.current_context and self.current_context not in self.contexts:
            raise KubectlError(
                f"Error in configuration: context was not found for specified context: {self.current_context}"
            )
        if not ctx and not self.current_context:
            raise KubectlError(connection_refused(self, "localhost:8080", "http", "127.0.0.1:8080", objects, types))
        if self.cmdpath in ("get", "create", "delete", "logs", "version") and self.unreachable():
            raise KubectlError(connection_refused(self, self.server, "https", self.server, objects, types))

    def unreachable(self) -> bool:
        """Fault ``unreachable``: true (the API server refuses every connection), or N (the
        first N calls that contact it are refused, then it answers again)."""
        down = self.faults.get("unreachable")
        if not down:
            return False
        return FaultCounters(self.state).take("unreachable", None if down is True else int(down))

    # -- faults ------------------------------------------------------------

    def api_call(
        self,
        op: Tuple[str, str],
        *,
        verb: str = "",
        rt: Optional[ResType] = None,
        name: str = "",
        namespace: str = "",
        create_ctx: str = "",
        apply: Optional[Callable[[], None]] = None,
        rbac: bool = True,
    ) -> None:
        """Apply hang/api_errors faults for one API request, then RBAC.

        ``apply`` performs the request; it runs before an ``after_apply`` error."""
        self._maybe_hang(op)
        after: Optional[KubectlError] = None
        retried = 0
        rules = list(enumerate(self.faults.get("api_errors") or []))
        while rules:
            idx, rule = rules.pop(0)
            if not op_matches(str(rule["match"]), op):
                continue
            rule_id = f"api_errors[{idx}]:{json.dumps(rule, sort_keys=True)}"
            if not FaultCounters(self.state).take(rule_id, rule.get("times")):
                continue
            if rule.get("retry_after") is not None and retried < CLIENT_GO_MAX_RETRIES:
                # A 429 (or 5xx) with Retry-After is retried by client-go itself, after that many
                # seconds, up to 10 times (client-go rest/request.go, checkWait and maxRetries):
                # kubectl prints nothing and the caller sees the later answer.
                time.sleep(float(rule["retry_after"]))
                retried += 1
                rules = list(enumerate(self.faults.get("api_errors") or []))
                continue
            error = self._fault_error(str(rule["error"]), verb or op[0], rt, name, namespace, create_ctx)
            if rule.get("after_apply"):
                after = error
                break
            raise error
        if rbac and rt is not None and verb:
            self.check_rbac(verb, rt.resource, rt, name, namespace, create_ctx)
        if apply is not None:
            apply()
        if after is not None:
            raise after

    def _maybe_hang(self, op: Tuple[str, str]) -> None:
        for idx, rule in enumerate(hang_rules(self.faults)):
            if not op_matches(str(rule.get("match", "")), op):
                continue
            rule_id = f"hang[{idx}]:{json.dumps(rule, sort_keys=True)}"
            if not FaultCounters(self.state).take(rule_id, rule.get("times")):
                continue
            seconds = float(rule.get("seconds", 30))
            if self.request_timeout is not None and self.request_timeout < seconds:
                time.sleep(self.request_timeout)
                raise KubectlError(API_ERRORS["timeout"])
            time.sleep(seconds)

    def _fault_error(
        self, code: str, verb: str, rt: Optional[ResType], name: str, namespace: str, create_ctx: str
    ) -> KubectlError:
        if code == "refused":  # met by the process's first request, discovery: the whole of kubectl's output
            return KubectlError(connection_refused(self, self.server, "https", self.server, ""))
        forbidden = ""
        if code == "403":
            forbidden = forbidden_text(verb, rt.resource if rt else "unknown", rt, name, namespace)
        return KubectlError(API_ERRORS[code].format(ctx=create_ctx, forbidden=forbidden, server=self.server))

    def check_rbac(
        self, verb: str, resource: str, rt: Optional[ResType], name: str, namespace: str, create_ctx: str = ""
    ) -> None:
        if is_forbidden(self.cluster, verb, resource):
            raise KubectlError(
                "Error from server (Forbidden): " + create_ctx + forbidden_text(verb, resource, rt, name, namespace)
            )


# --------------------------------------------------------------------------- an API server that refuses


# The client-go lines kubectl v1.32 logs per command while discovery fails, before its message
# (measured with `kubectl --request-timeout=30s ...` against a closed port on 127.0.0.1 and an
# empty $HOME, so no discovery cache): memCacheClient.refreshLocked reports each failed refresh
# through utilruntime.HandleError (client-go discovery/cached/memory/memcache.go:265), and the
# resource builder asks again for each mapping: `get` and `delete` log 4 lines plus one per
# resource type named (`get pods,events`: 6), `logs` 4, `create -f -` 1. `version` and
# `get --raw` do no discovery.
DISCOVERY_ATTEMPTS = {"get": 4, "delete": 4, "logs": 4, "create": 1}
PER_RESOURCE_TYPE = ("get", "delete")
DISCOVERY_TIMEOUT = "32s"  # client-go discovery/discovery_client.go defaultTimeout, without --request-timeout


def go_duration(seconds: float) -> str:
    """time.Duration.String() of whole seconds: 30s, 4m30s, 1h0m0s."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def connection_refused(inv: Invocation, host: str, scheme: str, dialed: str, objects: str, types: int = 1) -> str:
    """kubectl's whole stderr when nothing listens at `host`: client-go's klog lines, then the
    message. `get`, `delete`, `logs` end with StandardErrorMessage's words for a refused
    *url.Error (kubectl pkg/cmd/util/helpers.go); `create -f -` with the mapper's "unable to
    recognize" (cli-runtime pkg/resource/mapper.go), or, when it validates (the default,
    strict), with the failed OpenAPI download that validation needs first (kubectl
    pkg/cmd/util/helpers.go and pkg/validation; for a single object "failed to download
    openapi: " precedes the request, for a List it does not)."""
    timeout = go_duration(inv.request_timeout) if inv.request_timeout else DISCOVERY_TIMEOUT
    dial = f"dial tcp {dialed}: connect: connection refused"
    refused = f"The connection to the server {host} was refused - did you specify the right host or port?"
    if objects and inv.flags.get("validate", "strict") not in ("false", "ignore"):
        download = "failed to download openapi: " if objects == "one" else ""
        return (
            f'error: error validating "STDIN": error validating data: {download}Get "{scheme}://{host}/openapi/v2'
            f'?timeout={timeout}": {dial}; if you choose to ignore these errors, turn validation off with '
            "--validate=false"
        )
    api = f"{scheme}://{host}/api?timeout={timeout}"
    attempts = 0 if inv.flags.get("raw") else DISCOVERY_ATTEMPTS.get(inv.cmdpath, 0)
    attempts += types if attempts and inv.cmdpath in PER_RESOURCE_TYPE else 0
    lines = []
    for _ in range(attempts):
        now = time.time()
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"
        lines.append(
            f'E{stamp} {kubectl_pid():7d} memcache.go:265] "Unhandled Error" err="couldn\'t get current server API '
            f'group list: Get \\"{api}\\": {dial}"'
        )
    if inv.cmdpath == "create" and not inv.flags.get("raw"):  # a raw create maps nothing: the POST's own error
        lines.append(f'error: unable to recognize "STDIN": Get "{api}": {dial}')
    else:
        lines.append(refused)
    return "\n".join(lines)


# --------------------------------------------------------------------------- config view, version


def cmd_config_view(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    """``config view --minify -o json``: the kubeconfig reduced to one context (the --context
    flag's, else the current one), with its cluster's server and the user's secret redacted.
    Like kubectl, this reads the kubeconfig only."""
    if positional:
        raise KubectlError(f"error: unexpected arguments: [{' '.join(positional)}]")
    if not flags.get("minify") or flags.get("output") != "json":
        raise not_supported("config view without --minify -o json")
    inv.api_call(("config", "view"))
    ctx = inv.flags.get("context") or inv.current_context
    if not ctx:
        raise KubectlError("error: current-context must exist in order to minify")
    if ctx not in inv.contexts:
        raise KubectlError(f"error: cannot locate context {ctx}")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": "fake-cluster", "cluster": {"server": f"https://{inv.server}"}}],
        "users": [{"name": FAKE_USER, "user": {"token": "REDACTED"}}],
        "contexts": [{"name": ctx, "context": {"cluster": "fake-cluster", "user": FAKE_USER}}],
        "current-context": ctx,
    }
    out(json.dumps(config, indent=4) + "\n")
    return 0


def cmd_version(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    if positional:
        raise KubectlError(f"error: extra arguments: [{' '.join(positional)}]")
    fmt = flags.get("output", "")
    if fmt not in ("yaml", "json"):
        if fmt == "":
            raise not_supported("version without -o json")
        raise KubectlError("error: --output must be 'yaml' or 'json'")
    if fmt == "yaml":
        raise not_supported("version -o yaml")
    result: Dict[str, Any] = {
        "clientVersion": {
            "major": "1",
            "minor": str(client_minor(inv.faults)),
            "gitVersion": str(inv.faults.get("client_version") or CLIENT_GIT_VERSION),
            "gitCommit": "59526cd4867447956156ae3a602fcbac5f2fd9e1",
            "gitTreeState": "clean",
            "buildDate": "2025-04-22T16:03:51Z",
            "goVersion": "go1.23.6",
            "compiler": "gc",
            "platform": "linux/amd64",
        },
        "kustomizeVersion": KUSTOMIZE_VERSION,
    }
    try:
        inv.check_context()
        inv.api_call(("version", "version"))
    except KubectlError:
        out(json.dumps(result, indent=2) + "\n")  # kubectl prints the client's half, then fails
        raise
    sv = str(inv.faults.get("server_version") or DEFAULT_SERVER_VERSION)
    m = re.match(r"v?(\d+)\.(\d+)", sv)
    result["serverVersion"] = {
        "major": m.group(1) if m else "1",
        "minor": m.group(2) if m else "32",
        "gitVersion": sv,
        "gitCommit": "70d3cc986aa8221cd1dfb1121852688902d3bf53",
        "gitTreeState": "clean",
        "buildDate": "2024-12-11T17:59:15Z",
        "goVersion": "go1.23.3",
        "compiler": "gc",
        "platform": "linux/amd64",
    }
    out(json.dumps(result, indent=2) + "\n")
    return 0


# --------------------------------------------------------------------------- get


def cmd_get(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    if flags.get("raw"):
        return get_raw(inv, flags, positional)
    if not positional:
        raise KubectlError(
            'You must specify the type of resource to get. Use "kubectl api-resources" for a complete '
            'list of supported resources.\n\nerror: Required resource not specified.\nUse "kubectl '
            'explain <resource>" for a detailed description of that resource (e.g. kubectl explain '
            "pods).\nSee 'kubectl get -h' for help and examples"
        )
    fmt = flags.get("output", "")
    sel_text = flags.get("selector")
    field_text = flags.get("field-selector")
    watch = bool(flags.get("watch"))
    ignore_nf = bool(flags.get("ignore-not-found"))
    if "/" in positional[0]:
        raise not_supported("get TYPE/NAME (use get TYPE NAME)")
    type_words = positional[0].split(",")
    names = positional[1:]
    requests = [(t, n) for t in type_words for n in names] if names else [(t, None) for t in type_words]
    has_names = bool(names)
    if has_names and (sel_text is not None or field_text is not None):
        raise KubectlError("error: name cannot be provided when a selector is specified")
    if watch:
        if len({t.lower() for t in type_words}) > 1:
            raise KubectlError("error: you may only specify a single resource type")
        if len(requests) > 1:
            raise KubectlError(
                "error: watch is only supported on individual resources and resource "
                f"collections, but {len(requests)} resources were found"
            )
    inv.check_context(types=len(type_words))
    op_target = ",".join(sorted(set(type_words), key=type_words.index))
    # faults first (the request would fail before discovery answers), then discovery, then RBAC.
    first_rt = lookup_type(requests[0][0])
    first_name = requests[0][1] or ""
    inv.api_call(
        ("get", op_target),
        verb="get" if first_name else ("watch" if watch else "list"),
        rt=first_rt,
        name=first_name,
        namespace=inv.namespace,
        rbac=False,
    )
    rts = [(resolve_type(t), n) for t, n in requests]
    if not watch and (fmt == "" or flags.get("sort-by") is not None):
        table = guide_get_table(inv, rts, flags, sel_text)
        if table is not None:
            return table
    check_output_json(fmt, "get -w" if watch else "get")
    selector = parse_selector(sel_text) if sel_text is not None else None
    # --all-namespaces: one cluster-scoped list (GET /api/v1/pods), authorized at the cluster scope
    # (kubectl pkg/cmd/get/get.go; tests/test_kubectl_contract.py, "every namespace")
    everywhere = bool(flags.get("all-namespaces"))
    fields = parse_field_selector(rts, field_text) if field_text is not None else []
    field_name = selected_name(fields)
    if everywhere and (watch or has_names):
        raise not_supported("get --all-namespaces with names or --watch")
    if watch and fields and field_name is None:
        raise not_supported(f"get --watch --field-selector {field_text} (only metadata.name=NAME)")
    for rt, n in rts:
        verb = "get" if n is not None else ("watch" if watch else "list")
        scope = "" if everywhere else inv.namespace
        inv.check_rbac(verb, rt.resource, rt, n or "", scope)
        if watch:  # a list watch lists, then watches; a single object's watch GETs, then watches
            inv.check_rbac("list" if n is None else "watch", rt.resource, rt, n or "", scope)
    if any(rt.kind == "ServiceAccount" for rt, _ in rts):
        settle_serviceaccounts(inv.store)
    if watch:
        if not flags.get("output-watch-events"):
            raise not_supported("get -w without --output-watch-events")
        rt, n = rts[0]
        if n is not None:
            return watch_one_object(inv, rt, n)
        return watch_objects(inv, rt, field_name, selector)

    found: List[dict] = []
    errors: List[str] = []
    for rt, n in rts:
        ns = inv.namespace if rt.namespaced else None
        if n is not None:
            obj = inv.store.get(rt.kind, ns, n)
            matched = [obj] if obj is not None else []
        else:
            ns = None if everywhere else ns
            matched = [o for o in inv.store.list(rt.kind, ns) if matches(o, rt.kind, ns, None, selector)]
            matched = [o for o in matched if all(field_matches(o, field) for field in fields)]
        if n is not None and not matched and not ignore_nf:
            errors.append(named_not_found(inv, rt, n))
        found.extend(matched)
    single = len(rts) == 1 and rts[0][1] is not None
    if not found and ignore_nf:
        pass  # kubectl prints nothing at all
    elif single and len(found) == 1:
        print_json(found[0])
    elif found or not single:
        print_json({"apiVersion": "v1", "kind": "List", "items": found, "metadata": {"resourceVersion": ""}})
    if errors:
        raise KubectlError("\n".join(errors))
    return 0


# The fields a list or watch may be selected by, and where each lives: metadata.name and
# .namespace on every kind (apiserver pkg/registry/generic/matcher.go, ObjectMetaFieldsSet), and a
# pod's own (kubernetes/kubernetes pkg/registry/core/pod/strategy.go ToSelectableFields).
# Operators =, == and !=, comma for AND (apimachinery pkg/fields/selector.go ParseSelector); any
# other field the API server refuses with BadRequest (the kind's field label conversion, e.g.
# pkg/apis/core/v1/conversion.go for pods).
OBJECT_META_FIELDS = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
}
POD_FIELDS = {
    **OBJECT_META_FIELDS,
    "spec.nodeName": ("spec", "nodeName"),
    "spec.restartPolicy": ("spec", "restartPolicy"),
    "spec.schedulerName": ("spec", "schedulerName"),
    "spec.serviceAccountName": ("spec", "serviceAccountName"),
    "status.phase": ("status", "phase"),
    "status.podIP": ("status", "podIP"),
    "status.nominatedNodeName": ("status", "nominatedNodeName"),
}
if TYPE_CHECKING:
    FieldRequirement = Tuple[Tuple[str, str], str, str]  # (where, operator, value)


def parse_field_selector(rts: List[Tuple[ResType, Optional[str]]], text: str) -> List[FieldRequirement]:
    """``--field-selector`` of one kind's list or watch."""
    if len({rt.kind for rt, _ in rts}) != 1:
        raise not_supported("--field-selector on several kinds")
    rt = rts[0][0]
    selectable = POD_FIELDS if rt.kind == "Pod" else OBJECT_META_FIELDS
    found: List[FieldRequirement] = []
    for part in text.split(","):
        m = re.fullmatch(r"([A-Za-z.]+)(==|!=|=)(.*)", part.strip())
        if not m:
            raise KubectlError(f"error: invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = m.groups()
        if field not in selectable:
            version = f"{rt.group}/v1" if rt.group else "/v1"
            raise KubectlError(
                f'Error from server (BadRequest): Unable to find "{version}, Resource={rt.resource}" that match label '
                f'selector "", field selector "{text}": field label not supported: {field}'
            )
        found.append((selectable[field], "!=" if op == "!=" else "=", value))
    return found


def selected_name(fields: List[FieldRequirement]) -> Optional[str]:
    """The name of a selector that is exactly ``metadata.name=NAME`` (a watch of one object by
    name, the one field selector the tool watches with), else None."""
    if len(fields) == 1 and fields[0][0] == ("metadata", "name") and fields[0][1] == "=":
        return fields[0][2]
    return None


def field_matches(obj: dict, requirement: FieldRequirement) -> bool:
    (part, key), op, value = requirement
    actual = str((obj.get(part) or {}).get(key) or "")
    return (actual == value) == (op == "=")


RAW_NODE_METRICS = re.compile(r"/api/v1/nodes/([^/]+)/proxy/metrics")


def get_raw(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    """``get --raw /api/v1/nodes/NODE/proxy/metrics``: the node's kubelet /metrics (kubelet.py)
    through the API server's node proxy, which needs ``get nodes/proxy``.  kubectl's --raw
    rules: no arguments, no -l/-w, no -o; other raw paths are not implemented."""
    raw = flags["raw"]
    if positional:
        raise KubectlError("error: arguments may not be passed when --raw is specified")
    if flags.get("watch") or flags.get("selector") is not None:
        raise KubectlError(
            "error: --raw may not be specified with other flags that filter the server request or alter the output"
        )
    if flags.get("output"):
        raise KubectlError("error: --raw and --output are mutually exclusive")
    if not raw.startswith("/"):
        raise KubectlError(f'error: --raw must be a valid URL path: parse "{raw}": invalid URI for request')
    if flags.get("output-watch-events"):
        raise KubectlError("error: --output-watch-events option can only be used with --watch or --watch-only")
    if raw == "/apis/kueue.x-k8s.io":  # discovery of Kueue's group: an APIGroup, or NotFound without Kueue
        inv.check_context()
        inv.api_call(("get", "--raw /apis/kueue.x-k8s.io"), rbac=False)
        versions = served_kueue_versions()
        if not versions:
            raise KubectlError("Error from server (NotFound): the server could not find the requested resource")
        entries = [{"groupVersion": f"kueue.x-k8s.io/{v}", "version": v} for v in versions]
        print_json(
            {
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": "kueue.x-k8s.io",
                "versions": entries,
                "preferredVersion": entries[0],
            }
        )
        return 0
    runtimeclass = RAW_RUNTIMECLASS.fullmatch(raw)
    if runtimeclass is not None:
        return get_raw_runtimeclass(inv, unquoted(runtimeclass.group(1)))
    from .kubelet import metrics_text  # here: typing and hashlib, 6 ms, for the node's metrics only

    m = RAW_NODE_METRICS.fullmatch(raw)
    if m is None:
        raise not_supported(f"get --raw {raw} (only /api/v1/nodes/NODE/proxy/metrics and a RuntimeClass)")
    node = m.group(1)
    inv.check_context()
    nrt = BY_KIND["Node"]
    inv.api_call(("get", "nodes/proxy"), verb="get", rt=nrt, name=node, rbac=False)
    inv.check_rbac("get", "nodes/proxy", nrt, node, "")
    found = inv.store.get("Node", None, node)
    if found is None:
        raise KubectlError(not_found(nrt, node))
    handlers = sorted({str(rc.get("handler", "")) for rc in inv.store.list("RuntimeClass", None)})
    version = str(((found.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or DEFAULT_SERVER_VERSION)
    out(metrics_text(inv.state, node, handlers, inv.faults, version))
    return 0


RAW_RUNTIMECLASS = re.compile(r"/apis/node\.k8s\.io/v1/runtimeclasses/([^/?]+)")


def get_raw_runtimeclass(inv: Invocation, name: str) -> int:
    """``get --raw /apis/node.k8s.io/v1/runtimeclasses/NAME``: one GET, no discovery; the stored
    object as the server writes it, or the server's NotFound status, printed by kubectl's
    CheckErr as ``Error from server (NotFound): runtimeclasses.node.k8s.io "NAME" not found``
    (apimachinery errors.NewNotFound), exit 1."""
    inv.check_context()
    rt = BY_KIND["RuntimeClass"]
    inv.api_call(("get", "RuntimeClass"), verb="get", rt=rt, name=name)
    found = inv.store.get("RuntimeClass", None, name)
    if found is None:
        raise KubectlError(f'Error from server (NotFound): {rt.qualified} "{name}" not found')
    out(json.dumps(found))
    return 0


def watch_one_object(inv: Invocation, rt: ResType, name: str) -> int:
    """``get KIND NAME -w``, as kubectl does it (kubectl pkg/cmd/get/get.go, watch()): a GET first,
    whose NotFound ends kubectl at once (exit 1, no watch); the object as read is printed as
    ADDED; then a watch from resourceVersion 0 (fieldSelector metadata.name=NAME), whose first
    event, the API server's synthetic ADDED of the state at that moment, kubectl drops
    (contract tests: whatever it carries). So a change between the GET and the start of the
    watch is never printed: fault ``watch_gap`` (seconds) widens that window, as a slow
    network does."""
    ns = inv.namespace if rt.namespaced else None
    obj = inv.store.get(rt.kind, ns, name)
    if obj is None:
        raise KubectlError(named_not_found(inv, rt, name))
    out(go_json({"type": "ADDED", "object": sorted_obj(obj)}) + "\n")
    if inv.faults.get("watch_ends_early"):
        return 0
    gap = float(inv.faults.get("watch_gap") or 0)
    if gap:
        time.sleep(gap)
    return watch_objects(inv, rt, name, None, first_event_dropped=True)


def watch_objects(
    inv: Invocation, rt: ResType, name: Optional[str], selector: Optional[Selector], first_event_dropped: bool = False
) -> int:
    """``get -w -o json --output-watch-events`` of a list (``-l SEL``, ``--field-selector
    metadata.name=NAME``): ADDED for what the list holds, then every change as it is committed
    (the store's change log: a watch from the list's resourceVersion loses nothing), until
    --request-timeout. With ``first_event_dropped`` (watch_one_object), what exists now is taken
    in without being printed. Fault ``watch_error``: ``["jobs", ...]``: the watch of these
    resources ends with an ERROR event (410 Expired, as an API server sends when the watch's
    resourceVersion is too old) after the list; kubectl prints it and exits 0 (get.go). Fault
    ``watch_garbage``: ``{"jobs": "not_utf8" | "odd_shape"}``: after the list, bytes that are not
    UTF-8, or each object again with a status no API server sends (conditions a string), then the
    watch goes on. Real kubectl never prints either (Go's encoding/json writes only valid UTF-8,
    and the API server only objects of its types): this is what a broken proxy or a wrapper in
    front of kubectl may print, which the reader must survive. A namespace that does not exist is
    no error: its list is empty, and the watch sees what is created there later (by design, so that
    a namespace's existence does not leak: kubernetes/kubernetes issue 75537)."""
    start = time.monotonic()
    ns = inv.namespace if rt.namespaced else None
    if rt.kind == "ServiceAccount":
        settle_serviceaccounts(inv.store)
    follower = inv.store.follow({rt.kind}, ns)

    def emit(kind: str, obj: dict) -> None:
        out(go_json({"type": kind, "object": sorted_obj(obj)}) + "\n")

    def current(key: str, now: float) -> Optional[dict]:
        obj = follower.objects.get(key)
        if obj is None or follower.is_gone(key, now) or not matches(obj, rt.kind, ns, name, selector):
            return None
        return obj

    now = time.time()
    seen = {key: obj for key, obj in follower.visible(now).items() if current(key, now) is not None}
    for key in sorted(seen, key=lambda k: seen[k]["metadata"]["name"]):
        if not first_event_dropped:
            emit("ADDED", seen[key])
    if rt.kind == "Pod" and ns is not None:  # its list is out: fault pods_wait_for_pod_watch's gate
        mark_pod_watch(inv.state, ns)
    if inv.faults.get("watch_ends_early"):
        return 0
    garbage = (inv.faults.get("watch_garbage") or {}).get(rt.resource)
    if garbage == "not_utf8":  # then the stream goes on: the reader must stop trusting it by itself
        sys.stdout.flush()
        sys.stdout.buffer.write(b"\xff\xfe{}\n")
        sys.stdout.buffer.flush()
    elif garbage == "odd_shape":
        for obj in seen.values():
            emit("MODIFIED", dict(obj, status={"conditions": "Complete"}))
    if rt.resource in (inv.faults.get("watch_error") or []):
        expired = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 410}
        expired.update(reason="Expired", message="too old resource version: 1 (2)")
        emit("ERROR", expired)
        return 0
    due_done: set = set()
    while True:
        time.sleep(POLL_SECONDS)
        if inv.request_timeout is not None and time.monotonic() - start >= inv.request_timeout:
            return 0
        if not os.path.isdir(inv.state):
            return 0
        if rt.kind == "ServiceAccount":
            settle_serviceaccounts(inv.store)
        changes = watch_changes(follower, seen, current, due_done)
        for kind, obj in changes:
            emit(kind, obj)


def mark_pod_watch(state: str, namespace: str) -> None:
    """A watch of the namespace's pods has printed its list (the controller's fault
    pods_wait_for_pod_watch starts no container before it)."""
    os.makedirs(os.path.join(state, "pod_watches"), exist_ok=True)
    open(os.path.join(state, "pod_watches", namespace), "w").close()


def watch_changes(
    follower: Any, seen: Dict[str, dict], current: Callable[[str, float], Optional[dict]], due_done: set
) -> List[Tuple[str, dict]]:
    """One look of a watch at the store's change log (`follower`): the events since the last,
    ADDED, MODIFIED (a new resourceVersion) or DELETED, in resourceVersion order, deletions last;
    `seen` (what the watch has sent, by key) is brought up to date. `current(key, now)` is the
    object as the watch may show it (None: gone or not selected); a deletion whose time has come
    (pending deletions, `due_done` those already handled) counts as a change, a namespace's with
    every object in it. The fake kubectl's watch (watch_objects) and the API server in front of
    the fake (tests/apicluster.py) share it."""
    candidates = set(follower.poll())
    now = time.time()
    for vkey, t in list(follower.vanish.items()):
        if t <= now and vkey not in due_done:
            due_done.add(vkey)
            kind, _, vname = vkey.split("/", 2)
            if kind == "Namespace":
                candidates.update(k for k in seen if k.split("/", 2)[1] == vname)
            candidates.add(vkey)
    changes = []
    for key in candidates:
        obj, old = current(key, now), seen.get(key)
        if obj is not None and old is None:
            changes.append(("ADDED", obj))
        elif obj is not None and old is not None:
            if old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                changes.append(("MODIFIED", obj))
        elif old is not None:  # the object as it was deleted, not as this watch last sent it: the watch
            # cache sends every change, the last one included (apiserver pkg/storage/cacher watchCache)
            changes.append(("DELETED", follower.objects.get(key) or old))
        if obj is None:
            seen.pop(key, None)
        else:
            seen[key] = obj
    changes.sort(key=lambda c: (c[0] == "DELETED", int(c[1]["metadata"].get("resourceVersion") or 0)))
    return changes


# --------------------------------------------------------------------------- create


def cmd_create(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    files = flags.get("filename") or []
    if flags.get("raw") is not None:
        return create_raw(inv, flags, positional, files)
    if positional:
        raise KubectlError(f"Unexpected args: [{' '.join(positional)}]\nSee 'kubectl create -h' for help and examples")
    if not files:
        raise KubectlError("error: must specify one of -f and -k")
    if files.count("-") > 1:
        raise KubectlError("error: standard input cannot be used for multiple arguments")
    for f in files:
        if f != "-":
            if not os.path.exists(f):
                raise KubectlError(f'error: the path "{f}" does not exist')
            raise not_supported("create -f FILE (only -f - is implemented)")
    check_output_json(flags.get("output", ""), "create")
    validate = flags.get("validate", "strict")
    if validate not in ("strict", "true", "warn", "ignore", "false"):
        # kubectl v1.32's wording (cmdutil.GetValidationDirective)
        raise KubectlError(
            f'error: invalid - validate option "{validate}"; must be one of: strict (or true), warn, ignore (or false)'
        )
    stdin = sys.stdin.read() if not sys.stdin.isatty() else ""
    if not stdin.strip():
        raise KubectlError("error: no objects passed to create")
    # One JSON document or several one after another, as kubectl's YAMLOrJSONDecoder reads them
    # (cli-runtime StreamVisitor); a List's items are created as the documents would be.
    decoder, docs, at = json.JSONDecoder(), [], 0
    while stdin[at:].strip():
        try:
            doc, end = decoder.raw_decode(stdin, len(stdin) - len(stdin[at:].lstrip()))
        except ValueError as e:
            raise KubectlError(f"error: error parsing STDIN: error converting YAML to JSON: {e}") from None
        if not isinstance(doc, dict):
            raise KubectlError(
                "error: error parsing STDIN: json: cannot unmarshal into Go value of type map[string]interface {}"
            )
        docs.append(doc)
        at = end
    listed = len(docs) == 1 and str(docs[0].get("kind", "")).endswith("List")
    items = docs[0].get("items") if listed else docs
    if not items:
        raise KubectlError("error: no objects passed to create")
    # unreachable: a List's words, else those of documents and of one object (connection_refused)
    inv.check_context("list" if listed else "one")
    errors: List[str] = []
    for item in items:
        try:
            print_json(create_one(inv, item))
        except KubectlError as e:
            errors.append(e.message)
    if errors:
        raise KubectlError("\n".join(errors))
    return 0


# The collections ``create --raw`` may POST to: path -> (kind, apiVersion), the namespace from the path.
RAW_COLLECTION = re.compile(
    r"/api/v1/namespaces|/api/v1/namespaces/([^/?]+)/configmaps|/apis/batch/v1/namespaces/([^/?]+)/jobs"
)


def create_raw(inv: Invocation, flags: Dict[str, Any], positional: List[str], files: List[str]) -> int:
    """``create --raw PATH -f -`` (kubectl pkg/cmd/create/create.go, ValidateArgs, then
    RunCreate -> rawhttp.RawPost): the file's bytes POSTed as they are to PATH, one request, no
    discovery and no client-side validation; the server's answer printed as it is. The API
    server decodes the body as JSON when no Content-Type is sent (apiserver handlers/negotiation
    NegotiateInputSerializerForMediaType: the first supported type), checks that it is the
    collection's kind, and validates as the path's ``fieldValidation`` says (absent: Warn,
    handlers/rest.go fieldValidation); errors are printed without the ``error when creating
    "STDIN"`` of a plain create (there is no file name), as ``Error from server (Reason): message``."""
    raw = flags["raw"]
    if flags.get("output"):
        raise KubectlError("error: --raw and --output are mutually exclusive")
    if len(files) != 1:
        raise KubectlError("error: --raw can only use a single local file or stdin")
    if files[0] != "-":
        raise not_supported("create --raw -f FILE (only -f - is implemented)")
    if positional:
        raise KubectlError(f"Unexpected args: [{' '.join(positional)}]\nSee 'kubectl create -h' for help and examples")
    path, _, query = raw.partition("?")
    params = dict(query_pairs(query))
    match = RAW_COLLECTION.fullmatch(path)
    if match is None and path != RULES_REVIEW_PATH:
        raise not_supported(
            f"create --raw {raw} (only the namespaces, configmaps and jobs collections, and the rules review)"
        )
    stdin = sys.stdin.read() if not sys.stdin.isatty() else ""
    inv.check_context()
    if match is None:
        return create_rules_review(inv, stdin)
    try:
        obj = json.loads(stdin)
    except ValueError:
        obj = None
    kind, api_version = (
        ("Namespace", "v1")
        if path == "/api/v1/namespaces"
        else ("ConfigMap", "v1")
        if match.group(1)
        else ("Job", "batch/v1")
    )
    if not isinstance(obj, dict) or obj.get("kind") != kind or obj.get("apiVersion") != api_version:
        # apiserver handlers/create.go: the decoder refuses another kind than the endpoint's
        raise KubectlError(
            f"Error from server (BadRequest): the body of the request was in an unknown format for {kind}"
        )
    obj = deep_copy(obj)
    md = obj.setdefault("metadata", {})
    namespace = match.group(1) or match.group(2)
    if namespace is not None:
        namespace = unquoted(namespace)
        if md.get("namespace", namespace) != namespace:
            # apiserver handlers/rest.go (the object's namespace against the request's)
            raise KubectlError(
                "Error from server (BadRequest): the namespace of the provided object does not match the namespace "
                "sent on the request"
            )
        md["namespace"] = namespace
    rt = BY_KIND[kind]
    inv.flags = {**inv.flags, "validate": "strict" if params.get("fieldValidation") == "Strict" else "warn"}
    result: Dict[str, dict] = {}

    def apply() -> None:
        result["obj"] = store_new_object(inv, rt, obj, "")

    inv.api_call(("create", kind), verb="create", rt=rt, namespace=md.get("namespace", ""), apply=apply)
    out(json.dumps(result["obj"]))
    return 0


# Kinds a v1.32 cluster serves that the fake cannot create (anything else is "no matches").
REAL_KINDS = {
    "Pod": "v1",
    "RuntimeClass": "node.k8s.io/v1",
    "Node": "v1",
    "Event": "v1",
    "Secret": "v1",
    "Service": "v1",
    "ServiceAccount": "v1",
    "Deployment": "apps/v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "ResourceQuota": "v1",
    "LimitRange": "v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "PersistentVolumeClaim": "v1",
}


def served_kueue_versions() -> List[str]:
    from . import common

    return list(common.SERVED_KUEUE_VERSIONS)


def create_one(inv: Invocation, obj: dict) -> dict:
    if not isinstance(obj, dict):
        raise KubectlError('error: unable to decode "STDIN": object is not a JSON object')
    kind = obj.get("kind")
    api_version = obj.get("apiVersion")
    if not kind:
        raise KubectlError(f"error: unable to decode \"STDIN\": Object 'Kind' is missing in '{json.dumps(obj)}'")
    if not api_version:
        raise KubectlError(f"error: unable to decode \"STDIN\": Object 'apiVersion' is missing in '{json.dumps(obj)}'")
    obj = deep_copy(obj)
    md = obj.setdefault("metadata", {})
    name = md.get("name", "")
    kueue_kind = kind == "LocalQueue" and api_version in [f"kueue.x-k8s.io/{v}" for v in served_kueue_versions()]
    if CREATABLE.get(kind) != api_version and not kueue_kind:
        if REAL_KINDS.get(kind) == api_version:
            raise not_supported(f"creating kind {kind!r}")
        raise KubectlError(
            f'error: resource mapping not found for name: "{name}" namespace: "{md.get("namespace", "")}" '
            f'from "STDIN": no matches for kind "{kind}" in version "{api_version}"\n'
            "ensure CRDs are installed first"
        )
    if kind == "SelfSubjectAccessReview":
        return create_ssar(inv, obj)
    rt = BY_KIND[kind]
    ctx = 'error when creating "STDIN": '
    if rt.namespaced:
        obj_ns = md.get("namespace")
        if obj_ns and inv.namespace_flag and obj_ns != inv.namespace_flag:
            raise KubectlError(
                f'error: the namespace from the provided object "{obj_ns}" does not match '
                f'the namespace "{inv.namespace_flag}". You must pass '
                f"'--namespace={obj_ns}' to perform this operation."
            )
        md["namespace"] = obj_ns or inv.namespace
    else:
        md.pop("namespace", None)
    result: Dict[str, dict] = {}

    def apply() -> None:
        result["obj"] = store_new_object(inv, rt, obj, ctx)

    inv.api_call(("create", kind), verb="create", rt=rt, namespace=md.get("namespace", ""), create_ctx=ctx, apply=apply)
    return result["obj"]


def store_new_object(inv: Invocation, rt: ResType, obj: dict, ctx: str) -> dict:
    from .apiserver import (
        JOB_FIELD_SINCE,
        PER_INDEX_ON_BY_DEFAULT,
        admit_job,
        default_serviceaccount_later,
        invalid,
        namespace_enforces_restricted,
        pod_security_violations,
        prepare_job,
        server_minor,
        serviceaccount_object,
        strict_decoding_error,
        unknown_job_fields,
        validate_configmap,
        validate_metadata,
    )

    md = obj["metadata"]
    name = md.get("name", "")
    if md.get("resourceVersion"):
        raise KubectlError(
            f"Error from server (BadRequest): {ctx}resourceVersion should not be set on objects to be created"
        )
    uid = new_uid()
    if rt.kind == "Job":
        minor = server_minor(inv.faults)
        unknown = unknown_job_fields(obj, minor)
        strict = inv.flags.get("validate", "strict") in ("strict", "true")
        if unknown and strict:
            raise strict_decoding_error(unknown, ctx)
        dropped = bool(unknown) or minor < PER_INDEX_ON_BY_DEFAULT or bool(inv.faults.get("old_job_api"))
        problems = prepare_job(
            obj,
            uid,
            bool(inv.faults.get("legacy_labels")),
            old_job_api=dropped,
            no_pod_failure_policy=bool(inv.faults.get("no_pod_failure_policy")),
            knows_fail_index=minor >= JOB_FIELD_SINCE["backoffLimitPerIndex"],
        )
        if not problems:
            admit_job(obj, inv.faults)
    elif rt.kind == "Namespace":
        problems = validate_metadata(obj, label_name=True)
    elif rt.kind == "LocalQueue":  # Kueue's CRD schema: spec.clusterQueue is required
        problems = validate_metadata(obj, label_name=True)
        if not ((obj.get("spec") or {}).get("clusterQueue")):
            problems.append("spec.clusterQueue: Required value")
    else:
        problems = validate_configmap(obj)
    if problems:
        raise invalid(rt.kind, name, problems)
    warnings: List[str] = []
    with inv.store.tx() as tx:
        if rt.namespaced:
            ns_obj = tx.get("Namespace", None, md["namespace"])
            if ns_obj is None:
                raise KubectlError(f'Error from server (NotFound): {ctx}namespaces "{md["namespace"]}" not found')
            if ns_obj["metadata"].get("deletionTimestamp"):
                raise KubectlError(
                    f'Error from server (Forbidden): {ctx}{rt.qualified} "{name}" is forbidden: unable to '
                    f"create new content in namespace {md['namespace']} because it is being terminated"
                )
            if rt.kind == "Job" and namespace_enforces_restricted(ns_obj):
                v = pod_security_violations(obj["spec"]["template"]["spec"])
                if v:
                    warnings.append(f'Warning: would violate PodSecurity "restricted:latest": {", ".join(v)}')
        if tx.get(rt.kind, md.get("namespace"), name) is not None:
            raise KubectlError(f'Error from server (AlreadyExists): {ctx}{rt.qualified} "{name}" already exists')
        md["uid"] = uid
        md["creationTimestamp"] = now_ts(tx.now)
        if rt.kind == "Namespace":
            md["labels"] = {**(md.get("labels") or {}), "kubernetes.io/metadata.name": name}
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
            delay = float(inv.faults.get("serviceaccount_delay") or 0)
            if delay > 0:
                default_serviceaccount_later(inv.state, name, tx.now + delay)  # apiserver.py: the controller
            else:
                tx.put(serviceaccount_object(name, tx.now))
        tx.put(obj)
        created = deep_copy(obj)
    for w in warnings:
        err(w)
    if rt.kind == "Job":
        spawn_controller(inv.state, md["namespace"], name, uid)
    return created


RULES_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
RULE_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
SUBRESOURCES = {"pods": ("log", "status"), "nodes": ("proxy",), "jobs": ("status",), "namespaces": ("status",)}


def create_rules_review(inv: Invocation, stdin: str) -> int:
    """``create --raw /apis/authorization.k8s.io/v1/selfsubjectrulesreviews -f -``: the rules the
    fake user holds in the namespace, as RBAC lists them (plugin/pkg/auth/authorizer/rbac
    RulesFor): cluster-admin's one rule of wildcards when cluster.json forbids nothing, else one
    rule per verb and resource the forbidden list leaves (RBAC cannot say "all but"). The fault
    ``rules_review: "incomplete"`` is a cluster with a webhook authorizer, which cannot list its
    rules (`incomplete: true`, the RBAC rules beside it); every user may ask (system:basic-user)."""
    try:
        obj = json.loads(stdin)
    except ValueError:
        obj = None
    if not isinstance(obj, dict) or obj.get("kind") != "SelfSubjectRulesReview":
        raise KubectlError(
            "Error from server (BadRequest): the body of the request was in an unknown format for "
            "SelfSubjectRulesReview"
        )
    if not (obj.get("spec") or {}).get("namespace"):
        raise KubectlError("Error from server (BadRequest): no namespace on request")  # its REST Create
    result: Dict[str, dict] = {}

    def apply() -> None:
        if not inv.cluster.get("forbidden"):
            rules = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
        else:
            rules = []
            for rt in RESOURCES:
                for name in [rt.resource, *(f"{rt.resource}/{sub}" for sub in SUBRESOURCES.get(rt.resource, ()))]:
                    verbs = [verb for verb in RULE_VERBS if not is_forbidden(inv.cluster, verb, name)]
                    if verbs:
                        rules.append({"verbs": verbs, "apiGroups": [rt.group], "resources": [name]})
        status: Dict[str, Any] = {
            "resourceRules": rules,
            "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*"]}],
            "incomplete": inv.faults.get("rules_review") == "incomplete",
        }
        if status["incomplete"]:
            status["evaluationError"] = "webhook authorizer does not support user rule resolution"
        result["obj"] = {**obj, "metadata": {"creationTimestamp": None}, "status": status}

    inv.api_call(("create", "SelfSubjectRulesReview"), apply=apply, rbac=False)
    out(json.dumps(result["obj"]))
    return 0


def create_ssar(inv: Invocation, obj: dict) -> dict:
    attrs = (obj.get("spec") or {}).get("resourceAttributes") or {}
    verb = attrs.get("verb", "")
    resource = attrs.get("resource", "")
    if attrs.get("subresource"):
        resource = f"{resource}/{attrs['subresource']}"
    result: Dict[str, dict] = {}

    def apply() -> None:
        allowed = not is_forbidden(inv.cluster, verb, resource)
        reason = (
            f'RBAC: allowed by ClusterRoleBinding "fake-admin" of ClusterRole "cluster-admin" to User "{FAKE_USER}"'
            if allowed
            else "fake cluster: denied by the test's forbidden list"
        )
        result["obj"] = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "metadata": {"creationTimestamp": None},
            "spec": deep_copy(obj.get("spec") or {}),
            "status": {"allowed": allowed, "reason": reason},
        }

    inv.api_call(("create", "SelfSubjectAccessReview"), create_ctx='error when creating "STDIN": ', apply=apply)
    return result["obj"]


def spawn_controller(state: str, namespace: str, job: str, uid: str) -> None:
    """Start the detached Job controller/kubelet simulation (controller.py) for one Job."""
    import subprocess

    cdir = os.path.join(state, "controllers")
    os.makedirs(cdir, exist_ok=True)
    token = f"{namespace}__{job}__{uid[:8]}"
    write_json_atomic(
        os.path.join(cdir, token + ".json"), {"namespace": namespace, "job": job, "uid": uid, "started": time.time()}
    )
    env = dict(os.environ)
    env[CONTROLLER_ENV] = json.dumps({"namespace": namespace, "job": job, "uid": uid, "token": token})
    env[STATE_ENV] = state
    with open(os.path.join(cdir, token + ".log"), "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-S", ENTRY_SCRIPT],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=state,
            start_new_session=True,
            close_fds=True,
        )
    with open(os.path.join(cdir, token + ".pid"), "w", encoding="utf-8") as f:
        f.write(str(proc.pid))
    # Detached on purpose: this kubectl process exits without waiting for it.  Marking it as
    # reaped keeps Python from warning "subprocess is still running" at exit.
    proc.returncode = 0


# --------------------------------------------------------------------------- delete


def cmd_delete(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    if not positional:
        raise KubectlError(
            "error: You must provide one or more resources by argument or filename.\n"
            "Example resource specifications include:\n   '-f rsrc.yaml'\n"
            "   '--filename=rsrc.json'\n   '<resource> <name>'\n   '<resource>'"
        )
    cascade = flags.get("cascade", "background")
    if cascade in ("true", "false"):
        err(
            f"warning: --cascade={cascade} is deprecated (boolean value) and can be replaced with "
            f"--cascade={'background' if cascade == 'true' else 'orphan'}."
        )
        cascade = "background" if cascade == "true" else "orphan"
    if cascade not in ("background", "foreground", "orphan"):
        raise KubectlError(f'error: invalid cascade value ({cascade}). Must be "background", "foreground", or "orphan"')
    wait = flags.get("wait", True)
    if "/" in positional[0]:
        raise not_supported("delete TYPE/NAME (use delete TYPE NAME)")
    if len(positional) < 2:
        raise not_supported("delete without a resource name (delete TYPE NAME)")
    inv.check_context()
    t = positional[0]
    errors: List[str] = []
    deleted: List[Tuple[ResType, str]] = []
    for n in positional[1:]:
        rt = lookup_type(t)
        result: Dict[str, bool] = {}
        try:
            if rt is None:
                inv.api_call(("delete", t))
                rt = resolve_type(t)
            if rt.kind not in ("Job", "Namespace", "LocalQueue"):
                raise not_supported(f"delete {rt.resource}")
            if rt.kind == "Job" and cascade != "foreground":
                raise not_supported(f"delete job --cascade={cascade} (only --cascade=foreground)")

            def apply(rt: ResType = rt, n: str = n, result: Dict[str, bool] = result) -> None:
                result["deleted"] = delete_object(inv, rt, n)

            inv.api_call(
                ("delete", t),
                verb="delete",
                rt=rt,
                name=n,
                namespace=inv.namespace if rt.namespaced else "",
                apply=apply,
            )
        except KubectlError as e:
            errors.append(e.message)
            continue
        if result.get("deleted"):
            out(f'{rt.name_prefix} "{n}" deleted\n')
            deleted.append((rt, n))
        else:
            errors.append(not_found(rt, n))
    if wait:
        for rt, n in deleted:
            wait_gone(inv, rt, n)
    if errors:
        raise KubectlError("\n".join(errors))
    return 0


def delete_object(inv: Invocation, rt: ResType, name: str) -> bool:
    """Perform a delete; returns False if the object does not exist."""
    ns = inv.namespace if rt.namespaced else None
    with inv.store.tx() as tx:
        obj = tx.get(rt.kind, ns, name)
        if obj is None:
            return False
        if rt.kind == "Namespace":
            if name in ("default", "kube-system", "kube-public"):
                raise KubectlError(
                    f'Error from server (Forbidden): namespaces "{name}" is forbidden: '
                    "this namespace may not be deleted"
                )
            if obj["metadata"].get("deletionTimestamp"):
                raise KubectlError(
                    f'Error from server (Conflict): Operation cannot be fulfilled on namespaces "{name}": '
                    "The system is ensuring all content is removed from this namespace.  Upon completion, "
                    "this namespace will automatically be purged by the system."
                )
            delete_namespace(tx, obj, bool(inv.faults.get("namespace_stuck")))
        elif rt.kind == "LocalQueue":
            tx.vanish_later(obj)
        else:
            delete_job_foreground(tx, obj)
    return True


def delete_namespace(tx: Tx, obj: dict, stuck: bool) -> None:
    from .common import JOB_TRACKING_FINALIZER

    name = obj["metadata"]["name"]
    obj["metadata"]["deletionTimestamp"] = now_ts(tx.now)
    obj["status"] = {"phase": "Terminating"}
    if not stuck:
        tx.vanish_later(obj)
        return
    # Stuck: pods keep their job-tracking finalizer and stay Terminating, so the namespace
    # never goes away -- the classic "namespace stuck in Terminating".
    remaining = 0
    for o in tx.in_namespace(name):
        if o["kind"] == "Pod":
            o["metadata"].setdefault("deletionTimestamp", now_ts(tx.now))
            o["metadata"]["deletionGracePeriodSeconds"] = 0
            fins = o["metadata"].setdefault("finalizers", [])
            if JOB_TRACKING_FINALIZER not in fins:
                fins.append(JOB_TRACKING_FINALIZER)
            tx.put(o)
            remaining += 1
        else:
            tx.remove(o)
    t = now_ts(tx.now)
    obj["status"]["conditions"] = [
        {
            "type": "NamespaceDeletionDiscoveryFailure",
            "status": "False",
            "reason": "ResourcesDiscovered",
            "message": "All resources successfully discovered",
            "lastTransitionTime": t,
        },
        {
            "type": "NamespaceContentRemaining",
            "status": "True",
            "reason": "SomeResourcesRemain",
            "message": f"Some resources are remaining: pods. has {remaining} resource instances",
            "lastTransitionTime": t,
        },
        {
            "type": "NamespaceFinalizersRemaining",
            "status": "True",
            "reason": "SomeFinalizersRemain",
            "message": f"Some content in the namespace has finalizers remaining: {JOB_TRACKING_FINALIZER} "
            f"in {remaining} resource instances",
            "lastTransitionTime": t,
        },
    ]
    obj["spec"] = {"finalizers": ["kubernetes"]}
    tx.put(obj)


def delete_job_foreground(tx: Tx, job: dict) -> None:
    """Foreground cascading deletion: the garbage collector deletes the pods, GC_PODS_PER_SECOND
    of them a second, and the Job (with the foregroundDeletion finalizer) once they are gone."""
    uid = job["metadata"]["uid"]
    owned = [
        p
        for p in tx.list("Pod", job["metadata"]["namespace"])
        if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
    ]
    stuck = False
    for position, p in enumerate(owned):
        if not node_answers(tx, p):  # no kubelet confirms the kill: it stays Terminating, and the Job with it
            p["metadata"].setdefault("deletionTimestamp", now_ts(tx.now))
            tx.put(p)
            stuck = True
            continue
        p["metadata"].pop("finalizers", None)
        tx.vanish_later(p, position / GC_PODS_PER_SECOND)
    job["metadata"]["finalizers"] = ["foregroundDeletion"]
    if stuck:  # the garbage collector waits for every dependent (foreground deletion)
        job["metadata"].setdefault("deletionTimestamp", now_ts(tx.now))
        tx.put(job)
        return
    tx.vanish_later(job, len(owned) / GC_PODS_PER_SECOND + 0.05)


def node_answers(tx: Any, pod: dict) -> bool:
    """Whether the kubelet of the pod's node still answers (fault ``node_lost``: its Node is Ready
    Unknown): a deleted pod goes only once its kubelet has stopped it and confirmed (a graceful
    delete waits for the kubelet's final status, pkg/registry/core/pod/strategy.go), or PodGC
    force-deletes it. A pod never bound, or of a node that no longer exists, goes."""
    name = (pod.get("spec") or {}).get("nodeName")
    node = tx.get("Node", None, name) if name else None
    if node is None:
        return True
    ready = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
    return not ready or ready[0].get("status") == "True"


def wait_gone(inv: Invocation, rt: ResType, name: str) -> None:
    ns = inv.namespace if rt.namespaced else None
    deadline = time.monotonic() + DELETE_WAIT_CAP_SECONDS
    while time.monotonic() < deadline:
        if inv.store.get(rt.kind, ns, name) is None:
            return
        time.sleep(POLL_SECONDS)
    raise KubectlError(f"error: timed out waiting for the condition on {rt.resource}/{name}")


# --------------------------------------------------------------------------- logs


def cmd_logs(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    sel_text = flags.get("selector")
    container = flags.get("container")
    if sel_text is not None and positional:
        raise KubectlError(
            "error: only a selector (-l) or a POD name is allowed\nSee 'kubectl logs -h' for help and examples"
        )
    if sel_text is None and not 1 <= len(positional) <= 2:
        raise KubectlError(
            "error: expected 'logs [-f] [-p] (POD | TYPE/NAME) [-c CONTAINER]'.\n"
            "POD or TYPE/NAME is a required argument for the logs command\n"
            "See 'kubectl logs -h' for help and examples"
        )
    if len(positional) == 2:
        if container:
            raise KubectlError(
                "error: only one of -c or an inline [CONTAINER] arg is allowed\n"
                "See 'kubectl logs -h' for help and examples"
            )
        raise not_supported("logs POD CONTAINER (use -c CONTAINER)")
    if container is None:
        raise not_supported("logs without -c CONTAINER")
    tail = flags.get("tail", -1)
    if sel_text is not None and "tail" not in flags:
        tail = 10  # kubectl's default for -l
    inv.check_context()
    prt = BY_KIND["Pod"]
    # The authorizer sees what kubectl asks (contract tests, tests/test_kubectl_contract.py): `logs -l`
    # lists the pods first (list pods), `logs POD` GETs the pod first (get pods: kubectl
    # pkg/cmd/logs/logs.go Complete, builder.Do().Infos()), then each log (get pods/log, below).
    if sel_text is not None:
        inv.api_call(("logs", "logs"), verb="get", rt=prt, namespace=inv.namespace, rbac=False)
        inv.check_rbac("list", "pods", prt, "", inv.namespace)
        selector = parse_selector(sel_text)
        pods = [p for p in inv.store.list("Pod", inv.namespace) if matches(p, "Pod", inv.namespace, None, selector)]
        if not pods:
            err(f"No resources found in {inv.namespace} namespace.")
            return 0
    else:
        target = positional[0]
        if "/" in target:
            raise not_supported("logs TYPE/NAME (use logs POD)")
        inv.api_call(("logs", "logs"), verb="get", rt=prt, name=target, namespace=inv.namespace, rbac=False)
        inv.check_rbac("get", "pods", prt, target, inv.namespace)
        pod = inv.store.get("Pod", inv.namespace, target)
        if pod is None:
            raise KubectlError(missing_pod_of_logs(inv, target))
        pods = [pod]
    unavailable = {int(i) for i in inv.faults.get("logs_unavailable") or []}
    index_of = pod_indices(inv.state) if unavailable else {}
    if flags.get("follow"):
        return follow_logs(inv, flags, pods, container, unavailable, index_of)
    # kubectl ranges over a Go map of the pods' log requests (logs.go RunLogsContext ->
    # sequentialConsumeRequest, without -f): one pod after another, in random order ...
    import random  # here: every other command starts without it

    random.shuffle(pods)
    # ... each request through the one clientset LogsForObject made for them
    # (polymorphichelpers/logsforobject.go), whose RESTClient has client-go's default token
    # bucket: 5 requests a second, a burst of 10 (client-go rest/config.go DefaultQPS,
    # DefaultBurst, RESTClientForConfigAndClient -> flowcontrol.NewTokenBucketRateLimiter).
    limiter = TokenBucket(LOG_QPS, LOG_BURST)
    for pod in pods:
        name = pod["metadata"]["name"]
        limiter.wait()
        inv.check_rbac("get", "pods/log", prt, name, inv.namespace)
        try:
            data = read_pod_log(inv, pod, container, index_of.get((inv.namespace, name)), unavailable)
        except KubectlError as failure:
            if not flags.get("ignore-errors"):
                raise
            # --ignore-errors: the request's error on stdout, unprefixed, and the read goes on
            # (kubectl logs.go sequentialConsumeRequest: `fmt.Fprintf(o.Out, "error: %v\n", err)`,
            # err.Error() being the server's message without kubectl's "Error from server (...)")
            message = re.sub(r"^Error from server \([^)]*\): ", "", str(failure).splitlines()[0])
            transfer(inv, f"error: {message}\n".encode())
            continue
        # Like kubectl: bytes as the kubelet serves them, lines split at b"\n" only (a CR or a
        # U+2028 inside a line is just data), the prefix written once per such line.
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
            lines = [line + b"\n" for line in lines]
        else:
            lines = [line + b"\n" for line in lines[:-1]] + lines[-1:]
        if tail is not None and tail >= 0:
            lines = lines[-tail:] if tail else []
        if flags.get("prefix"):
            lines = [f"[pod/{name}/{container}] ".encode() + line for line in lines]
        transfer(inv, b"".join(lines))
    return 0


FOLLOW_POLL_SECONDS = 0.05  # how often a followed log looks for more output


def follow_logs(
    inv: Invocation, flags: Dict[str, Any], pods: List[dict], container: str, unavailable: set, index_of: dict
) -> int:
    """``logs -f``: kubectl pkg/cmd/logs/logs.go RunLogsContext. More streams than
    --max-log-requests (default 5) are refused before any is read; several are read at once
    (parallelConsumeRequest: one goroutine per pod writing prefix and line in one write to a pipe),
    one alone as without -f. A stream that fails ends the whole read (exit 1, its error on stderr),
    or with --ignore-errors prints ``error: MESSAGE`` on stdout and the others go on (1.36+
    consumeWithRetry: no retry with --ignore-errors). Each stream is the kubelet's ReadLogs with
    follow: the log so far, then each line as the container prints it, until the container has
    ended (then the rest) or the pod is gone (the kubelet stopped and removed its container)."""
    import threading  # here: every other command starts without it

    limit = flags.get("max-log-requests")
    limit = 5 if limit is None else int(limit)
    if len(pods) > 1 and len(pods) > limit:
        raise KubectlError(
            f"error: you are attempting to follow {len(pods)} log streams, but maximum allowed concurrency is "
            f"{limit}, use --max-log-requests to increase the limit"
        )
    prt = BY_KIND["Pod"]
    limiter = TokenBucket(LOG_QPS, LOG_BURST)
    lock, pacing = threading.Lock(), threading.Lock()
    failed: List[str] = []
    done = threading.Event()

    def write(data: bytes) -> None:
        with lock:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()

    def stream(pod: dict) -> None:
        name = pod["metadata"]["name"]
        prefix = f"[pod/{name}/{container}] ".encode() if flags.get("prefix") else b""
        try:
            with pacing:
                limiter.wait()
            inv.check_rbac("get", "pods/log", prt, name, inv.namespace)
            follow_pod_log(inv, pod, container, index_of.get((inv.namespace, name)), unavailable, prefix, write)
        except KubectlError as failure:
            if not flags.get("ignore-errors"):
                with lock:
                    failed.append(str(failure))
                done.set()
                return
            message = re.sub(r"^Error from server \([^)]*\): ", "", str(failure).splitlines()[0])
            write(f"error: {message}\n".encode())

    threads = [threading.Thread(target=stream, args=(pod,), daemon=True) for pod in pods]
    for thread in threads:
        thread.start()
    waiter = threading.Thread(target=lambda: [thread.join() for thread in threads] and None, daemon=True)
    waiter.start()
    while waiter.is_alive() and not done.is_set():
        waiter.join(FOLLOW_POLL_SECONDS)
    if failed:
        raise KubectlError(failed[0])
    return 0


def follow_pod_log(
    inv: Invocation, pod: dict, container: str, index: Optional[int], unavailable: set, prefix: bytes, write: Any
) -> None:
    """One followed stream (see follow_logs): lines as containerd has written them (whole lines
    while the container runs, containerlog.py), each with kubectl's prefix (logs.go
    DefaultConsumeRequest: one per bufio ReadBytes('\\n') piece)."""
    from .containerlog import cri_records, read_logs

    name = pod["metadata"]["name"]
    read_pod_log(inv, pod, container, index, unavailable)  # the kubelet's refusals, as without -f
    path = log_path(inv.state, inv.namespace, name)
    max_size = int(inv.faults.get("container_log_max_size") or CONTAINER_LOG_MAX_SIZE)
    # The bytes of the container's output already served (up to a line's end): each look reads
    # only what came after them, as the kubelet's follow reads on from its offset (logs.go
    # ReadLogs, woken by fsnotify in waitLogs), not the whole file again. A line's records
    # depend on that line alone, so the text of the rest is the rest of the text.
    consumed = 0

    def emit(text: bytes) -> None:
        pieces = re.findall(rb"[^\n]*\n|[^\n]+$", text)
        if pieces:
            write(b"".join(prefix + piece for piece in pieces))

    def after(offset: int) -> bytes:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return b""

    # The pod and the pending deletions are read again only when their files changed (each write
    # renames a new file into place: a new inode), not every look: ten streams looked 200 times a
    # second, and the API server in front of the fake (tests/apicluster.py) took that CPU from the
    # pods. Whether a pending deletion has come due is still asked each time.
    store, seen_files, stored, vanish = inv.store, None, None, {}

    def identity(file: str) -> Any:
        try:
            stat = os.stat(file)
        except OSError:
            return None
        return (stat.st_ino, stat.st_mtime_ns, stat.st_size)

    while True:
        files = (identity(store.path("Pod", inv.namespace, name)), identity(store.vanish_path))
        if files != seen_files:
            seen_files, stored, vanish = files, store.read("Pod", inv.namespace, name), store.pending_deletions()
        live = stored
        if live is not None and gone(vanish, time.time(), key_of(live), inv.namespace):
            live = None
        if live is None:
            return  # gone: the stream ends with what it carried
        ended = not any(
            "running" in (c.get("state") or {}) for c in (live.get("status") or {}).get("containerStatuses") or []
        )
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        if ended:
            rest = after(consumed)
            emit(served_log(rest, max_size) if consumed == 0 else read_logs(cri_records(rest)))
            return
        if size > consumed:
            fresh = after(consumed)
            complete = fresh[: fresh.rfind(b"\n") + 1]
            if complete:
                # a stream's start: the kubelet's current file only (rotation); then each line as
                # it comes, across rotations (logs.go waitLogs reopens)
                emit(served_log(complete, max_size) if consumed == 0 else read_logs(cri_records(complete)))
                consumed += len(complete)
        time.sleep(FOLLOW_POLL_SECONDS)


LOG_QPS, LOG_BURST = 5.0, 10  # client-go rest.DefaultQPS, rest.DefaultBurst


class TokenBucket:
    """client-go's flowcontrol.NewTokenBucketRateLimiter (golang.org/x/time/rate underneath):
    full at creation, `qps` tokens a second, at most `burst`; Wait takes one."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, burst
        self.tokens, self.at = float(burst), time.monotonic()

    def wait(self) -> None:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.qps)
        self.at = now
        if self.tokens < 1:
            time.sleep((1 - self.tokens) / self.qps)
            self.tokens, self.at = 1.0, time.monotonic()
        self.tokens -= 1


# What kubectl prints when --request-timeout ends a response while its body is read: client-go
# sets the timeout as http.Client.Timeout (rest.Config.Timeout), which covers reading the body, and
# net/http's cancelTimerBody wraps the error so; kubectl's CheckErr prefixes "error: ".
BODY_TIMEOUT = "error: context deadline exceeded (Client.Timeout or context cancellation while reading body)"


def transfer(inv: Invocation, data: bytes) -> None:
    """Write one log response to stdout. Fault ``log_bytes_per_second`` paces the transfer (a
    slow kubelet or link); with --request-timeout the response must end within it, else kubectl
    stops there with BODY_TIMEOUT after what arrived in time."""
    rate = inv.faults.get("log_bytes_per_second")
    if not rate:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    started = time.monotonic()
    piece = max(1, int(rate) // 20)
    for offset in range(0, len(data), piece):
        due = started + (offset + piece) / float(rate)
        if inv.request_timeout is not None and due - started > inv.request_timeout:
            time.sleep(max(0.0, started + inv.request_timeout - time.monotonic()))
            raise KubectlError(BODY_TIMEOUT)
        time.sleep(max(0.0, due - time.monotonic()))
        sys.stdout.buffer.write(data[offset : offset + piece])
        sys.stdout.flush()


def named_not_found(inv: Invocation, rt: ResType, name: str) -> str:
    """The NotFound of a named object: after it kubectl GETs the namespace (outside `default`),
    and when that is missing too, the namespace's NotFound is the error (cli-runtime
    pkg/resource/visitor.go, Info.Get)."""
    if rt.namespaced and inv.namespace != "default" and inv.store.get("Namespace", None, inv.namespace) is None:
        return not_found(BY_KIND["Namespace"], inv.namespace)
    return not_found(rt, name)


def missing_pod_of_logs(inv: Invocation, pod: str) -> str:
    """`logs POD` of a missing pod, in the words of this fake's kubectl minor (fault
    ``client_version``): from 1.30 kubectl's logs Complete wraps the error with the namespace
    (contract tests: `error: error from server (NotFound): pods "p0" not found in namespace "demo"`),
    before it the server's NotFound is printed as it is."""
    message = named_not_found(inv, BY_KIND["Pod"], pod)
    if client_minor(inv.faults) < 30 or not message.endswith(f'pods "{pod}" not found'):
        return message
    return f'error: error from server (NotFound): pods "{pod}" not found in namespace "{inv.namespace}"'


def client_minor(faults: dict) -> int:
    """The minor version of the kubectl this fake plays (fault ``client_version``, else CLIENT_GIT_VERSION)."""
    match = re.match(r"v?1\.(\d+)", str(faults.get("client_version") or CLIENT_GIT_VERSION))
    return int(match.group(1)) if match else 32


def pod_indices(state: str) -> Dict[Tuple[str, str], int]:
    """(namespace, pod) -> creation index within its job, from the controllers' records."""
    result: Dict[Tuple[str, str], int] = {}
    cdir = os.path.join(state, "controllers")
    try:
        names = os.listdir(cdir)
    except OSError:
        return result
    for fn in names:
        if fn.endswith(".stats.json"):
            rec = read_json(os.path.join(cdir, fn), {}) or {}
            for i, pod in enumerate(rec.get("pods") or []):
                result[(rec.get("namespace", ""), pod)] = i
    return result


def read_pod_log(inv: Invocation, pod: dict, container: str, index: Optional[int], unavailable: set) -> bytes:
    name = pod["metadata"]["name"]
    names = [c["name"] for c in pod["spec"].get("containers") or []]
    if container not in names:
        raise KubectlError(f"Error from server (BadRequest): container {container} is not valid for pod {name}")
    if index is not None and index in unavailable:
        raise KubectlError(
            f"Error from server (InternalError): Internal error occurred: failed to read log of pod {name}"
        )
    node = (pod.get("spec") or {}).get("nodeName")
    if not node_answers(
        inv.store, pod
    ):  # the API server proxies a log read to the pod's kubelet, which no longer answers
        raise KubectlError(
            f'Error from server: Get "https://{node}:10250/containerLogs/{inv.namespace}/{name}/{container}": '
            f"dial tcp {node}:10250: connect: no route to host"
        )
    path = log_path(inv.state, inv.namespace, name)
    started = any(
        "running" in (c.get("state") or {}) or "terminated" in (c.get("state") or {})
        for c in (pod.get("status") or {}).get("containerStatuses") or []
    )
    if not started and not os.path.exists(path):
        # The kubelet answers from the pod's container status (pkg/kubelet/kubelet_pods.go
        # validateContainerLogStatus, via GetKubeletContainerLogs; the API server passes its 400 on):
        # a pod that ended without any (a pod the kubelet's admission rejected, kubelet.go rejectPod:
        # no container ever ran) is `container %q in pod %q is not available`; one still being set
        # up is waiting to start.
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            raise KubectlError(
                f'Error from server (BadRequest): container "{container}" in pod "{name}" is not available'
            )
        raise KubectlError(
            f'Error from server (BadRequest): container "{container}" in pod "{name}" is '
            "waiting to start: ContainerCreating"
        )
    try:
        with open(path, "rb") as f:
            written = f.read()
    except FileNotFoundError:
        return b""
    return served_log(written, int(inv.faults.get("container_log_max_size") or CONTAINER_LOG_MAX_SIZE))


# --------------------------------------------------------------------------- the guide's script
# Forms the guide's own script uses; bench/bench.py runs it side by side.  Only these: every other
# table output or --sort-by stays refused.  (Its `get job NAME -o json`, `get pods -l job-name=...
# -o json`, `logs POD -c episode` and `create -f - -o json` are forms implemented above.)

EVENTS_SORT_FIELD = ".metadata.creationTimestamp"


def cmd_config_current_context(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    """``config current-context``: the kubeconfig's current-context (the kubeconfig alone)."""
    if positional:
        raise KubectlError(f"error: unexpected arguments: [{' '.join(positional)}]")
    inv.api_call(("config", "current-context"))
    if not inv.current_context:
        raise KubectlError("error: current-context is not set")
    out(inv.current_context + "\n")
    return 0


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration, which kubectl's AGE and LAST SEEN columns use."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def since(stamp: Optional[str], now: float) -> str:
    """translateTimestampSince: "<unknown>" for a missing time."""
    if not stamp:
        return "<unknown>"
    import calendar

    whole, _, fraction = stamp.rstrip("Z").partition(".")  # an eventTime has microseconds
    moment = calendar.timegm(time.strptime(whole + "Z", "%Y-%m-%dT%H:%M:%SZ")) + float("0." + (fraction or "0"))
    return human_duration(now - moment)


def render_table(header: List[str], rows: List[List[str]]) -> str:
    """kubectl's tab writer (minwidth 6, padding 3, spaces); the last column is not padded."""
    lines = [header, *rows]
    widths = [max(6, max(len(line[i]) for line in lines) + 3) for i in range(len(header) - 1)]
    return "".join("".join(cell.ljust(width) for cell, width in zip(line, widths)) + line[-1] + "\n" for line in lines)


def guide_get_table(
    inv: Invocation, rts: List[Tuple[ResType, Optional[str]]], flags: Dict[str, Any], sel_text: Optional[str]
) -> Optional[int]:
    """``get runtimeclass NAME`` (NAME HANDLER AGE) and ``get events --sort-by=.metadata.creationTimestamp``
    (LAST SEEN TYPE REASON OBJECT MESSAGE), as kubectl v1.32 prints them by default.  None for any
    other form (the caller refuses it)."""
    sort_by = flags.get("sort-by")
    plain = flags.get("output", "") == "" and sel_text is None and not flags.get("ignore-not-found")
    now = time.time()
    if plain and sort_by is None and len(rts) == 1 and rts[0][0].kind == "RuntimeClass" and rts[0][1]:
        rt, name = rts[0]
        inv.check_rbac("get", rt.resource, rt, name, "")
        obj = inv.store.get("RuntimeClass", None, name)
        if obj is None:
            raise KubectlError(not_found(rt, name))
        created = obj["metadata"].get("creationTimestamp")
        out(render_table(["NAME", "HANDLER", "AGE"], [[name, str(obj.get("handler", "")), since(created, now)]]))
        return 0
    if plain and sort_by == EVENTS_SORT_FIELD and len(rts) == 1 and rts[0][0].kind == "Event" and not rts[0][1]:
        rt = rts[0][0]
        inv.check_rbac("list", rt.resource, rt, "", inv.namespace)
        events = inv.store.list("Event", inv.namespace)
        if not events:
            err(f"No resources found in {inv.namespace} namespace.")
            return 0
        events.sort(key=lambda e: e["metadata"].get("creationTimestamp") or "")  # stable, like kubectl's sort
        rows = []
        for ev in events:
            first = since(ev.get("firstTimestamp") or ev.get("eventTime"), now)
            last = since(ev["lastTimestamp"], now) if ev.get("lastTimestamp") else first
            count = int(ev.get("count") or 0)
            if ev.get("series"):
                last = since(ev["series"].get("lastObservedTime"), now)
            elif count > 1:
                last = f"{last} (x{count} over {first})"
            involved = ev.get("involvedObject") or {}
            kind = str(involved.get("kind", "")).lower()
            target = f"{kind}/{involved['name']}" if involved.get("name") else kind
            rows.append(
                [last, str(ev.get("type", "")), str(ev.get("reason", "")), target, str(ev.get("message", "")).strip()]
            )
        out(render_table(["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], rows))
        return 0
    if sort_by is not None:
        raise not_supported(f"get --sort-by (only get events --sort-by={EVENTS_SORT_FIELD})")
    return None
