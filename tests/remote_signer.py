"""A small remote signer of our own, speaking the part of web3signer's eth1 API the platform uses:
``GET /upcheck``, ``GET /api/v1/eth1/publicKeys`` and ``POST /api/v1/eth1/sign/{identifier}``
(``{"data": "0x…"}``: the signature of ``keccak256(data)``, ``r || s || v`` with ``v`` 27 or 28, as
hex text). Its key comes from ``REMOTE_SIGNER_KEY``; it counts what it signed in
``GET /signed`` (ours, not web3signer's). Run as ``python -m tests.remote_signer PORT``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from coincurve import PrivateKey

from tests.waiting import eventually
from x402mw.evm.keccak import keccak256


def serve(port: int, key: bytes) -> None:
    private = PrivateKey(key)
    public = "0x" + private.public_key.format(compressed=False)[1:].hex()
    signed = 0

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: str, kind: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/upcheck":
                self._answer(200, "OK")
            elif self.path == "/api/v1/eth1/publicKeys":
                self._answer(200, json.dumps([public]), "application/json")
            elif self.path == "/signed":
                self._answer(200, str(signed))
            else:
                self._answer(404, "not found")

        def do_POST(self) -> None:
            nonlocal signed
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != f"/api/v1/eth1/sign/{public}":
                self._answer(404, "no such key")
                return
            try:
                data = bytes.fromhex(json.loads(body)["data"].removeprefix("0x"))
            except (ValueError, KeyError, TypeError):
                self._answer(400, "bad request")
                return
            signature = private.sign_recoverable(keccak256(data), hasher=None)
            signed += 1
            self._answer(200, "0x" + (signature[:64] + bytes([signature[64] + 27])).hex())

        def log_message(self, format: str, *args: Any) -> None:
            return

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


class RemoteSignerProcess:
    """The signer as a process on ``port`` holding ``key``; `stop` and `start` it again at will."""

    def __init__(self, port: int, key: bytes) -> None:
        self.port, self.key = port, key
        self.url = f"http://127.0.0.1:{port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = os.environ | {"REMOTE_SIGNER_KEY": self.key.hex()}
        self._process = process = subprocess.Popen(
            [sys.executable, "-m", "tests.remote_signer", str(self.port)], env=env
        )
        eventually(
            lambda: process.poll() is not None or httpx.get(self.url + "/upcheck", timeout=1).status_code == 200,
            what="the remote signer to answer",
        )
        assert process.poll() is None, "the remote signer exited"

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None

    def signed(self) -> int:
        """How many signatures it made since it started."""
        return int(httpx.get(self.url + "/signed", timeout=5).text)


@contextlib.contextmanager
def remote_signer(port: int, key: bytes) -> Iterator[RemoteSignerProcess]:
    signer = RemoteSignerProcess(port, key)
    signer.start()
    try:
        yield signer
    finally:
        signer.stop()


if __name__ == "__main__":
    serve(int(sys.argv[1]), bytes.fromhex(os.environ["REMOTE_SIGNER_KEY"]))
