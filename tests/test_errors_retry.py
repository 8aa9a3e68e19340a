"""The error map and the retry policy (pure logic, no server)."""

from __future__ import annotations

import time

import grpc
import grpc.aio
import pytest

import ydb_topic_async as yta
from ydb_topic_async._errors import error_from_code, error_from_status
from ydb_topic_async._proto import ydb_issue_message_pb2, ydb_status_codes_pb2
from ydb_topic_async._retry import BackoffSchedule, RetryPolicy, RetryState, retry_call, topic_wait

Status = ydb_status_codes_pb2.StatusIds


def test_every_status_code_has_its_own_class() -> None:
    codes = [v.number for v in Status.StatusCode.DESCRIPTOR.values if v.number not in (0, Status.SUCCESS)]
    classes = {type(error_from_status(code)) for code in codes}
    assert len(classes) == len(codes)
    assert all(issubclass(c, yta.ServerError) and c is not yta.ServerError for c in classes)


@pytest.mark.parametrize(
    ("status", "cls", "retriable", "idempotent_only", "backoff"),
    [
        (Status.BAD_REQUEST, yta.BadRequestError, False, False, "none"),
        (Status.SCHEME_ERROR, yta.SchemeError, False, False, "none"),
        (Status.UNAUTHORIZED, yta.UnauthorizedError, False, False, "none"),
        (Status.ABORTED, yta.AbortedError, True, False, "fast"),
        (Status.UNAVAILABLE, yta.UnavailableError, True, False, "fast"),
        (Status.OVERLOADED, yta.OverloadedError, True, False, "slow"),
        (Status.BAD_SESSION, yta.BadSessionError, True, False, "fast"),
        (Status.SESSION_BUSY, yta.SessionBusyError, True, False, "fast"),
        (Status.UNDETERMINED, yta.UndeterminedError, False, True, "fast"),
        (Status.ALREADY_EXISTS, yta.AlreadyExistsError, False, False, "none"),
    ],
)
def test_status_retriability(status: int, cls: type, retriable: bool, idempotent_only: bool, backoff: str) -> None:
    err = error_from_status(status)
    assert type(err) is cls
    assert err.is_retriable(idempotent=False) is retriable
    assert err.is_retriable(idempotent=True) is (retriable or idempotent_only)
    assert err.backoff == backoff


def test_server_issues_are_in_the_message() -> None:
    inner = ydb_issue_message_pb2.IssueMessage(message="partition 7 does not exist", issue_code=500011)
    outer = ydb_issue_message_pb2.IssueMessage(message="bad write request", issues=[inner])
    err = error_from_status(Status.BAD_REQUEST, [outer])
    assert "BAD_REQUEST" in str(err)
    assert "partition 7 does not exist (code 500011)" in str(err)
    assert err.issues[0].issues[0].code == 500011


@pytest.mark.parametrize(
    ("code", "cls", "retriable", "idempotent"),
    [
        (grpc.StatusCode.UNAVAILABLE, yta.ConnectionLostError, True, True),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, yta.ResourceExhaustedError, True, True),
        (grpc.StatusCode.DEADLINE_EXCEEDED, yta.DeadlineExceededError, False, True),
        (grpc.StatusCode.UNAUTHENTICATED, yta.UnauthenticatedError, False, False),
        (grpc.StatusCode.INVALID_ARGUMENT, yta.InvalidRequestError, False, False),
    ],
)
def test_grpc_codes(code: grpc.StatusCode, cls: type, retriable: bool, idempotent: bool) -> None:
    err = yta.error_from_grpc(grpc.aio.AioRpcError(code, details="socket closed"))
    assert type(err) is cls
    assert err.code == code
    assert "socket closed" in str(err)
    assert err.is_retriable(idempotent=False) is retriable
    assert err.is_retriable(idempotent=True) is idempotent


