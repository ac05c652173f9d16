#!/usr/bin/env bash
# Regenerates x402mw/platform/chain/X402Token.json from X402Token.sol with solcjs (works offline
# once the npm package is installed). Usage: cd contracts && ./build.sh
set -euo pipefail

SOLC_VERSION="0.8.26"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/../x402mw/platform/chain/X402Token.json"
cd "$here"

installed="$(node -p 'try { require("./node_modules/solc/package.json").version } catch (e) { "" }')"
if [ "$installed" != "$SOLC_VERSION" ]; then
    npm install --silent --no-audit --no-fund --no-save --prefix . "solc@$SOLC_VERSION"
fi

node - "$here/X402Token.sol" "$out" <<'JS'
const fs = require("fs");
const path = require("path");
const solc = require(path.resolve("node_modules/solc"));
const [source, out] = process.argv.slice(2);
const input = {
  language: "Solidity",
  sources: { "X402Token.sol": { content: fs.readFileSync(source, "utf8") } },
  settings: {
    optimizer: { enabled: true, runs: 10000 },
    evmVersion: "paris",
    outputSelection: { "*": { "X402Token": ["abi", "evm.bytecode.object"] } },
  },
};
const output = JSON.parse(solc.compile(JSON.stringify(input)));
const errors = (output.errors || []).filter((e) => e.severity === "error");
for (const e of output.errors || []) console.error(e.formattedMessage);
if (errors.length) process.exit(1);
const contract = output.contracts["X402Token.sol"].X402Token;
const artifact = {
  contractName: "X402Token",
  abi: contract.abi,
  bytecode: "0x" + contract.evm.bytecode.object,
  compiler: "solc-js " + solc.version(),
};
fs.writeFileSync(out, JSON.stringify(artifact, null, 2) + "\n");
console.log(`wrote ${path.relative(process.cwd(), out)} (${contract.evm.bytecode.object.length / 2} bytes)`);
JS
