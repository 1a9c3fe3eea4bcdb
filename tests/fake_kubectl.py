#!/usr/bin/env python3
"""A strict test fake of ``kubectl`` v1.32 backed by a fake cluster on disk.

This script stands in for ``kubectl`` in the tests of ``rl_batch_demo.py`` (the ``kubectl``
wrapper that tests/fakecluster.py puts on PATH runs it).  It implements only the verbs and
flags that tool sends, the way kubectl v1.32 does (same flag syntax, same messages, same
exit codes), so the tool is tested against a cluster that behaves like a real one, not
against a stub that agrees with whatever the tool sends.  It never runs a real kubectl.

The implementation is the package next to this file, ``tests/fakekube/``:

``cli.py``         argv: global flags, commands, strict pflag-style parsing; records each call
``commands.py``    the commands the tool runs and the exact forms it runs them in
``apiserver.py``   defaulting, validation, Pod Security and RBAC answers; a fresh cluster's objects
``store.py``       one file per object, resourceVersions, pending deletions, the change log
``controller.py``  the Job controller, scheduler and kubelet that run each episode for real
``faults.py``      the injected faults (``FAKE_KUBECTL_FAULTS``), validated by name

With env ``FAKE_KUBECTL_CONTROLLER`` set this script is the background Job controller
instead (``create`` of a Job starts it).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fakekube.zygote import SERVE_ENV, ZYGOTE_ENV  # os and sys only: before anything else is imported

if __name__ == "__main__" and os.environ.get(ZYGOTE_ENV) and not os.environ.get("FAKE_KUBECTL_CONTROLLER"):
    from fakekube.zygote import call  # a call made by the fork server (tests/fakekube/zygote.py)

    status = call(os.environ[ZYGOTE_ENV])
    if status is not None:
        os._exit(status)

from fakekube import containerlog
from fakekube.cli import main
from fakekube.common import POD_PIDS_FILE
from fakekube.store import Store, init_state

__all__ = ["POD_PIDS_FILE", "Store", "containerlog", "init_state", "main"]

if __name__ == "__main__":
    if os.environ.get(SERVE_ENV):
        from fakekube.zygote import serve

        if not serve(os.environ[SERVE_ENV]):
            sys.exit(0)  # the server, done; a copy goes on to make its call
        from fakekube.zygote import finish

        finish(main)
    sys.exit(main())