def test_full_jitter_stays_within_the_exponential_bound() -> None:
    schedule = BackoffSchedule(base=0.1, cap=1.0)
    assert schedule.delay(0, rand=lambda: 1.0) == pytest.approx(0.1)
    assert schedule.delay(3, rand=lambda: 1.0) == pytest.approx(0.8)
    assert schedule.delay(10, rand=lambda: 1.0) == pytest.approx(1.0)  # capped
    assert schedule.delay(10, rand=lambda: 0.0) == 0.0
    assert schedule.delay(1000, rand=lambda: 0.5) == pytest.approx(0.5)  # no overflow


def test_policy_picks_schedule_by_error_and_respects_limits() -> None:
    fast, slow = BackoffSchedule(0.001, 0.001), BackoffSchedule(5.0, 5.0)
    policy = RetryPolicy(max_attempts=3, max_elapsed=None, fast=fast, slow=slow)
    now = time.monotonic()
    unavailable, overloaded = yta.UnavailableError(), yta.OverloadedError()
    assert policy.next_delay(unavailable, 1, now, idempotent=False) <= 0.001  # type: ignore[operator]
    assert 0 <= policy.next_delay(overloaded, 1, now, idempotent=False) <= 5.0  # type: ignore[operator]
    assert policy.next_delay(unavailable, 3, now, idempotent=False) is None  # attempts used up
    assert policy.next_delay(yta.SchemeError(), 1, now, idempotent=True) is None
    assert policy.next_delay(yta.UndeterminedError(), 1, now, idempotent=False) is None
    assert policy.next_delay(yta.UndeterminedError(), 1, now, idempotent=True) is not None
    assert policy.next_delay(ValueError("not ours"), 1, now, idempotent=True) is None
    timed = RetryPolicy(max_attempts=None, max_elapsed=0.5, fast=BackoffSchedule(10, 10))
    assert timed.next_delay(unavailable, 1, now - 1.0, idempotent=True) is None  # out of time


def test_policy_rejects_nonsense() -> None:
    for bad in ({"max_attempts": 0}, {"max_attempts": 2.5}, {"max_elapsed": -1}, {"max_elapsed": "60"}):
        with pytest.raises(yta.InvalidArgumentError, match=next(iter(bad))) as raised:
            RetryPolicy(**bad)
        assert isinstance(raised.value, ValueError)  # still caught by code written for ValueError


async def test_retry_call_retries_then_succeeds_and_gives_up_on_permanent_errors() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise yta.UnavailableError("node restarting")
        return "ok"

    fast = BackoffSchedule(0.001, 0.001)
    assert await retry_call(flaky, RetryPolicy(max_attempts=5, fast=fast), idempotent=False) == "ok"
    assert calls == 3

    calls = 0

    async def broken() -> str:
        nonlocal calls
        calls += 1
        raise yta.SchemeError("no such topic")

    with pytest.raises(yta.SchemeError):
        await retry_call(broken, RetryPolicy(max_attempts=5, fast=fast), idempotent=True)
    assert calls == 1

    calls = 0

    async def always_down() -> str:
        nonlocal calls
        calls += 1
        raise yta.UnavailableError()

    with pytest.raises(yta.UnavailableError):
        await retry_call(always_down, RetryPolicy(max_attempts=4, fast=fast), idempotent=True)
    assert calls == 4


def test_a_message_over_grpcs_size_limit_is_not_retriable() -> None:
    too_large = error_from_code(grpc.StatusCode.RESOURCE_EXHAUSTED, "Received message larger than max (70 vs. 64)")
    assert type(too_large) is yta.RequestTooLargeError and isinstance(too_large, yta.ResourceExhaustedError)
    assert not too_large.is_retriable(idempotent=True)
    quota = error_from_code(grpc.StatusCode.RESOURCE_EXHAUSTED, "quota exceeded")
    assert type(quota) is yta.ResourceExhaustedError and quota.is_retriable(idempotent=False)


def test_a_budget_alone_bounds_time_not_attempts() -> None:
    assert RetryPolicy().max_attempts is None and RetryPolicy().max_elapsed == 60.0
    clock = [0.0]
    state = RetryState(RetryPolicy(max_elapsed=10.0, fast=BackoffSchedule(0.001, 0.001)), clock=lambda: clock[0])
    for _ in range(1000):  # far more than the old default of ten attempts
        assert state.next_delay(yta.UnavailableError()) is not None
        clock[0] += 0.005
    clock[0] = 10.5
    assert state.next_delay(yta.UnavailableError()) is None  # the streak outlasted the budget


