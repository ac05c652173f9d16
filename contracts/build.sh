#!/usr/bin/env bash
# Regenerates the compiled artifacts in x402mw/platform/chain/ (X402Token.json and one JSON per
# contract listed below) from the .sol files here with solcjs (works offline once the npm package is
# installed). Usage: cd contracts && ./build.sh
set -euo pipefail

SOLC_VERSION="0.8.26"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/../x402mw/platform/chain"
cd "$here"

installed="$(node -p 'try { require("./node_modules/solc/package.json").version } catch (e) { "" }')"
if [ "$installed" != "$SOLC_VERSION" ]; then
    npm install --silent --no-audit --no-fund --no-save --prefix . "solc@$SOLC_VERSION"
fi

node - "$here" "$out" <<'JS'
const fs = require("fs");
const path = require("path");
const solc = require(path.resolve("node_modules/solc"));
const [dir, out] = process.argv.slice(2);
// source file => the contracts of it that get an artifact
const wanted = {
  "X402Token.sol": ["X402Token"],
  "X402Permit2.sol": ["X402Permit2"],
  "X402Permit2Proxies.sol": ["X402UptoPermit2Proxy", "X402ExactPermit2Proxy"],
  "X402SmartWallet.sol": ["X402SmartWallet", "X402SmartWalletFactory", "X402ERC6492Validator"],
  "X402BadWallets.sol": ["X402RevertingWallet", "X402GasBurningWallet", "X402BadWalletFactory"],
  "X402BatchSettlement.sol": ["X402BatchSettlement", "X402ERC3009DepositCollector", "X402Permit2DepositCollector"],
  "X402AuthCaptureEscrow.sol": [
    "X402AuthCaptureEscrow",
    "X402AuthCaptureEscrowV1_0",
    "X402AuthCaptureTokenStore",
    "X402ERC3009PaymentCollector",
    "X402Permit2PaymentCollector",
    "X402OperatorRefundCollector",
    "X402ERC6492Preparer",
  ],
};
const sources = {};
for (const file of Object.keys(wanted)) sources[file] = { content: fs.readFileSync(path.join(dir, file), "utf8") };
const input = {
  language: "Solidity",
  sources,
  settings: {
    optimizer: { enabled: true, runs: 10000 },
    evmVersion: "paris",
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
  },
};
const output = JSON.parse(solc.compile(JSON.stringify(input)));
const errors = (output.errors || []).filter((e) => e.severity === "error");
for (const e of output.errors || []) console.error(e.formattedMessage);
if (errors.length) process.exit(1);
for (const [file, names] of Object.entries(wanted)) {
  for (const name of names) {
    const contract = output.contracts[file][name];
    const artifact = {
      contractName: name,
      abi: contract.abi,
      bytecode: "0x" + contract.evm.bytecode.object,
      deployedBytecode: "0x" + contract.evm.deployedBytecode.object,
      compiler: "solc-js " + solc.version(),
    };
    const target = path.join(out, name + ".json");
    fs.writeFileSync(target, JSON.stringify(artifact, null, 2) + "\n");
    console.log(`wrote ${path.relative(process.cwd(), target)} (${contract.evm.deployedBytecode.object.length / 2} bytes of runtime code)`);
  }
}
JS
