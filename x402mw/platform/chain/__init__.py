"""How the platform reaches chains: one async JSON-RPC interface (:mod:`.rpc`) over HTTP nodes and
the in-process dev chain (:mod:`.devchain`), the EIP-3009 token (:mod:`.token`), the gas-paying
relayer (:mod:`.relayer`, which sends) with its healing of transactions the node lost, displaced or
left waiting (:mod:`.healing`), and an anvil runner for tests and local runs (:mod:`.anvil`).

Import from the submodules; this package imports nothing eagerly, so that using the HTTP client
does not load py-evm.
"""
