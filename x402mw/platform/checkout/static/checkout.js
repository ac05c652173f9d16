// Hosted checkout: countdown, copy buttons, and polling of transfer-status until the order settles.
// The page is complete without this file; it only keeps the page current. No external resources.
(function () {
  "use strict";

  var root = document.getElementById("checkout");
  if (!root) {
    return;
  }
  var statusUrl = root.getAttribute("data-status-url");
  var pollMs = Math.max(1, Number(root.getAttribute("data-poll-seconds")) || 3) * 1000;
  var received = root.getAttribute("data-amount-received");
  var serverNow = Date.parse(root.getAttribute("data-server-now") || "");
  var skew = isNaN(serverNow) ? 0 : serverNow - Date.now();
  var statusText = {
    requires_payment: "Awaiting payment",
    processing: "Payment received, confirming",
    succeeded: "Paid",
    refunded: "Refunded",
    canceled: "Cancelled",
    expired: "Expired"
  };
  var finished = { succeeded: true, refunded: true, canceled: true, expired: true };

  var panels = { requires_payment: "pay", processing: "processing", succeeded: "paid" };

  function showPanel(name, reason) {
    var panels = root.querySelectorAll("[data-panel]");
    for (var i = 0; i < panels.length; i++) {
      panels[i].hidden = panels[i].getAttribute("data-panel") !== name;
    }
    var extras = root.querySelectorAll("[data-panel-also]");
    for (var j = 0; j < extras.length; j++) {
      extras[j].hidden = extras[j].getAttribute("data-panel-also") !== name;
    }
    if (name === "closed") {
      var reasons = root.querySelectorAll("[data-reason]");
      for (var k = 0; k < reasons.length; k++) {
        reasons[k].hidden = reasons[k].getAttribute("data-reason") !== reason;
      }
    }
  }

  function setStatus(status) {
    var element = document.getElementById("status");
    var text = statusText[status] || status;
    if (element.textContent !== text) {
      element.textContent = text;
    }
    element.setAttribute("data-state", status);
    root.setAttribute("data-status", status);
  }

  function apply(order) {
    setStatus(order.status);
    if (order.txHash) {
      var tx = document.getElementById("tx-hash");
      if (tx) {
        tx.textContent = order.txHash;
        document.getElementById("paid-tx").hidden = false;
      }
    }
    if (order.status === "requires_payment" && order.amountReceived !== received) {
      window.location.reload(); // part of it arrived: show what is still due, with a new QR code
      return;
    }
    showPanel(panels[order.status] || "closed", order.status);
  }

  function post(url, body) {
    return window
      .fetch(url, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body || {}),
        credentials: "omit"
      })
      .then(function (response) {
        return response.json().then(function (data) {
          if (!response.ok) {
            var error = new Error((data.error && data.error.message) || "The request failed");
            error.status = response.status;
            throw error;
          }
          return data;
        });
      });
  }

  var timer = null;
  function schedule(ms) {
    if (timer) {
      window.clearTimeout(timer);
    }
    timer = window.setTimeout(poll, ms);
  }

  function poll() {
    timer = null;
    post(statusUrl).then(
      function (order) {
        apply(order);
        if (!finished[order.status]) {
          schedule(pollMs);
        }
      },
      function () {
        schedule(pollMs * 2);
      }
    );
  }

  function pad(n) {
    return n < 10 ? "0" + n : String(n);
  }

  function startCountdown() {
    var element = document.getElementById("countdown");
    if (!element) {
      return;
    }
    var end = Date.parse(element.getAttribute("datetime"));
    if (isNaN(end)) {
      return;
    }
    function tick() {
      var left = Math.max(0, Math.floor((end - (Date.now() + skew)) / 1000));
      var d = Math.floor(left / 86400);
      var h = Math.floor((left % 86400) / 3600);
      var m = Math.floor((left % 3600) / 60);
      var s = left % 60;
      var clock = (d || h ? h + ":" + pad(m) : String(m)) + ":" + pad(s);
      element.textContent = d ? d + (d === 1 ? " day " : " days ") + clock : clock;
      if (left === 0) {
        if (root.getAttribute("data-status") === "requires_payment") {
          showPanel("closed", "expired");
        }
        return;
      }
      window.setTimeout(tick, 1000);
    }
    tick();
  }

  function enableCopy() {
    var buttons = root.querySelectorAll("button[data-copy]");
    for (var i = 0; i < buttons.length; i++) {
      (function (button) {
        if (!navigator.clipboard) {
          button.hidden = true;
          return;
        }
        button.addEventListener("click", function () {
          navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
            button.textContent = "Copied";
            window.setTimeout(function () {
              button.textContent = "Copy";
            }, 2000);
          });
        });
      })(buttons[i]);
    }
  }

  function autoSubmitPicker() {
    var select = document.getElementById("option");
    var submit = document.getElementById("option-submit");
    if (select && submit) {
      submit.hidden = true;
      select.addEventListener("change", function () {
        select.form.submit();
      });
    }
  }

  // Wallet payment: the browser's wallet (EIP-1193) sends the token transfer that `attempts` describes,
  // and `sync` reports its hash so the platform looks for it at once.
  function setUpWallet() {
    var box = document.getElementById("wallet");
    var button = document.getElementById("wallet-pay");
    if (!box || !button) {
      return;
    }
    var message = document.getElementById("wallet-message");
    var provider = window.ethereum;
    if (!provider || typeof provider.request !== "function") {
      if (box.getAttribute("data-only") === "true") {
        box.hidden = false;
        button.disabled = true;
        message.textContent =
          "No browser wallet was found. Open this page in a browser with a wallet to pay.";
      }
      return;
    }
    box.hidden = false;
    var transfer = document.getElementById("transfer");
    if (transfer) {
      document.getElementById("transfer-title").textContent = "Or pay by transfer";
      if (transfer.getAttribute("data-default-open") !== "true") {
        transfer.open = false; // a wallet is here: the transfer panel starts closed unless the merchant asks
      }
    }
    button.addEventListener("click", function () {
      var network = box.getAttribute("data-network");
      var account = null;
      var attempt = null;
      button.disabled = true;
      message.textContent = "Confirm in your wallet.";
      provider
        .request({ method: "eth_requestAccounts" })
        .then(function (accounts) {
          account = accounts[0];
          return post(box.getAttribute("data-attempts-url"), {
            network: network,
            currency: box.getAttribute("data-currency"),
            method: "wallet"
          });
        })
        .then(function (answer) {
          attempt = answer;
          return provider.request({ method: "eth_chainId" });
        })
        .then(function (chainId) {
          if (String(chainId).toLowerCase() !== attempt.transaction.chainId) {
            return provider.request({
              method: "wallet_switchEthereumChain",
              params: [{ chainId: attempt.transaction.chainId }]
            });
          }
          return null;
        })
        .then(function () {
          var tx = attempt.transaction;
          return provider.request({
            method: "eth_sendTransaction",
            params: [{ from: account, to: tx.to, data: tx.data, value: tx.value }]
          });
        })
        .then(function (txHash) {
          message.textContent = "Sent. Waiting for the network to include it.";
          return post(box.getAttribute("data-sync-url"), { txHash: txHash, network: network });
        })
        .then(function (order) {
          message.textContent = "";
          apply(order);
          if (!finished[order.status]) {
            schedule(pollMs);
          }
        })
        .catch(function (error) {
          button.disabled = false;
          message.textContent =
            error && error.code === 4001
              ? "You cancelled in your wallet. You can try again."
              : "The wallet could not pay: " + ((error && error.message) || "unknown error") + ".";
        });
    });
  }

  enableCopy();
  autoSubmitPicker();
  startCountdown();
  setUpWallet();
  if (!finished[root.getAttribute("data-status")]) {
    schedule(pollMs);
  }
  window.addEventListener("pagehide", function () {
    if (timer) {
      window.clearTimeout(timer);
    }
  });
})();
