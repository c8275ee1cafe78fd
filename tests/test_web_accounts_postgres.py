"""The accounts tests of tests/test_web_accounts.py against a real PostgreSQL server: a throwaway
cluster (`mascot.testing.postgres`, from Debian's `postgresql` package) started once for the
module, with a fresh database for each test. Opt-in: `make test-postgres` (marker `postgres`)."""

from __future__ import annotations

import itertools

import pytest

from mascot.testing.postgres import create_database, throwaway_cluster
from tests import test_web_accounts
from tests.test_web_accounts import *  # noqa: F401,F403  (the same tests, collected here again)

pytestmark = pytest.mark.postgres
_numbers = itertools.count()


@pytest.fixture(scope="module")
def cluster():
    try:
        with throwaway_cluster() as url:
            yield url
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def database_url(cluster):
    """A fresh database on the cluster for each test."""
    return create_database(cluster, f"t{next(_numbers)}")


def test_the_module_runs_every_accounts_test():
    ours = {name for name in globals() if name.startswith("test_")}
    theirs = {name for name in vars(test_web_accounts) if name.startswith("test_")}
    assert theirs <= ours
