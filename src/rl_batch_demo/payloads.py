"""The programs that run inside the sandboxes, as text: the files of sandbox/, inlined by the build."""

from __future__ import annotations

from .sandbox import payload_text

# The episode worker (payload) #################################################
# The programs that run inside the sandboxes, kept as text; uses nothing above, and only the command
# line reads it. Each is a real file under src/rl_batch_demo/sandbox/, which tools/build.py inlines
# here as a string literal. WORKER_SOURCE (sandbox/episode.py, with sandbox/runner.py inlined at its
# end) runs in every sandbox (mounted from the ConfigMap as /demo/episode.py), so that copying this
# one file is enough; it must run on any Python 3.9+ image as UID 1000 with nothing but the
# standard library. WORKER_TEMPLATE (sandbox/template.py) is what `show-worker --template` prints.


WORKER_SOURCE = payload_text("episode.py")

# The pod's command: runs the worker, then frames what it left under RL_DEMO_ARTIFACTS
# (docs/own-episodes.md, "Artifacts"); mounted beside it as /demo/launcher.py.
LAUNCHER_SOURCE = payload_text("launcher.py")

# A minimal custom worker (`show-worker --template`): the starting point for `run --worker`.
# The README's "Plugging in a real model" explains the protocol it follows.
WORKER_TEMPLATE = payload_text("template.py")
