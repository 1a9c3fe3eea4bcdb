"""Commands: check, run, cleanup, compare, show-worker and the rest, each an exit code."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .constants import (
    EXIT_CLUSTER,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_THRESHOLD,
    EXIT_USAGE,
    NAMESPACE_PREFIX,
    NO_RUNTIME,
    NON_TERMINATED_PODS,
    REWARDS_FILE,
)
from .core_basics import (
    configmap_manifest,
    job_name_for,
    namespace_manifest,
    new_run_id,
    round_job_manifest,
    tool_version,
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
    render_timeline_svg,
)
from .core_validation import check_thresholds
from .errors import DemoError, EpisodeInvalid, KubectlFailure, bug_message
from .flow_run import (
    BatchRun,
    cleanup_reproduce,
    cleanup_run,
    reproduce_group_argv,
    reproduce_group_dirs,
    reproduce_group_settings,
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
    save_if_possible,
    saved_results,
    write_atomic,
    write_json,
    write_receipt,
)
from .records import Read, Receipt, ReproduceGroup, ReproduceReport, Results, RunSettings
from .status import Progress, say_stderr

# Commands #####################################################################
# One function per command, given typed settings and a kubectl; each returns an exit code or
# raises DemoError. Uses everything above.


def dry_run(settings: RunSettings, namespace: str, run_id: str, print_summary: bool = True) -> int:
    """Write the manifests a run would submit, numbered in the order they are created."""
    claim_output(settings.output)
    manifests = [
        ("00-namespace.json", namespace_manifest(namespace, run_id)),
        ("01-configmap.json", configmap_manifest(namespace, run_id, settings.worker_source, settings.public_tasks)),
    ]
    for round_number in range(1, settings.rounds + 1):
        name = job_name_for(round_number, settings.rounds)
        manifest = round_job_manifest(settings, name, namespace, run_id, settings.given_image)
        manifests.append((f"{1 + round_number:02d}-job-{name}.json", manifest))
    for file_name, manifest in manifests:
        write_json(settings.output / file_name, manifest)
    if print_summary:
        print(f"dry run: wrote {len(manifests)} manifests to {settings.output}; no cluster was contacted")
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
        return dry_run(settings, namespace, run_id, print_summary)
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
        tool_version=tool_version(),
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
    except DemoError as failure:
        error = failure
    except OSError as failed_write:  # the output directory, not the cluster: a full disk, lost permissions
        error = DemoError(
            f"cannot write the run's output ({failed_write.strerror or failed_write}: {failed_write.filename}); "
            f"check the free space and permissions of {output}",
            EXIT_USAGE,
        )
    except Exception as unexpected:  # a bug: record it and clean up as asked, then let it show
        reraise, bug = unexpected, True
        error = DemoError(bug_message(unexpected), EXIT_CLUSTER)
    except BaseException as interruption:  # Ctrl-C, SIGTERM; through the API, what the caller's handler raised
        reraise = None if isinstance(interruption, KeyboardInterrupt) else interruption
        kubectl.stop_children()  # calls still running in other threads, or streams
        progress.finish()
        if batch.create_sent:
            say_stderr("interrupted: saving diagnostics (press Ctrl-C again to skip)")
        try:
            batch.save_after_interrupt()
        except KeyboardInterrupt:
            say_stderr("skipped saving diagnostics")
        where = f"diagnostics are in {output}" if batch.create_sent else "nothing was created in the cluster"
        error = DemoError(f"interrupted; {where}", EXIT_INTERRUPTED)
    finally:
        kubectl.wait_for_ended_watches()
        save_if_possible(output / "kubectl-calls.json", kubectl.calls)
    if error is not None:
        save_if_possible(
            output / "error.json", {"message": str(error), "exit_code": error.exit_code, "at": time.time()}
        )
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
        say_stderr(f"namespace {namespace} is kept; delete it with: {cleanup_command(tool, output)}")
    if reraise is not None:
        raise reraise
    if error is not None:
        raise error
    return EXIT_OK


def publish(results: Results, settings: RunSettings, print_summary: bool = True) -> Optional[DemoError]:
    """Write results.json and timeline.svg, print the summary (unless the caller prints its own),
    and judge the thresholds."""
    output = settings.output
    write_json(output / "results.json", results)
    write_atomic(output / "timeline.svg", render_timeline_svg(results))
    breaches = check_thresholds(results, settings.thresholds)
    summary = (
        json.dumps(headline(results), indent=2, sort_keys=True, allow_nan=False) + "\n"
        if settings.json_summary
        else render_summary(results, summary_files(settings), breaches)
    )
    try:
        if print_summary:
            sys.stdout.write(printable(summary, keep_newlines=True))
            sys.stdout.flush()
    except BrokenPipeError:  # a closed reader must not stop the thresholds or the cleanup
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    append_step_summary(markdown_summary(results))
    if breaches:
        return DemoError(
            f"latency budget breached: {'; '.join(breaches)}; results are in {output / 'results.json'}",
            EXIT_THRESHOLD,
        )
    return None


def summary_files(settings: RunSettings) -> List[Tuple[str, str]]:
    """The summary's last lines but one: where the run's files are, and the reports it was asked for."""
    output = settings.output
    files = [
        ("results", f"{output / 'results.json'} (every figure; {output / REWARDS_FILE}: one reward per episode)"),
        ("timeline", str(output / "timeline.svg")),
    ]
    reports = [f"JUnit {settings.junit}"] if settings.junit else []
    reports += [f"metrics {settings.metrics_file}"] if settings.metrics_file else []
    if reports:
        files.append(("reports", ", ".join(reports) + " (written when the run ends)"))
    return files


def cmd_reproduce(args: argparse.Namespace, base: RunSettings, tool: str) -> int:
    """The guide's experiment: 10 in parallel, the same one at a time, then a warm-up episode on
    each node and K rounds in parallel; one image digest throughout; each group cleaned up once
    its diagnostics are saved; the guide's table and a verdict at the end (with --quiet or
    --json, nothing else on stdout). `base` holds what every group's run shares (see
    reproduce_group_settings); a breached --threshold lets the experiment go on."""
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
        "tool_version": tool_version(),
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
            settings = reproduce_group_settings(base, group, report["image_pinned"])
            try:
                entry["exit_code"] = cmd_run(settings, make_kubectl(args).with_context(context), tool, not alone)
            except DemoError as error:
                entry["exit_code"], entry["error"] = error.exit_code, str(error)
                failure = None if error.exit_code == EXIT_THRESHOLD else error  # over budget, yet valid
            receipt = _read_json_file(output / group / "receipt.json")
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
        write_reproduce_reports(args, base, report, DemoError("interrupted", EXIT_INTERRUPTED))
        raise
    finally:
        text = write_reproduce_report(output, report, args.lang, args.reference == "guide")
    problems = write_reproduce_reports(args, base, report, failure)
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
    args: argparse.Namespace, base: RunSettings, report: ReproduceReport, failure: Optional[DemoError]
) -> List[str]:
    """The experiment's --junit and --metrics-file; returns what could not be written."""
    output = base.output
    return write_reports(
        [
            ("JUnit report", args.junit, lambda: reproduce_junit(output, report, failure, base.thresholds)),
            ("metrics file", args.metrics_file, lambda: reproduce_metrics(output, report, base, time.time())),
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
    except DemoError as failure:
        stopped = error = failure
    except Exception as bug:  # a bug: the reports still say the run failed, then it shows
        stopped, error = bug, DemoError(bug_message(bug), EXIT_CLUSTER)
    except BaseException as interrupt:  # Ctrl-C, SIGTERM, or what the API's caller's own handler raised
        stopped, error = interrupt, DemoError("interrupted", EXIT_INTERRUPTED)
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
        receipt = _read_json_file(output / "receipt.json") if output is not None else None
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
    if not (output / "receipt.json").exists() and (groups or (output / "report.json").is_file()):
        return cleanup_reproduce(args, groups)  # the output of `reproduce`
    receipt = read_receipt(output)
    cleanup_run(make_kubectl(args, receipt), receipt, output, print, wait_seconds=args.timeout)
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    """Can this cluster run the batch? Reads only; creates nothing but access reviews.

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

    reviews = access_review_list(NAMESPACE_PREFIX + "preflight", runtime is not None, kubelet_metrics, True)
    version, runtimeclass, nodes, pods, granted = concurrently(
        [
            lambda: attempt(
                lambda: kubectl.decode_json(kubectl.run(["version", "-o", "json"], read_only=True), "version")
            ),
            lambda: attempt(lambda: kubectl.get("runtimeclass", runtime)) if runtime is not None else None,
            lambda: attempt(lambda: kubectl.get_list("nodes")),
            lambda: attempt(lambda: kubectl.get_list("pods", flags=NON_TERMINATED_PODS)),  # what runs there
            lambda: attempt(lambda: kubectl.create(reviews, review=True)),
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
    )
    problems = [finding.problem for finding in findings if not finding.ok]
    verdict = f"NOT ready: {'; '.join(problems)}" if problems else f"ready to run {args.count} episodes"
    code = EXIT_CLUSTER if problems else EXIT_OK
    if args.json:
        report = {
            "context": context,
            "server": server,
            "count": args.count,
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
        print(printable(f"{finding.name}: {finding.detail}"))
    print(printable(f"verdict: {verdict}"))
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
        print(render_guide_table(table, "text"), end="")
        return EXIT_OK
    rows = comparison(runs)
    names = [name for name, _ in runs]
    if args.format == "json":
        print(json.dumps({"runs": names, "figures": rows}, indent=2, sort_keys=True, allow_nan=False))
    else:
        print(render_comparison(names, rows, args.format), end="")
    return EXIT_OK
