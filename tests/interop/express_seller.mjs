// A seller on the x402 Foundation's TypeScript SDK (@x402/express) that settles through x402mw's
// facilitator API. Run with node from a folder whose node_modules holds the SDK (.tools); it
// listens on a free loopback port and prints {"port": N} once it does.
import express from "express";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { ExactEvmScheme } from "@x402/evm/exact/server";

const { FACILITATOR_URL, API_KEY, NETWORK, ASSET, PAY_TO } = process.env;
const headers = { Authorization: `Bearer ${API_KEY}` };
const facilitator = new HTTPFacilitatorClient({
  url: FACILITATOR_URL,
  createAuthHeaders: async () => ({ verify: headers, settle: headers, supported: headers }),
});
const server = new x402ResourceServer(facilitator).register(NETWORK, new ExactEvmScheme());
const app = express();
app.use(
  paymentMiddleware(
    {
      "GET /weather": {
        accepts: {
          scheme: "exact",
          network: NETWORK,
          payTo: PAY_TO,
          price: { amount: "10000", asset: ASSET, extra: { name: "USD Coin", version: "2" } },
        },
        description: "Today's weather",
      },
    },
    server,
  ),
);
app.get("/weather", (req, res) => res.json({ forecast: "sunny" }));
const listener = app.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: listener.address().port }));
});
