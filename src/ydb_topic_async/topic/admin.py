"""Topic administration: create, describe, alter and drop topics, describe consumers and
partitions, and commit a consumer's offset.

``TopicAdmin`` is built from the ``ClientContext`` alone. ``driver.topic`` (``TopicClient``) is
one, with the writer and reader factories on top; the keyed writer and direct write use it too,
to read a topic's partitions and where they live.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from .._context import ClientContext
from .._errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    OperationTimeoutError,
    SchemeError,
    TopicNotFoundError,
)
from .._futures import deadline
from .._proto import ydb_topic_pb2 as pb
from .._retry import RetryPolicy, retry_call, topic_wait
from .._validate import check_int, check_optional_int, check_wait
from ..observability.logging import sdk_logger
from . import types as t

_SERVICE = "/Ydb.Topic.V1.TopicService/"

logger = sdk_logger("topic")


class TopicAdmin:
    """Administration of topics and consumers.

    Paths may be absolute (``/local/events``) or relative to the driver's database (``events``).
    Every method validates its arguments before sending anything. A method's ``timeout`` bounds
    the whole call, retries and backoff included (``OperationTimeoutError`` when it passes);
    failures that may pass (UNAVAILABLE, OVERLOADED, a broken connection) are retried by the
    driver's ``retry`` policy, for idempotent methods also those whose outcome is unknown.
    """

    def __init__(self, context: ClientContext) -> None:
        self._context = context

    def full_path(self, path: str) -> str:
        """``path`` made absolute against the driver's database."""
        return self._context.full_path(path)

    async def _call(
        self,
        method: str,
        request: Any,
        response_cls: Any,
        result_cls: Any,
        *,
        idempotent: bool,
        timeout: float | None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """One TopicService call; ``timeout`` bounds it whole, retries included; ``retry``: the
        policy instead of the driver's."""
        return await self._context.call(
            _SERVICE + method, request, response_cls, result_cls, idempotent=idempotent, timeout=timeout, retry=retry
        )

    # --- administration -----------------------------------------------------------------

    async def create_topic(
        self,
        path: str,
        *,
        min_active_partitions: int | None = None,
        max_active_partitions: int | None = None,
        partition_count_limit: int | None = None,
        retention_period: dt.timedelta | None = None,
        retention_storage_mb: int | None = None,
        supported_codecs: Sequence[int] = (),
        partition_write_speed_bytes_per_second: int | None = None,
        partition_write_burst_bytes: int | None = None,
        metering_mode: t.MeteringMode | None = None,
        attributes: Mapping[str, str] | None = None,
        consumers: Sequence[t.ConsumerSettings | str] = (),
        auto_partitioning: t.AutoPartitioningSettings | None = None,
        metrics_level: int | None = None,
        exists_ok: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Create a topic. When a topic exists at ``path`` already, YDB answers success and leaves
        it as it is (its settings are not compared with these); a server that answers
        ``ALREADY_EXISTS`` instead raises ``AlreadyExistsError``, unless ``exists_ok``.

        ``exists_ok=True`` makes the call safe to repeat (scripts, application start-up) on any
        server: a topic already at ``path`` is left as it is, whatever its settings, and transient
        failures are retried, since creating twice can no longer fail.

        ``metrics_level`` (a ``MetricsLevel`` or another unsigned 32-bit int) sets how much the
        topic reports to YDB's monitoring; ``None`` leaves it to the database.
        """
        _check_metrics_level(metrics_level, "metrics_level")
        for value, what in (
            (min_active_partitions, "min_active_partitions"),
            (max_active_partitions, "max_active_partitions"),
            (partition_count_limit, "partition_count_limit"),
            (retention_storage_mb, "retention_storage_mb"),
            (partition_write_speed_bytes_per_second, "partition_write_speed_bytes_per_second"),
            (partition_write_burst_bytes, "partition_write_burst_bytes"),
        ):
            check_optional_int(value, what)
        if (
            min_active_partitions is not None
            and max_active_partitions is not None
            and max_active_partitions
            and max_active_partitions < min_active_partitions
        ):
            raise InvalidArgumentError("max_active_partitions must not be below min_active_partitions")
        names = [c if isinstance(c, str) else c.name for c in consumers]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"duplicate consumer names in {names}")
        request = pb.CreateTopicRequest(
            path=self.full_path(path),
            retention_storage_mb=retention_storage_mb or 0,
            partition_write_speed_bytes_per_second=partition_write_speed_bytes_per_second or 0,
            partition_write_burst_bytes=partition_write_burst_bytes or 0,
            attributes=t.check_attributes(attributes, "attributes"),
            consumers=[t.consumer_to_proto(c) for c in consumers],
            metering_mode=int(metering_mode or 0),  # type: ignore[arg-type]
        )
        ps = request.partitioning_settings
        ps.min_active_partitions = min_active_partitions or 0
        ps.max_active_partitions = max_active_partitions or 0
        ps.partition_count_limit = partition_count_limit or 0
        if auto_partitioning is not None:
            _fill_auto_partitioning(ps.auto_partitioning_settings, auto_partitioning)
        if retention_period is not None:
            request.retention_period.CopyFrom(t.to_duration(retention_period, "retention_period"))
        if supported_codecs:
            request.supported_codecs.codecs.extend(t.check_codecs(supported_codecs, "supported_codecs"))
        if metrics_level is not None:
            request.metrics_level = int(metrics_level)
        try:
            await self._call(
                "CreateTopic", request, pb.CreateTopicResponse, None, idempotent=exists_ok, timeout=timeout
            )
        except AlreadyExistsError:
            if not exists_ok:
                raise
        except SchemeError:
            # Some servers answer SCHEME_ERROR for an existing path: the topic itself settles it.
            if not exists_ok or not await self._exists(request.path, timeout):
                raise

    async def _exists(self, full_path: str, timeout: float | None) -> bool:
        try:
            await self.describe_topic(full_path, timeout=timeout)
        except SchemeError:
            return False
        return True

    async def describe_topic(
        self,
        path: str,
        *,
        include_stats: bool = False,
        include_location: bool = False,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        wait_for_topic: float | None = None,
    ) -> t.TopicDescription:
        """Settings, consumers and partitions of a topic.

        Parameters:
            path: The topic, absolute or relative to the driver's database.
            include_stats: Ask for the partitions' offsets and statistics, and the consumers'
                (``ConsumerStats``).
            include_location: Ask for each partition's node and generation (``PartitionLocation``).
            timeout: Seconds the whole call may take, retries included (``OperationTimeoutError``
                after them); ``None``: as long as ``retry`` allows.
            retry: How failures that may pass are retried: ``None`` (the default) for the
                driver's ``retry`` policy, or a ``RetryPolicy`` of the caller's own, e.g. a
                longer budget for background work that should outlast an outage
                (``RetryPolicy.forever()``) or ``RetryPolicy.no_retries()`` to fail at once.
            wait_for_topic: Seconds to wait for a topic that does not exist yet, counted from
                the first answer saying so, asking again on ``retry``'s fast backoff (the last
                time as they end), as Kafka's ``partitionsFor`` waits for metadata; ``None`` (the
                default): a missing topic raises at once. Only a missing topic is waited for.

        Raises:
            TopicNotFoundError: No topic at ``path`` (after ``wait_for_topic``, if given).
            SchemeError: ``path`` is not a topic.
            InvalidArgumentError: ``retry`` is not a ``RetryPolicy`` or None, or
                ``wait_for_topic`` is not None or a positive, finite number of seconds.
        """
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError(f"retry must be a RetryPolicy or None, got {retry!r}")
        within = check_wait(wait_for_topic, "wait_for_topic")
        full = self.full_path(path)
        request = pb.DescribeTopicRequest(path=full, include_stats=include_stats, include_location=include_location)
        if within is None:
            result = await self._call(
                "DescribeTopic", request, pb.DescribeTopicResponse, pb.DescribeTopicResult,
                idempotent=True, timeout=timeout, retry=retry,
            )
            return t.topic_from_proto(result, full)
        wait = topic_wait(within, retry or self._context.retry)

        async def describe() -> t.TopicDescription:
            result = await self._call(
                "DescribeTopic", request, pb.DescribeTopicResponse, pb.DescribeTopicResult,
                idempotent=True, timeout=None, retry=retry,
            )
            return t.topic_from_proto(result, full)

        def waiting(error: BaseException, delay: float) -> None:
            logger.debug(
                "topic %s does not exist yet (try %d, %.1fs of %gs waited); next try in %.3fs",
                full, wait.attempt, wait.elapsed(), within, delay,
            )

        try:
            async with deadline(timeout):
                return await retry_call(describe, wait, on_retry=waiting)
        except TopicNotFoundError as exc:
            raise TopicNotFoundError.after_waiting(exc, full, wait.elapsed()) from exc
        except TimeoutError:
            raise OperationTimeoutError(
                f"describe_topic for {full} did not finish within {timeout}s (the topic does not exist yet)"
                if wait.failing
                else f"describe_topic for {full} did not finish within {timeout}s"
            ) from None

    async def start_offsets(self, path: str, *, timeout: float | None = None) -> dict[int, int]:
        """Per partition, the first offset still stored (retention moves it up), as aiokafka's
        ``beginning_offsets``.

        Parameters:
            path: The topic, absolute or relative to the driver's database.
            timeout: Seconds the whole call may take, retries included.

        Returns:
            ``{partition_id: offset}`` for every partition, active or not (a split partition
            keeps its messages until they expire).
        """
        return {pid: start for pid, (start, _) in (await self._offset_bounds(path, timeout)).items()}

    async def end_offsets(self, path: str, *, timeout: float | None = None) -> dict[int, int]:
        """Per partition, the offset the next message written to it will get (one past the last
        stored), as aiokafka's ``end_offsets``; equal to the start offset when the partition holds
        nothing.

        Parameters:
            path: The topic, absolute or relative to the driver's database.
            timeout: Seconds the whole call may take, retries included.

        Returns:
            ``{partition_id: offset}`` for every partition, active or not.
        """
        return {pid: end for pid, (_, end) in (await self._offset_bounds(path, timeout)).items()}

    async def _offset_bounds(self, path: str, timeout: float | None) -> dict[int, tuple[int, int]]:
        """``{partition_id: (start offset, end offset)}`` from one described state of the topic."""
        description = await self.describe_topic(path, include_stats=True, timeout=timeout)
        return offset_bounds(description)

    async def describe_partition(
        self,
        path: str,
        partition_id: int,
        *,
        include_stats: bool = True,
        include_location: bool = False,
        timeout: float | None = None,
    ) -> t.PartitionInfo:
        """One partition of a topic."""
        check_int(partition_id, "partition_id")
        request = pb.DescribePartitionRequest(
            path=self.full_path(path),
            partition_id=partition_id,
            include_stats=include_stats,
            include_location=include_location,
        )
        result = await self._call(
            "DescribePartition",
            request,
            pb.DescribePartitionResponse,
            pb.DescribePartitionResult,
            idempotent=True,
            timeout=timeout,
        )
        return t.partition_from_proto(result.partition)

    async def describe_consumer(
        self,
        path: str,
        consumer: str,
        *,
        include_stats: bool = True,
        include_location: bool = False,
        timeout: float | None = None,
    ) -> t.ConsumerDescription:
        """A consumer and, per partition, how far it has read and committed.

        Parameters:
            path: The topic, absolute or relative to the driver's database.
            consumer: The consumer's name.
            include_stats: Ask for the statistics (the default): per partition the offsets, the
                reading session, the last read time, the read, write and commit time lags and the
                bytes read per minute, hour and day (``ConsumerPartitionInfo``), and the consumer's
                own over all partitions (``ConsumerDescription.stats``). Without them the
                offsets are 0 and the times None.
            include_location: Ask for each partition's node and generation
                (``ConsumerPartitionInfo.location``).
            timeout: Seconds the whole call may take, retries included.
        """
        if not consumer or not isinstance(consumer, str):
            raise InvalidArgumentError("consumer must be a non-empty string")
        full = self.full_path(path)
        request = pb.DescribeConsumerRequest(
            path=full, consumer=consumer, include_stats=include_stats, include_location=include_location
        )
        result = await self._call(
            "DescribeConsumer",
            request,
            pb.DescribeConsumerResponse,
            pb.DescribeConsumerResult,
            idempotent=True,
            timeout=timeout,
        )
        return t.consumer_description_from_proto(result, full)

    async def alter_topic(
        self,
        path: str,
        *,
        set_min_active_partitions: int | None = None,
        set_max_active_partitions: int | None = None,
        set_partition_count_limit: int | None = None,
        set_retention_period: dt.timedelta | None = None,
        set_retention_storage_mb: int | None = None,
        set_supported_codecs: Sequence[int] | None = None,
        set_partition_write_speed_bytes_per_second: int | None = None,
        set_partition_write_burst_bytes: int | None = None,
        set_metering_mode: t.MeteringMode | None = None,
        alter_attributes: Mapping[str, str] | None = None,
        add_consumers: Sequence[t.ConsumerSettings | str] = (),
        drop_consumers: Sequence[str] = (),
        alter_consumers: Sequence[t.AlterConsumerSettings] = (),
        set_auto_partitioning: t.AutoPartitioningSettings | None = None,
        set_metrics_level: int | None = None,
        reset_metrics_level: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Change a topic's settings and consumers; only the given settings change.

        An empty value in ``alter_attributes`` removes that attribute. ``set_metrics_level``
        sets the topic's metrics level (see ``MetricsLevel``); ``reset_metrics_level=True``
        unsets it, leaving it to the database (not both). A consumer's
        ``availability_period`` is set or reset through ``alter_consumers``
        (``AlterConsumerSettings``).
        """
        _check_metrics_level(set_metrics_level, "set_metrics_level")
        if set_metrics_level is not None and reset_metrics_level:
            raise InvalidArgumentError("set_metrics_level and reset_metrics_level exclude each other")
        for value, what in (
            (set_min_active_partitions, "set_min_active_partitions"),
            (set_max_active_partitions, "set_max_active_partitions"),
            (set_partition_count_limit, "set_partition_count_limit"),
            (set_retention_storage_mb, "set_retention_storage_mb"),
            (set_partition_write_speed_bytes_per_second, "set_partition_write_speed_bytes_per_second"),
            (set_partition_write_burst_bytes, "set_partition_write_burst_bytes"),
        ):
            check_optional_int(value, what)
        if isinstance(drop_consumers, str):
            raise InvalidArgumentError("drop_consumers must be a list of names, not one string")
        request = pb.AlterTopicRequest(
            path=self.full_path(path),
            alter_attributes=t.check_attributes(alter_attributes, "alter_attributes"),
            add_consumers=[t.consumer_to_proto(c) for c in add_consumers],
            drop_consumers=list(drop_consumers),
            alter_consumers=[_alter_consumer_to_proto(c) for c in alter_consumers],
            set_metering_mode=int(set_metering_mode or 0),  # type: ignore[arg-type]
        )
        aps = request.alter_partitioning_settings
        if set_min_active_partitions is not None:
            aps.set_min_active_partitions = set_min_active_partitions
        if set_max_active_partitions is not None:
            aps.set_max_active_partitions = set_max_active_partitions
        if set_partition_count_limit is not None:
            aps.set_partition_count_limit = set_partition_count_limit
        if set_auto_partitioning is not None:
            alter = aps.alter_auto_partitioning_settings
            alter.set_strategy = int(set_auto_partitioning.strategy)  # type: ignore[assignment]
            speed = alter.set_partition_write_speed
            if set_auto_partitioning.stabilization_window is not None:
                speed.set_stabilization_window.CopyFrom(
                    t.to_duration(set_auto_partitioning.stabilization_window, "stabilization_window")
                )
            if set_auto_partitioning.up_utilization_percent is not None:
                speed.set_up_utilization_percent = set_auto_partitioning.up_utilization_percent
            if set_auto_partitioning.down_utilization_percent is not None:
                speed.set_down_utilization_percent = set_auto_partitioning.down_utilization_percent
        if set_retention_period is not None:
            request.set_retention_period.CopyFrom(t.to_duration(set_retention_period, "set_retention_period"))
        if set_retention_storage_mb is not None:
            request.set_retention_storage_mb = set_retention_storage_mb
        if set_supported_codecs is not None:
            request.set_supported_codecs.codecs.extend(t.check_codecs(set_supported_codecs, "set_supported_codecs"))
        if set_partition_write_speed_bytes_per_second is not None:
            request.set_partition_write_speed_bytes_per_second = set_partition_write_speed_bytes_per_second
        if set_partition_write_burst_bytes is not None:
            request.set_partition_write_burst_bytes = set_partition_write_burst_bytes
        if set_metrics_level is not None:
            request.set_metrics_level = int(set_metrics_level)
        elif reset_metrics_level:
            request.reset_metrics_level.SetInParent()
        await self._call("AlterTopic", request, pb.AlterTopicResponse, None, idempotent=False, timeout=timeout)

    async def drop_topic(self, path: str, *, timeout: float | None = None) -> None:
        """Delete a topic and its data. A missing topic raises ``SchemeError``."""
        request = pb.DropTopicRequest(path=self.full_path(path))
        await self._call("DropTopic", request, pb.DropTopicResponse, None, idempotent=False, timeout=timeout)

    async def commit_offset(
        self,
        path: str,
        partition_id: int,
        consumer: str,
        offset: int,
        *,
        read_session_id: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Set ``consumer``'s committed offset in one partition (the next offset to read).

        Without ``read_session_id`` the offset is set as given (backwards too), and the reader
        holding the partition for the consumer, if any, loses its read session: it reconnects
        and goes on from the new offset. With the ``read_session_id`` of that reader
        (``TopicReader.read_session_id``), the offset moves forward only and the reader goes on
        undisturbed; naming another session raises ``StaleReadSessionError`` and commits nothing.
        """
        check_int(partition_id, "partition_id")
        check_int(offset, "offset")
        if not consumer or not isinstance(consumer, str):
            raise InvalidArgumentError("consumer must be a non-empty string")
        request = pb.CommitOffsetRequest(
            path=self.full_path(path),
            partition_id=partition_id,
            consumer=consumer,
            offset=offset,
            read_session_id=read_session_id or "",
        )
        await self._call("CommitOffset", request, pb.CommitOffsetResponse, None, idempotent=True, timeout=timeout)


def offset_bounds(description: t.TopicDescription) -> dict[int, tuple[int, int]]:
    """``{partition_id: (start offset, end offset)}`` of a description made with stats."""
    bounds = {}
    for partition in description.partitions:
        stats = partition.stats
        if stats is None:
            raise InternalError(
                f"the server described partition {partition.partition_id} of {description.path} without its offsets"
            )
        bounds[partition.partition_id] = (stats.start_offset, stats.end_offset)
    return bounds


def _fill_auto_partitioning(msg: Any, settings: t.AutoPartitioningSettings) -> None:
    msg.strategy = int(settings.strategy)
    speed = msg.partition_write_speed
    if settings.stabilization_window is not None:
        speed.stabilization_window.CopyFrom(t.to_duration(settings.stabilization_window, "stabilization_window"))
    for value, what in (
        (settings.up_utilization_percent, "up_utilization_percent"),
        (settings.down_utilization_percent, "down_utilization_percent"),
    ):
        if value is not None and not 0 <= value <= 100:
            raise InvalidArgumentError(f"{what} must be between 0 and 100, got {value}")
    speed.up_utilization_percent = settings.up_utilization_percent or 0
    speed.down_utilization_percent = settings.down_utilization_percent or 0


def _alter_consumer_to_proto(c: t.AlterConsumerSettings) -> pb.AlterConsumer:
    if not isinstance(c, t.AlterConsumerSettings) or not c.name:
        raise InvalidArgumentError(f"alter_consumers takes AlterConsumerSettings with a name, got {c!r}")
    msg = pb.AlterConsumer(name=c.name, alter_attributes=t.check_attributes(c.attributes, f"consumer {c.name!r}"))
    if c.important is not None:
        msg.set_important = c.important
    if c.read_from is not None:
        msg.set_read_from.CopyFrom(t.to_timestamp(c.read_from, "read_from"))
    if c.supported_codecs is not None:
        msg.set_supported_codecs.codecs.extend(t.check_codecs(c.supported_codecs, f"consumer {c.name!r}"))
    if c.availability_period is not None:
        if c.reset_availability_period:
            raise InvalidArgumentError(
                f"consumer {c.name!r}: availability_period and reset_availability_period exclude each other"
            )
        msg.set_availability_period.CopyFrom(t.to_duration(c.availability_period, "availability_period"))
    elif c.reset_availability_period:
        msg.reset_availability_period.SetInParent()
    return msg


def _check_metrics_level(level: int | None, what: str) -> None:
    check_optional_int(level, what, maximum=2**32 - 1)
