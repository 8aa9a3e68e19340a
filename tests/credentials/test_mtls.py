"""Mutual TLS: a local server that requires client certificates, as YDB's
``client_certificate_authorization.client_certificate_required`` does
(ydb/docs/en/core/reference/configuration/client_certificate_authorization.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer

from ._pki import CertificateAuthority, Issued


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority()


@pytest.fixture(scope="module")
def client(ca: CertificateAuthority) -> Issued:
    return ca.issue("writer", server=False)


@pytest.fixture
async def server(ca: CertificateAuthority) -> AsyncIterator[LocalTopicServer]:
    issued = ca.issue("localhost", server=True)
    async with LocalTopicServer(
        tls=(issued.key, issued.cert), client_ca=ca.cert, require_client_cert=True, users={"alice": "secret"}
    ) as srv:
        yield srv


async def test_the_server_accepts_a_driver_with_a_client_certificate(
    server: LocalTopicServer, ca: CertificateAuthority, client: Issued
) -> None:
    """The login of static credentials goes over the same channels, certificate included."""
    async with yta.Driver(
        server.endpoint,
        server.database,
        yta.StaticCredentials("alice", "secret"),
        root_certificates=ca.cert,
        certificate_chain=client.cert,
        private_key=client.key,
    ) as driver:
        await driver.wait_ready(timeout=10)
        await driver.topic.create_topic("mutual", consumers=["c"])
        async with driver.topic.writer("mutual", producer_id="p") as writer:
            await writer.write_with_ack(b"over mutual TLS")
        async with driver.topic.reader("mutual", consumer="c") as reader:
            assert (await reader.receive_message(timeout=10)).data == b"over mutual TLS"


async def test_the_server_rejects_a_driver_without_one_with_a_clear_error(
    server: LocalTopicServer, ca: CertificateAuthority
) -> None:
    async with yta.Driver(
        server.endpoint, server.database, root_certificates=ca.cert, discovery=False,
        retry=yta.RetryPolicy.no_retries(),
    ) as driver:
        with pytest.raises(yta.ConnectionLostError) as failure:
            await driver.topic.describe_topic("mutual", timeout=10)
    text = str(failure.value)
    assert "the server closed the TLS connection: if it requires a client certificate" in text
    assert "certificate_chain and private_key" in text


async def test_a_certificate_of_another_authority_is_rejected(
    server: LocalTopicServer, ca: CertificateAuthority
) -> None:
    stranger = CertificateAuthority("another CA").issue("intruder", server=False)
    async with yta.Driver(
        server.endpoint, server.database, root_certificates=ca.cert, certificate_chain=stranger.cert,
        private_key=stranger.key, discovery=False, retry=yta.RetryPolicy.no_retries(),
    ) as driver:
        with pytest.raises(yta.ConnectionLostError):
            await driver.topic.describe_topic("mutual", timeout=10)


def test_client_certificate_options_are_checked(client: Issued) -> None:
    with pytest.raises(yta.InvalidArgumentError, match="needs both certificate_chain and private_key"):
        yta.Driver("grpcs://127.0.0.1:2135", "/local", certificate_chain=client.cert)
    with pytest.raises(yta.InvalidArgumentError, match="needs a TLS endpoint"):
        yta.Driver("grpc://127.0.0.1:2136", "/local", certificate_chain=client.cert, private_key=client.key)
    with pytest.raises(yta.InvalidArgumentError, match="private_key must be PEM bytes"):
        yta.Driver("grpcs://127.0.0.1:2135", "/local", certificate_chain=client.cert, private_key=b"not a key")


def test_the_server_checks_its_options(client: Issued) -> None:
    with pytest.raises(ValueError, match="client certificates need TLS"):
        LocalTopicServer(client_ca=client.cert)
    with pytest.raises(ValueError, match="require_client_cert needs client_ca"):
        LocalTopicServer(tls=(client.key, client.cert), require_client_cert=True)
