"""A small API server on 127.0.0.1 that answers the real kubectl and records every request.

tests/test_kubectl_contract.py runs the real kubectl against it: the server answers the
discovery documents kubectl asks for (/version, /api, /apis and the group versions the tool
uses), a test adds the routes its contract needs, and every request is recorded (method, path,
query, body, and when it arrived and when its answer was complete, on the monotonic clock) so
a test can assert the sequence and timing kubectl produced, not what we believe it does.

Standard library only: http.server in a thread, HTTP/1.1 with keep-alive as client-go uses it,
chunked answers for streams (watches, followed logs)."""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Pattern, Tuple, Union

SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4",
    "gitCommit": "59526cd4867447956156ae3a602fcbac5f2fd9e1",
    "gitTreeState": "clean",
    "buildDate": "2025-04-22T15:56:34Z",
    "goVersion": "go1.23.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _resource(name: str, kind: str, namespaced: bool, verbs: List[str], **extra: Any) -> Dict[str, Any]:
    return {"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs, **extra}


_ALL = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
# The group versions a cluster serves that the tool's calls resolve through (legacy discovery:
# the server answers the aggregated-discovery Accept type with plain JSON, and client-go falls
# back, as it does against any server without aggregated discovery).
GROUP_VERSIONS: Dict[str, List[Dict[str, Any]]] = {
    "v1": [
        _resource("configmaps", "ConfigMap", True, _ALL, shortNames=["cm"]),
        _resource("events", "Event", True, _ALL, shortNames=["ev"]),
        _resource("namespaces", "Namespace", False, ["create", "delete", "get", "list", "patch", "update", "watch"]),
        _resource("namespaces/status", "Namespace", False, ["get", "patch", "update"]),
        _resource("nodes", "Node", False, _ALL, shortNames=["no"]),
        _resource("nodes/proxy", "NodeProxyOptions", False, ["create", "delete", "get", "patch", "update"]),
        _resource("pods", "Pod", True, _ALL, shortNames=["po"], categories=["all"]),
        _resource("pods/log", "Pod", True, ["get"]),
        _resource("pods/status", "Pod", True, ["get", "patch", "update"]),
        _resource("serviceaccounts", "ServiceAccount", True, _ALL, shortNames=["sa"]),
    ],
    "batch/v1": [
        _resource("cronjobs", "CronJob", True, _ALL, shortNames=["cj"], categories=["all"]),
        _resource("jobs", "Job", True, _ALL, categories=["all"]),
        _resource("jobs/status", "Job", True, ["get", "patch", "update"]),
    ],
    "authorization.k8s.io/v1": [
        _resource("selfsubjectaccessreviews", "SelfSubjectAccessReview", False, ["create"]),
        _resource("selfsubjectrulesreviews", "SelfSubjectRulesReview", False, ["create"]),
    ],
    "node.k8s.io/v1": [_resource("runtimeclasses", "RuntimeClass", False, _ALL)],
    "events.k8s.io/v1": [_resource("events", "Event", True, _ALL, shortNames=["ev"])],
}


# kubectl asks for /openapi/v2 as protobuf (client-go DiscoveryClient.OpenAPISchema); an empty
# message is a document without definitions: client-side validation then checks no type.
OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"  # kube-openapi handler.go


def openapi_v3_root() -> Dict[str, Any]:
    """/openapi/v3: where each group version's document is."""
    paths = {}
    for group_version in GROUP_VERSIONS:
        key = ("api/" if group_version == "v1" else "apis/") + group_version
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash=0123456789ABCDEF"}
    return {"paths": paths}


def openapi_v3_group_version(key: str) -> Optional[Dict[str, Any]]:
    """A group version's OpenAPI v3 document, reduced to what kubectl's field-validation check
    reads (cli-runtime query_param_verifier_v3.go supportsQueryParamV3): each kind's PATCH
    operation, its x-kubernetes-group-version-kind and a fieldValidation query parameter."""
    group_version = key.split("/", 1)[1] if "/" in key else key
    if group_version not in GROUP_VERSIONS or not key.startswith("api/" if group_version == "v1" else "apis/"):
        return None
    group, _, version = group_version.rpartition("/")
    paths = {}
    for resource in GROUP_VERSIONS[group_version]:
        if "/" in resource["name"] or "patch" not in resource["verbs"]:
            continue
        scope = "/namespaces/{namespace}" if resource["namespaced"] else ""
        path = f"/{key}{scope}/{resource['name']}/{{name}}"
        gvk = {"group": group, "version": version, "kind": resource["kind"]}
        parameters = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}]
        paths[path] = {"patch": {"x-kubernetes-group-version-kind": gvk, "parameters": parameters, "responses": {}}}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
        "paths": paths,
    }


