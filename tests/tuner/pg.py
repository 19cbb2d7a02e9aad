"""A private PostgreSQL cluster a test may restart and stop (the shared one of .ci/postgres.sh must stay up).

Debian's server binaries, run as the `postgres` user with trust auth on 127.0.0.1 and a free port, the way
.ci/postgres.sh starts CI's. `private_pg()` skips the test where there are no binaries or no root.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


def _bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    return Path(found[-1]) if found and (Path(found[-1]) / "pg_ctl").exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivatePg:
    def __init__(self, bin_dir: Path, root: Path, port: int) -> None:
        self.bin_dir, self.root, self.port = bin_dir, root, port
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/pagetune"
        self.mlflow_url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/pagetune_mlflow"

    def _as_postgres(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["su", "postgres", "-s", "/bin/sh", "-c", " ".join(args)], check=check,
                              capture_output=True, text=True)

    def _ctl(self, *args: str) -> None:
        self._as_postgres(str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-l", str(self.root / "log"),
                          "-w", *args)

    def init(self) -> None:
        self._as_postgres(str(self.bin_dir / "initdb"), "-D", str(self.root / "data"), "-A", "trust", "-U",
                          "postgres")
        self.start()
        for db in ("pagetune", "pagetune_mlflow"):
            self._as_postgres(str(self.bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), db)

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=100"
        self._ctl("-o", f"'{opts}'", "start")

    def stop(self) -> None:
        self._ctl("-m", "fast", "stop")

    def restart(self) -> None:
        self._ctl("-m", "fast", "restart")

    def stop_for(self, seconds: float) -> float:
        """Stop the server, start it again `seconds` later; how long it was away (s)."""
        begin = time.monotonic()
        self.stop()
        time.sleep(max(0.0, seconds - (time.monotonic() - begin)))
        self.start()
        return time.monotonic() - begin

    def destroy(self) -> None:
        self._as_postgres(str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "stop",
                          check=False)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def private_pg():
    bin_dir = _bin()
    if bin_dir is None or os.geteuid() != 0 or shutil.which("su") is None:
        pytest.skip("needs PostgreSQL's server binaries (/usr/lib/postgresql/*/bin) and root")
    root = Path(tempfile.mkdtemp(prefix="pagetune-pg-"))
    shutil.chown(root, "postgres")
    root.chmod(0o700)
    pg = PrivatePg(bin_dir, root, _free_port())
    try:
        pg.init()
        yield pg
    finally:
        pg.destroy()
