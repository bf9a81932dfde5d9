"""Search options known without importing Optuna: the sampler registry, the heartbeat default and
the --storage URL checks.

``dmlbench list samplers``, ``dmlbench run --help`` and config validation read these; the samplers
themselves are built by :func:`benchmark.search.study.make_sampler`.
"""

from __future__ import annotations

from benchmark.errors import ConfigError
from benchmark.registry import Registry

SAMPLERS: Registry[str] = Registry("sampler")
for _name, _doc in [
    ("gp", "Gaussian-process BO with log-EI (Optuna GPSampler), mirroring MLRC's Ax/BoTorch"),
    ("tpe", "Tree-structured Parzen estimator (Optuna TPESampler)"),
    ("random", "Uniform random search (Optuna RandomSampler)"),
]:
    SAMPLERS.register(_name, _doc)

#: Seconds between heartbeats of a running trial in a shared database (``--heartbeat``).
DEFAULT_HEARTBEAT_S = 30


def is_database_url(url: str | None) -> bool:
    """Whether ``url`` names a database (SQLAlchemy URL) rather than the embedded journal."""
    return url is not None and "://" in url


def redact_url(url: str) -> str:
    """``url`` without its password (for messages and run records)."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        cred, host = rest.rsplit("@", 1)
        return f"{scheme}://{cred.split(':', 1)[0]}@{host}"
    return url


def check_storage_url(url: str | None) -> None:
    """Reject a ``--storage`` value that is not an SQLAlchemy URL with an installed driver.

    Needs SQLAlchemy (and the dialect's driver) but neither Optuna nor torch, so ``dmlbench run``
    checks it before importing them: a typo'd URL is reported in a fraction of a second.
    """
    if url is None:
        return
    if not is_database_url(url):
        raise ConfigError(
            f"--storage expects a database URL such as postgresql://user@host/db (or sqlite:///file.db), "
            f"got {url!r}. Leave it out to use the journal file in the run directory."
        )
    import sqlalchemy.engine  # ~0.2 s, only for a database URL; Optuna's own import would be seconds

    try:
        dialect = sqlalchemy.engine.make_url(url).get_dialect()
        dialect.import_dbapi()
    except ImportError as exc:
        raise ConfigError(
            f"--storage {url.split('://', 1)[0]}://... needs its database driver ({exc}); for PostgreSQL: "
            "pip install 'dmlbench[postgres]'."
        ) from exc
    except Exception as exc:  # SQLAlchemy's ArgumentError and friends: not a URL it understands
        raise ConfigError(
            f"--storage {redact_url(url)} is not a database URL SQLAlchemy understands: {exc}"
        ) from exc