class Recorded:
    """One request as the server saw it."""

    def __init__(self, method: str, target: str, headers: Dict[str, str], body: bytes, arrived: float) -> None:
        parsed = urllib.parse.urlsplit(target)
        self.method = method
        self.path = parsed.path
        self.query: Dict[str, str] = dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
        self.headers = headers
        self.body = body
        self.arrived = arrived  # time.monotonic() once the request line and headers were read
        # time.monotonic() just before the answer's last bytes were written: a client cannot have
        # read the whole answer earlier (a stamp taken after the write could come after the
        # client's next request, on a loaded machine)
        self.answered: Optional[float] = None
        self.status: Optional[int] = None

    @property
    def discovery(self) -> bool:
        return self.path in ("/version", "/api", "/apis") or bool(_DISCOVERY_PATH.fullmatch(self.path))

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        query = "?" + urllib.parse.urlencode(self.query) if self.query else ""
        return f"{self.method} {self.path}{query} -> {self.status}"


_DISCOVERY_PATH = re.compile(r"/api/v1|/apis/[^/]+/[^/]+|/apis/[^/]+")


class Answer:
    """What a route answers: a status and a body (bytes, or JSON), or a stream of chunks,
    each sent after its delay in seconds, the connection then closed."""

    def __init__(
        self,
        status: int = 200,
        body: Union[bytes, Any] = b"",
        content_type: str = "application/json",
        chunks: Optional[Iterable[Tuple[float, bytes]]] = None,
        delay: float = 0.0,
        headers: Optional[Dict[str, str]] = None,
    ) -> None:
        self.status = status
        self.body = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.content_type = content_type
        self.chunks = chunks
        self.delay = delay  # before the status line: a slow server
        self.headers = headers or {}


def status_answer(code: int, reason: str, message: str, details: Optional[Dict[str, Any]] = None) -> Answer:
    """A metav1.Status error, as the API server writes it."""
    status: Dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        status["details"] = details
    return Answer(code, status)


Route = Callable[[Recorded, "re.Match[str]"], Answer]


class _ListeningServer(http.server.ThreadingHTTPServer):
    """A thread per connection, with a listen backlog an API server's: socketserver's default of
    5 drops the connections kubectl opens at once beyond it (`logs -f` of ten pods opens ten),
    and the kernel then retries each after a second (the SYN's first retransmission)."""

    daemon_threads = True
    request_queue_size = 128


