"""Commands: check, run, cleanup, compare, show-worker and the rest, each an exit code."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .constants import (
    CLUSTERQUEUE_RESOURCE,
    EXIT_CLUSTER,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_THRESHOLD,
    EXIT_USAGE,
    NAMESPACE_PREFIX,
    NO_RUNTIME,
    NON_TERMINATED_PODS,
    REWARDS_FILE,
    RUN_FILES,
)
from .core_basics import (
    configmap_manifest,
    job_name_for,
    namespace_manifest,
    new_run_id,
    release_and_fingerprint,
    round_job_manifest,
)
from .core_guide import REPRODUCE_GROUPS, guide_table, render_guide_table
from .core_permissions import access_review_list, preflight_findings
from .core_reports import (
    comparison,
    headline,
    junit_suites,
    junit_tag_properties,
    markdown_literal,
    markdown_summary,
    metrics_labels,
    printable,
    render_comparison,
    render_junit_xml,
    render_metrics,
    render_summary,
)
from .core_validation import check_thresholds
from .errors import BUG, INTERRUPTED, DemoError, EpisodeInvalid, KubectlFailure, outcome_of
from .flow_run import (
    BatchRun,
    cleanup_reproduce,
    cleanup_run,
    read_kueue_group,
    reproduce_group_argv,
    reproduce_group_dirs,
    reproduce_junit,
    reproduce_metrics,
    reproduce_verdict,
    write_reproduce_report,
)
from .kubectl import Kubectl, concurrently, make_kubectl
from .persistence import (
    _read_json_file,
    append_step_summary,
    claim_output,
    cleanup_command,
    load_results,
    read_receipt,
    refuse_existing_output,
    release_output,
    rounds_on_disk,
    save_error,
    save_kubectl_calls,
    saved_results,
    write_atomic,
    write_json,
    write_manifests,
    write_receipt,
    write_results_files,
)
from .records import Read, Receipt, ReproduceGroup, ReproduceReport, Results, RunSettings
from .status import Progress, discard_stdout, say, say_stderr, terminal_width

# Commands #####################################################################
# One function per command, given typed settings and a kubectl; each returns an exit code or
# raises DemoError. Uses everything above.


def write_dry_run(settings: RunSettings, namespace: str, run_id: str, print_summary: bool = True) -> int:
    """Write the manifests a run would submit, numbered in the order they are created."""
    claim_output(settings.output)
    manifests = [
        ("00-namespace.json", namespace_manifest(namespace, run_id)),
        (
            "01-configmap.json",
            configmap_manifest(
                namespace, run_id, settings.worker_source, settings.public_tasks, settings.launcher_source
            ),
        ),
    ]
    for round_number in range(1, settings.rounds + 1):
        name = job_name_for(round_number, settings.rounds)
        manifest = round_job_manifest(settings, name, namespace, run_id, settings.given_image)
        manifests.append((f"{1 + round_number:02d}-job-{name}.json", manifest))
    write_manifests(settings.output, manifests)
    if print_summary:
        say(f"dry run: wrote {len(manifests)} manifests to {settings.output}; no cluster was contacted")
    return EXIT_OK


def cmd_run(settings: RunSettings, unbound: Kubectl, tool: str, print_summary: bool = True) -> int:
    """One batch: the receipt, then BatchRun, then the results, the cleanup it was asked for, and
    the command that cleans up what is kept (`tool`: how the user started this tool). `reproduce`
    runs it without the summary when it prints only its own (--quiet, --json), the Python API
    always (it prints nothing on stdout)."""
    output = settings.output
    refuse_existing_output(output)
    run_id = new_run_id()
    namespace = NAMESPACE_PREFIX + run_id
    if settings.dry_run:
        return write_dry_run(settings, namespace, run_id, print_summary)
    context, server = unbound.cluster_identity()
    kubectl = unbound.with_context(context, server)
    claim_output(output)
    receipt = Receipt(
        context=context,
        server=server,
        namespace=namespace,
        run_id=run_id,
        kubeconfig=kubectl.kubeconfig,
        kubectl=kubectl.executable,
        created_at=time.time(),
        tool_version=release_and_fingerprint(),
        jobs=[],
    )
    write_receipt(output, receipt)
    progress = Progress(enabled=not settings.quiet, log_interval=kubectl.timing.progress_log_interval)
    batch = BatchRun(kubectl, receipt, settings, progress)
    error: Optional[DemoError] = None
    reraise: Optional[BaseException] = None  # raised as it is once the cleanup policy has run
    bug = False
    try:
        results = batch.execute()
        error = publish(results, settings, print_summary)
    except BaseException as raised:  # an OSError here is the output directory's, not the cluster's
        outcome = outcome_of(raised, output)
        error = outcome.error()
        bug = outcome.kind == BUG  # recorded and cleaned up as asked, then it shows
        # Ctrl-C and SIGTERM end in their exit code; through the API, what the caller's handler raised shows
        if bug or (outcome.kind == INTERRUPTED and not isinstance(raised, KeyboardInterrupt)):
            reraise = raised
        if outcome.kind == INTERRUPTED:
            kubectl.stop_children()  # calls still running in other threads, or streams
            progress.finish()
            if batch.create_sent:
                say_stderr("interrupted: saving diagnostics (press Ctrl-C again to skip)")
            skipped = False
            try:
                batch.save_after_interrupt(batch.in_flight)
            except KeyboardInterrupt:  # the second Ctrl-C: the last line must not promise what was skipped
                skipped = True
                say_stderr("skipped saving diagnostics")
            where = f"diagnostics are in {output}" if batch.create_sent else "nothing was created in the cluster"
            if skipped:
                where = (
                    f"saving diagnostics was skipped, so {output} holds only what the run wrote before "
                    "(receipt.json, for cleanup)"
                )
            error = DemoError(f"interrupted; {where}", EXIT_INTERRUPTED)
    finally:
        kubectl.cancel_prepared()  # a create prepared for a step the run never reached
        kubectl.wait_for_ended_watches()
        save_kubectl_calls(output, kubectl.calls)
    if error is not None:
        save_error(output, str(error), error.exit_code, time.time())
        append_step_summary(f"### rl-batch-demo: failed (exit {error.exit_code})\n\n{markdown_literal(str(error))}")
    if error is not None and not bug and not batch.create_sent:
        release_output(output)  # nothing to clean up or inspect in the cluster: the same --output works again
        raise reraise or error
    cleaned = False
    validated = error is None or error.exit_code == EXIT_THRESHOLD
    if settings.cleanup_policy == "always" or (settings.cleanup_policy == "on-success" and validated):
        try:
            cleanup_run(kubectl, receipt, output, say_stderr)
            cleaned = True
        except DemoError as cleanup_error:
            if error is None:
                error = cleanup_error
            else:
                say_stderr(f"cleanup failed as well: {cleanup_error}")
        except KeyboardInterrupt:
            error = error or DemoError("interrupted during cleanup", EXIT_INTERRUPTED)
    if not cleaned and batch.namespace_created:
        command = cleanup_command(tool, output)
        say_stderr(f"namespace {namespace} is kept; delete it with: {command}", whole=command)
    if reraise is not None:
        raise reraise
    if error is not None:
        raise error
    return EXIT_OK


def publish(results: Results, settings: RunSettings, print_summary: bool = True) -> Optional[DemoError]:
    """Write results.json and timeline.svg, print the summary (unless the caller prints its own),
    and judge the thresholds."""
    output = settings.output
    write_results_files(output, results)
    breaches = check_thresholds(results, settings.thresholds)
    summary = (
        json.dumps(headline(results), indent=2, sort_keys=True, allow_nan=False) + "\n"
        if settings.json_summary
        else render_summary(results, summary_files(settings), breaches, terminal_width(sys.stdout))
    )
    try:
        if print_summary:
            sys.stdout.write(printable(summary, keep_newlines=True))
            sys.stdout.flush()
    except BrokenPipeError:  # a closed reader must not stop the thresholds or the cleanup
        discard_stdout()
    append_step_summary(markdown_summary(results))
    if breaches:
        return DemoError(
            f"latency budget breached: {'; '.join(breaches)}; results are in {output / RUN_FILES.results}",
            EXIT_THRESHOLD,
        )
    return None


def summary_files(settings: RunSettings) -> List[Tuple[str, str]]:
    """The summary's last lines but one: where the run's files are, and the reports it was asked for."""
    output = settings.output
    files = [
        ("results", f"{output / RUN_FILES.results} (every figure; {output / REWARDS_FILE}: one reward per episode)"),
        ("timeline", str(output / RUN_FILES.timeline)),
    ]
    reports = [f"JUnit {settings.junit}"] if settings.junit else []
    reports += [f"metrics {settings.metrics_file}"] if settings.metrics_file else []
    if reports:
        files.append(("reports", ", ".join(reports) + " (written when the run ends)"))
    return files


def cmd_reproduce(
    args: argparse.Namespace, base: RunSettings, tool: str, settings_of: Callable[[Sequence[str]], RunSettings]
) -> int:
    """The guide's experiment: 10 in parallel, the same one at a time, then a warm-up episode on
    each node and K rounds in parallel; one image digest throughout; each group cleaned up once
    its diagnostics are saved; the guide's table and a verdict at the end (with --quiet or
    --json, nothing else on stdout). `base` holds what every group's run shares; each group runs
    the settings `settings_of` reads from its command line (reproduce_group_argv, as report.json
    records it); a breached --threshold lets the experiment go on."""
    output = base.output
    refuse_existing_output(output)
    context, _ = make_kubectl(args).cluster_identity()  # read once: every group runs in this context
    claim_output(output)
    report: ReproduceReport = {
        "context": context,
        "image": args.image,
        "image_pinned": None,
        "count": args.count,
        "rounds": args.rounds,
        "groups": [],
        "complete": False,
        "tool_version": release_and_fingerprint(),
    }
    alone = args.quiet or args.json  # stdout: only the table and the verdict, or only the JSON
    failure: Optional[DemoError] = None
    try:
        for number, group in enumerate(REPRODUCE_GROUPS, 1):
            argv = reproduce_group_argv(args, context, group, report["image_pinned"])
            if not alone:
                say_stderr(f"reproduce: group {number}/{len(REPRODUCE_GROUPS)} ({group}): {shlex.join(argv)}")
            entry: ReproduceGroup = {"name": group, "directory": group, "argv": argv, "exit_code": None}
            report["groups"].append(entry)
            write_json(output / "report.json", report)
            settings = settings_of(argv)
            try:
                entry["exit_code"] = cmd_run(settings, make_kubectl(args).with_context(context), tool, not alone)
            except DemoError as error:
                entry["exit_code"], entry["error"] = error.exit_code, str(error)
                failure = None if error.exit_code == EXIT_THRESHOLD else error  # over budget, yet valid
            receipt = _read_json_file(output / group / RUN_FILES.receipt)
            entry["namespace"] = receipt.get("namespace") if isinstance(receipt, dict) else None
            if failure is not None:
                break
            if report["image_pinned"] is None:
                results = saved_results(output / group)
                report["image_pinned"] = results["image_pinned"] if results else None
                if not report["image_pinned"]:
                    failure = DemoError(
                        f"group {group} did not resolve an image digest; inspect {output / group}", EXIT_CLUSTER
                    )
                    break
        report["complete"] = failure is None
    except KeyboardInterrupt:
        write_reproduce_reports(args, base, settings_of, report, DemoError("interrupted", EXIT_INTERRUPTED))
        raise
    finally:
        text = write_reproduce_report(output, report, args.lang, args.reference == "guide")
    table, width = report.get("table"), terminal_width(sys.stdout)
    if text is not None and table and width is not None:  # report.md keeps full lines; a terminal, its width
        text = render_guide_table(table, "text", width)
    problems = write_reproduce_reports(args, base, settings_of, report, failure)
    verdict = reproduce_verdict(output, report)
    if args.json:
        sys.stdout.write(json.dumps({**report, "verdict": verdict}, indent=2, sort_keys=True, allow_nan=False) + "\n")
    else:
        if text is not None:
            sys.stdout.write(("" if alone else "\n") + printable(text, keep_newlines=True) + "\n")
        sys.stdout.write(printable(verdict) + "\n")
    sys.stdout.flush()
    if failure is not None:
        kept = "" if base.cleanup_policy == "always" else f"; clean up with: {cleanup_command(tool, output)}"
        raise DemoError(
            f"reproduce stopped at group {report['groups'][-1]['name']}: {failure}{kept}", failure.exit_code
        )
    if problems:
        raise DemoError(f"the experiment finished but {'; '.join(problems)}", EXIT_USAGE)
    breached = [entry for entry in report["groups"] if entry["exit_code"] == EXIT_THRESHOLD]
    if breached:
        named = "; ".join(f"{entry['name']}: {entry['error']}" for entry in breached)
        raise DemoError(f"latency budget breached in {named}", EXIT_THRESHOLD)
    return EXIT_OK


def write_reports(reports: Sequence[Tuple[str, Optional[str], Callable[[], str]]]) -> List[str]:
    """Write each report (what it is, its path or None when not asked for, its text) atomically,
    whatever the outcome of the run: a report that cannot be written is a warning, and the list
    of them is returned for the caller to judge."""
    problems = []
    for what, path, render in reports:
        if path:
            try:
                write_atomic(Path(path), render())
            except OSError as oops:
                problems.append(f"the {what} {path} could not be written ({oops.strerror or oops})")
    for problem in problems:
        say_stderr(f"warning: {problem}")
    return problems


def write_reproduce_reports(
    args: argparse.Namespace,
    base: RunSettings,
    settings_of: Callable[[Sequence[str]], RunSettings],
    report: ReproduceReport,
    failure: Optional[DemoError],
) -> List[str]:
    """The experiment's --junit and --metrics-file; returns what could not be written."""
    output = base.output
    return write_reports(
        [
            ("JUnit report", args.junit, lambda: reproduce_junit(output, report, failure, base.thresholds)),
            ("metrics file", args.metrics_file, lambda: reproduce_metrics(output, report, settings_of, time.time())),
        ]
    )


