"""A missing optional package fails one way wherever the SDK uses it: ``MissingDependencyError``
(also an ``ImportError``, so ``except ImportError`` keeps working), naming the missing module and
the extra that installs it. Each case runs in a fresh interpreter where the package cannot be
imported or found, as if it were not installed (a module imported at the top fails only on first
import)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

import ydb_topic_async as yta

pytestmark = pytest.mark.timeout(120)

BLOCK = textwrap.dedent(
    """
    import json, sys

    BLOCKED = {blocked!r}

    for loaded in [m for m in sys.modules if m.split(".")[0] == BLOCKED]:
        del sys.modules[loaded]
    sys.modules[BLOCKED] = None  # importing it fails, and find_spec finds nothing: not installed

    import ydb_topic_async as yta

    def run():
    {code}

    try:
        run()
    except SystemExit as exc:  # a program reports it so
        print(json.dumps({{"kind": "SystemExit", "message": str(exc.code)}}))
    except ImportError as exc:
        print(json.dumps({{
            "kind": type(exc).__name__, "missing": isinstance(exc, yta.MissingDependencyError),
            "usage": isinstance(exc, yta.UsageError), "message": str(exc), "name": exc.name,
            "extra": getattr(exc, "extra", None),
        }}))
    else:
        print(json.dumps({{"kind": "nothing raised"}}))
    """
)

CASES = {
    # place: (the package refused, the extra that installs it, what uses it)
    "fastapi integration": ("fastapi", "fastapi", "import ydb_topic_async.integrations.fastapi"),
    "aiohttp integration": ("aiohttp", "aiohttp", "import ydb_topic_async.integrations.aiohttp"),
    "FastStream broker": ("faststream", "faststream", "import ydb_topic_async.faststream"),
    "FastStream's FastAPI router": ("fastapi", "fastapi", "import ydb_topic_async.faststream.fastapi"),
    "spark without pyspark": ("pyspark", "spark", "import ydb_topic_async.spark"),
    "spark without pyarrow": ("pyarrow", "spark", "import ydb_topic_async.spark"),
    "tracing": ("opentelemetry", "otel", "yta.OpenTelemetryTracing()"),
    "OpenTelemetry metrics": ("opentelemetry", "otel", "yta.OpenTelemetryMetrics()"),
    "service account key": ("jwt", "cloud", "yta.ServiceAccountCredentials('sa', 'key', 'not used')"),
    "metadata credentials": ("httpx", "cloud", "yta.MetadataUrlCredentials()"),
    "testing token services": (
        "cryptography", "cloud", "from ydb_topic_async.testing import IamTokenService; IamTokenService().create_key()"
    ),
}


def _run(blocked: str, code: str) -> dict[str, object]:
    script = BLOCK.format(blocked=blocked, code=textwrap.indent(code, "    "))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


@pytest.mark.parametrize("place", list(CASES))
def test_a_missing_package_is_one_error_naming_its_extra(place: str) -> None:
    blocked, extra, code = CASES[place]
    if place == "spark without pyarrow" and not _installed("pyspark"):
        pytest.skip("pyspark is not installed either, so the error names pyspark (the case above)")
    result = _run(blocked, code)
    assert result["kind"] == "MissingDependencyError", result
    assert result["missing"] is True and result["usage"] is True  # and an ImportError: it was caught as one
    assert (result["name"], result["extra"]) == (blocked, extra)
    message = str(result["message"])
    assert f"({blocked} is missing)" in message
    assert f'pip install -e ".[{extra}]"' in message and f"ydb-topic-async[{extra}]" in message


FASTSTREAM_EXTRAS = {
    # place: (the package refused, FastStream's extra that installs it, what uses it)
    "FastStream's OpenTelemetry middleware": (
        "opentelemetry", "otel", "import ydb_topic_async.faststream.opentelemetry"
    ),
    "FastStream's Prometheus middleware": (
        "prometheus_client", "prometheus", "import ydb_topic_async.faststream.prometheus"
    ),
}


@pytest.mark.parametrize("place", list(FASTSTREAM_EXTRAS))
def test_a_missing_package_of_a_faststream_extra_names_that_extra(place: str) -> None:
    """FastStream's telemetry middlewares need packages of FastStream's own extras, which no extra
    of this package installs: the error names FastStream's."""
    blocked, extra, code = FASTSTREAM_EXTRAS[place]
    result = _run(blocked, code)
    assert result["kind"] == "MissingDependencyError", result
    assert result["missing"] is True and result["usage"] is True
    assert (result["name"], result["extra"]) == (blocked, None)
    message = str(result["message"])
    assert f"({blocked} is missing)" in message and f"pip install 'faststream[{extra}]'" in message


def test_the_demo_says_which_extra_it_needs_before_it_starts() -> None:
    result = _run("pyspark", "from ydb_topic_async.demo.__main__ import main; main([])")
    assert result["kind"] == "SystemExit", result
    assert "(pyspark is missing)" in str(result["message"]) and "ydb-topic-async[spark]" in str(result["message"])


def test_the_error_is_an_import_error_with_the_module_and_the_extra() -> None:
    error = yta.MissingDependencyError("x needs y", name="y", extra="cloud")
    assert isinstance(error, ImportError) and isinstance(error, yta.UsageError)
    assert (error.name, error.extra, str(error)) == ("y", "cloud", "x needs y")
