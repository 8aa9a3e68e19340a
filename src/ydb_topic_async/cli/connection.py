"""The driver a command uses: the endpoint, database, credentials and TLS files its options and
the environment describe (the options win), and failing fast, in one line, when nothing answers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from .. import (
    AccessTokenCredentials,
    AnonymousCredentials,
    Credentials,
    Driver,
    MetadataUrlCredentials,
    Oauth2TokenExchangeCredentials,
    ServiceAccountCredentials,
    StaticCredentials,
    YdbTopicError,
    credentials_from_env,
)
from .failures import CommandFailure, UsageFailure


def _credentials(args: argparse.Namespace) -> Credentials:
    """The credentials option given, else the environment's (YDB's SDKs' variables), else
    ``YDB_TOKEN`` (YDB CLI's), else none."""
    if args.user:
        password = args.password if args.password is not None else os.environ.get("YDB_PASSWORD")
        if password is None:
            raise UsageFailure("--user needs --password (or YDB_PASSWORD)")
        return StaticCredentials(args.user, password)
    if args.token:
        return AccessTokenCredentials(args.token)
    if args.sa_key_file:
        return ServiceAccountCredentials.from_file(args.sa_key_file, iam_endpoint=args.iam_endpoint)
    if args.use_metadata_credentials:
        return MetadataUrlCredentials()
    if args.oauth2_key_file:
        return Oauth2TokenExchangeCredentials.from_file(args.oauth2_key_file, token_endpoint=args.iam_endpoint)
    token = os.environ.get("YDB_TOKEN")
    return credentials_from_env(fallback=AccessTokenCredentials(token) if token else AnonymousCredentials())


def make_driver(args: argparse.Namespace) -> Driver:
    """The driver the options and the environment describe (the options win)."""
    env = dict(os.environ)
    for option, variable in (("ca_file", "YDB_CA_FILE"), ("client_cert_file", "YDB_CLIENT_CERT_FILE"),
                             ("client_cert_key_file", "YDB_CLIENT_CERT_KEY_FILE")):
        if getattr(args, option):
            env[variable] = getattr(args, option)
            if option == "ca_file":
                env.pop("YDB_SSL_ROOT_CERTIFICATES_FILE", None)
    endpoint = args.endpoint or env.get("YDB_CONNECTION_STRING") or env.get("YDB_ENDPOINT") or "grpc://localhost:2136"
    database = args.database
    url = urlsplit(endpoint if "://" in endpoint else f"grpc://{endpoint}")
    names_one = "database=" in url.query or url.path not in ("", "/")
    if database is None and not names_one and not env.get("YDB_DATABASE"):
        database = "/local"
    # Driver.from_env takes YDB_DATABASE when neither the option nor the endpoint names a database.
    return Driver.from_env(endpoint, database, _credentials(args), environ=env)


@contextlib.asynccontextmanager
async def open_driver(args: argparse.Namespace) -> AsyncIterator[Driver]:
    """An open driver whose server answered within ``--timeout`` (else a clear error, exit 1)."""
    driver = make_driver(args)
    try:
        # Writers and readers reconnect forever; fail fast instead when nothing answers.
        await _connect(driver, args.timeout)
        yield driver
    finally:
        await driver.close()


async def _connect(driver: Driver, timeout: float) -> None:
    """Open ``driver`` and wait until its server answers: a ``CommandFailure`` otherwise.

    A refused connection fails at once instead of after ``timeout``; a server that accepts
    connections and never answers fails after ``timeout``, whatever the waiting raised.
    """
    where = f"{driver.endpoint} (database {driver.database})"
    silent = f"no YDB endpoint answered at {where} within {timeout:g}s"
    try:
        async with asyncio.timeout(timeout):
            await _probe(driver.endpoint, where)
            await driver.open()
            await driver.wait_ready(timeout)
    except TimeoutError as exc:
        raise CommandFailure(str(exc) if isinstance(exc, YdbTopicError) else silent) from None
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # a real cancellation (Ctrl-C): let it end the command
        # gRPC can end an abandoned call with a bare CancelledError: still nobody answered.
        raise CommandFailure(silent) from None


async def _probe(endpoint: str, where: str) -> None:
    """Open and close one TCP connection to ``endpoint``: refused or unresolvable fails now."""
    url = urlsplit(endpoint)
    try:
        _, writer = await asyncio.open_connection(url.hostname, url.port)
    except OSError as exc:
        if exc.errno and not isinstance(exc, socket.gaierror):
            reason = os.strerror(exc.errno)  # not asyncio's "Connect call failed (...)"
        else:
            reason = exc.strerror or str(exc) or type(exc).__name__
        raise CommandFailure(f"cannot connect to {where}: {reason}") from None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()