def test_retry_state_streaks_start_over_after_progress() -> None:
    clock = [0.0]
    fast = BackoffSchedule(1.0, 100.0)
    state = RetryState(RetryPolicy(max_attempts=3, max_elapsed=None, fast=fast), clock=lambda: clock[0])
    failing_at_first = state.failing
    assert not failing_at_first
    assert state.next_delay(yta.ConnectionLostError()) is not None
    assert state.next_delay(yta.ConnectionLostError()) is not None
    failing_after_two = state.failing
    assert failing_after_two and state.attempt == 2
    clock[0] = 7.0
    assert state.elapsed() == 7.0
    assert state.next_delay(yta.ConnectionLostError()) is None  # the third try of the streak was the last
    state.reset()
    assert not state.failing and state.elapsed() == 0.0
    assert state.next_delay(yta.ConnectionLostError()) is not None  # a new streak, a new budget
    assert state.failures == 4
    assert state.next_delay(yta.SchemeError()) is None  # final whatever the budget


def test_retry_state_classifies_failures_its_own_way_and_forever_never_gives_up() -> None:
    state = RetryState(RetryPolicy.forever(), classify=lambda error: "fast" if isinstance(error, KeyError) else None)
    assert all(state.next_delay(KeyError("handler bug")) is not None for _ in range(10_000))
    assert state.next_delay(yta.UnavailableError()) is None


def test_backoff_floor_keeps_delays_above_a_fraction_of_the_bound() -> None:
    equal_jitter = BackoffSchedule(base=1.0, cap=8.0, floor=0.5)
    assert equal_jitter.delay(2, rand=lambda: 0.0) == pytest.approx(2.0)
    assert equal_jitter.delay(2, rand=lambda: 1.0) == pytest.approx(4.0)
    assert BackoffSchedule(base=1.0, cap=8.0).delay(2, rand=lambda: 0.0) == 0.0  # full jitter by default


@pytest.mark.parametrize("status", [Status.BAD_REQUEST, Status.SESSION_EXPIRED])
def test_a_producer_takeover_is_its_own_error_whatever_the_status(status: int) -> None:
    """Released YDB versions answer a session whose producer id a newer session took over with
    BAD_REQUEST, the newest ones with SESSION_EXPIRED (``TOwnerInfo::GenerateCookie`` in
    ydb/core/persqueue/pqtablet/partition/ownerinfo.cpp, commits e9db2ae7 and 19c9cb9f); the
    reason is the same. Either way the writer must not retry: it would take the producer id back."""
    issue = ydb_issue_message_pb2.IssueMessage(
        message="status is not ok: ownership session is killed by another session with id x|y_2 partition id 0",
        issue_code=500003,
    )
    error = error_from_status(status, [issue], "write stream")
    assert type(error) is yta.ProducerTakenOverError
    assert isinstance(error, yta.BadRequestError) and isinstance(error, yta.ProducerConflictError)
    assert not error.is_retriable(idempotent=True)
    assert "another writer took over this producer id" in str(error)
    assert type(error_from_status(status, [], "write stream")) is not yta.ProducerTakenOverError


def test_a_commit_naming_a_dead_read_session_is_not_retried() -> None:
    """CommitOffset with a read_session_id that does not hold the partition: the partition answers
    WRONG_COOKIE "set offset in already dead session ..." and CommitOffset SESSION_EXPIRED
    (commit_offset_actor.cpp); that session will not come back, so no retry helps."""
    issue = ydb_issue_message_pb2.IssueMessage(message="set offset in already dead session s1 actual is s2")
    error = error_from_status(Status.SESSION_EXPIRED, [issue])
    assert type(error) is yta.StaleReadSessionError and isinstance(error, yta.SessionExpiredError)
    assert not error.is_retriable(idempotent=True)
    assert type(error_from_status(Status.SESSION_EXPIRED, [])) is yta.SessionExpiredError


