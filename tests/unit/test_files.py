"""The one way the lab writes its user's files (testbed.store.files): whole or not at all,
under a temp name nobody can guess that is created new, renamed over its place; never
through a symlink planted at a temp name or at the file's own name."""

import os
import resource
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.store import files
from testbed.store.files import Unwritable
from tests.support.helpers import horse

SECRET = b"root's own\n"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file someone wants overwritten (0600, outside the directory written to)."""
    path = tmp_path / "secret"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


@pytest.fixture
def umask() -> Iterator[int]:
    """Writes under a umask of the test's choosing (restored after)."""
    before = os.umask(0o027)
    yield 0o027
    os.umask(before)


def names(path: Path, count: int) -> list[Path]:
    """The temp names a writer tries, made predictable: for a test to plant something at each."""
    return [path.with_name(f".{path.name}.{n:016x}.tmp") for n in range(count)]


def predictable(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    tried = iter(names(target, files._TRIES))
    monkeypatch.setattr(files, "temp_name", lambda path: next(tried))


def listing(directory: Path) -> dict[str, str]:
    return {p.name: ("link" if p.is_symlink() else "file") for p in directory.iterdir()}


def test_a_file_is_written_whole_with_the_mode_a_new_file_gets(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "results.json"
    target.write_text("the last run's\n")
    target.chmod(0o600)
    with files.replaced(target) as out:
        out.write(b"{}\n")
    assert target.read_bytes() == b"{}\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    assert listing(tmp_path) == {"results.json": "file"}  # no temp left


def test_a_symlink_planted_at_the_files_own_name_is_replaced_not_followed(tmp_path: Path, secret: Path) -> None:
    target = tmp_path / "results.json"
    target.symlink_to(secret)
    with files.replaced(target) as out:
        out.write(b"{}\n")
    assert secret.read_bytes() == SECRET and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert not target.is_symlink() and target.read_bytes() == b"{}\n"


def test_what_is_not_a_regular_file_at_the_files_own_name_is_never_replaced(tmp_path: Path) -> None:
    """A FIFO (or a device, or /dev/stdout's link to a descriptor) that came there meanwhile: kept, nothing left."""
    target = tmp_path / "results.json"
    os.mkfifo(target)
    refused = pytest.raises(Unwritable, match=r"results\.json: a FIFO, not a regular file: never replaced$")
    with refused, files.replaced(target) as out:
        out.write(b"{}\n")
    assert stat.S_ISFIFO(target.lstat().st_mode) and listing(tmp_path) == {"results.json": "file"}


@pytest.mark.parametrize(
    ("name", "held"),
    [
        ("/dev/stdout", "a link to a descriptor of the process (/proc/self/fd/1)"),
        ("/dev/null", "a device"),
        ("/", "a directory"),
    ],
)
def test_what_a_rename_must_not_replace_is_named(name: str, held: str) -> None:
    assert files.occupant(Path(name)) == held


def test_nothing_a_regular_file_or_a_link_to_one_may_be_replaced(tmp_path: Path, secret: Path) -> None:
    (tmp_path / "link").symlink_to(secret)
    (tmp_path / "dangling").symlink_to(tmp_path / "none")
    assert [files.occupant(tmp_path / n) for n in ("none", "link", "dangling")] == [None, None, None]
    assert files.occupant(secret) is None


def test_every_temp_name_taken_is_passed_over_never_opened(
    tmp_path: Path, secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A symlink, a file and a directory at the first names the writer tries: it writes under the next."""
    target = tmp_path / "junit.xml"
    tried = names(target, files._TRIES)
    for name in tried[:-3]:
        name.symlink_to(secret)
    tried[-3].write_bytes(b"someone's")
    tried[-2].mkdir()
    predictable(monkeypatch, target)
    with files.replaced(target) as out:
        out.write(b"<testsuites/>")
    assert secret.read_bytes() == SECRET and tried[-3].read_bytes() == b"someone's"
    assert all(name.is_symlink() and name.resolve() == secret for name in tried[:-3])
    assert target.read_bytes() == b"<testsuites/>" and not tried[-1].exists()


def test_with_every_temp_name_taken_nothing_is_written_anywhere(
    tmp_path: Path, secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "results.json"
    for name in names(target, files._TRIES):
        name.symlink_to(secret)
    target.symlink_to(secret)
    predictable(monkeypatch, target)
    taken = r"^cannot write .*results\.json: 100 temp names beside it were taken$"
    with pytest.raises(Unwritable, match=taken), files.replaced(target) as out:
        out.write(b"{}\n")
    assert secret.read_bytes() == SECRET and target.is_symlink()


def test_a_write_that_fails_leaves_nothing_and_the_old_file_as_it_was(tmp_path: Path) -> None:
    """The file system refuses the write (a file size limit, as a full disk would): Unwritable, one line."""
    target = tmp_path / "results.json"
    target.write_bytes(b"the last run's")

    def write_past_the_limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            with files.replaced(target) as out:
                out.write(b"x" * 8192)
        except Unwritable as exc:
            assert str(exc) == f"cannot write {target}: File too large", exc
        else:
            raise AssertionError("the write went past the limit")

    assert horse(write_past_the_limit) == 0
    assert target.read_bytes() == b"the last run's" and listing(tmp_path) == {"results.json": "file"}


def test_an_error_in_the_writer_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_bytes(b"old")
    with pytest.raises(ZeroDivisionError), files.replaced(target) as out:
        out.write(b"half")
        _ = 1 / 0
    assert target.read_bytes() == b"old" and listing(tmp_path) == {"report.html": "file"}


def test_a_file_written_as_the_run_goes_is_made_new_never_through_a_symlink(tmp_path: Path, secret: Path) -> None:
    planted = tmp_path / "history.jsonl"
    planted.symlink_to(secret)
    with pytest.raises(Unwritable, match=r"history\.jsonl: File exists$"):
        files.created(planted)
    assert secret.read_bytes() == SECRET
    with files.created(tmp_path / "records.jsonl") as out:
        out.write("{}\n")
    assert (tmp_path / "records.jsonl").read_text() == "{}\n"


def test_a_probe_leaves_nothing(tmp_path: Path) -> None:
    files.probe(tmp_path / "results.json")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(Unwritable, match="No such file or directory"):
        files.probe(tmp_path / "gone" / "results.json")
