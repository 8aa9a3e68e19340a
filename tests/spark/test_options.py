"""Option parsing and offset planning of the ``ydb_topic`` source, without Spark or a server."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from ydb_topic_async.spark._errors import DataLossError
from ydb_topic_async.spark._offsets import (
    OffsetRange,
    SourceOffsets,
    Split,
    TopicOffsets,
    TopicState,
    check_start,
    limit_offsets,
    loss_reporter,
    range_reporter,
    resolve,
    split,
)
from ydb_topic_async.spark._options import OffsetsByTopic, TimesByTopic, check_mode, parse_options

BASE = {"endpoint": "grpc://localhost:2136", "database": "/local", "topic": "t"}


def parse(**options: str) -> Any:
    return parse_options({**BASE, **options})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"maxOffsetPerTrigger": "5"}, r"unknown option 'maxoffsetpertrigger' \(as Spark passes it, in lower case\); "
                                       "did you mean 'maxOffsetsPerTrigger'"),
        ({"failOnDataloss": "x"}, "must be one of true, false"),
        ({"startingOffset": "latest"}, "did you mean 'startingOffsets'"),
        ({"colour": "red"}, r"unknown option 'colour' \(as Spark passes it, in lower case\) \(the options are listed"),
        ({"subscribe": "a,b"}, "Kafka connector's, not this source's: give the topics in 'topic'"),
        ({"assign": "{}"}, "name partitions in 'startingOffsets'"),
        ({"includeHeaders": "true"}, "always in the 'metadata' column"),
        ({"kafka.group.id": "g"}, "configures a Kafka client"),
        ({"kafkaConsumer.pollTimeoutMs": "5"}, "use 'pollTimeout'"),
        ({"startingTimestamp": "yesterday"}, "milliseconds since the epoch"),
        ({"startingOffsetsByTimestamp": '{"0": -5}'}, "partition 0 must be milliseconds"),
        ({"startingTimestamp": "1", "startingOffsets": "latest"}, "give one of 'startingTimestamp', 'startingOffsets'"),
        ({"endingTimestamp": "1", "endingOffsetsByTimestamp": '{"0": 1}'}, "not several"),
        ({"maxTriggerDelay": "soon"}, "duration like '15m'"),
        ({"minPartitions": "0"}, "'minPartitions' must be a positive integer"),
        ({"pollTimeout": "inf"}, "positive number of seconds"),
        ({"retryTimeout": "-1"}, "'retryTimeout' must be a positive number"),
        ({"onReplayMismatch": "ignore"}, "must be one of fail, atLeastOnce"),
        ({"startingOffsetsByTimestampStrategy": "earliest"}, "must be one of error, latest"),
        ({"token": "t", "tokenFile": "/x"}, "one way to authenticate, not 'token' and 'tokenFile'"),
        ({"credentialsProvider": "no_colon"}, "must look like 'package.module:function'"),
        ({"credentialsProvider": "no_such_module_here:make"}, "cannot be imported"),
        ({"credentialsProvider": "os:sep"}, "is not callable"),
        ({"rootCertificates": "not a certificate"}, "PEM text"),
        ({"rootCertificatesFile": "/no/such/file.pem"}, "'rootCertificatesFile' cannot be read"),
        ({"producerIdPrefix": ""}, "'producerIdPrefix' must be a short non-empty string"),
        ({"topic": "a, b", "startingOffsets": '{"0": 1}'}, "must name the topic of each offset when several topics"),
        ({"topic": "a", "startingOffsets": '{"b": {"0": 1}}'}, "names topic 'b', which this query does not read"),
        ({"topic": "a", "endingOffsets": '{"/other/a": {"0": 1}}'}, "names topic '/other/a', which this query does"),
        ({"topic": "a,a"}, "names a topic twice"),
        ({"topic": '["a", 1]'}, "JSON list of topics"),
        ({"partitioner": "md5"}, "'partitioner' must be 'ydb'"),
        ({"maxBufferBytes": "0"}, "option 'maxBufferBytes': max_buffer_bytes must be a positive int"),
        ({"bufferWaitTimeout": "-1"}, "option 'bufferWaitTimeout': buffer_wait_timeout must be None or a number"),
        ({"codec": "lzop"}, "option 'codec': no encoder registered for codec lzop"),
        ({"maxRequestSize": "10"}, "option 'maxRequestSize': max_request_size must be"),
        ({"waitForTopic": "0"}, "option 'waitForTopic': wait_for_topic must be None .do not wait. or a positive"),
        ({"waitForTopic": "soon"}, "option 'waitForTopic': wait_for_topic must be None"),
    ],
)
def test_bad_options_name_the_problem(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(**options)


def test_spark_own_options_and_spellings_are_accepted() -> None:
    parsed = parse(
        path="ignored-when-topic-is-set", checkpointLocation="/tmp/cp", queryName="q",
        MAXOFFSETSPERTRIGGER="10", failondataloss="False", onReplayMismatch="at-least-once",
        maxTriggerDelay="30s", startingOffsetsByTimestampStrategy="LATEST",
    )
    assert parsed.max_offsets_per_trigger == 10
    assert parsed.fail_on_data_loss is False
    assert parsed.rewrite_on_replay_mismatch is True
    assert parsed.max_trigger_delay == 30.0
    assert parsed.timestamp_strategy_latest is True
    assert parse(maxTriggerDelay="250").max_trigger_delay == 0.25  # a bare number is milliseconds, as in Spark
    assert parse().max_trigger_delay == 15 * 60
    assert parse().fail_on_data_loss is True


def test_timestamps_follow_the_kafka_connector() -> None:
    assert parse(startingTimestamp="1700000000000").starting_offsets == TimesByTopic(default=1700000000000)
    nested = parse(startingOffsetsByTimestamp='{"t": {"0": 5, "2": 7}}').starting_offsets
    assert nested == TimesByTopic(topics={"t": {0: 5, 2: 7}})
    assert parse(endingTimestamp="9").ending_offsets == TimesByTopic(default=9)


def test_several_topics_and_offsets_per_topic() -> None:
    """``topic`` takes a list, as the Kafka connector's ``subscribe``; JSON offsets nest per topic,
    named as the option names them or by absolute path."""
    parsed = parse(topic="clicks, /local/views", startingOffsets='{"/local/clicks": {"0": 5}, "/local/views": '
                                                                   '{"1": -1}}')
    assert parsed.topics == ("clicks", "/local/views")
    assert parsed.starting_offsets == OffsetsByTopic({"clicks": {0: 5}, "/local/views": {1: -1}})
    assert parse(topic='["a", "b"]').topics == ("a", "b")
    assert parse(topic="t", startingOffsets='{"0": 3}').starting_offsets == OffsetsByTopic({"t": {0: 3}})
    with pytest.raises(ValueError, match="a write takes one 'topic', not 2"):
        check_mode(parse(topic="a,b"), "batch write")
    with pytest.raises(ValueError, match="option 'topic' is required"):
        check_mode(parse_options({k: v for k, v in BASE.items() if k != "topic"}), "stream read")
    check_mode(parse_options({k: v for k, v in BASE.items() if k != "topic"}), "stream write")  # a topic column


def test_batch_reads_refuse_what_kafka_refuses() -> None:
    with pytest.raises(ValueError, match="starting offset can't be latest for batch queries"):
        check_mode(parse(startingOffsets="latest"), "batch read")
    with pytest.raises(ValueError, match="topic 't' partition 1 can't be latest"):
        check_mode(parse(startingOffsets='{"0": 2, "1": -1}'), "batch read")
    check_mode(parse(startingOffsets="latest"), "stream read")
    with pytest.raises(ValueError, match="ending offset can't be earliest"):
        parse(endingOffsets="earliest")


@pytest.mark.parametrize(
    ("option", "mode", "message"),
    [
        ("endingOffsets", "stream read", "'endingOffsets' is for batch reads, not a stream read"),
        ("maxOffsetsPerTrigger", "batch read", "is for stream reads, not a batch read"),
        ("consumer", "batch read", "is for stream reads"),
        ("codec", "stream read", "is for batch writes and stream writes, not a stream read"),
        ("startingOffsets", "batch write", "is for batch reads and stream reads, not a batch write"),
        ("onReplayMismatch", "batch write", "is for stream writes, not a batch write"),
    ],
)
def test_options_of_another_mode_fail(option: str, mode: str, message: str) -> None:
    values = {"endingOffsets": "latest", "codec": "gzip", "startingOffsets": "earliest", "consumer": "c",
              "maxOffsetsPerTrigger": "5", "onReplayMismatch": "fail"}
    with pytest.raises(ValueError, match=message):
        check_mode(parse(**{option: values[option]}), mode)


def test_a_write_may_wait_for_its_topic() -> None:
    """``waitForTopic`` (seconds) is the writers' ``wait_for_topic``, also of the describes a write
    makes before its writers (the sink's record of the topic's ends, a key's partition)."""
    parsed = parse(waitForTopic="2.5")
    assert parsed.writer == {"wait_for_topic": 2.5} and parsed.wait_for_topic == 2.5
    assert parsed.writer_settings().wait_for_topic == 2.5
    assert parse().wait_for_topic is None
    with pytest.raises(ValueError, match="'waitForTopic' is for batch writes and stream writes, not a batch read"):
        check_mode(parse(waitForTopic="5"), "batch read")


def test_secrets_stay_out_of_reprs() -> None:
    parsed = parse(user="u", password="hunter2")
    assert "hunter2" not in repr(parsed)
    assert "hunter2" not in repr(parsed.connection)


# --- offsets ---------------------------------------------------------------------------------

STATE = TopicState("/local/t", 1000, {0: (10, 50), 1: (0, 5)})


def losses(fail: bool = False) -> tuple[list[str], Any]:
    seen: list[str] = []
    report = loss_reporter(fail, "t")

    def record(what: str) -> None:
        seen.append(what)
        report(what)

    return seen, record


def test_checkpoint_offsets_round_trip_and_read_the_older_form() -> None:
    offsets = TopicOffsets({1: 5, 0: 12}, "/local/t", 1000)
    assert offsets.to_json() == {"topic": "/local/t", "createdAt": 1000, "partitions": {"0": 12, "1": 5}}
    assert TopicOffsets.from_json(offsets.to_json()) == offsets
    assert TopicOffsets.from_json({"0": 3}) == TopicOffsets({0: 3})
    with pytest.raises(ValueError, match="bad checkpoint offset"):
        TopicOffsets.from_json({"partitions": {"x": 1}})


def test_source_offsets_name_every_topic_and_record_the_split() -> None:
    one = SourceOffsets({"/local/t": TopicOffsets({0: 12}, "/local/t", 1000)}, Split(min_partitions=4))
    assert one.to_json() == {"topic": "/local/t", "createdAt": 1000, "partitions": {"0": 12},
                             "split": {"minPartitions": 4}}
    assert SourceOffsets.from_json(one.to_json()) == one
    two = SourceOffsets(
        {"/local/b": TopicOffsets({0: 1}, "/local/b", 7), "/local/a": TopicOffsets({1: 2}, "/local/a", 5)}, Split()
    )
    assert two.to_json() == {
        "topics": {"/local/a": {"createdAt": 5, "partitions": {"1": 2}}, "/local/b": {"createdAt": 7,
                                                                                     "partitions": {"0": 1}}},
        "split": {},
    }
    assert SourceOffsets.from_json(two.to_json()) == two
    older = SourceOffsets.from_json({"topic": "/local/t", "createdAt": 1, "partitions": {"0": 3}})
    assert older.split is None  # written before splits were recorded: the options decide
    oldest = SourceOffsets.from_json({"0": 3})
    assert oldest.for_topic("/local/t", single=True) == TopicOffsets({0: 3})
    assert oldest.for_topic("/local/t", single=False) is None
    with pytest.raises(ValueError, match="bad minPartitions"):
        SourceOffsets.from_json({"partitions": {"0": 1}, "split": {"minPartitions": 0}})


@pytest.mark.parametrize(
    ("checkpoint", "expected", "lost"),
    [
        (TopicOffsets({0: 20, 1: 3}, "/local/t", 1000), {0: 20, 1: 3}, []),
        (TopicOffsets({0: 20, 1: 3}, "/local/t", 999), {0: 10, 1: 0}, ["deleted and created again"]),
        (TopicOffsets({0: 20, 1: 3}, "/local/other", 1000), {0: 10, 1: 0}, ["for topic /local/other"]),
        (TopicOffsets({0: 60, 1: 3}), {0: 10, 1: 3}, ["ends at offset 50, before the checkpoint's offset 60"]),
        (TopicOffsets({0: 4, 1: 3}), {0: 10, 1: 3}, ["offsets 4..9 of partition 0 expired"]),
        (TopicOffsets({1: 3}), {0: 10, 1: 3}, ["partition 0 appeared with offsets from 10: 0..9 expired unread"]),
        (TopicOffsets({0: 20, 1: 3, 7: 1}), {0: 20, 1: 3}, ["partition 7 is gone"]),
    ],
)
def test_every_mismatch_between_checkpoint_and_topic_is_data_loss(
    checkpoint: TopicOffsets, expected: dict[int, int], lost: list[str]
) -> None:
    seen, report = losses(fail=False)
    assert check_start(STATE, checkpoint, report) == expected
    assert len(seen) == len(lost) and all(text in got for text, got in zip(lost, seen, strict=True))
    if lost:
        with pytest.raises(DataLossError, match="set the option failOnDataLoss to false"):
            check_start(STATE, checkpoint, loss_reporter(True, "t"))


def test_requested_offsets_out_of_range() -> None:
    """Before the first offset: lost data. Past the end: not written yet, which fails as in the Kafka
    connector (unless failOnDataLoss is false) but is not called data loss."""
    seen, report = losses()
    strict_end = range_reporter(True, "t")
    assert resolve({0: 5, 1: -1}, STATE, "startingOffsets", report, strict_end) == {0: 10, 1: 5}
    assert seen == ["option 'startingOffsets' asks for offset 5 of partition 0, which has offsets 10..50"]
    with pytest.raises(ValueError, match="asks for offset 99 of partition 1, which ends at offset 5") as error:
        resolve({1: 99}, STATE, "endingOffsets", loss_reporter(True, "t"), strict_end)
    assert not isinstance(error.value, DataLossError)
    assert "lost" not in str(error.value) and "has not been written yet" in str(error.value)
    assert resolve({1: 99}, STATE, "endingOffsets", report, range_reporter(False, "t")) == {0: 50, 1: 5}
    assert resolve({0: -2}, STATE, "endingOffsets", report, strict_end) == {0: 10, 1: 5}


def test_split_gives_big_ranges_more_tasks() -> None:
    parts = [OffsetRange(0, 0, 90), OffsetRange(1, 0, 10)]
    assert split(parts, None, None) == parts
    pieces = split(parts, 4, None)
    assert [(r.partition, r.start, r.end) for r in pieces] == [(0, 0, 22), (0, 22, 45), (0, 45, 67), (0, 67, 90),
                                                              (1, 0, 10)]
    assert [r.size for r in split(parts, None, 30)] == [30, 30, 30, 10]
    assert split([OffsetRange(0, 5, 7)], 10, None) == [OffsetRange(0, 5, 6), OffsetRange(0, 6, 7)]


def test_limit_shares_the_budget_by_backlog() -> None:
    assert limit_offsets({0: 0, 1: 0}, {0: 90, 1: 10}, 20) == {0: 18, 1: 2}
    assert limit_offsets({0: 0}, {0: 5, 1: 3}, None) == {0: 5, 1: 3}


# --- credentials -----------------------------------------------------------------------------


def token_provider() -> Any:
    """A ``credentialsProvider`` for the test below."""
    from ydb_topic_async import AccessTokenCredentials

    return AccessTokenCredentials("from-provider")


def not_credentials() -> object:
    return "a token string is not a credentials object"


async def test_each_credential_option_makes_its_credentials(tmp_path: Path) -> None:
    from ydb_topic_async import AccessTokenCredentials, StaticCredentials
    from ydb_topic_async.spark._bridge import TokenFileCredentials, credentials

    assert credentials(parse(token="t").connection).__class__ is AccessTokenCredentials
    assert isinstance(credentials(parse(user="u", password="p").connection), StaticCredentials)
    assert credentials(parse().connection) is None
    provided = credentials(parse(credentialsProvider=f"{__name__}:token_provider").connection)
    assert provided is not None and await provided.auth_token() == "from-provider"
    with pytest.raises(ValueError, match="returned str, not credentials"):
        credentials(parse(credentialsProvider=f"{__name__}:not_credentials").connection)

    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    from_file = credentials(parse(tokenFile=str(token_file)).connection)
    assert isinstance(from_file, TokenFileCredentials)
    assert await from_file.auth_token() == "first"
    token_file.write_text("second, rotated\n")
    os.utime(token_file, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))  # a new mtime, however fast
    assert await from_file.auth_token() == "second, rotated"
    token_file.unlink()
    with pytest.raises(ValueError, match="token file cannot be read"):
        await from_file.auth_token()
