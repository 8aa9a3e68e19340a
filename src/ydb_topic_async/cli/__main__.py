"""``python -m ydb_topic_async.cli``."""

from .main import main

raise SystemExit(main())
