"""Structured logging: session ids and context fields in the records, credentials never."""

from __future__ import annotations

import asyncio
import logging
import threading
import traceback

import pytest

import ydb_topic_async as yta
from ydb_topic_async.observability.logging import REDACTED, register_secret, sdk_logger
from ydb_topic_async.testing import LocalTopicServer

from ..credentials._kinds import CLOUD_KINDS, setup

pytestmark = pytest.mark.timeout(30)

USER = "alice"
PASSWORD = "wonderland-rabbit-hole"


def _record_texts(records: list[logging.LogRecord]) -> str:
    """Everything a handler could print of the records: messages, tracebacks and every attribute."""
    formatter = logging.Formatter()
    parts = []
    for record in records:
        parts.append(formatter.format(record))
        parts.extend(repr(value) for value in vars(record).values())
    return "\n".join(parts)


async def _write_and_read(driver: yta.Driver, server: LocalTopicServer, topic: str) -> tuple[str, str]:
    """Write and read a few messages through a broken stream each; return the last session ids."""
    await driver.topic.create_topic(topic, consumers=["c"])
    async with driver.topic.writer(topic, producer_id="log-producer", partition_id=0) as writer:
        await writer.write_with_ack(b"one")
        server.faults.drop_write_streams()
        await writer.write_with_ack(b"two")
        async with driver.topic.reader(topic, consumer="c") as reader:
            batch = await reader.receive_batch(max_messages=1, timeout=10)
            assert [m.data for m in batch] == [b"one"]
            second = await reader.receive_message(timeout=10)
            assert second.data == b"two"
            reader.commit(batch)
            await reader.commit_with_ack(second, timeout=10)
            assert server.faults.drop_read_streams() == 1
            await writer.write_with_ack(b"three")
            assert (await reader.receive_message(timeout=10)).data == b"three"
            reader_session = reader.read_session_id
        writer_session = writer.session_id
    return writer_session, reader_session


@pytest.mark.parametrize("kind", ["static", "token"])
async def test_records_carry_session_ids_and_never_credentials(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="ydb_topic_async")
    async with LocalTopicServer(users={USER: PASSWORD}) as server:
        token = server.auth.login(USER, PASSWORD)
        assert token
        credentials: yta.Credentials = (
            yta.StaticCredentials(USER, PASSWORD) if kind == "static" else yta.AccessTokenCredentials(token)
        )
        async with yta.Driver(server.endpoint, server.database, credentials, discovery=False) as driver:
            writer_session, reader_session = await _write_and_read(driver, server, f"logged-{kind}")
            used_token = await driver.credentials.auth_token()
    assert used_token

    records = [r for r in caplog.records if r.name.startswith("ydb_topic_async")]
    writer_records = [r for r in records if getattr(r, "ydb_producer_id", None) == "log-producer"]
    reader_records = [r for r in records if getattr(r, "ydb_consumer", None) == "c"]

    # The writer logged its sessions (the first, the broken one, the new one) with full context.
    started = [r for r in writer_records if "started" in r.getMessage()]
    assert len(started) == 2
    assert writer_session in started[-1].getMessage()
    assert started[-1].ydb_session_id == writer_session  # type: ignore[attr-defined]
    assert started[-1].ydb_topic == "/local/logged-" + kind  # type: ignore[attr-defined]
    assert started[-1].ydb_partition_id == 0  # type: ignore[attr-defined]
    broke = [r for r in writer_records if "reconnecting" in r.getMessage()]
    assert len(broke) == 1
    assert broke[0].ydb_session_id == started[0].ydb_session_id  # type: ignore[attr-defined]
    assert started[0].ydb_session_id in broke[0].getMessage()  # type: ignore[attr-defined]

    reader_started = [r for r in reader_records if "started" in r.getMessage()]
    assert len(reader_started) == 2
    assert reader_session in reader_started[-1].getMessage()
    assert reader_started[-1].ydb_session_id == reader_session  # type: ignore[attr-defined]
    assert any("reconnecting" in r.getMessage() for r in reader_records)

    text = _record_texts(records)
    assert writer_session in text and reader_session in text
    assert used_token not in text
    assert token not in text
    assert PASSWORD not in text


async def test_registered_secrets_are_masked_in_messages_and_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    secret = "t0ken-that-must-not-leak"
    register_secret(secret)
    caplog.set_level(logging.DEBUG, logger="ydb_topic_async")
    logger = sdk_logger("observability-test")
    try:
        raise RuntimeError(f"server refused {secret}")
    except RuntimeError:
        logger.warning("call with %s failed", secret, exc_info=True)
    # A module that made its logger directly is covered as well.
    logging.getLogger("ydb_topic_async.observability-test-plain").error("header %s", secret)
    register_secret("another-secret-value")  # registration installs the filter on every SDK logger
    logging.getLogger("ydb_topic_async.observability-test-plain").error("header %s", secret)

    masked = [r for r in caplog.records if r.name.startswith("ydb_topic_async.observability-test")]
    assert masked[0].getMessage() == f"call with {REDACTED} failed"
    assert masked[0].exc_text is not None and "RuntimeError: server refused ***" in masked[0].exc_text
    assert masked[-1].getMessage() == f"header {REDACTED}"
    assert secret not in logging.Formatter().format(masked[0])


