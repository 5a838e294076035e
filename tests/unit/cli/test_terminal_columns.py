"""cli/app.terminal_columns: shutil.get_terminal_size().columns without importing shutil."""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import sys
import termios

import pytest

from healthcheck.cli.app import terminal_columns


class _Stdout:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


@pytest.fixture(params=["pty", "pipe", "none"])
def stdout(request, monkeypatch):
    if request.param == "none":
        monkeypatch.setattr(sys, "__stdout__", None)
        yield
        return
    if request.param == "pty":
        keep, fd = os.openpty()
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 37, 133, 0, 0))
    else:
        keep, fd = os.pipe()
    monkeypatch.setattr(sys, "__stdout__", _Stdout(fd))
    yield
    os.close(keep)
    os.close(fd)


@pytest.mark.parametrize("columns", [None, "", "0", "-3", "+90", " 77 ", "abc", "120", "1e3"])
def test_the_width_is_shutils(monkeypatch, stdout, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.delenv("LINES", raising=False)
    assert terminal_columns() == shutil.get_terminal_size().columns
