"""What metrics cost: this SDK's writer and reader without a recorder, with one that records
nothing, and with ``OpenTelemetryMetrics`` on the OpenTelemetry SDK, in one run.

    python benchmarks/metrics.py --messages 50000 --sizes 100
    python benchmarks/metrics.py --messages 50000 --sizes 100 1024 --json results/metrics.json

Three settings of ``Driver(metrics=...)``:

- ``off``: none (the SDK skips computing metrics altogether);
- ``hooks``: a ``NoopMetrics`` subclass that overrides nothing: the SDK computes and reports
  every figure (acknowledgement statuses read one by one, payload sizes summed, lag and buffer
  changes), and the recorder drops them; the SDK's own share of the cost;
- ``otel``: ``OpenTelemetryMetrics`` on an OpenTelemetry SDK ``MeterProvider`` with an in-memory
  reader (collected once, at the end, where the figures are checked: the counts must equal the
  messages written and read); the whole cost of exporting metrics, but for the exporter's own
  collection, which runs on its schedule, away from the event loop.

``write``: one ``await writer.write(payload)`` per message, then close (every acknowledgement
awaited). ``read``: ``receive_batch`` and ``commit`` per batch under a consumer of its own, until
every message is read, then close (commits acknowledged). The local server runs in its own
process: ``time.process_time`` is the client's CPU alone. Every round runs each setting once per
direction, in an order that rotates between rounds; the round with the least client CPU is
reported.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Figure, ServerProcess, best, measure, measure_sizes
from read import BUFFER, fill
from write import _create, _drop, messages_for

SETTINGS = ("off", "hooks", "otel")


class _Recorder:
    """One setting's recorder, and how to read back what it counted (``otel`` only)."""

    def __init__(self, setting: str) -> None:
        import ydb_topic_async as yta

        self.reader: Any = None
        self.metrics: Any = None
        if setting == "hooks":

            class RecordsNothing(yta.NoopMetrics):
                pass

            self.metrics = RecordsNothing()
        elif setting == "otel":
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import InMemoryMetricReader

            self.reader = InMemoryMetricReader()
            self.metrics = yta.OpenTelemetryMetrics(meter_provider=MeterProvider(metric_readers=[self.reader]))

    def check(self, name: str, n: int) -> None:
        """Counter ``name`` summed over its attribute sets must be ``n`` (with OpenTelemetry)."""
        if self.reader is None:
            return
        data = self.reader.get_metrics_data()
        counted = int(sum(
            point.value
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics if metric.name == name
            for point in metric.data.data_points
        ))
        if counted != n:
            raise AssertionError(f"OpenTelemetry counted {counted} for {name}, not {n}")


async def write_with(
    endpoint: str, database: str, topic: str, n: int, payload: bytes, recorder: _Recorder
) -> dict[str, Any]:
    import ydb_topic_async as yta

    async with (
        yta.Driver(endpoint, database, discovery=False, metrics=recorder.metrics) as driver,
        driver.topic.writer(topic, producer_id="bench") as writer,
    ):
        write = writer.write
        for _ in range(n):
            await write(payload)
    return {}


async def read_with(
    endpoint: str, database: str, topic: str, consumer: str, n: int, recorder: _Recorder
) -> dict[str, Any]:
    import ydb_topic_async as yta

    async with (
        yta.Driver(endpoint, database, discovery=False, metrics=recorder.metrics) as driver,
        driver.topic.reader(topic, consumer=consumer, buffer_size_bytes=BUFFER) as reader,
    ):
        got = 0
        while got < n:
            batch = await reader.receive_batch()
            for message in batch:
                message.data, message.offset  # noqa: B018
                got += 1
            reader.commit(batch)
    return {}


async def run_size(
    server: ServerProcess | None, endpoint: str, database: str, args: argparse.Namespace, size: int
) -> list[Figure]:
    payload = os.urandom(size)
    n = messages_for(size, args)
    source = f"bench-metrics-read-{size}"
    consumers = [f"c-{setting}-{r}" for setting in SETTINGS for r in range(args.rounds)]
    await fill(endpoint, database, source, consumers, n, size)
    rounds: dict[tuple[str, str], list[Figure]] = {}
    for round_no in range(args.rounds):
        order = [*SETTINGS[round_no % 3 :], *SETTINGS[: round_no % 3]]
        for setting in order:
            topic = f"bench-metrics-{setting}-{size}-{round_no}"
            await _create(endpoint, database, topic)
            recorder = _Recorder(setting)  # made before the measurement, as an application makes it at start
            figure = await measure(
                server, lambda topic=topic, r=recorder: write_with(endpoint, database, topic, n, payload, r),
                benchmark="metrics", client=setting, label=f"write, metrics {setting}", messages=n, size=size,
                mode="write",
            )
            recorder.check("messaging.client.sent.messages", n)
            rounds.setdefault(("write", setting), []).append(figure)
            if server is not None:
                await _drop(endpoint, database, topic)
            consumer = f"c-{setting}-{round_no}"
            recorder = _Recorder(setting)
            figure = await measure(
                server, lambda c=consumer, r=recorder: read_with(endpoint, database, source, c, n, r),
                benchmark="metrics", client=setting, label=f"read, metrics {setting}", messages=n, size=size,
                mode="read",
            )
            recorder.check("messaging.client.consumed.messages", n)
            rounds.setdefault(("read", setting), []).append(figure)
    return [best(rounds[(mode, setting)]) for mode in ("write", "read") for setting in SETTINGS]


def report(figures: list[Figure]) -> None:
    print("| direction | metrics | messages/s | client CPU µs/msg | added µs/msg | added |")
    print("|---|---|---:|---:|---:|---:|")
    for mode in ("write", "read"):
        of_mode = {f.client: f for f in figures if f.mode == mode}
        off = of_mode["off"].client_us_per_message
        for setting in SETTINGS:
            f = of_mode[setting]
            added = f.client_us_per_message - off
            print(
                f"| {mode} | {setting} | {f.rate:,.0f} | {f.client_us_per_message:.2f} | "
                f"{added:+.2f} | {added / off * 100:+.0f}% |"
            )


async def main_async(args: argparse.Namespace) -> None:
    def heading(size: int) -> str:
        return f"{messages_for(size, args)} messages x {size} B, raw codec, best of {args.rounds} rounds"

    await measure_sizes("metrics", args, heading, run_size, report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000, help="messages per measurement (default 50000)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100], help="payload sizes in bytes (default 100)")
    parser.add_argument("--max-mib", type=int, default=200, help="fewer messages for large sizes: MiB per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the least client CPU is reported (default 3)")
    parser.add_argument("--endpoint", help="use this server instead of starting the local one")
    parser.add_argument("--database", default="/local")
    parser.add_argument("--json", help="write the figures to this JSON file")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