def cmd_run_reported(settings: RunSettings, unbound: Kubectl, tool: str, print_summary: bool = True) -> int:
    """`run`, then its --junit and --metrics-file reports, written whatever the outcome:
    CI needs them most when the run failed. Reports never change the run's exit code,
    except that a report that cannot be written fails an otherwise successful run."""
    if settings.dry_run or not (settings.junit or settings.metrics_file):
        return cmd_run(settings, unbound, tool, print_summary)
    output = settings.output
    fresh = not (output.exists() or output.is_symlink())  # only then is what DIR holds this run's
    code = EXIT_OK
    stopped: Optional[BaseException] = None
    error: Optional[DemoError] = None
    try:
        code = cmd_run(settings, unbound, tool, print_summary)
    except BaseException as raised:  # the reports say how the run ended (a bug: failed), then it shows
        stopped, error = raised, outcome_of(raised).error()
    problems = write_ci_reports(settings, output if fresh else None, error)
    if stopped is not None:
        raise stopped
    if problems:
        raise DemoError(f"the run succeeded but {'; '.join(problems)}", EXIT_USAGE)
    return code


def write_ci_reports(settings: RunSettings, output: Optional[Path], error: Optional[DemoError]) -> List[str]:
    """Write --junit and --metrics-file from what the run left in DIR (None: DIR was not this
    run's, so nothing in it is read). Returns what could not be written."""
    results = saved_results(output)
    exit_code = error.exit_code if error is not None else EXIT_OK

    def junit() -> str:
        started = rounds_on_disk(output, settings.rounds) if output is not None and results is None else []
        failure = None
        if error is not None:
            failure = (error.exit_code, str(error), error.pod if isinstance(error, EpisodeInvalid) else None)
        receipt = _read_json_file(output / RUN_FILES.receipt) if output is not None else None
        properties = {"exit_code": str(exit_code), **junit_tag_properties(settings.tags)}
        if isinstance(receipt, dict):
            properties.update(namespace=str(receipt.get("namespace")), context=str(receipt.get("context")))
        return render_junit_xml(junit_suites(results, started, settings.thresholds, failure), properties)

    return write_reports(
        [
            ("JUnit report", settings.junit, junit),
            (
                "metrics file",
                settings.metrics_file,
                lambda: render_metrics(results, metrics_labels(settings), exit_code, time.time()),
            ),
        ]
    )


