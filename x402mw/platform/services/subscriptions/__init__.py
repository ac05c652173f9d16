"""Subscriptions (spec 2.3, 2.4, 3.3): plans, subscriptions, their invoices and renewals.

- `plans`: subscription plans; `service`: opening and cancelling a subscription;
- `steps`: what a subscription does next and the rows its changes write; `periods`: billing-period arithmetic;
- `payments`: an invoice's order, paid, moves its subscription (in the order's transaction);
- `renewals`: the due work (renewal invoices, reminders, period ends, grace) the background loop runs;
- `clocks`: test clocks, on which test-mode subscriptions live;
- `customer_links`: signed links to a subscription's customer page and its forms' CSRF tokens;
- `objects`: the public forms of plans, subscriptions, invoices and clocks.

May import `services` modules outside the family (payment orders, outbox, ledger) and the layers
below; never `settlement` (import-linter keeps the two families independent).
"""
