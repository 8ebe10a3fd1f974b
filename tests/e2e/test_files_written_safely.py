"""Files written safely: --json, --junit, --report and the run store never write through a
symlink planted at any name a run writes; a store or a --json target that fills up during
a run ends it with one line and exit 3, and the judged cells are written where they can be
(the other of the two, or stdout)."""

import json
import os
import pwd
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.helpers import assert_left_nothing, run_testbed

pytestmark = pytest.mark.e2e

ONE = ["--ops", "5", "-s", "retry-only", "-b", "none"]
TWO = ["--ops", "10", "-s", "retry-only", "-b", "none", "-b", "after-effect"]
SECRET = b"root's own, 0600\n"


def umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_symlinks_planted_in_a_world_writable_directory_are_replaced_never_followed(workdir: Path) -> None:
    """A symlink to a root-owned 0600 file, planted by another user at every name the run
    writes: the files themselves and the temp names a run used to write them through."""
    shared = workdir / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone may add a name; not sticky, so the kernel's symlink protection is off
    secret = workdir / "secret"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    owner = secret.stat()

    def plant(directory: Path, *names: str) -> list[Path]:
        planted = []
        for name in names:
            for path in (directory / name, directory / f"{name}.tmp"):
                path.symlink_to(secret)
                if os.geteuid() == 0:
                    nobody = pwd.getpwnam("nobody")
                    os.lchown(path, nobody.pw_uid, nobody.pw_gid)
                planted.append(path)
        return planted

    plant(shared, "results.json", "junit.xml", "check.xml")
    args = [*ONE, "--json", str(shared / "results.json"), "--junit", str(shared / "junit.xml")]
    ran = run_testbed(args, workdir)
    assert ran.code == 0, ran.stderr
    run = workdir / "runs" / json.loads((shared / "results.json").read_text())["run"]
    plant(run, "report.html")
    assert run_testbed([str(run)], workdir, command="report").code == 0
    checked = run_testbed([str(run), "--junit", str(shared / "check.xml")], workdir, command="check")
    assert checked.code == 0, checked.stderr

    assert secret.read_bytes() == SECRET
    assert (stat.S_IMODE(secret.stat().st_mode), secret.stat().st_uid) == (0o600, owner.st_uid)
    for written in (shared / "results.json", shared / "junit.xml", shared / "check.xml", run / "report.html"):
        mode = written.lstat().st_mode
        assert stat.S_ISREG(mode) and stat.S_IMODE(mode) == 0o666 & ~umask(), written
        assert written.with_name(written.name + ".tmp").resolve() == secret  # passed over, left as it was
    assert sorted(p.name for p in shared.iterdir() if not p.name.endswith(".tmp")) == [
        "check.xml",
        "junit.xml",
        "results.json",
    ]  # no temp file left behind
    assert_left_nothing(ran)


@pytest.fixture
def small_disk(workdir: Path) -> Iterator[Path]:
    """A 200 KiB tmpfs (mounting needs root, as CI has: skipped where it is not allowed)."""
    mount = workdir / "small"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    yield mount
    if subprocess.run(["umount", str(mount)]).returncode != 0:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


def fill(disk: Path, leave: int = 0) -> None:
    """Takes the disk's space but `leave` bytes."""
    with open(disk / "filler", "wb") as out:
        while (free := os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize) > leave:
            try:
                out.write(b"\0" * min(4096, free - leave))
                out.flush()
            except OSError:
                break


def last_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    return stderr.strip().splitlines()[-1]


def test_a_store_that_fills_keeps_the_judged_cells_at_the_json_path(workdir: Path, small_disk: Path) -> None:
    """Room for the history, not for the provider's log: every cell is judged, the store fails as
    the run keeps its files, and results.json at --json holds the cells, marked incomplete."""
    fill(small_disk, leave=36 * 1024)
    store = small_disk / "runs"
    ran = run_testbed([*TWO, "--store", str(store)], workdir)
    assert ran.code == 3, ran.stderr
    run_id = next(store.iterdir()).name
    shown = store.relative_to(workdir) / run_id  # the run's working directory is `workdir`
    said = re.escape(f"testbed: error: cannot write {shown}/") + r"\S+: No space left on device"
    said += r" \(\d cell\(s\) judged, \d not run, written to " + re.escape(f"{workdir / 'results.json'})")
    assert re.fullmatch(said, last_line(ran.stderr)), ran.stderr
    results = ran.json
    assert results["incomplete"] is True and results["verdict"] == "incomplete"
    assert results["failure"].startswith(f"cannot write {shown}/")
    assert len(results["rows"]) + len(results["notRun"]) == 2 and all(r["verdict"] == "pass" for r in results["rows"])
    listed = run_testbed(["--store", str(store)], workdir, command="runs")
    assert listed.stdout.splitlines()[1].split()[:5] == [run_id, "?", "?", "?", "interrupted"]
    assert_left_nothing(ran)


def test_a_json_target_that_is_full_leaves_the_results_in_the_store(workdir: Path, small_disk: Path) -> None:
    fill(small_disk)
    target = small_disk / "results.json"
    ran = run_testbed([*TWO, "--json", str(target)], workdir)
    assert ran.code == 3, ran.stderr
    run = next((workdir / "runs").glob("2*"))
    written = Path("runs") / run.name / "results.json"
    assert last_line(ran.stderr) == (
        f"testbed: error: cannot write {target.relative_to(workdir)}: No space left on device"
        f" (2 cell(s) judged, 0 not run, written to {written})"
    )
    stored = json.loads((run / "results.json").read_text())
    assert stored["verdict"] == "pass" and len(stored["rows"]) == 2  # the stored run is whole
    assert run_testbed(["latest"], workdir, command="check").code == 0
    assert not target.exists() and sorted(p.name for p in small_disk.iterdir()) == ["filler"]
    assert_left_nothing(ran)


def test_with_nowhere_to_write_the_results_go_to_stdout(workdir: Path, small_disk: Path) -> None:
    """The store and --json on one full disk: the store fails with the history's first write."""
    fill(small_disk)
    ran = run_testbed([*TWO, "--store", str(small_disk / "runs"), "--json", str(small_disk / "r.json")], workdir)
    assert ran.code == 3, ran.stderr
    line = last_line(ran.stderr)
    assert re.fullmatch(
        r"testbed: error: cannot write \S+/history\.jsonl: No space left on device;"
        r" cannot write small/r\.json: No space left on device"
        r" \(\d cell\(s\) judged, \d not run, written to stdout\)",
        line,
    ), line
    results = json.loads(ran.stdout)
    assert results["verdict"] == "incomplete" and "history.jsonl: No space left on device" in results["failure"]
    assert len(results["rows"]) + len(results["notRun"]) == 2
    assert_left_nothing(ran)
