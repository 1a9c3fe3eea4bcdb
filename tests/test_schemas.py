"""The manifests the tool submits, checked against Kubernetes' own JSON schemas.

Uses the `kubernetes-validate` package, which `.ci/run` installs; without it the test is
skipped with a message (and fails when RL_DEMO_REQUIRE_SCHEMAS=1, as in CI)."""

from __future__ import annotations

import os
import unittest
from typing import Any

import rl_batch_demo as demo

try:
    import kubernetes_validate
except ImportError:  # a fresh machine: the suite must still pass with nothing installed
    kubernetes_validate = None

OLDEST_VERSION = (1, 27)
RETRIES_SINCE = (1, 29)  # --infra-retries: per-index backoff limits and FailIndex


def schema_versions() -> list[str]:
    latest = tuple(int(part) for part in kubernetes_validate.latest_version().split(".")[:2])
    return [f"1.{minor}.0" for minor in range(OLDEST_VERSION[1], latest[1] + 1)]


def manifests() -> list[dict[str, Any]]:
    namespace = "agc-rl-0123456789ab"
    objects = [
        demo.namespace_manifest(namespace, "0123456789ab"),
        demo.configmap_manifest(namespace, "0123456789ab", demo.WORKER_SOURCE),
        demo.job_manifest(
            name="rollout",
            namespace=namespace,
            run_id="0123456789ab",
            count=10,
            parallelism=10,
            image=demo.DEFAULT_IMAGE,
            runtime="cube",
            deadline_seconds=240,
        ),
        demo.job_manifest(
            name="rollout",
            namespace=namespace,
            run_id="0123456789ab",
            count=10,
            parallelism=1,
            image=demo.DEFAULT_IMAGE,
            runtime=None,
            deadline_seconds=240,
        ),
    ]
    objects += demo.access_review_list(namespace, with_runtimeclass=True)["items"]
    return objects


class SchemaTest(unittest.TestCase):
    def setUp(self) -> None:
        if kubernetes_validate is None:
            if os.environ.get("RL_DEMO_REQUIRE_SCHEMAS") == "1":
                self.fail("kubernetes-validate is required here but not installed")
            self.skipTest("kubernetes-validate is not installed; .ci/run installs it")

    def test_every_manifest_is_valid_on_every_version(self) -> None:
        versions = schema_versions()
        self.assertGreaterEqual(len(versions), 6, versions)
        for version in versions:
            for manifest in manifests():
                with self.subTest(version=version, kind=manifest["kind"]):
                    kubernetes_validate.validate(manifest, version, strict=True)

    def test_the_retrying_job_is_valid_from_1_29(self) -> None:
        """--infra-retries' Job (podFailurePolicy, backoffLimitPerIndex, with and without
        --max-failed-episodes) on every version that has per-index backoff limits."""
        versions = [version for version in schema_versions() if int(version.split(".")[1]) >= RETRIES_SINCE[1]]
        self.assertGreaterEqual(len(versions), 6, versions)
        for version in versions:
            for max_failed in (0, 2):
                job = demo.job_manifest(
                    name="rollout",
                    namespace="agc-rl-0123456789ab",
                    run_id="0123456789ab",
                    count=10,
                    parallelism=10,
                    image=demo.DEFAULT_IMAGE,
                    runtime="cube",
                    deadline_seconds=240,
                    max_failed_episodes=max_failed,
                    infra_retries=2,
                )
                with self.subTest(version=version, max_failed_episodes=max_failed):
                    kubernetes_validate.validate(job, version, strict=True)

    def test_a_broken_manifest_is_caught(self) -> None:
        """The check itself works: a misspelt field fails strict validation."""
        job = manifests()[2]
        job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
        with self.assertRaises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(job, schema_versions()[-1], strict=True)


if __name__ == "__main__":
    unittest.main()
