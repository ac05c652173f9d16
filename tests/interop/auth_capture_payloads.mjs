// The x402 Foundation's TypeScript SDK (@x402/evm's auth-capture client, viem) building the payment
// payloads of the auth-capture scheme. Run with node from a folder whose node_modules holds them
// (.tools, which `make test` fills). Input: AC_KEY (the payer's key) and AC_CASES, a JSON list of
// payment requirements; output: one JSON line, the list of the payloads built.
import { AuthCaptureEvmScheme } from "@x402/evm/auth-capture/client";
import { privateKeyToAccount } from "viem/accounts";

const scheme = new AuthCaptureEvmScheme(privateKeyToAccount(process.env.AC_KEY));
const payloads = [];
for (const requirements of JSON.parse(process.env.AC_CASES)) {
  payloads.push((await scheme.createPaymentPayload(2, requirements)).payload);
}
console.log(JSON.stringify(payloads));
