"""setup.py's build of the compiled core: what it keeps between pip's runs, and the compile
it starts early (docs/architecture.md, "The compiled core")."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import pytest

from tests.helpers import ROOT

pytest.importorskip("mypyc.build", reason="mypy is a dev dependency")


def setup_module_parts() -> ModuleType:
    spec = importlib.util.spec_from_file_location("schedcli_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # setup() runs only as __main__
    return module


@pytest.fixture
def build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.chdir(tmp_path)  # build/ is relative to where pip runs setup.py
    monkeypatch.delenv("SCHEDCLI_PREBUILD", raising=False)
    return setup_module_parts()


def test_extensions_kept_from_another_build_environment_are_not_reused(
    build: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # They name that environment's mypyc headers, which pip has deleted: reused, the
    # group failed to compile on every reinstall with unchanged sources.
    import mypyc.build

    assert build._runtime_headers() == mypyc.build.include_dir()
    core = build._compiled_spec()
    first = build._key(core)
    monkeypatch.setattr(build, "_runtime_headers", lambda: "/tmp/pip-build-env-other/lib-rt")
    assert build._key(core) != first


@pytest.mark.parametrize(
    ("argv", "describing"),
    [
        (["setup.py", "egg_info"], True),  # pip: requirements for the build
        (["setup.py", "dist_info", "--output-dir", "/tmp/x", "--keep-egg-info"], True),
        (["setup.py", "editable_wheel", "--dist-dir", "/tmp/x"], False),
        (["setup.py", "bdist_wheel", "--dist-dir", "/tmp/x"], False),
        (["setup.py", "build_ext", "--inplace"], False),
        (["setup.py", "--verbose", "egg_info"], True),
        (["setup.py"], False),
    ],
)
def test_only_the_runs_that_describe_the_package_leave_the_compile_to_the_background(
    build: ModuleType, monkeypatch: pytest.MonkeyPatch, argv: list[str], describing: bool
) -> None:
    monkeypatch.setattr("sys.argv", argv)
    assert build._describing() is describing


def finish_prebuild(
    build: ModuleType, key: str, written: str, hold: float, release: threading.Event | None = None
) -> threading.Thread:
    """Stands in for the background compile: holds the lock for `hold` seconds (or until
    `release`), then leaves `done` reading `written`."""
    prebuilt = Path("build/prebuilt")
    (prebuilt / key / "lib").mkdir(parents=True)
    lock = open(prebuilt / f"{key}.lock", "wb")  # noqa: SIM115 - released by the thread
    fcntl.flock(lock, fcntl.LOCK_EX)

    def compile_then_release() -> None:
        (release or threading.Event()).wait(hold)
        (prebuilt / key / "done").write_text(written)
        lock.close()

    thread = threading.Thread(target=compile_then_release)
    thread.start()
    return thread


def test_the_build_waits_for_the_early_compile_and_takes_what_it_finished(
    build: ModuleType,
) -> None:
    thread = finish_prebuild(build, "k1", written="k1", hold=0.3)
    lib = build.prebuilt_lib("k1")
    assert lib == Path("build/prebuilt/k1/lib")
    assert (lib.parent / "done").exists()  # read after the compile let go, not before
    thread.join()


def test_the_build_compiles_itself_when_the_early_compile_did_not_finish_for_its_key(
    build: ModuleType,
) -> None:
    assert build.prebuilt_lib("k1") is None  # none started
    finish_prebuild(build, "k2", written="", hold=0).join()  # ended without finishing
    assert build.prebuilt_lib("k2") is None
    finish_prebuild(build, "k3", written="k2", hold=0).join()  # another key's output
    assert build.prebuilt_lib("k3") is None


def test_the_background_compile_is_its_own_and_never_waits_on_itself(
    build: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    thread = finish_prebuild(build, "k1", written="k1", hold=30, release=release)
    monkeypatch.setenv("SCHEDCLI_PREBUILD", "k1")
    assert build.prebuilt_lib("k1") is None  # returned while the lock is still held
    assert thread.is_alive()
    release.set()
    thread.join()


def test_a_new_install_forgets_finished_prebuilds_of_other_keys_but_not_running_ones(
    build: ModuleType,
) -> None:
    finish_prebuild(build, "old", written="old", hold=0).join()
    release = threading.Event()
    running = finish_prebuild(build, "busy", written="busy", hold=30, release=release)
    build._PREBUILT.mkdir(parents=True, exist_ok=True)
    build._forget_other_prebuilds("new")
    left = sorted(p.name for p in Path("build/prebuilt").iterdir())
    assert left == ["busy", "busy.lock"]
    release.set()
    running.join()


class FakeCompile:
    """Stands in for subprocess.Popen: keeps the descriptors a child would inherit (their
    flocks with them) until ``exit``."""

    started: ClassVar[list[FakeCompile]] = []

    def __init__(self, args: list[str], **kwargs: object) -> None:
        self.args, self.env = args, kwargs["env"]
        pass_fds = kwargs["pass_fds"]
        assert isinstance(pass_fds, tuple)
        self.fds = [os.dup(fd) for fd in pass_fds]
        FakeCompile.started.append(self)

    def exit(self) -> None:
        for fd in self.fds:
            os.close(fd)


@pytest.fixture
def fake_compile(monkeypatch: pytest.MonkeyPatch) -> list[FakeCompile]:
    monkeypatch.delenv("SCHEDCLI_PREBUILD_OFF", raising=False)
    monkeypatch.setattr("subprocess.Popen", FakeCompile)
    FakeCompile.started = []
    return FakeCompile.started


def held(lock: Path) -> bool:
    with open(lock, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        return False


def test_the_first_describing_run_starts_one_compile_which_holds_its_lock_while_it_runs(
    build: ModuleType, fake_compile: list[FakeCompile]
) -> None:
    assert build._prebuild("k1")
    assert build._prebuild("k1")  # pip's metadata run: started already
    [child] = fake_compile
    assert "build_ext" in child.args and child.env["SCHEDCLI_PREBUILD"] == "k1"  # type: ignore[index]
    lock = Path("build/prebuilt/k1.lock")
    assert held(lock)
    build._forget_other_prebuilds("k2")  # another install meanwhile leaves it be
    assert held(lock)
    assert sorted(p.name for p in lock.parent.iterdir()) == ["k1.lock", "k1.log"]
    child.exit()
    assert not held(lock)
    assert build.prebuilt_lib("k1") is None  # ended without finishing: the build compiles


def test_a_compile_that_cannot_start_leaves_the_compiling_to_the_build(
    build: ModuleType, fake_compile: list[FakeCompile], monkeypatch: pytest.MonkeyPatch
) -> None:
    def cannot(*args: object, **kwargs: object) -> None:
        raise OSError("no processes left")

    monkeypatch.setattr("subprocess.Popen", cannot)
    assert not build._prebuild("k1")
    assert build.prebuilt_lib("k1") is None
    monkeypatch.setenv("SCHEDCLI_PREBUILD_OFF", "1")
    assert not build._prebuild("k2")
