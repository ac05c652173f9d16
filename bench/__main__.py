"""``python -m bench`` (``make bench``): every benchmark, each printing ours, its baseline and the ratio."""

from bench import (
    bench_challenge,
    bench_channels,
    bench_checkout,
    bench_devchain,
    bench_e2e,
    bench_gateway,
    bench_keys,
    bench_mcp,
    bench_metered,
    bench_orders,
    bench_subscriptions,
    bench_verify,
)

bench_challenge.run()
bench_verify.run()
bench_e2e.run(database="postgresql")  # the database a deployment runs on
bench_e2e.run(database="sqlite")  # the development default
bench_metered.run(database="postgresql")  # metered (upto) beside exact, in one run
bench_channels.run()  # payment channels beside exact, with the gas of each
bench_orders.run()
bench_checkout.run()
bench_keys.run()
bench_devchain.run()
bench_mcp.run()
bench_gateway.run()
bench_subscriptions.run()
