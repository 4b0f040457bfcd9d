"""Progress in a log: when stderr is not a terminal, a bar is a log line every few seconds with
the count, rate and time left (spectrag.util.console.LogBar)."""

from __future__ import annotations

import io
import logging

import pytest
from tqdm import tqdm

from spectrag.util import console


@pytest.fixture
def lines():
    got: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            got.append(record.getMessage())

    handler, level = Keep(), console.LOGGER.level
    console.LOGGER.addHandler(handler)
    console.LOGGER.setLevel(logging.INFO)
    yield got
    console.LOGGER.removeHandler(handler)
    console.LOGGER.setLevel(level)


def test_log_bar_logs_count_rate_and_time_left(lines):
    with console.LogBar(total=4, desc="embed", unit=" chunks", every=0.0) as shown:
        for _ in range(4):
            shown.update(1)
    assert lines[0].startswith("embed: 1/4 chunks (25%), ") and "chunks/s" in lines[0] and "left" in lines[0]
    assert any(line.startswith("embed: 3/4 chunks (75%)") for line in lines)
    assert lines[-1].startswith("embed: 4/4 chunks (100%)") and lines[-1].endswith("in all")


def test_log_bar_is_quiet_for_a_stage_shorter_than_its_interval(lines):
    with console.LogBar(total=2, desc="quick", every=60.0) as shown:
        shown.update(2)
    assert lines == []


def test_log_bar_names_the_running_step_and_slow_rates(lines):
    shown = console.LogBar(total=3, desc="graph", unit=" steps", every=0.0)
    shown.set_postfix_str("entity")
    shown.start_t -= 10.0  # the first step took 10 s: a rate below one a second
    shown.update(1)
    shown.close()
    assert "graph: 1/3 steps (33%) [entity], 10.0 s per steps, about 20 s left" in lines[0]
    assert console.duration(42) == "42 s" and console.duration(185) == "3 min 5 s" and console.duration(7800) == "2 h 10 min"


def test_bar_is_a_tqdm_bar_on_a_terminal_and_log_lines_elsewhere(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    with console.showing(True):
        assert isinstance(console.bar(total=1, file=io.StringIO()), console.LogBar)
        on_tty = console.bar(total=1, file=Tty())
        assert isinstance(on_tty, tqdm) and not isinstance(on_tty, console.LogBar) and not on_tty.disable
    off = console.bar(total=1, file=io.StringIO())  # outside showing(): nothing
    assert off.disable and not isinstance(off, console.LogBar)
    assert isinstance(console.bar(total=1, file=io.StringIO(), show=True), console.LogBar)


def test_root_logger_quiet_emits_nothing_and_leaves_the_root_logger_as_it_was(capsys):
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    root.handlers = []  # unconfigured, as in a user's script: logging.warning() would call basicConfig()
    try:
        with console.root_logger_quiet():
            logging.warning("advice nobody asked for")
        assert root.handlers == [] and root.level == level
    finally:
        root.handlers = saved
    assert "advice nobody asked for" not in capsys.readouterr().err
