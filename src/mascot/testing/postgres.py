"""A throwaway PostgreSQL cluster for tests and benchmarks, from Debian's `postgresql` package
(initdb and pg_ctl; run as the `postgres` user when the caller is root, as PostgreSQL refuses
root). Trust authentication on 127.0.0.1 only, no fsync: for tests, never for data.

    with throwaway_cluster() as url:          # postgresql://mascot@127.0.0.1:PORT
        database = create_database(url, "t1")  # postgresql://mascot@127.0.0.1:PORT/t1
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BIN = Path(os.environ.get("MASCOT_PG_BIN", "/usr/lib/postgresql/15/bin"))


def postgres_tool(name: str) -> str | None:
    return str(BIN / name) if (BIN / name).exists() else shutil.which(name)


def as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def throwaway_cluster(max_connections: int = 200) -> Iterator[str]:
    """Starts a cluster on a free port and yields its URL (no database part); stops and removes it after."""
    initdb, pg_ctl = postgres_tool("initdb"), postgres_tool("pg_ctl")
    if not initdb or not pg_ctl:
        raise FileNotFoundError("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    folder = Path(tempfile.mkdtemp(prefix="mascot-pg-"))  # under /tmp, readable by the postgres user
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    data, port = folder / "data", free_port()
    try:
        subprocess.run(as_postgres([initdb, "-D", str(data), "-A", "trust", "-U", "mascot", "--no-sync"]), check=True, capture_output=True)
        options = f"-p {port} -h 127.0.0.1 -k {folder} -F -c max_connections={max_connections}"
        subprocess.run(
            as_postgres([pg_ctl, "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start"]), check=True, capture_output=True
        )
        yield f"postgresql://mascot@127.0.0.1:{port}"
    finally:
        subprocess.run(as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def create_database(cluster_url: str, name: str) -> str:
    """A new, empty database on the cluster; its URL."""
    from sqlalchemy import create_engine, text

    engine = create_engine(f"{cluster_url.replace('postgresql://', 'postgresql+psycopg://')}/postgres", isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return f"{cluster_url}/{name}"