@pytest.mark.parametrize(
    ("message", "issue_code", "missing"),
    [
        # The write session since the describer actor, and DescribeTopic (ydb/core/persqueue/public/
        # describer: NDescriber::Description; write_session_actor: ErrorCodeFromDescriberStatus).
        ("You do not have access permissions or the '/Root/t' does not exist", 500017, True),
        ("You do not have access permissions or the '/Root/t' does not exist", 500018, True),
        ("You do not have access or the '/Root/t' does not exist", 500017, True),
        # Before it (persqueue_v1/actors/persqueue_utils.cpp, ProcessMetaCacheTopicResponse), and
        # DescribeTopic's schema actor then.
        ("no path '/Root/t', Marker# PQ15", 500017, True),
        ("topic 't' has no balancer, Marker# PQ193", 500017, True),
        ("path 'Root/t' does not exist or you do not have access rights", 500018, True),
        # Not "the topic does not exist".
        ("The '/Root/dir' path is not a topic", 500017, False),
        ("item '/Root/dir' is not a topic, Marker# PQ13", 500017, False),
        ("no partition 7 in topic '/Root/t', Marker# PQ4", 500017, False),
        ("topic 't' describe error, Status# LookupError, Marker# PQ150", 500100, False),
    ],
)
def test_a_missing_topic_is_told_apart_from_other_scheme_errors(message: str, issue_code: int, missing: bool) -> None:
    """YDB answers a missing topic and a path that is not a topic both with SCHEME_ERROR (often the
    same issue code, UNKNOWN_TOPIC): only the words tell them apart, in each YDB version's wording.
    Nested issues count too."""
    issue = ydb_issue_message_pb2.IssueMessage(message=message, issue_code=issue_code, severity=1)
    error = error_from_status(Status.SCHEME_ERROR, [issue], "write stream")
    nested = error_from_status(
        Status.SCHEME_ERROR, [ydb_issue_message_pb2.IssueMessage(message="outer", issues=[issue])]
    )
    assert isinstance(error, yta.SchemeError) and isinstance(nested, yta.SchemeError)
    assert isinstance(error, yta.TopicNotFoundError) is missing
    assert isinstance(nested, yta.TopicNotFoundError) is missing
    assert not error.is_retriable(idempotent=True)  # only a writer's wait_for_topic waits for it
    other = error_from_status(Status.BAD_REQUEST, [issue])
    assert not isinstance(other, yta.TopicNotFoundError)


def test_a_wait_for_a_topic_tries_last_as_its_bound_ends() -> None:
    """A wait (``topic_wait``) tries on the fast schedule until its bound, the last delay cut to
    end there (where a retry budget gives up before a delay that would pass it), and retries
    nothing but a missing topic."""
    missing = error_from_status(
        Status.SCHEME_ERROR, [ydb_issue_message_pb2.IssueMessage(message="no path 'x', Marker# PQ15")]
    )
    policy = RetryPolicy(max_attempts=2, fast=BackoffSchedule(base=0.4, cap=0.4, floor=1.0))
    wait = topic_wait(1.0, policy)
    assert wait.policy.max_attempts is None and wait.policy.max_elapsed == 1.0  # the policy's budget aside
    assert wait.policy.fast == policy.fast
    assert wait.retries(missing) and not wait.retries(yta.UnavailableError()) and not wait.retries(yta.SchemeError())

    def delays(last_try_at_end: bool) -> list[float]:
        now = [100.0]
        state = RetryState(
            wait.policy, classify=lambda e: "fast", clock=lambda: now[0], last_try_at_end=last_try_at_end
        )
        taken = []
        while (delay := state.next_delay(missing)) is not None:
            taken.append(round(delay, 6))
            now[0] += delay
        return taken

    assert delays(last_try_at_end=True) == [0.4, 0.4, 0.2]  # the last try at 1.0s
    assert delays(last_try_at_end=False) == [0.4, 0.4]  # a budget gives up at 0.8s
