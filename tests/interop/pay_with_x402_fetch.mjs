// An agent on the x402 Foundation's TypeScript SDK (@x402/fetch, @x402/evm, viem) paying a URL.
// Run with node from a folder whose node_modules holds them (.tools, which `make test` fills);
// configured from the environment; prints one JSON line per request.
import { decodePaymentResponseHeader, wrapFetchWithPaymentFromConfig } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm";
import { privateKeyToAccount } from "viem/accounts";

const { PAY_URL, PAY_KEY, PAY_NETWORK, PAY_ASSET, PAY_MAX, PAY_TIMES } = process.env;
const account = privateKeyToAccount(PAY_KEY);
const pay = wrapFetchWithPaymentFromConfig(fetch, {
  schemes: [{ network: "eip155:*", client: new ExactEvmScheme(account) }],
  spendControls: {
    allowedAssets: [{ network: PAY_NETWORK, asset: PAY_ASSET, maxAmountPerPayment: PAY_MAX }],
  },
});
for (let i = 0; i < Number(PAY_TIMES || "1"); i++) {
  try {
    const response = await pay(PAY_URL);
    const header = response.headers.get("PAYMENT-RESPONSE");
    console.log(JSON.stringify({
      status: response.status,
      body: await response.text(),
      settlement: header ? decodePaymentResponseHeader(header) : null,
    }));
  } catch (error) {
    console.log(JSON.stringify({ error: String(error && error.message ? error.message : error) }));
  }
}
