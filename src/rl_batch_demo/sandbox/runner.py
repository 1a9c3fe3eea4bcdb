import importlib.machinery
import importlib.util
import json
import linecache
import os
import sys
import traceback
import unittest

try:  # the interpreter's own SHA-256 for two small texts: hashlib loads OpenSSL, 2.5 ms of each run
    from _sha2 import sha256  # Python 3.12 on
except ImportError:
    try:
        from _sha256 import sha256  # Python 3.9 to 3.11
    except ImportError:  # a build that leaves every hash to OpenSSL
        from hashlib import sha256

TEST_MODULE = "test_shipping"
CODE_MODULE = "shipping"
TEST_ORIGIN = "runner stdin"


class RecordingResult(unittest.TextTestResult):
    # Records one [test id, outcome] entry per test run, a failure never overwritten by a pass.

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.entries = []
        self.current = None
        self.outcome = None

    def startTest(self, test):
        super().startTest(test)
        self.current, self.outcome = test, "unfinished"

    def stopTest(self, test):
        super().stopTest(test)
        if test is self.current:
            self.entries.append([test.id(), self.outcome])
        self.current, self.outcome = None, None

    def note(self, test, outcome):
        if test is self.current:
            if self.outcome in ("unfinished", "passed"):
                self.outcome = outcome
        else:  # an error outside a test, such as in setUpClass
            self.entries.append([test.id(), outcome])

    def addSuccess(self, test):
        super().addSuccess(test)
        self.note(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.note(test, "failed")

    def addError(self, test, err):
        super().addError(test, err)
        self.note(test, "error")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.note(test, "skipped")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.note(test, "expected_failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.note(test, "unexpected_success")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.note(test, "failed" if issubclass(err[0], test.failureException) else "error")


def load_module(name, source, origin, filename):
    # A module compiled from source the runner holds, never found on sys.path nor read from a .pyc;
    # its origin is the file it was read from (then also its __file__), or where it came from.
    spec = importlib.machinery.ModuleSpec(name, None, origin=origin)
    spec.has_location = origin == filename
    module = importlib.util.module_from_spec(spec)
    code = compile(source, filename, "exec", dont_inherit=True)
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module


def origins(compiled):
    # name -> the origin of the module sys.modules holds now, and the sha256 compiled under it.
    found = {}
    for name in (CODE_MODULE, TEST_MODULE):
        spec = getattr(sys.modules.get(name), "__spec__", None)
        origin = getattr(spec, "origin", None)
        found[name] = {"origin": origin if isinstance(origin, str) else None, "sha256": compiled.get(name)}
    return found


def run(channel, test_sha256):
    # One run of the tests, in a child of serve(): its report to `channel`; its exit code.
    os.set_inheritable(channel, False)
    report = {"nonce": None, "tests": [], "error": None, "modules": {}}
    compiled = {}
    result = None
    try:
        message = json.loads(sys.stdin.readline())
        report["nonce"] = message["nonce"]
        test_source = message["test_source"].encode("utf-8")
        if sha256(test_source).hexdigest() != test_sha256:
            raise ValueError("the test source on stdin does not match its sha256")
        sys.path.insert(0, os.getcwd())  # for modules the code under test imports itself
        with open(message["code_path"], "rb") as stream:
            code_source = stream.read()
        compiled[CODE_MODULE] = sha256(code_source).hexdigest()
        load_module(CODE_MODULE, code_source, message["code_path"], message["code_path"])
        filename = "test_shipping.py (" + TEST_ORIGIN + ")"
        lines = message["test_source"].splitlines(True)
        linecache.cache[filename] = (len(test_source), None, lines, filename)  # for tracebacks
        compiled[TEST_MODULE] = test_sha256
        module = load_module(TEST_MODULE, test_source, TEST_ORIGIN, filename)
        suite = unittest.defaultTestLoader.loadTestsFromModule(module)
        result = unittest.TextTestRunner(stream=sys.stderr, resultclass=RecordingResult).run(suite)
    except BaseException as error:  # SystemExit at import too: the report says so
        traceback.print_exc()
        report["error"] = (type(error).__name__ + ": " + str(error))[:200]
    if result is not None:
        report["tests"] = result.entries
    report["modules"] = origins(compiled)
    with os.fdopen(channel, "wb") as stream:
        stream.write(json.dumps(report).encode())
    return 0 if result is not None and report["error"] is None and result.wasSuccessful() else 1


def serve():
    # argv: TEST_SHA256 STATUS_FD, then one IN,OUT,ERR,CHANNEL group of descriptors per run.
    # Each run is a child forked from this process once its imports are done, before any run
    # starts: the same clean state as a fresh interpreter for each, at the cost of one start (an
    # interpreter and unittest's imports: a third of a pod's CPU). This process runs no code of the
    # workspace; it writes "forked" to STATUS_FD once every child exists (the worker starts the
    # first run only then), "RUN EXITCODE" as each child ends, then exits.
    test_sha256, status = sys.argv[1], int(sys.argv[2])
    runs = [[int(fd) for fd in group.split(",")] for group in sys.argv[3:]]
    children = {}
    for number, fds in enumerate(runs):
        pid = os.fork()
        if pid == 0:  # this run's pipes as its standard streams, nothing of the others' or of the status
            for other in runs:
                if other is not fds:
                    for fd in other:
                        os.close(fd)
            os.close(status)
            for target, fd in enumerate(fds[:3]):
                os.dup2(fd, target)
                os.close(fd)
            return run(fds[3], test_sha256)  # sys.exit(serve()) below: the child exits as a runner always did
        children[pid] = number
    for fds in runs:
        for fd in fds:
            os.close(fd)
    os.write(status, b"forked\n")  # every run's child exists: the worker may start the first
    quiet = os.open(os.devnull, os.O_RDWR)  # the first run's pipes end with that run: none of them kept here
    for target in (0, 1, 2):
        os.dup2(quiet, target)
    os.close(quiet)
    while children:
        pid, wait_status = os.waitpid(-1, 0)
        number = children.pop(pid, None)
        if number is not None:
            os.write(status, f"{number} {os.waitstatus_to_exitcode(wait_status)}\n".encode())
    return 0


sys.exit(serve())
