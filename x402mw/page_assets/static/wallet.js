/* The browser wallet code shared by the hosted checkout (checkout.js) and the sellers' paywall:
   EIP-1193 only (window.ethereum), no library. window.X402Wallet = {walletError, useChain,
   signAuthorization}. */
(function () {
  "use strict";

  function walletError(error) {
    if (error && error.code === 4001) {
      return "You cancelled in your wallet. You can try again.";
    }
    if (error && error.status) {
      return error.message; // the server's own explanation
    }
    return "The wallet could not pay: " + ((error && error.message) || "unknown error") + ".";
  }

  // Switch the wallet to chainId (0x-hex), offering the network by its name if the wallet lacks it.
  function useChain(provider, chainId, name) {
    var wanted = String(chainId).toLowerCase();
    return provider.request({ method: "eth_chainId" }).then(function (current) {
      if (String(current).toLowerCase() === wanted) {
        return null;
      }
      return provider
        .request({ method: "wallet_switchEthereumChain", params: [{ chainId: wanted }] })
        .catch(function (error) {
          if (!error || error.code !== 4902) {
            throw error;
          }
          // The wallet does not know the network: offer it, then switch (wallets that need more than
          // its id and name to add it say so, and the buyer adds it by hand).
          return provider
            .request({ method: "wallet_addEthereumChain", params: [{ chainId: wanted, chainName: name }] })
            .then(
              function () {
                return provider.request({ method: "wallet_switchEthereumChain", params: [{ chainId: wanted }] });
              },
              function () {
                throw new Error("add " + name + " to your wallet, then try again");
              }
            );
        });
    });
  }

  // Sign an EIP-3009 authorization (EIP-712 typed data) from account: gasless for the payer.
  function signAuthorization(provider, account, typed) {
    var message = {};
    for (var key in typed.message) {
      if (Object.prototype.hasOwnProperty.call(typed.message, key)) {
        message[key] = typed.message[key];
      }
    }
    message.from = account;
    var request = { types: typed.types, primaryType: typed.primaryType, domain: typed.domain, message: message };
    return provider
      .request({ method: "eth_signTypedData_v4", params: [account, JSON.stringify(request)] })
      .then(function (signature) {
        return { message: message, signature: signature };
      });
  }

  window.X402Wallet = { walletError: walletError, useChain: useChain, signAuthorization: signAuthorization };
})();
