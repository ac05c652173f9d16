"""Where the dev chain keeps its state: py-evm's key-value database as an append-only log file.

:class:`ChainStore` is the database py-evm writes its blocks, state tries and receipts into. It
holds every value in memory, as py-evm's in-memory database does, and :meth:`ChainStore.commit`
appends the changes made since the last commit to the log as one checksummed frame. The dev chain
commits after sealing each block, before anyone sees its receipts, so the file always holds the
chain as of a sealed block: a crash of the process (even SIGKILL) loses at most the transactions of
the block being built, which no caller has a receipt for. Each commit is also synced to the disk
(``fdatasync``), so that a power loss loses no more, where the disk honours it.

Why a log and not a table: py-evm's keys are hashes, so a sealed block's ~90 writes land on ~90
random pages of a B-tree; SQLite committed them in ~2-3 ms per block (12% fewer settlements per
second), while one append and its sync cost ~0.3 ms. Opening reads the whole log: 0.55-1 s, and
~160 MB of memory, after 20,000 transfers.

:class:`DevChainState` is the file with what the platform needs to trust it: the format and engine
versions that wrote it and the chain's identity (:class:`ChainIdentity`: chain id, genesis hash,
token addresses), appended once the new chain's tokens are deployed, so that a file without it
counts as never made. The file is locked (``flock``) while open: one process runs a chain. A state
written by other versions of py-evm or eth-tester is refused rather than read, because what its
bytes mean may have changed.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from eth.db.atomic import AtomicDB
from eth.db.backends.base import BaseDB
from eth.exceptions import PyEVMError
from eth.exceptions import TransactionNotFound as EVMTransactionNotFound
from eth_tester import PyEVMBackend
from eth_tester.backends.pyevm.serializers import serialize_transaction, serialize_transaction_receipt
from eth_tester.exceptions import TransactionNotFound
from rlp.exceptions import RLPException

from x402mw.errors import ConfigurationError
from x402mw.platform.chain.contracts import canonical_genesis_accounts

FORMAT = 1  # the layout of the file; a change that old files cannot be read with bumps it
ENGINE = f"py-evm {version('py-evm')}, eth-tester {version('eth-tester')}"
_MAGIC = b"x402mw dev chain"
_HEADER = struct.Struct(">16sI")  # magic, format
_FRAME_HEAD = struct.Struct(">BII")  # kind, payload length, CRC-32 of the payload
_FRAME = struct.Struct(">BIII")  # the above and a CRC-32 of the above, so a damaged length shows
_RECORD = struct.Struct(">HI")  # key length, value length (_DELETED: the key was deleted)
_CHANGES, _META = 0, 1
_DELETED = 0xFFFFFFFF


@dataclass(frozen=True)
class ChainIdentity:
    """What tells one dev chain from another: a new chain gets a random genesis, so its hash differs
    from every other's even though the chain id and the token addresses are always the same."""

    chain_id: int
    genesis_hash: str
    tokens: dict[str, str]

    def as_json(self) -> dict[str, Any]:
        return {"chainId": self.chain_id, "genesisHash": self.genesis_hash, "tokens": dict(self.tokens)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChainIdentity:
        tokens = {str(symbol): str(address) for symbol, address in data["tokens"].items()}
        return cls(int(data["chainId"]), str(data["genesisHash"]), tokens)


class ChainStore(BaseDB):
    """py-evm's ``BaseDB`` in memory, with the changes since the last :meth:`commit` remembered."""

    def __init__(self, data: dict[bytes, bytes], append: Any) -> None:
        self._data = data
        self._changes: dict[bytes, bytes | None] = {}
        self._append = append

    def __getitem__(self, key: bytes) -> bytes:
        return self._data[key]

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self._data[key] = value
        self._changes[key] = value

    def __delitem__(self, key: bytes) -> None:
        del self._data[key]
        self._changes[key] = None

    def _exists(self, key: bytes) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def release(self) -> None:
        """Forget every value (the store is closed)."""
        self._data.clear()
        self._changes.clear()

    def commit(self) -> None:
        """Append every change since the last commit to the file as one frame. On failure nothing
        is appended and the changes stay for the next commit."""
        if not self._changes:
            return
        parts: list[bytes] = []
        for key, value in self._changes.items():
            if value is None:
                parts += (_RECORD.pack(len(key), _DELETED), key)
            else:
                parts += (_RECORD.pack(len(key), len(value)), key, value)
        self._append(_CHANGES, b"".join(parts))
        self._changes.clear()


def _wall_clock_chain(chain_class: Any) -> Any:
    """``chain_class`` with block timestamps that follow the wall clock: a new block takes the
    current second, or its parent's when that is later, instead of at least its parent's plus one."""

    def same_second(vm_class: Any) -> Any:
        class SameSecondVM(vm_class):  # type: ignore[misc]
            @classmethod
            def validate_header(cls, header: Any, parent_header: Any) -> None:
                if parent_header is not None and header.timestamp == parent_header.timestamp:
                    parent_header = parent_header.copy(timestamp=parent_header.timestamp - 1)
                super().validate_header(header, parent_header)

        SameSecondVM.__name__ = SameSecondVM.__qualname__ = vm_class.__name__
        return SameSecondVM

    class WallClockChain(chain_class):  # type: ignore[misc]
        vm_configuration = tuple((number, same_second(vm)) for number, vm in chain_class.vm_configuration)

        def create_header_from_parent(self, parent_header: Any, **header_params: Any) -> Any:
            header_params.setdefault("timestamp", max(parent_header.timestamp, int(time.time())))
            return super().create_header_from_parent(parent_header, **header_params)

    WallClockChain.__name__ = WallClockChain.__qualname__ = chain_class.__name__
    return WallClockChain


class DevChainBackend(PyEVMBackend):  # type: ignore[misc]
    """eth-tester's py-evm backend, over ``db`` when given (else in memory), that finds a transaction
    through the chain's hash index: eth-tester scans back from the head, which takes seconds on a
    long chain and the whole chain for a hash it does not know (a transaction a crash lost).

    With ``db``, ``genesis_salt`` given makes a new chain there (the salt goes into the genesis
    header's extra data, so that every new chain has a genesis hash of its own); without it the chain
    already in ``db`` is opened.

    A new chain's genesis also holds the runtime code of Permit2 and the x402 Permit2 proxies at
    their canonical addresses (:func:`~x402mw.platform.chain.contracts.canonical_genesis_accounts`).

    Blocks made within one second share its timestamp (:func:`_wall_clock_chain`), as anvil's may:
    py-evm's own rule (each block one second later than its parent at least) let a busy chain's
    clock run ahead of the wall clock by a second per block, until authorizations signed for the
    next two minutes had already expired on it."""

    chain: Any

    def __init__(self, db: ChainStore | None = None, *, genesis_salt: bytes | None = None) -> None:
        super().__init__()  # an in-memory chain: it gives eth-tester's account keys and chain class
        chain_class = _wall_clock_chain(type(self.chain))
        if db is not None and genesis_salt is None:
            self.chain = chain_class(AtomicDB(db))
            return
        overrides = {} if genesis_salt is None else {"extra_data": genesis_salt}
        params = self.generate_genesis_params(overrides=overrides)
        state = {**self.generate_genesis_state(), **canonical_genesis_accounts()}
        self.chain = chain_class.from_genesis(AtomicDB() if db is None else AtomicDB(db), params, state)

    def date_pending_block(self) -> None:
        """Give the block being built the current second, while nothing is in it yet: it was dated
        when its parent was sealed, which may be long ago on an idle chain (and an authorization
        valid from ten minutes ago would not yet be valid in it)."""
        header = self.chain.header
        now = int(time.time())
        if header.timestamp < now and not self.chain.get_block().transactions:
            self.chain.header = header.copy(timestamp=now)

    def date_next_block(self, timestamp: int) -> None:
        """Date the block being built (nothing in it yet: the caller sealed what was sent)
        ``timestamp``, which must not be before its parent's; the blocks after it are dated no
        earlier (anvil's ``evm_setNextBlockTimestamp``: a test moves the chain's clock forward)."""
        parent = self.chain.get_canonical_head()
        if timestamp < parent.timestamp:
            raise ValueError(f"Timestamp error: {timestamp} is lower than previous block's timestamp")  # anvil's words
        self.chain.header = self.chain.header.copy(timestamp=timestamp)

    def genesis_hash(self) -> str:
        return "0x" + bytes(self.chain.get_canonical_block_header_by_number(0).hash).hex()

    def _find(self, transaction_hash: bytes) -> tuple[Any, Any, int]:
        chain = self.chain
        pending = chain.get_block()
        try:
            number, index = chain.chaindb.get_transaction_index(transaction_hash)
        except EVMTransactionNotFound:
            pass
        else:
            # An evm_revert leaves the index entries (and number lookups) of the blocks it undid until
            # blocks of those numbers are made again: only a block below the pending one counts.
            if number < pending.number:
                block = chain.get_canonical_block_by_number(number)
                if index < len(block.transactions) and block.transactions[index].hash == transaction_hash:
                    return block, block.transactions[index], index
        for index, transaction in enumerate(pending.transactions):
            if transaction.hash == transaction_hash:
                return pending, transaction, index
        raise TransactionNotFound(f"no transaction 0x{bytes(transaction_hash).hex()}")

    def get_transaction_by_hash(self, transaction_hash: bytes) -> Any:
        block, transaction, index = self._find(transaction_hash)
        return serialize_transaction(block, transaction, index, block.number == self.chain.get_block().number)

    def get_transaction_receipt(self, transaction_hash: bytes) -> Any:
        block, transaction, index = self._find(transaction_hash)
        receipts = block.get_receipts(self.chain.chaindb)
        pending = block.number == self.chain.get_block().number
        return serialize_transaction_receipt(block, receipts, transaction, index, pending, self.chain.get_vm())


class DevChainState:
    """The dev chain's state file, read and locked. ``identity`` is ``None`` when the file holds no
    finished chain (never made, or its making was interrupted): :meth:`new_backend` then makes one and
    :meth:`finish` records it. Otherwise :meth:`backend` opens the chain it holds.

    :meth:`open` raises `ConfigurationError` when the file is locked by another process, damaged, or
    written by another format or engine version."""

    FILENAME = "chain.log"

    def __init__(self, path: Path, fd: int, data: dict[bytes, bytes], identity: ChainIdentity | None) -> None:
        self.path = path
        self.identity = identity
        self._fd = fd
        self.store = ChainStore(data, self._append)

    @classmethod
    def exists(cls, directory: Path) -> bool:
        """Whether ``directory`` has a state file (finished or not)."""
        return (directory / cls.FILENAME).exists()

    @classmethod
    def open(cls, directory: Path) -> DevChainState:
        path = directory / cls.FILENAME
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise ConfigurationError(f"cannot open the dev chain's state {path}: {exc.strerror or exc}") from None
        try:
            _lock(fd, path)
            data, identity = _read(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, data, identity)

    def new_backend(self) -> DevChainBackend:
        """A new chain with a random genesis, replacing whatever an interrupted making left."""
        os.ftruncate(self._fd, 0)
        os.write(self._fd, _HEADER.pack(_MAGIC, FORMAT))
        _sync(self._fd)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the file's name too, so that a power loss cannot take the chain away
        finally:
            os.close(directory)
        self.store = ChainStore({}, self._append)
        return DevChainBackend(self.store, genesis_salt=os.urandom(32))

    def backend(self) -> DevChainBackend:
        """The chain this file holds, checked against its recorded identity."""
        assert self.identity is not None
        try:
            backend = DevChainBackend(self.store)
            genesis = backend.genesis_hash()
            head = backend.chain.get_canonical_head()
            state_root_present = head.state_root in self.store
        except (PyEVMError, KeyError, RLPException, ValueError) as exc:
            raise self._damaged(f"{type(exc).__name__}: {exc}") from None
        if genesis != self.identity.genesis_hash or backend.chain.chain_id != self.identity.chain_id:
            raise self._damaged(f"its blocks belong to chain {backend.chain.chain_id} with genesis {genesis}")
        if not state_root_present:
            raise self._damaged(f"the state of its head block {head.block_number} is missing")
        return backend

    def finish(self, identity: ChainIdentity) -> None:
        """Record a new chain's identity, after every change made so far."""
        self.store.commit()
        self._append(_META, json.dumps({"engine": ENGINE, "identity": identity.as_json()}).encode())
        self.identity = identity

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # also releases the lock
            self._fd = -1
        # py-evm's method caches may hold the chain (and so this store) for a while: let the values go.
        self.store.release()

    def _append(self, kind: int, payload: bytes) -> None:
        head = _FRAME_HEAD.pack(kind, len(payload), zlib.crc32(payload))
        frame = head + struct.pack(">I", zlib.crc32(head)) + payload
        size = os.fstat(self._fd).st_size
        try:
            written = 0
            while written < len(frame):  # one write unless the disk is full or a signal cuts it short
                written += os.write(self._fd, frame[written:])
            _sync(self._fd)
        except BaseException:
            os.ftruncate(self._fd, size)  # never leave half a frame for the next one to follow
            raise

    def _damaged(self, detail: str) -> ConfigurationError:
        return ConfigurationError(_damaged_message(self.path, detail))


def _damaged_message(path: Path, detail: str) -> str:
    return (
        f"the dev chain's state {path} is damaged ({detail}); the platform will not start a new chain in "
        f"its place. Restore the data dir from a backup, or delete the whole data dir ({path.parent.parent}) "
        "to start over with a new chain and an empty platform."
    )


def _sync(fd: int) -> None:
    # On the disk before anyone sees what was written: a power loss then loses at most the block
    # being appended. An append and its fdatasync took ~0.3 ms here, ~1% of a sealed block's time.
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


def _lock(fd: int, path: Path) -> None:
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ConfigurationError(
            f"the dev chain's state {path} is in use by another process (another `x402mw platform serve` "
            "or `worker` on the same data dir?); only one process can run the embedded dev chain"
        ) from None


def _read(fd: int, path: Path) -> tuple[dict[bytes, bytes], ChainIdentity | None]:
    """Every key and value in the file, and the identity it records. A frame cut short at the end (a
    crash in the middle of an append) is dropped; a damaged frame anywhere else is refused."""
    with open(fd, "rb", closefd=False) as handle:
        handle.seek(0)
        content = handle.read()
    if not content:
        return {}, None
    if len(content) < _HEADER.size or content[: len(_MAGIC)] != _MAGIC:
        raise ConfigurationError(_damaged_message(path, "it is not a dev chain state file"))
    _, found = _HEADER.unpack_from(content)
    if found != FORMAT:
        raise ConfigurationError(_other_version(path, f"format {found}"))
    data: dict[bytes, bytes] = {}
    meta: dict[str, Any] = {}
    view = memoryview(content)
    offset = _HEADER.size
    while offset < len(content):
        if offset + _FRAME.size > len(content):
            break  # the last frame, cut short in its header
        kind, length, payload_crc, head_crc = _FRAME.unpack_from(content, offset)
        if zlib.crc32(view[offset : offset + _FRAME_HEAD.size]) != head_crc:
            raise ConfigurationError(_damaged_message(path, f"the frame at byte {offset} has a damaged header"))
        start = offset + _FRAME.size
        end = start + length
        if end > len(content):
            break  # the last frame, cut short
        payload = view[start:end]
        if zlib.crc32(payload) != payload_crc:
            if end == len(content):
                break  # the last frame, not all of it written
            raise ConfigurationError(_damaged_message(path, f"the frame at byte {offset} fails its checksum"))
        if kind == _CHANGES:
            _apply(content, start, end, data)
        elif kind == _META:
            meta.update(json.loads(bytes(payload)))
        else:
            raise ConfigurationError(_damaged_message(path, f"the frame at byte {offset} is of unknown kind {kind}"))
        offset = end
    if offset < len(content):
        os.ftruncate(fd, offset)
    if "identity" not in meta:
        return {}, None
    if meta.get("engine") != ENGINE:
        raise ConfigurationError(_other_version(path, str(meta.get("engine"))))
    try:
        return data, ChainIdentity.from_json(meta["identity"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigurationError(_damaged_message(path, f"its identity is unreadable: {exc}")) from None


def _apply(content: bytes, offset: int, end: int, data: dict[bytes, bytes]) -> None:
    unpack, record = _RECORD.unpack_from, _RECORD.size
    while offset < end:
        key_length, value_length = unpack(content, offset)
        offset += record
        key = content[offset : offset + key_length]
        offset += key_length
        if value_length == _DELETED:
            data.pop(key, None)
        else:
            data[key] = content[offset : offset + value_length]
            offset += value_length


def _other_version(path: Path, found: str) -> str:
    return (
        f"the dev chain's state {path} was written by another version ({found}); this x402mw reads format "
        f"{FORMAT} written by {ENGINE}. Run the x402mw version that wrote it, or delete the whole data dir "
        f"({path.parent.parent}) to start over with a new chain and an empty platform."
    )
