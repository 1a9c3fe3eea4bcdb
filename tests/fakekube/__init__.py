"""The strict fake of kubectl v1.32 that the end-to-end tests run the tool against.

Run it as ``tests/fake_kubectl.py`` (the executable entry); build a cluster for it with
``tests/fakecluster.py``.  What the tool expects from a cluster is spelled out module by
module:

* ``cli``: the command line kubectl accepts (global flags, commands, flags) and how it
  rejects everything else;
* ``commands``: the exact requests the tool makes and the answers a v1.32 cluster gives;
* ``apiserver``: what the API server adds to or refuses in the objects the tool creates;
* ``store``: how objects, resourceVersions and deletions behave over time;
* ``controller``: what the Job controller, scheduler and kubelet do with the tool's Job;
* ``faults``: the failures a test can inject.

Only the standard library is used; importing this package imports nothing.
"""
