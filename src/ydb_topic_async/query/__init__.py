"""Query sessions and transactions: ``driver.query``.

    async with driver.query.transaction() as tx:
        writer = driver.topic.tx_writer(tx, "output")
        await writer.write(b"published when tx commits")
"""

from .client import QueryClient
from .session_pool import QuerySession, SessionPool
from .transaction import AfterHook, BeforeHook, Transaction, TransactionState

__all__ = [
    "AfterHook",
    "BeforeHook",
    "QueryClient",
    "QuerySession",
    "SessionPool",
    "Transaction",
    "TransactionState",
]
