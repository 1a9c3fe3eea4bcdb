"""What a hostile episode prints is input, not instructions: each rule of the untrusted-output
contract, case by case (docs/safety.md: "Untrusted pods")."""

from __future__ import annotations

import json
import tempfile
import unittest
from pathlib import Path
from typing import Any
from unittest import mock
from xml.etree import ElementTree

import rl_batch_demo as demo
from tests.test_units import JOB_CREATED_AT, log_of, make_events, make_pod, pod_log

GOOD_READY = '{"event": "ready", "at": 1.0, "episode_id": "p"}'


def read_through(chunks: list[bytes], names: list[str], scratch: Path) -> dict[str, demo.PodLog]:
    reader = demo.EpisodeLogReader(scratch, names)
    for chunk in chunks:
        reader.feed(chunk)
    return reader.finish()


class EventLineTest(unittest.TestCase):
    """A line that claims to be an event but cannot be one is a named error; noise is ignored."""

    def test_hostile_lines_are_errors_not_crashes(self) -> None:
        for name, line, problem in (
            ("deep nesting", '{"event": "ready", "at": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested"),
            ("NaN", '{"event": "ready", "at": NaN}', "NaN is not a JSON number"),
            ("Infinity", '{"event": "ready", "at": -Infinity}', "Infinity is not a JSON number"),
            ("huge integer time", '{"event": "ready", "at": ' + "9" * 500 + "}", "no finite numeric 'at'"),
            ("boolean time", '{"event": "ready", "at": true}', "no finite numeric 'at'"),
            ("event not a name", '{"event": ["ready"], "at": 1}', "not a name"),
            ("truncated", '{"event": "ready", "at": ', "malformed JSON event"),
        ):
            with self.subTest(name), self.assertRaisesRegex(demo.EventParseError, problem):
                demo.parse_event_line(line)

    def test_noise_is_ignored(self) -> None:
        for line in ("", "plain text", "[" * 100_000, '{"level": "info"}', "{not json", "\x00\x1b[2J"):
            with self.subTest(line=line[:20]):
                self.assertIsNone(demo.parse_event_line(line))

    def test_invalid_utf8_and_control_bytes_do_not_crash_the_scanner(self) -> None:
        scanner = demo.EventScanner()
        for raw in (b"\xff\xfe\xfa garbage", b"\x00\x00", GOOD_READY.encode() + b"\r", b"\xed\xa0\x80"):
            scanner.line(raw)
        self.assertEqual(scanner.error, "")
        self.assertEqual(list(scanner.kept), ["ready"])

    def test_a_lone_surrogate_survives_as_data(self) -> None:
        [event] = demo.parse_events('{"event": "ready", "at": 1.0, "episode_id": "\\ud800"}\n')
        self.assertEqual(event["episode_id"], "\ud800")
        json.dumps(event, allow_nan=False)  # ensure_ascii keeps it writable

    def test_only_newline_splits_lines(self) -> None:
        """str.splitlines would split on each of these and let one line forge a second event."""
        for separator in ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"):
            with self.subTest(separator=repr(separator)):
                text = f"noise{separator}{GOOD_READY}\n"
                self.assertEqual(demo.parse_events(text), [])

    def test_only_the_first_ready_and_reward_lines_are_kept_and_as_bytes(self) -> None:
        """`[[]]` takes some 30 times its bytes once parsed: what a pod prints is kept as it
        printed it, only the lines the validation reads, and parsed again only then."""
        swollen = '{"event": "ready", "at": 1.0, "episode_id": "p", "x": [' + ",".join(["[[]]"] * 10000) + "]}"
        scanner = demo.EventScanner()
        for line in (swollen, swollen, '{"event": "tick", "at": 2}', '{"event": "reward", "at": 3}'):
            scanner.line(line.encode())
        self.assertEqual(scanner.counts, {"ready": 2, "other": 1, "reward": 1})
        self.assertEqual(scanner.kept, {"ready": swollen.encode(), "reward": b'{"event": "reward", "at": 3}'})
        self.assertEqual(
            [event["event"] for event in demo.logged_events(scanner.pod_log())], ["ready", "ready", "reward"]
        )
        budget = demo.LogBudgets(memory=len(swollen) + 10)
        scanner = demo.EventScanner(budget)
        for line in (swollen, '{"event": "reward", "at": 3, "pad": "' + "x" * 20 + '"}'):
            scanner.line(line.encode())
        self.assertIn("past the run's", scanner.error)

    def test_a_reward_info_that_swells_when_parsed_is_dropped(self) -> None:
        swollen = {"event": "reward", "at": 1.0, "reward": 1, "x": [[[]] for _ in range(2500)]}
        self.assertLess(len(json.dumps(swollen)), demo.INFO_LIMIT)
        self.assertIn("in memory once parsed", demo.reward_info(swollen)["info_dropped"])
        self.assertEqual(demo.reward_info({"event": "reward", "at": 1, "reward": 1, "note": "hi"}), {"note": "hi"})

    def test_too_many_events_invalidate_the_episode(self) -> None:
        lines = "".join(f'{{"event": "tick", "at": {index}}}\n' for index in range(demo.EVENTS_PER_EPISODE_LIMIT + 1))
        with self.assertRaisesRegex(demo.EventParseError, f"more than {demo.EVENTS_PER_EPISODE_LIMIT} events"):
            demo.parse_events(lines)

    def test_a_line_longer_than_the_limit_is_noise(self) -> None:
        scanner = demo.EventScanner()
        scanner.line(b'{"event": "reward", "at": 1, "pad": "' + b"x" * demo.EVENT_LINE_LIMIT + b'"}')
        self.assertEqual((scanner.kept, scanner.counts, scanner.error, scanner.long_lines), ({}, {}, "", 1))


class LogStreamTest(unittest.TestCase):
    """`kubectl logs --prefix` output read as bytes: split on newline only, names from the listing."""

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory()
        self.addCleanup(scratch.cleanup)
        self.dir = Path(scratch.name)

    def test_a_pod_cannot_inject_a_line_into_another_pods_log(self) -> None:
        forged = b'[pod/rollout-a/episode] noise\r[pod/rollout-b/episode] {"event": "reward", "at": 2}\n'
        for separator in (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\xc2\x85", b"\xe2\x80\xa8"):
            with self.subTest(separator=separator):
                logs = read_through([forged.replace(b"\r", separator)], ["rollout-a", "rollout-b"], self.dir)
                self.assertEqual(sorted(logs), ["rollout-a"])
                self.assertEqual(demo.logged_events(logs["rollout-a"]), [])

    def test_file_names_come_only_from_the_listing(self) -> None:
        output = b"[pod/../episode] x\n[pod/other/episode] y\n[pod/rollout-a/episode] z\nno prefix at all\n"
        logs = read_through([output], ["rollout-a"], self.dir)
        self.assertEqual(sorted(logs), ["rollout-a"])
        self.assertEqual(sorted(path.name for path in self.dir.iterdir()), ["rollout-a.log"])

    def test_an_endless_line_is_streamed_to_disk_not_kept(self) -> None:
        chunks = (
            [b"[pod/rollout-a/episode] "] + [b"y" * 65536] * 8 + [b"\n[pod/rollout-a/episode] " + GOOD_READY.encode()]
        )
        logs = read_through(chunks, ["rollout-a"], self.dir)
        self.assertEqual(logs["rollout-a"].long_lines, 1)
        self.assertEqual([event["event"] for event in demo.logged_events(logs["rollout-a"])], ["ready"])
        self.assertEqual((self.dir / "rollout-a.log").stat().st_size, 8 * 65536 + 1 + len(GOOD_READY))

    def test_the_saved_log_is_capped_with_a_marker_and_its_event_lines_still_saved(self) -> None:
        with mock.patch.object(demo, "LOG_FILE_LIMIT", 1000):
            noise = b"[pod/rollout-a/episode] " + b"n" * 99 + b"\n"
            logs = read_through(
                [noise * 50, b"[pod/rollout-a/episode] " + GOOD_READY.encode() + b"\n"], ["rollout-a"], self.dir
            )
        text = (self.dir / "rollout-a.log").read_bytes()
        self.assertTrue(text.startswith(b"n" * 99 + b"\n"))
        head, tail = text[:1000], text[1000:]
        self.assertEqual(head, noise[24:] * 10)  # the first 1,000 bytes, then nothing but the ready line
        self.assertEqual(
            tail.split(b"\n")[:3],
            [b"[rl-batch-demo: 4,000 bytes not saved before this line]", GOOD_READY.encode(), tail.split(b"\n")[2]],
        )
        self.assertTrue(tail.split(b"\n")[2].startswith(b"[rl-batch-demo: log truncated at 1000 bytes (each <pod>.log"))
        self.assertEqual(logs["rollout-a"].dropped_bytes, 50 * 100 - 1000)
        self.assertEqual([event["event"] for event in demo.logged_events(logs["rollout-a"])], ["ready"])

    def test_the_runs_budget_is_shared_by_its_pods_and_never_costs_an_event_line(self) -> None:
        budgets = demo.LogBudgets(disk=1500)
        noise = b"n" * 99 + b"\n"
        reader = demo.EpisodeLogReader(self.dir, ["rollout-a", "rollout-b"], budgets=budgets)
        for name in ("rollout-a", "rollout-b"):
            reader.feed(f"[pod/{name}/episode] ".encode() + noise)
            reader.feed((f"[pod/{name}/episode] ".encode() + noise) * 9)
            reader.feed(f"[pod/{name}/episode] {GOOD_READY}\n".encode())
        logs = reader.finish()
        self.assertEqual(logs["rollout-a"].dropped_bytes, 0)
        left = 1500 - 1000 - (len(GOOD_READY) + 1)  # after rollout-a's text and its ready line
        self.assertEqual(logs["rollout-b"].dropped_bytes, 1000 - left)
        text = (self.dir / "rollout-b.log").read_bytes()
        self.assertIn(b"the run's logs reached their budget", text)
        self.assertIn(b"before this line]\n" + GOOD_READY.encode() + b"\n", text)
        self.assertEqual([event["event"] for event in demo.logged_events(logs["rollout-b"])], ["ready"])

    def test_every_byte_written_for_pods_counts_against_the_ledger(self) -> None:
        """Issue 27: the logs' text, the kept lines and their markers, the closing notes, and the
        pod-made strings of pods.json and events.txt, all within the ledger's disk side (its text
        part and its reserve), however many loud pods; every ready line within the memory side
        is still saved."""
        budgets = demo.LogBudgets(disk=1500, memory=600)
        total = budgets.disk + budgets.reserve
        names = [f"rollout-{index}" for index in range(10)]
        reader = demo.EpisodeLogReader(self.dir, names, budgets=budgets)
        for name in names:
            reader.feed((f"[pod/{name}/episode] ".encode() + b"n" * 99 + b"\n") * 5)
            reader.feed(f"[pod/{name}/episode] {GOOD_READY}\n".encode())
        logs = reader.finish()
        pods = [
            {"metadata": {"name": name, "uid": name}, "status": {"containerStatuses": [{"name": "episode", "state": {
                "terminated": {"exitCode": 0, "message": "m" * 300}}}]}}
            for name in names
        ]  # fmt: skip
        events = [{"metadata": {"name": f"e{i}", "uid": f"e{i}"}, "message": "w" * 200} for i in range(5)]
        (self.dir / "pods.json").write_text(json.dumps(demo.pods_listing_within(pods, budgets)))
        (self.dir / "events.txt").write_text(demo.events_text_within(events, budgets))
        written = sum(len(path.read_bytes()) for path in self.dir.glob("*.log"))
        listed = json.loads((self.dir / "pods.json").read_text())["items"]
        messages = [pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] for pod in listed]
        pod_made = sum(len(message.encode()) for message in messages)
        pod_made += sum(len(line.split()[-1]) for line in (self.dir / "events.txt").read_text().splitlines()[1:])
        self.assertLessEqual(written + pod_made, total)
        kept = [name for name in names if demo.logged_events(logs[name])]
        self.assertGreaterEqual(len(kept), 600 // (len(GOOD_READY) + 60) - 1)
        for name in kept:
            self.assertIn(GOOD_READY.encode(), (self.dir / f"{name}.log").read_bytes(), name)
        self.assertTrue(all(message.endswith(demo.POD_TEXT_CUT) or not message for message in messages))
        again = json.loads(json.dumps(demo.pods_listing_within(pods, budgets)))["items"]
        self.assertEqual(again, listed)  # written again, it spends nothing more and says the same

    def test_a_line_glued_onto_another_pods_last_line_puts_both_in_doubt(self) -> None:
        """kubectl writes a pod's last line without its newline as it came: the next pod's first
        prefixed line lands inside it. Both pods are then read again alone (read_logs)."""
        output = b"[pod/rollout-a/episode] bye[pod/rollout-b/episode] " + GOOD_READY.encode() + b"\n"
        reader = demo.EpisodeLogReader(self.dir, ["rollout-a", "rollout-b", "rollout-c"])
        reader.feed(output + b"[pod/rollout-c/episode] " + GOOD_READY.encode() + b"\n")
        reader.finish()
        self.assertEqual(reader.doubtful, {"rollout-a", "rollout-b"})

    def test_a_prefix_glued_anywhere_into_an_over_long_line_puts_both_in_doubt(self) -> None:
        """A last line over the line limit without a newline (a `\\r` progress bar that ran for a
        while) swallows the next pod's first line just as a short one does: every piece of it is
        checked, across the ends of the chunks it arrives in too."""
        head = b"[pod/rollout-a/episode] " + b"\r" + b"#" * 100_000
        glued = b"[pod/rollout-b/episode] " + GOOD_READY.encode() + b"\n"
        for split in (1, 7, len(glued) - 1):  # where a chunk ends: before the prefix, inside it, after it
            with self.subTest(split=split):
                output = head + glued
                reader = demo.EpisodeLogReader(self.dir, ["rollout-a", "rollout-b"])
                for start in range(0, len(output) - len(glued) + split, 65536):
                    reader.feed(output[start : min(start + 65536, len(output) - len(glued) + split)])
                reader.feed(output[len(output) - len(glued) + split :])
                reader.finish()
                self.assertEqual(reader.doubtful, {"rollout-a", "rollout-b"})

    def test_a_selector_read_drops_doubtful_and_cut_off_pods(self) -> None:
        class Printing(demo.Kubectl):
            def stream(self, args: Any, consume: Any, **_: Any) -> None:
                consume(b"[pod/rollout-a/episode] " + GOOD_READY.encode() + b'\n[pod/rollout-b/episode] {"ev')
                raise demo.KubectlTimeout("did not answer", demo.EXIT_TIMEOUT)

        kubectl = Printing("kubectl", context="c", kubeconfig=None)
        logs = demo.logs_by_selector(kubectl, "ns", "x=y", ["rollout-a", "rollout-b"], self.dir)
        self.assertEqual(sorted(logs), ["rollout-a"])  # rollout-b was being printed when kubectl stopped

    def test_single_pod_logs_have_no_prefix(self) -> None:
        reader = demo.EpisodeLogReader(self.dir, ["p"], single_pod="p")
        reader.feed(b"[pod/q/episode] " + GOOD_READY.encode() + b"\n")
        logs = reader.finish()
        self.assertEqual(list(logs), ["p"])
        self.assertEqual(demo.logged_events(logs["p"]), [])  # the forged prefix makes it noise, not q's event


class ForgedFigureTest(unittest.TestCase):
    """Exact types and times within the pod's life: a figure cannot be forged with a near value."""

    def validate(self, pod: dict[str, Any], events: list[dict[str, Any]]) -> demo.EpisodeRow:
        return demo.validate_episode(pod, events, JOB_CREATED_AT, None, "here")

    def events(self, **reward_fields: Any) -> list[dict[str, Any]]:
        return make_events("rollout-abcde", JOB_CREATED_AT + 3.0, JOB_CREATED_AT + 3.5, **reward_fields)

    def test_reward_must_be_the_integer_one(self) -> None:
        for reward in (True, 1.0, "1", [1], None):
            with self.subTest(reward=reward), self.assertRaisesRegex(demo.EpisodeInvalid, "the integer 1"):
                self.validate(make_pod(), self.events(reward=reward))

    def test_exit_codes_must_be_integers(self) -> None:
        for fields in ({"tests_exit": False}, {"tests_exit": 0.0}, {"baseline_exit": True}, {"baseline_exit": "1"}):
            with self.subTest(fields=fields), self.assertRaises(demo.EpisodeInvalid):
                self.validate(make_pod(), self.events(**fields))

    def test_the_built_in_reward_must_name_the_runners_own_tests(self) -> None:
        sha256 = demo.BUILTIN_TEST_MODULE["sha256"]
        for modules in (
            None,
            {},
            "runner stdin",
            {"test_shipping": None},
            {"test_shipping": {"origin": "/workspace/test_shipping/__init__.py", "sha256": sha256}},
            {"test_shipping": {"origin": "runner stdin", "sha256": "0" * 64}},
            {"test_shipping": {"origin": "runner stdin", "sha256": sha256, "extra": 1}},
        ):
            events = self.events(modules=modules)
            if modules is None:
                del events[1]["modules"]  # an older worker's reward event
            with self.subTest(modules=modules), self.assertRaisesRegex(demo.EpisodeInvalid, "runner's own copy"):
                self.validate(make_pod(), events)
        row = demo.validate_episode(make_pod(), self.events(modules={}), JOB_CREATED_AT, None, "here", False)
        self.assertEqual(row["reward"], 1)  # a custom worker owes no such field

    def test_ready_before_the_container_started_is_a_clock_error(self) -> None:
        pod = make_pod(created="2026-11-29T10:00:01Z", started="2026-11-29T10:00:05Z", finished="2026-11-29T10:00:09Z")
        events = make_events("rollout-abcde", JOB_CREATED_AT + 3.0, JOB_CREATED_AT + 8.0)
        with self.assertRaisesRegex(demo.EpisodeInvalid, "earlier than its container's start"):
            self.validate(pod, events)

    def test_self_reported_start_outside_the_pods_life_is_a_clock_error(self) -> None:
        for stamp in (JOB_CREATED_AT - 3600, JOB_CREATED_AT + 3.5):
            events = self.events()
            events[0]["process_started_at"] = stamp
            with self.subTest(stamp=stamp), self.assertRaisesRegex(demo.EpisodeInvalid, "outside the pod's life"):
                self.validate(make_pod(), events)

    def test_a_good_episode_still_passes(self) -> None:
        self.assertEqual(self.validate(make_pod(), self.events())["reward"], 1)


class MismatchTest(unittest.TestCase):
    def test_the_message_says_what_differs(self) -> None:
        events = make_events("p", 10.0, 11.0)
        for message_events, expected in (
            ([events[0], events[0], events[1]], "the log has 1 'ready' events, the termination message 2"),
            ([events[0], dict(events[1], reward=0)], "their 'reward' events differ in 'reward': the log has 1"),
        ):
            with self.subTest(expected=expected), self.assertRaises(demo.EpisodeInvalid) as caught:
                demo.episode_events("p", pod_log(log_of(events)), None, log_of(message_events), True, "here")
            self.assertIn(expected, str(caught.exception))


class OutputEscapingTest(unittest.TestCase):
    """Nothing from a pod reaches a terminal, a CI page or the SVG unescaped."""

    def test_control_characters_are_escaped(self) -> None:
        for hostile in ("\x1b[2J", "\r", "\x07", "\x9b31m", "\u202e", "\u2028", "\x00"):
            with self.subTest(hostile=repr(hostile)):
                shown = demo.printable(f"a{hostile}b")
                self.assertTrue(shown.isprintable(), repr(shown))
                self.assertTrue(shown.startswith("a") and shown.endswith("b"))
        self.assertEqual(demo.printable("one\ntwo"), "one\\ntwo")
        self.assertEqual(demo.printable("one\ntwo", keep_newlines=True), "one\ntwo")

    def test_markdown_cannot_add_headings_links_or_images(self) -> None:
        hostile = "x\n# heading\n![img](http://example.invalid/a.png)\n```\n[link](http://example.invalid)"
        block = demo.markdown_literal(hostile)
        fence = block.split("text\n", 1)[0]
        self.assertGreater(len(fence), 3)  # longer than the run of backticks inside
        self.assertTrue(block.rstrip("\n").endswith(fence))
        self.assertNotIn("\n# heading", block)

    def test_error_messages_from_pod_values_are_one_printable_line(self) -> None:
        events = make_events("rollout-abcde\x1b[31m\nforged line", JOB_CREATED_AT + 3.0, JOB_CREATED_AT + 3.5)
        with self.assertRaises(demo.EpisodeInvalid) as caught:
            demo.validate_episode(make_pod(), events, JOB_CREATED_AT, None, "here")
        shown = demo.printable(str(caught.exception))
        self.assertTrue(shown.isprintable())
        self.assertNotIn("\n", shown)

    def test_the_svg_stays_well_formed(self) -> None:
        row = demo.validate_episode(
            make_pod(),
            make_events("rollout-abcde", JOB_CREATED_AT + 3.0, JOB_CREATED_AT + 3.5),
            JOB_CREATED_AT,
            None,
            "h",
        )
        row["node"] = 'node"<x>&\x01'
        results = demo.batch_figures([row])
        results.update(parallelism=1, runtime="cube", pods=[demo.pod_row(row)])
        ElementTree.fromstring(demo.render_timeline_svg(results))


class JsonOutputTest(unittest.TestCase):
    def test_no_nan_can_be_written(self) -> None:
        with tempfile.TemporaryDirectory() as scratch, self.assertRaises(ValueError):
            demo.write_json(Path(scratch) / "x.json", {"figure": float("nan")})


if __name__ == "__main__":
    unittest.main()