def test_short_strings_are_not_treated_as_secrets(caplog: pytest.LogCaptureFixture) -> None:
    register_secret("pw")
    caplog.set_level(logging.DEBUG, logger="ydb_topic_async")
    sdk_logger("observability-test").info("upload complete: pw")
    assert caplog.records[-1].getMessage() == "upload complete: pw"


def test_a_secret_containing_another_is_masked_whole(caplog: pytest.LogCaptureFixture) -> None:
    register_secret("inner-secret")
    register_secret("outer-inner-secret-value")  # registered later, and contains the first
    caplog.set_level(logging.DEBUG, logger="ydb_topic_async")
    sdk_logger("observability-test").info("token outer-inner-secret-value, then inner-secret")
    assert caplog.records[-1].getMessage() == f"token {REDACTED}, then {REDACTED}"


class _ExcInfoHandler(logging.Handler):
    """Formats ``exc_info`` itself, as JSON and OpenTelemetry log handlers do, ignoring ``exc_text``."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.outputs: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.outputs.append("".join(traceback.format_exception(*record.exc_info)))
        else:
            self.outputs.append(record.exc_text or "")


def test_tracebacks_are_masked_for_handlers_that_format_exc_info_themselves() -> None:
    secret = "exc-info-secret-token"
    register_secret(secret)
    handler = _ExcInfoHandler()
    logger = sdk_logger("observability-exc-info")
    logger.addHandler(handler)
    try:
        try:
            raise RuntimeError(f"server refused {secret}")
        except RuntimeError:
            logger.error("call failed", exc_info=True)
    finally:
        logger.removeHandler(handler)
    (output,) = handler.outputs
    assert "RuntimeError: server refused ***" in output
    assert "Traceback (most recent call last)" in output
    assert secret not in output


def test_masking_is_safe_while_another_thread_registers_secrets() -> None:
    logger = sdk_logger("observability-threads")
    sink = logging.NullHandler()  # only the filter matters here, not the output
    logger.addHandler(sink)
    logger.propagate = False
    register_secret("initial-secret-value")
    # A long message makes each masking pass long enough for registrations to land during it.
    text = "x" * 200_000
    done = threading.Event()
    errors: list[BaseException] = []

    def register_many() -> None:
        try:
            for i in range(3000):
                register_secret(f"rotating-token-{i:06d}")
        finally:
            done.set()

    thread = threading.Thread(target=register_many)
    thread.start()
    try:
        while not done.is_set():
            try:
                logger.warning("payload %s", text)
            except RuntimeError as exc:  # "OrderedDict mutated during iteration"
                errors.append(exc)
                break
    finally:
        thread.join()
        logger.propagate = True
        logger.removeHandler(sink)
    assert errors == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", [*CLOUD_KINDS, "static"])
async def test_no_token_key_or_password_of_any_kind_reaches_the_logs(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every credentials kind, through broken streams, in-band refreshes and (for the kinds with a
    token service) an outage of the token service that fails refreshes and logs them."""
    caplog.set_level(logging.DEBUG, logger="ydb_topic_async")
    async with (
        setup(kind, 1.0) as s,
        yta.Driver(s.server.endpoint, s.server.database, s.credentials, discovery=False) as driver,
    ):
        await _write_and_read(driver, s.server, f"secret-{kind}")
        if s.service is not None:
            async with s.service.down():
                await asyncio.sleep(1.2)  # refreshes fail, the token expires
                with pytest.raises(yta.OperationTimeoutError) as failure:
                    await driver.topic.describe_topic(f"secret-{kind}", timeout=0.5)
                assert "has no valid token" in str(failure.value)
        else:
            await asyncio.sleep(1.2)  # a login or two more
        # A bound, not a timing: the refresh after an outage may wait out its backoff (up to 5 s)
        # and the call its own retry delay.
        await driver.topic.describe_topic(f"secret-{kind}", timeout=30)
        secrets = s.all_secrets()
    records = [r for r in caplog.records if r.name.startswith("ydb_topic_async")]
    text = _record_texts(records)
    if s.service is not None:
        assert "could not refresh its token" in text  # the failure path was logged
    assert len(secrets) >= 2  # a token before the outage (or the login), a new one after it
    for secret in secrets:
        assert secret not in text


def test_a_password_stays_masked_however_many_tokens_rotate_after_it(caplog: pytest.LogCaptureFixture) -> None:
    """Tokens rotate and only the most recent are kept for masking; a password (or a key, or a
    fixed token) is kept for good: a service that runs for months still never logs it."""
    yta.StaticCredentials("alice", "a-long-lived-password")
    yta.AccessTokenCredentials("a-fixed-access-token")
    for i in range(1000):
        register_secret(f"rotating-token-{i:06d}")
    logger = sdk_logger("observability-pinned")
    with caplog.at_level(logging.INFO, logger=logger.name):
        logger.info("login with a-long-lived-password and a-fixed-access-token and rotating-token-000999")
        logger.info("an old rotating-token-000000 may show: it expired long ago")
    first, second = (r.getMessage() for r in caplog.records)
    assert first == "login with *** and *** and ***"
    assert "rotating-token-000000" in second  # evicted: what keeps the list bounded
