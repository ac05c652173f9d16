"""The running platform: database engine, chains with their relayers, services. Built once at start-up."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import hmac
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.errors import ConfigurationError
from x402mw.evm.keys import address_of
from x402mw.platform.chain.pool import RelayerPool
from x402mw.platform.chain.providers import FailoverJsonRpc
from x402mw.platform.chain.relayer import Relayer
from x402mw.platform.chain.rpc import HttpJsonRpc, JsonRpc
from x402mw.platform.chain.signers import LocalSigner, RemoteSigner
from x402mw.platform.chain.token import read_domain
from x402mw.platform.clock import Clock
from x402mw.platform.db.engine import create_engine_for
from x402mw.platform.db.schema import migrate, schema_state
from x402mw.platform.emails.mailers import transport_for
from x402mw.platform.emails.outbox import EmailOutbox
from x402mw.platform.keys import load_or_create_key, parse_private_key, prepare_data_dir
from x402mw.platform.objects.payments import SandboxPayment
from x402mw.platform.sealing import SecretBox
from x402mw.platform.services.api_requests import ApiRequestLog
from x402mw.platform.services.catalogue import Catalogue
from x402mw.platform.services.chains import ChainHandle, Chains
from x402mw.platform.services.channels.authorizers import Authorizers
from x402mw.platform.services.channels.service import ChannelService
from x402mw.platform.services.channels.worker import ChannelWorker
from x402mw.platform.services.deposits import DepositKeys
from x402mw.platform.services.embedded_chain import start_embedded_chain
from x402mw.platform.services.endpoints import EndpointDirectory
from x402mw.platform.services.idempotency import IdempotencyKeys
from x402mw.platform.services.merchants import Caller, KeyRing
from x402mw.platform.services.payment_intents import OrderLinks, PaymentIntentWriter, api_host_of
from x402mw.platform.services.refunds import RefundService
from x402mw.platform.services.relayer_leases import RelayerLeases
from x402mw.platform.services.sandbox import Scenario, simulate
from x402mw.platform.services.settlement.payments import Payments
from x402mw.platform.services.settlement.service import SettlementService
from x402mw.platform.services.settlement.upto import UptoSettlement
from x402mw.platform.services.sign_ins import SignInService, chain_verifier
from x402mw.platform.services.subscriptions.customer_links import CustomerLinks
from x402mw.platform.services.subscriptions.payments import follow_order
from x402mw.platform.services.subscriptions.renewals import RenewalRunner
from x402mw.platform.services.subscriptions.service import SubscriptionService
from x402mw.platform.services.watcher import DepositWatcher
from x402mw.platform.settings import ChainSettings, PlatformSettings, shown_url
from x402mw.platform.webhooks.delivery import WebhookSender
from x402mw.protocol.networks import Asset, Network, get_network, register_network

logger = logging.getLogger("x402mw.platform")
LOCAL_CHAIN_IDS = frozenset({31337, 1337})


@dataclass
class Platform:
    settings: PlatformSettings
    engine: AsyncEngine
    chains: Chains
    settlement: SettlementService
    clock: Clock
    receipt_address: str
    keys: KeyRing
    endpoints: EndpointDirectory
    deposit_keys: DepositKeys
    watcher: DepositWatcher
    refunds: RefundService
    payment_intents: PaymentIntentWriter
    secrets: SecretBox  # seals webhook secrets at rest
    idempotency: IdempotencyKeys  # the Idempotency-Key store of the merchant API
    subscriptions: SubscriptionService
    renewals: RenewalRunner  # the subscriptions' due work (renewal invoices, reminders, grace)
    emails: EmailOutbox  # sends the subscribers' emails
    catalogue: Catalogue  # the discovery catalogue (Bazaar) of discoverable endpoints' resources
    sign_ins: SignInService  # sign-in-with-x: signatures, spent nonces, earlier payments
    api_requests: ApiRequestLog  # the merchant API's request log (the dashboard's developers pages)
    webhooks: WebhookSender  # delivers the events to the merchants' webhook endpoints
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    _payments: Payments | None = None
    _channels: ChannelService | None = None
    _channel_worker: ChannelWorker | None = None
    # Set as the platform closes: background work finishes the step it is in and stops.
    draining: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def payments(self) -> Payments:
        """Agent payments by scheme, and their holds (captured or released), on `settlement`."""
        if self._payments is None:
            self._payments = Payments(self.settlement)
        return self._payments

    @property
    def channels(self) -> ChannelService:
        """Payment channels (the ``batch-settlement`` scheme): vouchers held and charged."""
        if self._channels is None:
            self._channels = ChannelService(
                self.engine, self.chains, self.clock, Authorizers(self.engine, self.secrets)
            )
        return self._channels

    @property
    def channel_worker(self) -> ChannelWorker:
        """The channels' claims, settles, refunds and withdrawal watch, for the worker."""
        if self._channel_worker is None:
            self._channel_worker = ChannelWorker(self.engine, self.chains, self.clock, self.channels)
        return self._channel_worker

    @property
    def upto(self) -> UptoSettlement:
        """Metered settlement (the ``upto`` scheme), on `settlement`."""
        return self.payments.upto

    async def simulate_payment(
        self, caller: Caller, payment_id: str, scenario: Scenario, network: str | None
    ) -> SandboxPayment:
        """Pay the caller's test order as the sandbox does (`x402mw.platform.services.sandbox.simulate`)."""
        return await simulate(
            self.engine,
            self.chains,
            self.deposit_keys,
            self.watcher,
            self.clock,
            self.payment_intents.checkout_url_base,
            caller,
            payment_id,
            scenario,
            network,
        )

    @classmethod
    async def start(cls, settings: PlatformSettings, *, clock: Clock | None = None) -> Platform:
        clock = clock or Clock()
        prepare_data_dir(settings.data_dir)
        relayer_signer = _relayer_signer(settings)
        receipt_key = _key(settings.receipt_key, settings.data_dir / "receipt.key")
        treasury_key = _key(settings.treasury_key, settings.data_dir / "treasury.key")
        deposit_keys = DepositKeys(_key(settings.deposit_seed, settings.data_dir / "deposit.seed"))
        sealing_key = _key(settings.sealing_key, settings.data_dir / "sealing.key")
        secrets = SecretBox(sealing_key)
        # Customer page links are signed with a key of their own, derived from the sealing key.
        page_key = hmac.new(sealing_key, b"x402mw customer pages", hashlib.sha256).digest()
        email_transport = transport_for(settings)
        database_url = settings.database_url.get_secret_value()
        # Unset (the library's default, in-process), it migrates; the commands decide it themselves
        # (`PlatformSettings.migrates_on_start`). Not migrating, it refuses a schema it does not match.
        state = await asyncio.to_thread(schema_state, database_url)
        if state.pending and not state.unknown and settings.migrate is not False:
            await asyncio.to_thread(migrate, database_url)
        elif (refusal := state.refusal()) is not None:
            raise ConfigurationError(refusal)
        engine = create_engine_for(database_url, pool_size=settings.database_pool_size)
        chains = Chains()
        try:
            for chain_settings in settings.chains:
                chains.add(await _connect(chain_settings, relayer_signer, settings, engine))
        except BaseException:
            await chains.aclose()
            await engine.dispose()
            await relayer_signer.aclose()
            raise
        takeover = timedelta(seconds=settings.takeover_seconds)
        settlement = SettlementService(
            engine, chains, receipt_key, clock, simulate=settings.simulate, takeover_after=takeover
        )
        base = OrderLinks(settings.checkout_url_base, api_host=api_host_of(settings.base_url))
        # an order paying an invoice moves its subscription (told by the watcher, which moves paid orders)
        watcher = DepositWatcher(engine, chains, clock, deposit_keys, address_of(treasury_key), base, follow_order)
        links, grace = CustomerLinks(page_key, base), settings.subscription_grace_days
        platform = cls(
            settings,
            engine,
            chains,
            settlement,
            clock,
            address_of(receipt_key),
            KeyRing(engine),
            EndpointDirectory(engine),
            deposit_keys,
            watcher,
            RefundService(engine, chains, clock, deposit_keys, treasury_key, base, claim=takeover),
            PaymentIntentWriter(engine, base),
            secrets,
            IdempotencyKeys(engine, clock),
            SubscriptionService(engine, clock, links, grace),
            RenewalRunner(engine, clock, links, grace),
            EmailOutbox(engine, clock, email_transport, links, settings.smtp_sender, grace),
            Catalogue(engine),
            SignInService(engine, chain_verifier(chains)),
            ApiRequestLog(engine),
            WebhookSender(engine, clock, secrets, settings.takeover_seconds, settings.private_webhooks_allowed),
        )
        platform.keys.start()
        try:
            await watcher.start()
        except BaseException:
            await platform.aclose()
            raise
        return platform

    def run_in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` beside the platform until it closes (`x402mw.platform.background` does so)."""
        self._tasks.append(asyncio.get_running_loop().create_task(work))

    async def aclose(self) -> None:
        self.draining.set()
        if self._tasks:  # the step each is in finishes (within the drain bound); none starts another
            await asyncio.wait(self._tasks, timeout=self.settings.drain_seconds)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.settlement.aclose()
        await self.payment_intents.aclose()
        await self.idempotency.aclose()
        await self.api_requests.aclose()
        await self.keys.aclose()
        await self.webhooks.aclose()
        await self.chains.aclose()
        await self.engine.dispose()


def _relayer_signer(settings: PlatformSettings) -> LocalSigner | RemoteSigner:
    """The relayer's key in this process (its setting, or its file in the data dir), or the remote
    signer that holds it."""
    if settings.relayer_signer_url is not None and settings.relayer_signer_address is not None:
        return RemoteSigner(settings.relayer_signer_url.get_secret_value(), settings.relayer_signer_address)
    return LocalSigner(_key(settings.relayer_key, settings.data_dir / "relayer.key"))


async def _connect(
    chain: ChainSettings, relayer_signer: LocalSigner | RemoteSigner, settings: PlatformSettings, engine: AsyncEngine
) -> ChainHandle:
    relayer_address = relayer_signer.address
    remote = relayer_signer if isinstance(relayer_signer, RemoteSigner) else None
    if chain.rpc_url is None:
        dev = await start_embedded_chain(
            engine, settings.data_dir, relayer_address=relayer_address, fund_addresses=settings.dev_fund_addresses
        )
        assets = {
            symbol: Asset(symbol, address, 6, "USD Coin" if symbol == "USDC" else "EURC", "2")
            for symbol, address in dev.tokens.items()
        }
        network = Network(dev.chain_id, "x402mw dev chain", None, 1, True, assets, local=True)
        register_network(network)
        relayer = Relayer(dev.rpc, relayer_signer, chain_id=dev.chain_id)
        await relayer.start()
        return ChainHandle(network, dev.rpc, relayer, chain.confirmations or 1, dev=dev, signer=remote)
    rpc, chain_id = await _providers(chain)
    known = get_network(chain_id)
    if chain.tokens:
        assets = {}
        for symbol, address in chain.tokens.items():
            name, version = await read_domain(rpc, address)
            assets[symbol.upper()] = Asset(symbol.upper(), address, 6, name, version)
        local = chain_id in LOCAL_CHAIN_IDS
        network = Network(
            chain_id,
            known.name if known else f"chain {chain_id}",
            None,
            chain.confirmations or (known.confirmations if known else 1),
            known.testnet if known else True,
            assets,
            local=local or known is None,
        )
        register_network(network)
    elif known is None:
        raise ConfigurationError(
            f"chain {chain_id} at {shown_url(chain.rpc_url)} is not in the built-in table; name its token addresses"
        )
    else:
        network = known
        problems = []
        for asset in network.assets.values():
            if not asset.eip3009:
                continue
            name, version = await read_domain(rpc, asset.address)
            if (name, version) != (asset.eip712_name, asset.eip712_version):
                problems.append(
                    f"{asset.symbol} at {asset.address} on chain {chain_id} signs as "
                    f"{name!r} version {version!r}, the table says {asset.eip712_name!r} "
                    f"version {asset.eip712_version!r}"
                )
        if problems:
            raise ConfigurationError(problems)
    minter = parse_private_key(chain.minter_key.get_secret_value()) if chain.minter_key else None
    confirmations = chain.confirmations or network.confirmations
    if settings.relayer_pool_size or settings.relayer_pool_keys:
        # (the settings refuse a pool with a remote signer: its accounts' keys derive from the relayer's)
        relayer_key = _key(settings.relayer_key, settings.data_dir / "relayer.key")
        pool, leases = await _relayer_pool(rpc, chain_id, relayer_key, settings, engine)
        return ChainHandle(network, rpc, pool, confirmations, minter_key=minter, leases=leases)
    relayer = Relayer(rpc, relayer_signer, chain_id=chain_id)
    await relayer.start()
    return ChainHandle(network, rpc, relayer, confirmations, minter_key=minter, signer=remote)


async def _relayer_pool(
    rpc: JsonRpc, chain_id: int, relayer_key: bytes, settings: PlatformSettings, engine: AsyncEngine
) -> tuple[RelayerPool, RelayerLeases]:
    """A pool of relayer accounts, this process's share of them leased (the relayer key funds them)."""
    given = [parse_private_key(key.get_secret_value()) for key in settings.relayer_pool_keys]
    pool = RelayerPool(
        rpc, Relayer(rpc, relayer_key, chain_id=chain_id), chain_id=chain_id, cap=settings.relayer_in_flight_cap
    )
    leases = RelayerLeases(
        engine,
        pool,
        chain_id=chain_id,
        relayer_key=relayer_key,
        given_keys=given,
        lease=settings.relayer_lease_seconds,
        gas_floor=settings.relayer_gas_floor_wei,
    )
    try:
        await pool.start()
        await leases.start(settings.relayer_pool_size or len(given))
    except BaseException:
        await leases.aclose()
        await pool.aclose()
        raise
    return pool, leases


async def _providers(chain: ChainSettings) -> tuple[JsonRpc, int]:
    """The chain's JSON-RPC access (one provider, or several behind a `FailoverJsonRpc`) and its id,
    read from the first provider that answers."""
    urls = chain.rpc_urls
    providers = [HttpJsonRpc(url.get_secret_value()) for url in urls]
    error: BaseException | None = None
    for provider in providers:
        try:
            chain_id = int(await provider.request("eth_chainId", []), 16)
            break
        except (httpx.HTTPError, OSError, TimeoutError) as exc:
            error = error or exc
    else:
        for provider in providers:
            await provider.aclose()
        assert error is not None
        where = ", ".join(shown_url(url) for url in urls)
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigurationError(f"cannot reach the chain's JSON-RPC at {where}: {reason}") from error
    if len(providers) == 1:
        return providers[0], chain_id
    names = [f"{n}:{shown_url(url)}" for n, url in enumerate(urls)]
    return FailoverJsonRpc(providers, network=f"eip155:{chain_id}", names=names), chain_id


def _key(given: SecretStr | None, path: Path) -> bytes:
    return load_or_create_key(given.get_secret_value() if given else None, path)


def settle_heap() -> None:
    """Tune the garbage collector of a process that serves, once it has started. Everything start-up
    made (modules, the engine, the chains' state) lives as long as the process: `gc.freeze` moves it
    out of the collector's reach, so full collections stop walking it. Young objects are collected
    every 20,000 allocations instead of 700. Together they took the p99 of payment-order creation
    under load (bench_orders) from 135-164 ms to 74-83 ms, at the cost of some memory between
    collections."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)
