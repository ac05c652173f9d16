"""The chains the platform settles on: for each, its JSON-RPC access, relayer, network and tokens."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from x402mw.evm.eip712 import TokenDomain
from x402mw.platform.chain.devchain import DevChain
from x402mw.platform.chain.pool import RelayerPool
from x402mw.platform.chain.relayer import Relayer
from x402mw.platform.chain.rpc import JsonRpc
from x402mw.platform.chain.signers import Signer
from x402mw.platform.chain.transactions import TxReceipt
from x402mw.platform.services.relayer_leases import RelayerLeases
from x402mw.protocol.networks import Asset, Network, parse_caip2


@dataclass
class ChainHandle:
    network: Network
    rpc: JsonRpc
    relayer: Relayer | RelayerPool  # one account shared by every process, or the accounts this process leases
    confirmations: int
    dev: DevChain | None = None
    minter_key: bytes | None = None  # the test-token minter on local nodes (sandbox faucet)
    domains: dict[str, TokenDomain] = field(default_factory=dict)  # by lower-case token address
    leases: RelayerLeases | None = None  # keeps a pool's accounts leased
    signer: Signer | None = None  # the relayer's remote signer, when its key is not in this process

    @property
    def chain_id(self) -> int:
        return self.network.chain_id

    @property
    def livemode(self) -> bool:
        """Live chains hold real money: only live keys may use them."""
        return not (self.network.testnet or self.network.local)

    def asset(self, symbol: str) -> Asset | None:
        return self.network.asset(symbol)

    def domain(self, token: str) -> TokenDomain | None:
        return self.domains.get(token.lower())

    async def wait_for(self, tx_hash: str, *, confirmations: int = 0, timeout: float = 60.0) -> TxReceipt:
        """Wait for ``tx_hash`` (or the version of it the relayer sent in its place) to be included
        and then ``confirmations`` further blocks; `TimeoutError` after ``timeout`` seconds.

        A local chain (dev chain, anvil) only makes blocks when transactions arrive, so there the
        confirmations are mined on purpose once the transaction is in.
        """
        if confirmations and self.network.local:
            receipt = await self.relayer.wait_for_receipt(tx_hash, timeout=timeout)
            head = int(await self.rpc.request("eth_blockNumber", []), 16)
            for _ in range(max(0, receipt.block_number + confirmations - head)):
                await self.rpc.request("evm_mine", [])
        return await self.relayer.wait_for_receipt(tx_hash, confirmations=confirmations, timeout=timeout)

    @property
    def facilitator(self) -> Relayer:
        """The account ``upto`` settlements are sent from: the one their signed witnesses name, which
        the upto proxy takes transfers from and from no other sender. It must be the same in every
        process and at every moment: the relayer itself, or with a pool (whose accounts move between
        processes) its funding account, which every process sends from (a node's "nonce too low"
        makes a sender resync, as for one relayer shared by processes)."""
        return self.relayer.reader if isinstance(self.relayer, RelayerPool) else self.relayer

    def sender(self, scheme: str) -> Relayer | RelayerPool:
        """What sends (and simulates) a transfer of ``scheme``: `facilitator` for ``upto``."""
        return self.facilitator if scheme == "upto" else self.relayer

    async def head_time(self) -> int:
        """The timestamp of the latest block: what the chain holds ``validBefore`` against."""
        block = await self.rpc.request("eth_getBlockByNumber", ["latest", False])
        return int(block["timestamp"], 16)

    def add_domains(self) -> None:
        for asset in self.network.assets.values():
            if asset.eip3009:
                self.domains[asset.address.lower()] = TokenDomain(
                    name=asset.eip712_name,
                    version=asset.eip712_version,
                    chain_id=self.chain_id,
                    verifying_contract=asset.address,
                )


class Chains:
    def __init__(self) -> None:
        self._by_id: dict[int, ChainHandle] = {}

    def add(self, handle: ChainHandle) -> None:
        handle.add_domains()
        self._by_id[handle.chain_id] = handle

    def get(self, chain_id: int) -> ChainHandle | None:
        return self._by_id.get(chain_id)

    def by_network(self, network: str) -> ChainHandle | None:
        try:
            return self._by_id.get(parse_caip2(network))
        except ValueError:
            return None

    def currencies(self, livemode: bool, *, decimals: int) -> list[str]:
        """The coins (symbols, sorted) some chain of this mode carries with ``decimals`` decimals: the
        coins a payment order of that mode can be paid in (test orders on test chains)."""
        found = {
            symbol
            for handle in self._by_id.values()
            if handle.livemode == livemode
            for symbol, asset in handle.network.assets.items()
            if asset.decimals == decimals
        }
        return sorted(found)

    def __iter__(self) -> Iterator[ChainHandle]:
        return iter(list(self._by_id.values()))

    async def aclose(self) -> None:
        signers = {id(h.signer): h.signer for h in self._by_id.values() if h.signer is not None}
        for handle in self._by_id.values():
            if handle.leases is not None:
                await handle.leases.aclose()
            await handle.relayer.aclose()
            await handle.rpc.aclose()
        for signer in signers.values():  # one for every chain
            await signer.aclose()
