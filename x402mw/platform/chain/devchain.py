"""The in-process dev chain: eth-tester with the py-evm backend behind the :class:`JsonRpc` protocol.

:class:`DevChainRpc` answers the subset of Ethereum JSON-RPC the platform uses, with the same wire
shapes as a real node (hex quantities, camelCase fields, revert data in error ``data``), so the
relayer and token code cannot tell it from anvil. :func:`start_dev_chain` boots a chain with the
project's EIP-3009 token deployed as USDC and EURC, Permit2 and the x402 Permit2 proxies at their
canonical addresses (in the genesis), and the relayer and demo wallets funded, in memory or kept in
a state file (:mod:`~x402mw.platform.chain.devstate`) that it reopens as it was.

Mining is automine with small coalescing: a sent transaction is applied to the pending block at
once, and the block is sealed after four transactions or before the next call that reads chain
state. Every observer sees each transaction mined, as with automine, but a burst of sends shares a
few blocks, so block timestamps (py-evm advances them by at least one second per block) run ahead
of the wall clock less. Larger blocks would be slower: py-evm rebuilds the block's tries on every
added transaction. A kept chain is committed to its file as each block is sealed, before anyone
sees its receipts, so a crash loses only transactions no caller has a receipt for. Receipts are
cached as blocks are sealed; older ones are found through the chain's transaction index.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from eth_abi.abi import encode as abi_encode
from eth_account.typed_transactions.typed_transaction import TypedTransaction
from eth_tester import EthereumTester
from eth_tester.exceptions import TransactionFailed, TransactionNotFound
from eth_tester.exceptions import ValidationError as TesterValidationError
from eth_utils.exceptions import ValidationError
from hexbytes import HexBytes
from rlp.exceptions import RLPException

from x402mw.evm.auth_capture import AUTH_CAPTURE_ESCROW_V1_1_ADDRESS
from x402mw.evm.batch_settlement import BATCH_SETTLEMENT_ADDRESS
from x402mw.platform.chain.devstate import ChainIdentity, DevChainBackend, DevChainState
from x402mw.platform.chain.relayer import transact
from x402mw.platform.chain.rpc import RpcError
from x402mw.platform.chain.token import deploy_token, mint
from x402mw.protocol.networks import PERMIT2_ADDRESS

logger = logging.getLogger(__name__)

DEV_CHAIN_ID = 131277322940537  # eth-tester's chain id, the same for every dev chain

_RECEIPT_CACHE_SIZE = 100_000
_QUANTITY_KEYS = ("gas", "value", "gas_price", "max_fee_per_gas", "max_priority_fee_per_gas", "nonce")


class DevChainRpc:
    """JSON-RPC over an in-process py-evm chain.

    Calls run one at a time, in the order they were made, on a single worker thread (so the EVM
    never blocks the event loop and pipelined transactions arrive in nonce order), guarded by a
    lock so that synchronous use from other threads stays serialized too.

    With ``state``, the chain lives in that state file (``backend`` must be the chain opened from
    it): each sealed block is committed there, and :meth:`aclose` seals what was sent and closes it.
    """

    def __init__(
        self,
        backend: DevChainBackend | None = None,
        *,
        max_block_transactions: int = 4,
        state: DevChainState | None = None,
    ) -> None:
        self._backend = backend or DevChainBackend()
        self._state = state
        self._tester = EthereumTester(self._backend)
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="x402mw-devchain")
        self._unsealed: list[str] = []
        self._max_block_transactions = max(1, max_block_transactions)
        self._receipts: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._closed = False
        self.chain_id: int = self._backend.chain.chain_id
        self._methods: dict[str, Callable[[list[Any]], Any]] = {
            "eth_chainId": lambda p: hex(self.chain_id),
            "net_version": lambda p: str(self.chain_id),
            "web3_clientVersion": lambda p: "x402mw-devchain/py-evm",
            "eth_blockNumber": lambda p: hex(self._tester.get_block_by_number("latest")["number"]),
            "eth_getBlockByNumber": self._get_block_by_number,
            "eth_getBalance": lambda p: hex(self._tester.get_balance(p[0], _block(p, 1))),
            "eth_getCode": lambda p: self._tester.get_code(p[0], _block(p, 1)),
            "eth_getTransactionCount": lambda p: hex(self._tester.get_nonce(p[0], _block(p, 1))),
            "eth_gasPrice": lambda p: hex(self._base_fee() + 10**9),
            "eth_maxPriorityFeePerGas": lambda p: hex(10**9),
            "eth_call": self._call,
            "eth_estimateGas": self._estimate_gas,
            "eth_sendRawTransaction": self._send_raw_transaction,
            "eth_getTransactionReceipt": self._get_receipt,
            "eth_getTransactionByHash": self._get_transaction,
            "eth_getLogs": self._get_logs,
            "evm_mine": self._mine,
            "evm_snapshot": lambda p: hex(self._tester.take_snapshot()),
            "evm_revert": self._revert,
            "evm_setNextBlockTimestamp": self._set_next_block_timestamp,
        }

    @property
    def dev_keys(self) -> tuple[bytes, ...]:
        """Private keys of the accounts the chain's genesis funds (public test keys)."""
        return tuple(key.to_bytes() for key in self._backend.account_keys)

    async def request(self, method: str, params: list[Any] | None = None) -> Any:
        return await self._submit(lambda: self._dispatch(method, params or []))

    async def batch(self, calls: list[tuple[str, list[Any]]]) -> list[Any]:
        return await self._submit(lambda: [self._dispatch(method, params) for method, params in calls])  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._state is not None:
            await asyncio.to_thread(self._close_state)

    async def keep(self, identity: ChainIdentity) -> None:
        """Record a new chain's ``identity`` in its state file, with every block sealed so far."""
        state = self._state
        assert state is not None

        def finish() -> None:
            self._seal()
            state.finish(identity)

        await self._submit(finish)

    def request_sync(self, method: str, params: list[Any] | None = None) -> Any:
        """The blocking twin of :meth:`request`, for scripts and threads without an event loop."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the dev chain RPC is closed")
            return self._dispatch(method, params or [])

    def _close_state(self) -> None:
        assert self._state is not None
        with self._lock:  # waits for the call running now, if any
            try:
                self._seal()  # a stop keeps every transaction sent so far
            finally:
                self._state.close()

    async def _submit(self, work: Callable[[], Any]) -> Any:
        if self._closed:
            raise RuntimeError("the dev chain RPC is closed")

        def locked() -> Any:
            with self._lock:
                return work()

        # Submitted synchronously (before the first await), so calls keep the order they were made in.
        return await asyncio.wrap_future(self._executor.submit(locked))

    def _dispatch(self, method: str, params: list[Any]) -> Any:
        handler = self._methods.get(method)
        if handler is None:
            raise RpcError(-32601, f"the dev chain does not support {method}")
        if method != "eth_sendRawTransaction":
            self._seal()
        try:
            return handler(params)
        except RpcError:
            raise
        except (ValidationError, TesterValidationError, ValueError, TypeError, KeyError, IndexError) as exc:
            raise RpcError(-32602, f"{method}: {exc}") from None

    def _seal(self) -> None:
        if not self._unsealed:
            return
        self._tester.mine_blocks()
        hashes, self._unsealed = self._unsealed, []
        self._commit()
        for tx_hash in hashes:
            self._remember(tx_hash, _object(self._tester.get_transaction_receipt(tx_hash)))

    def _commit(self) -> None:
        if self._state is not None:
            self._state.store.commit()

    def _remember(self, tx_hash: str, receipt: dict[str, Any]) -> None:
        self._receipts[tx_hash] = receipt
        if len(self._receipts) > _RECEIPT_CACHE_SIZE:
            self._receipts.popitem(last=False)

    def _base_fee(self) -> int:
        return int(self._tester.get_block_by_number("latest")["base_fee_per_gas"])

    def _send_raw_transaction(self, params: list[Any]) -> str:
        raw = bytes.fromhex(_strip(params[0]))
        header = self._backend.chain.header
        if self._unsealed and header.gas_used + _declared_gas(raw) > header.gas_limit:
            self._seal()
        if not self._unsealed:
            self._backend.date_pending_block()
        try:
            tx_hash = "0x" + bytes(self._backend.send_raw_transaction(raw)).hex()
        except ValidationError as exc:
            raise RpcError(-32000, _rejection(str(exc))) from None
        self._unsealed.append(tx_hash)
        if len(self._unsealed) >= self._max_block_transactions:
            self._seal()
        return tx_hash

    def _get_receipt(self, params: list[Any]) -> dict[str, Any] | None:
        tx_hash = str(params[0]).lower()
        cached = self._receipts.get(tx_hash)
        if cached is not None:
            return cached
        try:
            receipt = _object(self._tester.get_transaction_receipt(tx_hash))
        except TransactionNotFound:
            return None
        self._remember(tx_hash, receipt)
        return receipt

    def _get_transaction(self, params: list[Any]) -> dict[str, Any] | None:
        try:
            return _object(self._tester.get_transaction_by_hash(str(params[0]).lower()))
        except TransactionNotFound:
            return None

    def _get_block_by_number(self, params: list[Any]) -> dict[str, Any] | None:
        try:
            block = self._tester.get_block_by_number(_block(params, 0), bool(params[1]) if len(params) > 1 else False)
        except Exception:  # eth-tester raises BlockNotFound for numbers past the head
            return None
        return _object(block)

    def _get_logs(self, params: list[Any]) -> list[dict[str, Any]]:
        query: dict[str, Any] = params[0] if params else {}
        head = self._tester.get_block_by_number("latest")["number"]

        def number(key: str) -> int:
            tag = query.get(key, "latest")
            if isinstance(tag, str) and tag.startswith("0x"):
                return int(tag, 16)
            return 0 if tag == "earliest" else int(head)

        address = query.get("address")
        if isinstance(address, str):
            address = [address]
        topics = [
            None if topic is None else [topic] if isinstance(topic, str) else list(topic)
            for topic in query.get("topics") or []
        ]
        wanted = {a.lower() for a in address} if address else None
        logs = []
        for block_number in range(number("fromBlock"), min(number("toBlock"), head) + 1):
            block = self._tester.get_block_by_number(block_number)
            for tx_hash in block["transactions"]:
                receipt = self._get_receipt([_hex_data(tx_hash)])
                for log in receipt["logs"] if receipt else []:
                    if wanted is not None and log["address"].lower() not in wanted:
                        continue
                    if all(
                        allowed is None or (i < len(log["topics"]) and log["topics"][i].lower() in allowed)
                        for i, allowed in enumerate(topics)
                    ):
                        logs.append(log)
        return logs

    def _call(self, params: list[Any]) -> str:
        tx = self._transaction(params[0])
        try:
            return _hex_data(self._tester.call(tx, _block(params, 1)))
        except TransactionFailed as exc:
            raise _revert(exc) from None

    def _estimate_gas(self, params: list[Any]) -> str:
        tx = self._transaction(params[0])
        try:
            return hex(self._tester.estimate_gas(tx, _block(params, 1)))
        except TransactionFailed as exc:
            raise _revert(exc) from None

    def _transaction(self, raw: dict[str, Any]) -> dict[str, Any]:
        tx: dict[str, Any] = {}
        for key, value in raw.items():
            snake = "".join("_" + c.lower() if c.isupper() else c for c in key)
            if snake == "input":
                snake = "data"
            if snake in _QUANTITY_KEYS and isinstance(value, str):
                value = int(value, 16)
            tx[snake] = value
        # A node runs eth_call without charging for gas; py-evm does charge, so a call without a
        # sender runs from a funded genesis account.
        tx.setdefault("from", self._tester.get_accounts()[0])
        return tx

    def _mine(self, params: list[Any]) -> str:
        self._backend.date_pending_block()
        self._tester.mine_blocks(int(params[0], 16) if params else 1)
        self._commit()
        return "0x0"

    def _set_next_block_timestamp(self, params: list[Any]) -> None:  # as anvil's, for tests of delays
        self._backend.date_next_block(int(params[0], 16) if isinstance(params[0], str) else int(params[0]))

    def _revert(self, params: list[Any]) -> bool:
        self._tester.revert_to_snapshot(int(params[0], 16))
        self._commit()
        self._receipts.clear()
        return True


@dataclass
class DevChain:
    """A running in-process dev chain with USDC and EURC deployed (6 decimals, EIP-712 version "2")."""

    rpc: DevChainRpc
    chain_id: int
    tokens: dict[str, str]
    _minter_key: bytes = field(repr=False)
    genesis_hash: str = ""

    @property
    def identity(self) -> ChainIdentity:
        return ChainIdentity(self.chain_id, self.genesis_hash, dict(self.tokens))

    async def mint(self, symbol: str, to: str, amount_atomic: int) -> str:
        """Mint ``amount_atomic`` of the token ``symbol`` to ``to``; return the mined transaction hash."""
        return await mint(self.rpc, self._minter_key, self.tokens[symbol.upper()], to, amount_atomic)

    async def fund_gas(self, to: str, wei: int) -> str:
        """Send ``wei`` of the native coin to ``to``; return the mined transaction hash."""
        return (await transact(self.rpc, self._minter_key, to, b"", gas=21_000, value=wei)).transaction_hash

    async def aclose(self) -> None:
        await self.rpc.aclose()


_RELAYER_GAS = 10_000 * 10**18
_WALLET_GAS = 100 * 10**18


async def start_dev_chain(
    *,
    relayer_address: str,
    fund_addresses: Sequence[str] = (),
    token_mint_atomic: int = 1_000_000 * 10**6,
    state: DevChainState | None = None,
) -> DevChain:
    """Boot a dev chain: deploy USDC ("USD Coin") and EURC ("EURC"), give the relayer 10,000 ETH of
    gas, and give each of ``fund_addresses`` 100 ETH and ``token_mint_atomic`` of each token.

    The genesis account that deploys the tokens stays their minter (:meth:`DevChain.mint`).

    With ``state`` (opened, and owned by the chain from here on) the chain lives in that file: a file
    that holds a chain reopens it as it was (`ConfigurationError` if it is damaged), only topping up
    the relayer's gas below a tenth of the above and funding addresses that have no gas yet; an empty
    one gets a new chain, recorded as finished once its tokens are deployed and its wallets funded.
    """
    reopened = state is not None and state.identity is not None
    try:
        if state is None:
            backend = DevChainBackend()
        else:
            backend = await asyncio.to_thread(state.backend if reopened else state.new_backend)
    except BaseException:
        if state is not None:
            state.close()
        raise
    rpc = DevChainRpc(backend, state=state)
    key = rpc.dev_keys[0]
    try:
        if reopened:
            assert state is not None and state.identity is not None
            chain = DevChain(rpc, rpc.chain_id, dict(state.identity.tokens), key, state.identity.genesis_hash)
            if await rpc.request("eth_getCode", [PERMIT2_ADDRESS, "latest"]) in ("0x", b"", None):
                logger.warning(
                    "the dev chain in %s was made before x402mw put Permit2 in its genesis: payments through "
                    "Permit2 (the upto scheme) cannot settle on it; delete the data dir for a new chain",
                    state.path,
                )
            elif await rpc.request("eth_getCode", [BATCH_SETTLEMENT_ADDRESS, "latest"]) in ("0x", b"", None):
                logger.warning(
                    "the dev chain in %s was made before x402mw put the batch-settlement escrow in its genesis: "
                    "payment channels cannot open on it; delete the data dir for a new chain",
                    state.path,
                )
            elif await rpc.request("eth_getCode", [AUTH_CAPTURE_ESCROW_V1_1_ADDRESS, "latest"]) in ("0x", b"", None):
                logger.warning(
                    "the dev chain in %s was made before x402mw put the auth-capture escrow in its genesis: "
                    "auth-capture payments cannot be authorized on it; delete the data dir for a new chain",
                    state.path,
                )
            if await _gas(rpc, relayer_address) < _RELAYER_GAS // 10:
                await chain.fund_gas(relayer_address, _RELAYER_GAS)
            await _fund(chain, [a for a in fund_addresses if await _gas(rpc, a) == 0], token_mint_atomic)
            return chain
        tokens = {
            "USDC": await deploy_token(rpc, key, name="USD Coin", symbol="USDC"),
            "EURC": await deploy_token(rpc, key, name="EURC", symbol="EURC"),
        }
        chain = DevChain(rpc, rpc.chain_id, tokens, key, backend.genesis_hash())
        await chain.fund_gas(relayer_address, _RELAYER_GAS)
        await _fund(chain, fund_addresses, token_mint_atomic)
        if state is not None:
            await rpc.keep(chain.identity)
        return chain
    except BaseException:
        await rpc.aclose()
        raise


async def _fund(chain: DevChain, addresses: Sequence[str], token_atomic: int) -> None:
    for address in addresses:
        await chain.fund_gas(address, _WALLET_GAS)
        for symbol in chain.tokens:
            await chain.mint(symbol, address, token_atomic)


async def _gas(rpc: DevChainRpc, address: str) -> int:
    return int(await rpc.request("eth_getBalance", [address, "latest"]), 16)


def _block(params: list[Any], index: int) -> int | str:
    tag = params[index] if len(params) > index else "latest"
    if isinstance(tag, str) and tag.startswith("0x"):
        return int(tag, 16)
    return tag  # type: ignore[no-any-return]


def _hex_data(value: Any) -> str:
    return "0x" + bytes(value).hex() if isinstance(value, bytes | bytearray) else str(value)


def _strip(value: str) -> str:
    return value[2:] if value.startswith(("0x", "0X")) else value


def _declared_gas(raw: bytes) -> int:
    """The gas limit a typed transaction declares; 0 when it is legacy or cannot be decoded (the
    backend then rejects the transaction itself, with its own message)."""
    try:
        if raw and raw[0] < 0x7F:
            return int(TypedTransaction.from_bytes(HexBytes(raw)).as_dict()["gas"])
    except (ValueError, KeyError, TypeError, RLPException) as exc:
        logger.debug("undecodable raw transaction: %s", exc)
    return 0


def _rejection(message: str) -> str:
    # Speak like geth/anvil so that the relayer's nonce handling is the same on every chain.
    lowered = message.lower()
    if "nonce" in lowered:
        expected, got = _nonce_pair(message)
        if expected is not None and got is not None:
            return f"nonce too {'low' if got < expected else 'high'}: {message}"
    if "cannot afford" in lowered or "balance" in lowered:
        return f"insufficient funds for gas * price + value: {message}"
    return message


def _nonce_pair(message: str) -> tuple[int | None, int | None]:
    numbers = [int(word.strip(".,:")) for word in message.split() if word.strip(".,:").isdigit()]
    return (numbers[0], numbers[1]) if len(numbers) >= 2 else (None, None)


def _revert(exc: TransactionFailed) -> RpcError:
    # py-evm hands over the decoded Error(string) reason, or the raw revert data of anything else (a
    # custom error such as Permit2's InvalidNonce()): give either back as a node's revert data.
    raw = exc.args[0] if exc.args else ""
    if isinstance(raw, str) and raw[:2] in ("b'", 'b"'):
        # eth-tester's eth_call gives anything but Error(string) as the str() of the revert bytes.
        with contextlib.suppress(ValueError, SyntaxError):
            raw = ast.literal_eval(raw)
    if isinstance(raw, bytes | bytearray):
        data = "0x" + bytes(raw).hex()
        return RpcError(3, f"execution reverted: custom error {data}" if raw else "execution reverted", data)
    reason = str(raw)
    return RpcError(3, f"execution reverted: {reason}", "0x08c379a0" + abi_encode(["string"], [reason]).hex())


def _object(value: dict[str, Any]) -> dict[str, Any]:
    return {_camel(key): _to_json(item) for key, item in value.items()}


def _to_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {_camel(key): _to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_to_json(item) for item in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return hex(value)
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return value


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)
