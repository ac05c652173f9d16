/*
 * x402mw checkout.js: the checkout button and the checkout panel, for a merchant's own pages.
 *
 *   <script src="{checkout_url_base}/static/x402mw-checkout.js"></script>
 *
 *   X402mwCheckout.open({checkoutUrl, mode: "popup" | "redirect", onComplete})   // from a click
 *   X402mwCheckout.mount(element, {paymentId, onComplete})                       // -> {frame, unmount}
 *
 * No build step and no request to anywhere but the platform that served this file. onComplete is for
 * instant UI feedback only: grant what was bought from the payment_intent.succeeded webhook, never from
 * this callback. The checkout page talks to this file with postMessage, and each side accepts messages
 * only from the other's origin.
 */
(function (global) {
  "use strict";

  var SOURCE = "x402mw-checkout";
  var PROTOCOL = 1;
  var POPUP_NAME = "x402mw-checkout";
  var PAYMENT_ID = /^(?:pi_)?([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$/;
  var MIN_HEIGHT = 160;
  var MAX_HEIGHT = 4000;

  // Where the platform's checkout lives: the URL this file was loaded from, less /static/<file>.
  var script = document.currentScript;
  var checkoutBase = null;
  if (script && script.src) {
    checkoutBase = script.src.replace(/\/static\/x402mw-checkout\.js(?:[?#].*)?$/, "");
    if (checkoutBase === script.src) {
      checkoutBase = null; // served from elsewhere: mount() then needs a checkoutUrl
    }
  }

  function CheckoutError(code, message) {
    var error = new Error(message);
    error.name = "CheckoutError";
    error.code = code;
    return error;
  }

  function parseUrl(value, what) {
    if (typeof value !== "string" || !value) {
      throw CheckoutError("invalid_checkout_url", what + " is required: the checkoutUrl the API answered");
    }
    var url;
    try {
      url = new URL(value, global.location.href);
    } catch (e) {
      throw CheckoutError("invalid_checkout_url", what + " is not a URL: " + value);
    }
    if (url.protocol !== "https:" && url.protocol !== "http:") {
      throw CheckoutError("invalid_checkout_url", what + " must be an http(s) URL: " + value);
    }
    return url;
  }

  // The checkout page learns from the URL how it is shown and whom to tell; it sends its messages to
  // that origin only, so a page that names an origin not its own receives nothing.
  function embedded(url, mode) {
    var origin = global.location.origin;
    if (!origin || origin === "null") {
      throw CheckoutError("unsupported_page", "checkout.js needs a page served over http(s)");
    }
    var copy = new URL(url.href);
    copy.searchParams.set("embed", mode);
    copy.searchParams.set("origin", origin);
    return copy;
  }

  function isFunction(value) {
    return typeof value === "function";
  }

  // One session per popup or panel: it listens to its own window only, from the checkout's origin only,
  // and calls onComplete once per outcome.
  function Session(origin, peer, onComplete, onMessage) {
    var self = this;
    self.origin = origin;
    self.peer = peer;
    self.paymentId = null;
    self.status = null;
    self.reported = null;
    self.onComplete = onComplete;
    self.listener = function (event) {
      if (event.origin !== self.origin || event.source !== self.peer()) {
        return;
      }
      var data = event.data;
      if (!data || data.source !== SOURCE || data.version !== PROTOCOL || typeof data.type !== "string") {
        return;
      }
      if (typeof data.paymentId === "string") {
        self.paymentId = data.paymentId;
      }
      if (typeof data.status === "string") {
        self.status = data.status;
      }
      if (data.type === "complete") {
        self.complete(data.status, data.reason);
      }
      if (onMessage) {
        onMessage(data);
      }
    };
    global.addEventListener("message", self.listener);
  }

  Session.prototype.complete = function (status, reason) {
    if (typeof status !== "string" || this.reported === status) {
      return;
    }
    this.reported = status;
    var result = { paymentId: this.paymentId, status: status };
    if (typeof reason === "string") {
      result.reason = reason;
    }
    if (isFunction(this.onComplete)) {
      var callback = this.onComplete;
      global.setTimeout(function () {
        callback(result); // outside our listener: an error in the merchant's callback is theirs to see
      }, 0);
    }
  };

  Session.prototype.stop = function () {
    global.removeEventListener("message", this.listener);
  };

  var popupSession = null;
  var popupWatch = null;

  function endPopupSession() {
    if (popupWatch) {
      global.clearInterval(popupWatch);
      popupWatch = null;
    }
    if (popupSession) {
      popupSession.stop();
      popupSession = null;
    }
  }

  /**
   * The checkout button: open the order's checkoutUrl in a popup (the default) or go there
   * (mode "redirect"). Call it from a click handler: browsers block popups opened otherwise, and then
   * this throws an error whose code is "popup_blocked" (fall back to mode "redirect").
   * onComplete({paymentId, status, reason?}): status "succeeded" when the order is paid, "canceled"
   * when the buyer cancels or closes the popup before paying ("processing" when closed while the
   * payment is being confirmed), or the order's own final status ("expired", "canceled", "refunded").
   * Returns {window, close()} for a popup, null for a redirect.
   */
  function open(options) {
    options = options || {};
    var mode = options.mode === undefined ? "popup" : options.mode;
    if (mode !== "popup" && mode !== "redirect") {
      throw CheckoutError("invalid_mode", 'mode is "popup" or "redirect", not ' + String(mode));
    }
    var url = parseUrl(options.checkoutUrl, "checkoutUrl");
    if (mode === "redirect") {
      global.location.assign(url.href);
      return null;
    }
    var target = embedded(url, "popup");
    var width = 480;
    var height = 760;
    var screenX = global.screenX || 0;
    var screenY = global.screenY || 0;
    var left = Math.max(0, Math.round(screenX + ((global.outerWidth || width) - width) / 2));
    var top = Math.max(0, Math.round(screenY + ((global.outerHeight || height) - height) / 2));
    var features = "popup=yes,width=" + width + ",height=" + height + ",left=" + left + ",top=" + top;
    var popup = null;
    try {
      popup = global.open(target.href, POPUP_NAME, features);
    } catch (e) {
      popup = null;
    }
    if (!popup || popup.closed) {
      throw CheckoutError(
        "popup_blocked",
        'The browser blocked the checkout popup. Call open() from a click, or use mode: "redirect".'
      );
    }
    endPopupSession(); // one checkout popup at a time: a second open() reuses the window
    var session = new Session(
      target.origin,
      function () {
        return popup;
      },
      options.onComplete
    );
    var match = PAYMENT_ID.exec(url.pathname.split("/").pop() || "");
    session.paymentId = match ? match[1].toLowerCase() : null;
    popupSession = session;
    var closedSeen = false;
    popupWatch = global.setInterval(function () {
      if (!popup.closed) {
        return;
      }
      // Reported on the tick after the one that first saw it closed: what the popup said as it
      // closed (the buyer's cancel, a payment) may still be on its way as a message, and wins.
      if (!closedSeen) {
        closedSeen = true;
        return;
      }
      if (!session.reported) {
        session.complete(session.status === "processing" ? "processing" : "canceled", "closed");
      }
      if (popupSession === session) {
        endPopupSession();
      }
    }, 400);
    try {
      popup.focus();
    } catch (e) {
      // some browsers refuse focus to a window they just opened; it is in front anyway
    }
    return {
      window: popup,
      close: function () {
        if (popupSession === session) {
          endPopupSession();
        }
        if (!popup.closed) {
          popup.close();
        }
      }
    };
  }

  /**
   * The checkout panel: embed the hosted checkout of one order in ``element`` (an element or a CSS
   * selector). options: {paymentId} (bare UUID or pi_<uuid>) or {checkoutUrl}; onComplete as for
   * open(); title (the frame's accessible name, default "Checkout"). The frame follows the height of
   * its content. Returns {frame, unmount()}.
   */
  function mount(element, options) {
    options = options || {};
    if (typeof element === "string") {
      element = document.querySelector(element);
    }
    if (!element || element.nodeType !== 1) {
      throw CheckoutError("invalid_element", "mount() needs an element (or a selector) to put the panel in");
    }
    var url;
    if (options.checkoutUrl !== undefined) {
      url = parseUrl(options.checkoutUrl, "checkoutUrl");
    } else {
      var match = PAYMENT_ID.exec(typeof options.paymentId === "string" ? options.paymentId : "");
      if (!match) {
        throw CheckoutError("invalid_payment_id", "paymentId is the order's id (a UUID, or pi_<uuid>)");
      }
      if (!checkoutBase) {
        throw CheckoutError(
          "invalid_checkout_url",
          "Load checkout.js from the platform ({checkout_url_base}/static/x402mw-checkout.js), or pass checkoutUrl"
        );
      }
      url = new URL(checkoutBase + "/pi_" + match[1].toLowerCase());
    }
    var target = embedded(url, "panel");
    var frame = document.createElement("iframe");
    frame.src = target.href;
    frame.title = typeof options.title === "string" && options.title ? options.title : "Checkout";
    frame.setAttribute("allow", "clipboard-write");
    frame.setAttribute("data-x402mw-checkout", "panel");
    frame.style.display = "block";
    frame.style.width = "100%";
    frame.style.border = "0";
    frame.style.height = "520px";
    var session = new Session(
      target.origin,
      function () {
        return frame.contentWindow;
      },
      options.onComplete,
      function (data) {
        if (typeof data.height === "number" && isFinite(data.height)) {
          var height = Math.min(MAX_HEIGHT, Math.max(MIN_HEIGHT, Math.ceil(data.height)));
          frame.style.height = height + "px";
        }
      }
    );
    element.appendChild(frame);
    return {
      frame: frame,
      unmount: function () {
        session.stop();
        if (frame.parentNode) {
          frame.parentNode.removeChild(frame);
        }
      }
    };
  }

  global.X402mwCheckout = { open: open, mount: mount, version: PROTOCOL };
})(window);