def cmd_show_worker(source: str) -> int:
    sys.stdout.write(source)
    sys.stdout.flush()
    return EXIT_OK


def cmd_cleanup(args: argparse.Namespace) -> int:
    output = Path(args.output)
    groups = reproduce_group_dirs(output)
    if not (output / RUN_FILES.receipt).exists() and (groups or (output / "report.json").is_file()):
        return cleanup_reproduce(args, groups)  # the output of `reproduce`
    receipt = read_receipt(output)
    cleanup_run(make_kubectl(args, receipt), receipt, output, say, wait_seconds=args.timeout)
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    """Can this cluster run the batch? Reads only; creates nothing but access reviews. Its
    --count and --parallelism are held to `run`'s limits before (cli.check_settings), and the
    capacity is planned as `run` would run them.

    A read that is forbidden or fails becomes one of the verdict's problems, so the verdict
    always lists everything that fails."""
    unbound = make_kubectl(args)
    context, server = unbound.cluster_identity()
    kubectl = unbound.with_context(context, server)
    runtime = None if args.runtime == NO_RUNTIME else args.runtime
    kubelet_metrics = args.kubelet_metrics

    def attempt(read: Callable[[], Any]) -> Read:
        try:
            return Read(read())
        except KubectlFailure as failure:
            if failure.unreachable:  # every read fails alike: one line says why
                raise
            return Read(failure=failure.first_line)

    queue = args.queue
    reviews = access_review_list(
        NAMESPACE_PREFIX + "preflight", runtime is not None, kubelet_metrics, True, local_queue=queue is not None
    )
    version, runtimeclass, nodes, pods, granted, kueue, cluster_queue = concurrently(
        [
            lambda: attempt(
                lambda: kubectl.decode_json(kubectl.run(["version", "-o", "json"], read_only=True), "version")
            ),
            lambda: attempt(lambda: kubectl.runtimeclass(runtime)) if runtime is not None else None,
            lambda: attempt(lambda: kubectl.get_list("nodes")),
            lambda: attempt(lambda: kubectl.get_list("pods", flags=NON_TERMINATED_PODS)),  # what runs there
            lambda: attempt(lambda: kubectl.create(reviews, review=True)),
            lambda: attempt(lambda: read_kueue_group(kubectl)) if queue is not None else None,
            lambda: attempt(lambda: kubectl.get(CLUSTERQUEUE_RESOURCE, queue)) if queue is not None else None,
        ]
    )
    findings = preflight_findings(
        context=context,
        server=server,
        runtime=runtime,
        version=version,
        runtimeclass=runtimeclass,
        image=args.image,
        nodes=nodes,
        pods=pods,
        reviews=granted,
        count=args.count,
        kubelet_metrics=kubelet_metrics,
        ephemeral_storage=args.ephemeral_storage,
        queue=queue,
        kueue=kueue,
        cluster_queue=cluster_queue,
        capacity=args.parallelism == "auto",
        parallelism=None if args.parallelism in (None, "auto") else args.parallelism,
    )
    problems = [finding.problem for finding in findings if not finding.ok]
    verdict = f"NOT ready: {'; '.join(problems)}" if problems else f"ready to run {args.count} episodes"
    code = EXIT_CLUSTER if problems else EXIT_OK
    if args.json:
        report = {
            "context": context,
            "server": server,
            "count": args.count,
            "parallelism": args.parallelism or args.count,
            "findings": [
                {"name": finding.name, "ok": finding.ok, "detail": finding.detail, "problem": finding.problem}
                for finding in findings
            ],
            "ready": not problems,
            "problems": problems,
            "verdict": verdict,
            "exit_code": code,
        }
        print(json.dumps(report, indent=2, sort_keys=True, allow_nan=False))
        return code
    for finding in findings:
        say(f"{finding.name}: {finding.detail}")
    say(f"verdict: {verdict}")
    return code


def cmd_compare(args: argparse.Namespace) -> int:
    runs = [(str(directory), load_results(Path(directory))) for directory in args.directories]
    counts = {results.get("episodes_per_round", results["episodes"]) for _, results in runs}
    if len(counts) > 1 and not args.allow_different_counts:
        raise DemoError(
            f"these runs have different episode counts ({', '.join(str(c) for c in sorted(counts))}); compare "
            "equal counts, as the guide advises, or pass --allow-different-counts",
            EXIT_USAGE,
        )
    if args.format == "guide":
        table = guide_table(runs, args.lang, args.reference == "guide")
        print(render_guide_table(table, "text", terminal_width(sys.stdout)), end="")
        return EXIT_OK
    rows = comparison(runs)
    names = [name for name, _ in runs]
    if args.format == "json":
        print(json.dumps({"runs": names, "figures": rows}, indent=2, sort_keys=True, allow_nan=False))
    else:
        width = terminal_width(sys.stdout) if args.format == "text" else None
        print(render_comparison(names, rows, args.format, width), end="")
    return EXIT_OK
