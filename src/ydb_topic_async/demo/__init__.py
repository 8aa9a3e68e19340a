"""The demo job: ``python -m ydb_topic_async.demo``."""
