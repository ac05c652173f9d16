"""Agent payment settlement: an x402 payment checked, claimed once, sent to the chain through the
relayer, and released with a signed receipt.

- `payments`: `Payments`, the agent settlement API's entry point, which chooses the scheme;
- `service`: `SettlementService`, an ``exact`` payment claimed once (checkout and the facilitator call it too);
- `holds`: held payments (a paid tool's, an ``upto`` authorization) captured or released by their id;
- `sending`: a claimed payment's transfer sent, waited for and released, for every scheme;
- `checks`: what is checked off-chain, with no side effects (`verify_payment`, `PaymentRefusal`);
- `smart_accounts`: payers whose ``from`` is a contract wallet (EIP-1271, ERC-6492);
- `transfers`: the on-chain call that moves the money, for either scheme;
- `upto`: the metered scheme through Permit2, in two steps around the seller's handler;
- `writes`: the settlement's rows, written in groups; `outcomes`: what a settlement answers and from which rows;
- `release`: the receipt, signed and recorded; `recovery`: finishing what a stopped process left;
- `payment_identifiers`: the x402 ``payment-identifier`` extension (one logical paid request, one payment).

May import `services` modules outside the family (chains, ledger, outbox) and the layers below;
never `subscriptions` (import-linter keeps the two families independent).
"""