class RecordingServer:
    """The server, started on a free port of 127.0.0.1; use as a context manager."""

    def __init__(self) -> None:
        self.routes: List[Tuple[str, Pattern[str], Route]] = []
        self.requests: List[Recorded] = []
        self.arrivals: List[Tuple[str, str]] = []  # (method, path) of every request begun, its body read or not
        self.lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else a body written after its headers waits ~40 ms for an ACK

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                arrived = time.monotonic()
                with owner.lock:
                    owner.arrivals.append((self.command, self.path))
                try:
                    body = self._body()
                except EOFError:  # the client went away before its body's end: no request. An API server
                    # reads the whole body before it decodes it (apiserver pkg/endpoints/handlers/rest.go
                    # limitedReadBody, io.ReadAll), and net/http's chunked reader fails with
                    # io.ErrUnexpectedEOF on a body cut before its last chunk: the create fails, nothing stored
                    self.close_connection = True
                    return
                headers = {key.lower(): value for key, value in self.headers.items()}
                record = Recorded(self.command, self.path, headers, body, arrived)
                with owner.lock:
                    owner.requests.append(record)
                answer = owner.answer(record)
                record.status = answer.status
                if answer.delay:
                    time.sleep(answer.delay)
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", answer.content_type)
                    for key, value in answer.headers.items():
                        self.send_header(key, value)
                    if answer.chunks is None:
                        self.send_header("Content-Length", str(len(answer.body)))
                        record.answered = time.monotonic()
                        self.end_headers()
                        self.wfile.write(answer.body)
                        self.wfile.flush()
                    else:
                        self.send_header("Transfer-Encoding", "chunked")
                        self.send_header("Connection", "close")
                        self.end_headers()
                        self.wfile.flush()
                        for delay, chunk in answer.chunks:
                            if delay:
                                time.sleep(delay)
                            if chunk:
                                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                                self.wfile.flush()
                        record.answered = time.monotonic()
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                        self.close_connection = True
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # kubectl went away (a timeout, an exit)

            def _body(self) -> bytes:
                """The request's body: Content-Length bytes, or chunks (`create --raw -f -` streams
                its file: client-go's Body(io.Reader) sets no length, net/http then sends it
                chunked)."""
                if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
                    length = int(self.headers.get("Content-Length") or 0)
                    return self.rfile.read(length) if length else b""
                body = b""
                while True:
                    line = self.rfile.readline()
                    if not line.endswith(b"\n"):  # the connection ended before the last chunk (a killed kubectl)
                        raise EOFError("the request's body ended before its last chunk")
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return body
                    body += self.rfile.read(size)
                    self.rfile.readline()  # the chunk's CRLF

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        self.httpd = _ListeningServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="recording-server", daemon=True
        )  # the poll interval is how long shutdown() waits

    def __enter__(self) -> RecordingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def route(self, method: str, pattern: str, handler: Route) -> None:
        """Answer METHOD requests whose whole path matches pattern (routes added later win)."""
        self.routes.insert(0, (method, re.compile(pattern), handler))

    def answer(self, record: Recorded) -> Answer:
        for method, pattern, handler in self.routes:
            match = pattern.fullmatch(record.path)
            if method == record.method and match:
                return handler(record, match)
        if record.method == "GET":
            discovery = self.discovery(record.path)
            if discovery is not None:
                return Answer(200, discovery)
            if record.path == "/openapi/v2":
                return Answer(200, b"", OPENAPI_V2_PROTOBUF)
            if record.path == "/openapi/v3":
                return Answer(200, openapi_v3_root())
            if record.path.startswith("/openapi/v3/"):
                document = openapi_v3_group_version(record.path[len("/openapi/v3/") :])
                if document is not None:
                    return Answer(200, document)
        return status_answer(404, "NotFound", "the server could not find the requested resource")

    @staticmethod
    def discovery(path: str) -> Optional[Dict[str, Any]]:
        if path == "/version":
            return SERVER_VERSION
        if path == "/api":
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
            }
        groups = sorted({gv.split("/")[0] for gv in GROUP_VERSIONS if "/" in gv})
        if path == "/apis":
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": group,
                        "versions": [{"groupVersion": f"{group}/v1", "version": "v1"}],
                        "preferredVersion": {"groupVersion": f"{group}/v1", "version": "v1"},
                    }
                    for group in groups
                ],
            }
        for group in groups:
            if path == f"/apis/{group}":
                return {
                    "kind": "APIGroup",
                    "apiVersion": "v1",
                    "name": group,
                    "versions": [{"groupVersion": f"{group}/v1", "version": "v1"}],
                    "preferredVersion": {"groupVersion": f"{group}/v1", "version": "v1"},
                }
        for group_version, resources in GROUP_VERSIONS.items():
            prefix = "/api/" if group_version == "v1" else "/apis/"
            if path == prefix + group_version:
                return {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": group_version,
                    "resources": resources,
                }
        return None

    def taken(self) -> List[Recorded]:
        """The requests so far, in arrival order."""
        with self.lock:
            return sorted(self.requests, key=lambda record: record.arrived)

    def api_requests(self) -> List[Recorded]:
        """The requests so far that are not discovery (nor OpenAPI documents)."""
        return [r for r in self.taken() if not r.discovery and not r.path.startswith("/openapi/")]

    def kubeconfig(self, directory: Path, contexts: Iterable[str] = ("contract",), current: str = "contract") -> Path:
        """A kubeconfig whose every context points at this server, no credentials."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "recording", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {}}],
            "contexts": [{"name": name, "context": {"cluster": "recording", "user": "tester"}} for name in contexts],
            "current-context": current,
        }
        path = directory / "kubeconfig"
        path.write_text(json.dumps(config))
        return path
