"""``ydb-topic-async``: administer topics, write and read messages, run the local server.

    ydb-topic-async topic create events --partitions 4 --consumer analytics
    printf 'a\\nb\\n' | ydb-topic-async write events --producer-id cli
    ydb-topic-async read events --consumer analytics --count 2 --format json
    ydb-topic-async serve --port 2136

The endpoint comes from ``--endpoint``, ``YDB_CONNECTION_STRING`` or ``YDB_ENDPOINT`` (default
``grpc://localhost:2136``), the database from ``--database``, the endpoint's ``?database=``, or
``YDB_DATABASE`` (default ``/local``). Credentials come from a credentials option, else from the
environment as YDB's SDKs read it (``YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS``, ...,
``YDB_OAUTH2_KEY_FILE``, ``YDB_USER``), else ``YDB_TOKEN``, else none. TLS files come from
``--ca-file``, ``--client-cert-file`` and ``--client-cert-key-file``, else YDB CLI's variables.
Exit codes: 0 success, 1 the operation failed, 2 the command line is wrong, 130 interrupted.
Every failure is reported as one line on standard error, without a traceback (``--traceback``
shows it).
"""

from __future__ import annotations

import argparse

from .. import LZ4_CODEC, Codec, __version__
from ..testing import add_serve_arguments

CODECS = {"raw": Codec.RAW, "gzip": Codec.GZIP, "zstd": Codec.ZSTD, "lz4": LZ4_CODEC}
PROG = "ydb-topic-async"


def _plain(text: str) -> str:
    """Docstring text for a terminal: without the reStructuredText literal markers."""
    return text.replace("``", "")


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: each command's parser is its ``usage`` default (to print with a mistake)."""
    summary, _, details = (__doc__ or "").partition("\n\n")
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=_plain(summary),
        epilog="examples:\n" + _plain(details).rstrip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--traceback", action="store_true", help="show the traceback of an unexpected failure")
    parser.add_argument("--endpoint", default=None,
                        help="grpc://host:port or grpcs://host:port (default: YDB_CONNECTION_STRING, YDB_ENDPOINT"
                             " or grpc://localhost:2136)")
    parser.add_argument("--database", default=None,
                        help="database path (default: the endpoint's ?database=, YDB_DATABASE, or /local)")
    auth = parser.add_argument_group(
        "credentials", "at most one; without any, the environment's as YDB's SDKs read it, else YDB_TOKEN, else none"
    )
    chosen = auth.add_mutually_exclusive_group()
    chosen.add_argument("--token", default=None, help="an access token (default: YDB_TOKEN)")
    chosen.add_argument("--user", help="log in as this user (password from --password or YDB_PASSWORD)")
    chosen.add_argument("--sa-key-file", metavar="PATH", help="a service account's authorized key file (IAM)")
    chosen.add_argument("--use-metadata-credentials", action="store_true",
                        help="the token of the instance's service account, from the metadata service")
    chosen.add_argument("--oauth2-key-file", metavar="PATH",
                        help="an OAuth 2.0 token exchange configuration file (YDB's format)")
    auth.add_argument("--password", help="the password of --user (default: YDB_PASSWORD)")
    auth.add_argument("--iam-endpoint", metavar="URL",
                      help="the IAM token service for --sa-key-file (host:port), or the token endpoint for"
                           " --oauth2-key-file")
    tls = parser.add_argument_group("TLS")
    tls.add_argument("--ca-file", metavar="PATH", help="PEM roots to trust (default: YDB_CA_FILE)")
    tls.add_argument("--client-cert-file", metavar="PATH",
                     help="a client certificate for mutual TLS, PEM or PKCS#12 (default: YDB_CLIENT_CERT_FILE)")
    tls.add_argument("--client-cert-key-file", metavar="PATH",
                     help="its PEM private key (default: YDB_CLIENT_CERT_KEY_FILE)")
    parser.add_argument("--timeout", type=_positive_float, default=10.0,
                        help="seconds to wait for the server to answer at start (default: 10)")
    parser.set_defaults(usage=parser)
    commands = parser.add_subparsers(dest="command", required=True)

    topic = commands.add_parser("topic", help="create, describe, alter or drop a topic").add_subparsers(
        dest="action", required=True
    )
    create = topic.add_parser("create", help="create a topic")
    create.add_argument("path")
    create.add_argument("--partitions", type=_positive_int, default=1)
    create.add_argument("--retention-hours", type=float)
    create.add_argument("--codecs", help="comma-separated codecs the topic accepts, e.g. raw,zstd")
    create.add_argument("--consumer", action="append", default=[], help="add a consumer (repeatable)")
    describe = topic.add_parser("describe", help="show a topic's settings and partitions")
    describe.add_argument("path")
    describe.add_argument("--json", action="store_true", help="print JSON")
    alter = topic.add_parser("alter", help="change a topic")
    alter.add_argument("path")
    alter.add_argument("--partitions", type=_positive_int, help="new (larger) number of partitions")
    alter.add_argument("--retention-hours", type=float)
    alter.add_argument("--add-consumer", action="append", default=[])
    alter.add_argument("--drop-consumer", action="append", default=[])
    drop = topic.add_parser("drop", help="delete a topic")
    drop.add_argument("path")
    for command in (create, describe, alter, drop):
        command.set_defaults(usage=command)

    consumer = commands.add_parser("consumer", help="inspect consumers").add_subparsers(dest="action", required=True)
    consumer_describe = consumer.add_parser("describe", help="committed offsets, lag and time lag per partition")
    consumer_describe.add_argument("path")
    consumer_describe.add_argument("name")
    consumer_describe.add_argument("--json", action="store_true")
    consumer_describe.set_defaults(usage=consumer_describe)

    write = commands.add_parser("write", help="write lines from stdin or a file, one message each")
    write.add_argument("path")
    write.add_argument("--file", help="read lines from this file instead of stdin")
    write.add_argument("--producer-id", help="enables deduplication across retries")
    write.add_argument("--codec", choices=sorted(CODECS), default="raw")
    write.add_argument("--rate", type=_positive_float, help="at most this many messages per second")
    write.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="show a progress bar on stderr (default: when stderr is a terminal)")
    write.set_defaults(usage=write)

    read = commands.add_parser("read", help="read messages")
    read.add_argument("path")
    read.add_argument("--consumer", help="read as this consumer (omit to read a partition from an offset)")
    read.add_argument("--partition", type=int, action="append",
                      help="partition to read (repeatable); required without a consumer")
    read.add_argument("--offset", type=int, help="start offset, only without a consumer (default: 0)")
    read.add_argument("--count", type=int, help="stop after this many messages")
    read.add_argument("--follow", action="store_true", help="keep waiting for new messages")
    read.add_argument("--idle-timeout", type=_positive_float, default=2.0,
                      help="without --follow, stop after this many idle seconds (default: 2)")
    read.add_argument("--format", choices=("raw", "json"), default="raw")
    read.add_argument("--no-commit", action="store_true", help="do not commit what was read")
    read.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help="show the count and rate of messages read on stderr, with a bar when --count is given"
                           " (default: when stderr is a terminal and stdout is not)")
    read.set_defaults(usage=read)

    serve = commands.add_parser(
        "serve", help="run the local topic server",
        description="Run the local topic server until interrupted"
        " (the same command as python -m ydb_topic_async.testing).",
    )
    add_serve_arguments(serve)
    serve.set_defaults(usage=serve)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value

