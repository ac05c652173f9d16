/* The x402 paywall: pays the 402 of this very URL with a browser wallet (an EIP-3009 authorization,
   gasless for the payer), or signs in with a wallet that already paid (sign-in-with-x), then shows
   the paid response. Needs wallet.js (window.X402Wallet); nothing from another host. */
(function () {
  "use strict";
  var W = window.X402Wallet;
  var required = JSON.parse(document.getElementById("x402-required").textContent);
  var offer = required.accepts[0];
  var signIn = (required.extensions || {})["sign-in-with-x"];
  var message = document.getElementById("wallet-message");
  var payButton = document.getElementById("wallet-pay");
  var signInButton = document.getElementById("wallet-sign-in");
  var result = document.getElementById("result");
  var provider = window.ethereum;
  var chainId = "0x" + Number(offer.network.split(":")[1]).toString(16);

  function b64(text) {
    var bytes = new TextEncoder().encode(text);
    var binary = "";
    for (var i = 0; i < bytes.length; i++) {
      binary += String.fromCharCode(bytes[i]);
    }
    return window.btoa(binary);
  }

  function randomNonce() {
    var bytes = new Uint8Array(32);
    window.crypto.getRandomValues(bytes);
    var hex = "0x";
    for (var i = 0; i < bytes.length; i++) {
      hex += ("0" + bytes[i].toString(16)).slice(-2);
    }
    return hex;
  }

  function busy(on) {
    payButton.disabled = on;
    if (signInButton) {
      signInButton.disabled = on;
    }
  }

  function show(response) {
    var type = response.headers.get("Content-Type") || "";
    if (response.status !== 200) {
      return response.text().then(function (text) {
        var reason = "";
        try {
          var body = JSON.parse(text);
          reason = body.message || (body.error && (body.error.message || body.error)) || "";
        } catch (ignored) {
          reason = "";
        }
        var error = new Error(reason || "the server answered " + response.status);
        error.status = response.status;
        throw error;
      });
    }
    var shown = type.indexOf("image/") === 0 ? response.blob() : response.text();
    return shown.then(function (body) {
      document.getElementById("offer").hidden = true;
      result.hidden = false;
      var out = document.getElementById("result-body");
      if (typeof body !== "string") {
        var img = document.createElement("img");
        img.alt = "The paid image";
        img.src = URL.createObjectURL(body);
        out.replaceWith(img);
      } else if (type.indexOf("json") !== -1) {
        try {
          out.textContent = JSON.stringify(JSON.parse(body), null, 2);
        } catch (ignored) {
          out.textContent = body;
        }
      } else {
        out.textContent = body; // text, never markup: the page shows what it received
      }
      message.textContent = "";
      document.getElementById("result-title").focus();
    });
  }

  function retry(name, value) {
    var headers = {};
    headers[name] = value;
    return window.fetch(window.location.href, { headers: headers, credentials: "same-origin" }).then(show);
  }

  function account() {
    return provider.request({ method: "eth_requestAccounts" }).then(function (accounts) {
      return accounts[0];
    });
  }

  function pay() {
    var from = null;
    busy(true);
    message.textContent = "Confirm in your wallet.";
    account()
      .then(function (found) {
        from = found;
        return W.useChain(provider, chainId, offer.network);
      })
      .then(function () {
        var now = Math.floor(Date.now() / 1000);
        var typed = {
          types: {
            EIP712Domain: [
              { name: "name", type: "string" },
              { name: "version", type: "string" },
              { name: "chainId", type: "uint256" },
              { name: "verifyingContract", type: "address" }
            ],
            TransferWithAuthorization: [
              { name: "from", type: "address" },
              { name: "to", type: "address" },
              { name: "value", type: "uint256" },
              { name: "validAfter", type: "uint256" },
              { name: "validBefore", type: "uint256" },
              { name: "nonce", type: "bytes32" }
            ]
          },
          primaryType: "TransferWithAuthorization",
          domain: {
            name: offer.extra.name,
            version: offer.extra.version,
            chainId: Number(offer.network.split(":")[1]),
            verifyingContract: offer.asset
          },
          message: {
            to: offer.payTo,
            value: offer.amount,
            validAfter: String(now - 600),
            validBefore: String(now + offer.maxTimeoutSeconds),
            nonce: randomNonce()
          }
        };
        return W.signAuthorization(provider, from, typed);
      })
      .then(function (signed) {
        message.textContent = "Signed. Paying…";
        var payload = {
          x402Version: 2,
          resource: required.resource,
          accepted: offer,
          payload: { signature: signed.signature, authorization: signed.message }
        };
        return retry("PAYMENT-SIGNATURE", b64(JSON.stringify(payload)));
      })
      .catch(function (error) {
        busy(false);
        message.textContent = W.walletError(error);
      });
  }

  function siwe(info, address) {
    var lines = [info.domain + " wants you to sign in with your Ethereum account:", address, ""];
    lines.push.apply(lines, info.statement ? [info.statement, ""] : [""]); // EIP-4361's blank lines
    lines.push(
      "URI: " + info.uri,
      "Version: " + info.version,
      "Chain ID: " + Number(offer.network.split(":")[1]),
      "Nonce: " + info.nonce,
      "Issued At: " + info.issuedAt
    );
    if (info.resources) {
      lines.push("Resources:");
      info.resources.forEach(function (r) {
        lines.push("- " + r);
      });
    }
    return lines.join("\n");
  }

  function hexText(text) {
    var bytes = new TextEncoder().encode(text);
    var hex = "0x";
    for (var i = 0; i < bytes.length; i++) {
      hex += ("0" + bytes[i].toString(16)).slice(-2);
    }
    return hex;
  }

  function signInAgain() {
    var info = signIn.info;
    var from = null;
    busy(true);
    message.textContent = "Sign the message in your wallet: it costs nothing.";
    account()
      .then(function (found) {
        from = found;
        return provider.request({ method: "personal_sign", params: [hexText(siwe(info, from)), from] });
      })
      .then(function (signature) {
        var signed = {
          domain: info.domain,
          address: from,
          uri: info.uri,
          version: info.version,
          chainId: offer.network,
          type: "eip191",
          nonce: info.nonce,
          issuedAt: info.issuedAt,
          resources: info.resources,
          signature: signature
        };
        if (info.statement) {
          signed.statement = info.statement;
        }
        message.textContent = "Signed. Checking your payment…";
        return retry("SIGN-IN-WITH-X", b64(JSON.stringify(signed)));
      })
      .catch(function (error) {
        busy(false);
        message.textContent =
          error && error.status === 402
            ? "This wallet has no payment for this page that lets it back in. Pay to continue."
            : W.walletError(error);
      });
  }

  if (!provider || typeof provider.request !== "function") {
    payButton.disabled = true;
    if (signInButton) {
      signInButton.disabled = true;
    }
    message.textContent = "No browser wallet was found. Open this page in a browser with a wallet to pay.";
    return;
  }
  payButton.addEventListener("click", pay);
  if (signInButton && signIn) {
    signInButton.addEventListener("click", signInAgain);
  }
})();
