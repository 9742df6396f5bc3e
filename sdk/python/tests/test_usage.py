"""Usage and metrics through the Python SDK against a real deskboxd sampling every second: a
sandbox's samples, usage grouped by a metadata key (JSON and CSV), and a bad parameter named."""

from __future__ import annotations

import time
import unittest
from typing import Optional

import support  # noqa: F401  (puts sdk/python on sys.path)
from support import RUNTIME, TEMPLATE, DeskboxdProcess

from deskbox import BadRequestError, NotFoundError, Sandbox, metrics, usage, usage_csv

server: Optional[DeskboxdProcess] = None


def setUpModule() -> None:
    global server
    server = DeskboxdProcess(["--usage-sample-s", "1", "--price-vcpu-second", "0.01"])


def tearDownModule() -> None:
    if server is not None:
        server.stop()


class UsageTest(unittest.TestCase):
    def test_samples_and_usage_by_customer(self) -> None:
        assert server is not None
        url = server.url
        with Sandbox.create(template=TEMPLATE, runtime=RUNTIME, network=False, ready=False,
                            metadata={"customer": "py"}, server=url) as sb:
            sb.commands.run("timeout 1 sh -c 'while :; do :; done'; true", check=True)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and len(sb.metrics()["samples"]) < 2:
                time.sleep(0.2)
            samples = sb.metrics()["samples"]
            self.assertGreaterEqual(len(samples), 2)
            self.assertGreater(samples[-1]["totals"]["cpu_seconds"], 0.2)
            self.assertEqual(metrics(sb.id, server=url)["id"], sb.id)
            self.assertLessEqual(len(sb.metrics(step=3600)["samples"]), 2)
            sandbox_id = sb.id
        report = usage(group_by="metadata.customer", server=url)
        self.assertEqual([g["key"] for g in report["groups"]], ["py"])
        group = report["groups"][0]
        self.assertEqual(group["sandboxes"], 1)
        self.assertAlmostEqual(group["cost"], group["vcpu_seconds"] * 0.01)
        self.assertTrue(usage_csv(group_by="template", server=url).startswith("key,sandboxes,"))
        # Its samples outlive it.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and metrics(sandbox_id, server=url)["state"] != "ended":
            time.sleep(0.2)
        self.assertEqual(metrics(sandbox_id, server=url)["state"], "ended")

    def test_bad_parameters_are_named(self) -> None:
        assert server is not None
        with self.assertRaises(BadRequestError) as caught:
            usage(group_by="customer", server=server.url)
        self.assertEqual(caught.exception.field, "group_by")
        with self.assertRaises(BadRequestError) as caught:
            usage(from_="yesterday", server=server.url)
        self.assertEqual(caught.exception.field, "from")
        with self.assertRaises(NotFoundError):
            metrics("sb-000000000000", server=server.url)


if __name__ == "__main__":
    unittest.main()
