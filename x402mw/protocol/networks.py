"""Networks (CAIP-2 ``eip155:<chain id>``) and the stablecoins we know on each.

The table holds public facts: token addresses, decimals and the EIP-712 domain (``name``,
``version``) each token signs authorizations with. The platform reads ``name()``/``version()``
on-chain at start-up and refuses a token whose domain differs from this table.
Local chains (the in-process dev chain, anvil) are added at run time with `register_network`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EIP3009_COINS = frozenset({"USDC", "EURC"})

# The same address on every EVM chain (CREATE2 deployments), and the one clients hard-code in what
# they sign: Uniswap's Permit2 and the x402 Foundation's Permit2 proxies of the `upto` and `exact`
# schemes. Our own contracts sit at these addresses on the dev chain and anvil
# (x402mw.platform.chain.contracts).
PERMIT2_ADDRESS = "0x000000000022D473030F116dDEE9F6B43aC78BA3"
UPTO_PERMIT2_PROXY_ADDRESS = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002"
EXACT_PERMIT2_PROXY_ADDRESS = "0x402085c248EeA27D92E8b30b2C58ed07f9E20001"


@dataclass(frozen=True, slots=True)
class Asset:
    """A token on one network. ``eip3009`` is False for coins (USDT) that cannot be paid gaslessly."""

    symbol: str
    address: str
    decimals: int
    eip712_name: str
    eip712_version: str
    eip3009: bool = True


@dataclass(frozen=True, slots=True)
class Network:
    chain_id: int
    name: str
    v1_name: str | None
    confirmations: int
    testnet: bool
    assets: dict[str, Asset] = field(default_factory=dict)
    local: bool = False

    @property
    def caip2(self) -> str:
        return f"eip155:{self.chain_id}"

    def asset(self, symbol: str) -> Asset | None:
        return self.assets.get(symbol.upper())

    def asset_by_address(self, address: str) -> Asset | None:
        wanted = address.lower()
        for asset in self.assets.values():
            if asset.address.lower() == wanted:
                return asset
        return None


def _usdc(address: str, name: str = "USD Coin") -> Asset:
    return Asset("USDC", address, 6, name, "2")


def _eurc(address: str, name: str = "EURC") -> Asset:
    return Asset("EURC", address, 6, name, "2")


def _usdt(address: str) -> Asset:
    return Asset("USDT", address, 6, "Tether USD", "1", eip3009=False)


def _net(chain_id: int, name: str, v1: str | None, conf: int, testnet: bool, *assets: Asset) -> Network:
    return Network(chain_id, name, v1, conf, testnet, {a.symbol: a for a in assets})


_BUILTIN: tuple[Network, ...] = (
    _net(
        8453,
        "Base",
        "base",
        10,
        False,
        _usdc("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
        _eurc("0x60a3E35Cc302bFA44Cb288Bc5a4F316Fdb1adb42"),
    ),
    _net(
        84532,
        "Base Sepolia",
        "base-sepolia",
        3,
        True,
        _usdc("0x036CbD53842c5426634e7929541eC2318f3dCF7e", "USDC"),
        _eurc("0x808456652fdb597867f38412077A9182bf77359F"),
    ),
    _net(
        1,
        "Ethereum",
        "ethereum",
        12,
        False,
        _usdc("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
        _eurc("0x1aBaEA1f7C830bD89Acc67eC4af516284b1bC33c", "Euro Coin"),
        _usdt("0xdAC17F958D2ee523a2206206994597C13D831ec7"),
    ),
    _net(
        11155111,
        "Sepolia",
        "sepolia",
        3,
        True,
        _usdc("0x1c7D4B196Cb0C7B01d743Fbc6116a902379C7238", "USDC"),
        _eurc("0x08210F9170F89Ab7658F0B5E3fF39b0E03C594D4"),
    ),
    _net(
        137,
        "Polygon",
        "polygon",
        64,
        False,
        _usdc("0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"),
        _usdt("0xc2132D05D31c914a87C6611C10748AEb04B58e8F"),
    ),
    _net(
        80002,
        "Polygon Amoy",
        "polygon-amoy",
        5,
        True,
        _usdc("0x41E94Eb019C0762f9Bfcf9Fb1E58725BfB0e7582", "USDC"),
    ),
    _net(
        42161,
        "Arbitrum One",
        "arbitrum",
        20,
        False,
        _usdc("0xaf88d065e77c8cC2239327C5EDb3A432268e5831"),
        _usdt("0xFd086bC7CD5C481DCC9C85ebE478A1C0b69FCbb9"),
    ),
    _net(
        421614,
        "Arbitrum Sepolia",
        "arbitrum-sepolia",
        5,
        True,
        _usdc("0x75faf114eafb1BDbe2F0316DF893fd58CE46AA4d", "USDC"),
    ),
    _net(
        10,
        "Optimism",
        "optimism",
        10,
        False,
        _usdc("0x0b2C639c533813f4Aa9D7837CAf62653d097Ff85"),
        _usdt("0x94b008aA00579c1307B0EF2c499aD98a8ce58e58"),
    ),
    _net(
        43114,
        "Avalanche",
        "avalanche",
        1,
        False,
        _usdc("0xB97EF9Ef8734C71904D8002F8b6Bc66Dd9c48a6E"),
        _eurc("0xC891EB4cbdEFf6e073e859e987815Ed1505c2ACD", "Euro Coin"),
        _usdt("0x9702230A8Ea53601f5cD2dc00fDBc13d4dF4A8c7"),
    ),
    _net(
        43113,
        "Avalanche Fuji",
        "avalanche-fuji",
        1,
        True,
        _usdc("0x5425890298aed601595a70AB815c96711a31Bc65"),
    ),
)

_NETWORKS: dict[int, Network] = {n.chain_id: n for n in _BUILTIN}


def parse_caip2(network: str) -> int:
    """The chain id of ``eip155:<id>``, the id in plain decimal (``eip155:08453`` is refused: one
    network, one spelling); ``ValueError`` for anything else."""
    prefix, _, ident = network.partition(":")
    if (
        prefix != "eip155"
        or not ident.isascii()
        or not ident.isdigit()
        or len(ident) > 20
        or (ident[0] == "0" and ident != "0")
    ):
        raise ValueError(f"not an EVM CAIP-2 network id: {network!r}")
    return int(ident)


def get_network(network: str | int) -> Network | None:
    """Look a network up by chain id, ``eip155:<id>`` or x402 v1 name."""
    if isinstance(network, int):
        return _NETWORKS.get(network)
    try:
        return _NETWORKS.get(parse_caip2(network))
    except ValueError:
        return network_for_v1_name(network)


def network_for_v1_name(name: str) -> Network | None:
    for candidate in _NETWORKS.values():
        if candidate.v1_name == name:
            return candidate
    return None


def known_networks() -> list[Network]:
    return list(_NETWORKS.values())


def register_network(network: Network) -> None:
    """Add or replace a network (the platform registers its local dev chain or anvil this way)."""
    _NETWORKS[network.chain_id] = network
