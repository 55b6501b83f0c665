"""pytest-abbench's entry point: options and registration, nothing heavy.

pytest imports this module at start-up, so it imports only the option
declarations; the session's hooks, fixtures and everything behind them are
imported in ``pytest_configure``, and never torch or triton (only the cell
child imports those).
"""

from __future__ import annotations

import pytest

from pytest_abbench.session.options import register


def pytest_addoption(parser: pytest.Parser) -> None:
    register(parser)


def pytest_configure(config: pytest.Config) -> None:
    from pytest_abbench.session import fixtures
    from pytest_abbench.session.campaign_session import CELL_MARK, SESSION_KEY, AbbenchSession
    from pytest_abbench.session.collection import CollectionHooks
    from pytest_abbench.session.options import resolve
    from pytest_abbench.session.reporting import ReportHooks

    config.addinivalue_line("markers", f"{CELL_MARK}(campaign, op): a cell test: pytest-abbench parametrizes it "
                                       "over the rounds and sides of that campaign file's op")
    session = AbbenchSession(config, resolve(config))
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "abbench-session")
    config.pluginmanager.register(CollectionHooks(session), "abbench-collection")
    config.pluginmanager.register(ReportHooks(session), "abbench-reporting")
    config.pluginmanager.register(fixtures, "abbench-fixtures")
    if config.pluginmanager.hasplugin("xdist"):
        from pytest_abbench.session.xdist_hooks import XdistHooks

        config.pluginmanager.register(XdistHooks(session), "abbench-xdist")
    else:  # cells carry xdist's group mark; without xdist (-p no:xdist) it would warn on every run
        config.addinivalue_line("markers", "xdist_group(name): under pytest-xdist, the cells of one op stay together")


def pytest_unconfigure(config: pytest.Config) -> None:
    from pytest_abbench.session.campaign_session import SESSION_KEY

    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.root.release()
