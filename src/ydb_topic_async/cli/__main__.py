"""``python -m ydb_topic_async.cli``."""

from . import main

raise SystemExit(main())
