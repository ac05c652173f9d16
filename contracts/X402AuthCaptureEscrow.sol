// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// @dev The EIP-712-style type hash of `PaymentInfo` (commerce-payments' `PAYMENT_INFO_TYPEHASH`).
bytes32 constant _PAYMENT_INFO_TYPEHASH = keccak256(
    "PaymentInfo(address operator,address payer,address receiver,address token,uint120 maxAmount,uint48 preApprovalExpiry,uint48 authorizationExpiry,uint48 refundExpiry,uint16 minFeeBps,uint16 maxFeeBps,address feeReceiver,uint256 salt)"
);

interface IX402AuthCaptureToken {
    function balanceOf(address account) external view returns (uint256);
    function transfer(address to, uint256 value) external returns (bool);
    function transferFrom(address from, address to, uint256 value) external returns (bool);
}

interface IX402AuthCaptureERC3009 {
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes calldata signature
    ) external;
}

interface IX402AuthCapturePermit2 {
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    struct SignatureTransferDetails {
        address to;
        uint256 requestedAmount;
    }

    function permitTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes calldata signature
    ) external;
}

/// @dev ERC-20 calls that accept a token returning nothing and refuse a `false` answer, a revert
///      (its data passed on) or an address without code.
library X402AuthCaptureTransfers {
    error TokenTransferFailed(address token);

    function safeTransfer(address token, address to, uint256 amount) internal {
        _call(token, abi.encodeWithSelector(IX402AuthCaptureToken.transfer.selector, to, amount));
    }

    function safeTransferFrom(address token, address from, address to, uint256 amount) internal {
        _call(token, abi.encodeWithSelector(IX402AuthCaptureToken.transferFrom.selector, from, to, amount));
    }

    function _call(address token, bytes memory data) private {
        (bool ok, bytes memory answer) = token.call(data);
        if (!ok) {
            if (answer.length == 0) revert TokenTransferFailed(token);
            assembly {
                revert(add(answer, 0x20), mload(answer))
            }
        }
        bool accepted = answer.length == 0 ? token.code.length > 0 : abi.decode(answer, (bool));
        if (!accepted) revert TokenTransferFailed(token);
    }
}

/// @title X402AuthCaptureTokenStore
/// @notice Holds the escrowed tokens of one operator's payments, so that one operator's payments can
///         never pay out another's funds. Created by the escrow with CREATE2 (salt: the operator's
///         address) the first time it pays something out of it; tokens can arrive before that.
contract X402AuthCaptureTokenStore {
    /// @notice The escrow that created this store, the only caller of `sendTokens`.
    address public immutable authCaptureEscrow;

    error OnlyAuthCaptureEscrow();
    error TokenTransferFailed(address token);

    constructor() {
        authCaptureEscrow = msg.sender;
    }

    /// @notice Sends `amount` of `token` to `recipient`: the token's revert is passed on; a `false`
    ///         answer, or no answer from an address without code, is `TokenTransferFailed(token)`.
    function sendTokens(address token, address recipient, uint256 amount) external returns (bool) {
        if (msg.sender != authCaptureEscrow) revert OnlyAuthCaptureEscrow();
        // The transfer in assembly keeps the store's code small: every operator's first payout
        // deploys one, and code costs 200 gas a byte.
        assembly {
            let free := mload(0x40)
            mstore(0x00, 0xa9059cbb) // transfer(address,uint256)
            mstore(0x20, recipient)
            mstore(0x40, amount)
            let ok := call(gas(), token, 0, 0x1c, 0x44, 0x00, 0x20)
            if iszero(ok) {
                returndatacopy(0x00, 0x00, returndatasize())
                revert(0x00, returndatasize())
            }
            let answered := or(and(eq(returndatasize(), 0), gt(extcodesize(token), 0)), and(gt(returndatasize(), 31), eq(mload(0x00), 1)))
            if iszero(answered) {
                mstore(0x00, 0x2b596cb7) // TokenTransferFailed(address)
                mstore(0x20, token)
                revert(0x1c, 0x24)
            }
            mstore(0x40, free) // the free memory pointer, overwritten above
        }
        return true;
    }
}

/// @notice What the escrow asks of a token collector (the commerce-payments `TokenCollector` interface).
interface IX402AuthCaptureCollector {
    enum CollectorType {
        Payment,
        Refund
    }

    function collectorType() external view returns (CollectorType);

    function collectTokens(
        X402AuthCaptureEscrowBase.PaymentInfo calldata paymentInfo,
        address tokenStore,
        uint256 amount,
        bytes calldata collectorData
    ) external;
}

/// @title X402AuthCaptureEscrowBase
/// @notice What both deployments of the auth-capture escrow share (the interface of Base's
///         commerce-payments `AuthCaptureEscrow`): a payer's tokens are `authorize`d into escrow
///         through a token collector, then the payment's `operator` `capture`s them to the receiver
///         (less a fee within the payer's bounds), in one or several parts before
///         `authorizationExpiry`, `void`s what is left, or `refund`s what was captured before
///         `refundExpiry`; from `authorizationExpiry` on the payer alone may `reclaim` what is still
///         held. `charge` authorizes and captures in one call.
/// @dev Placed at its canonical address without a constructor (anvil_setCode, the dev chain's
///      genesis): no immutables; the re-entrancy lock lives in ordinary storage (`paris`, no
///      transient storage). Funds sit in one `X402AuthCaptureTokenStore` per operator.
///
///      Invariants, per payment: `capturableAmount + refundableAmount` never exceeds what was
///      authorized (or charged), which never exceeds `maxAmount`; a capture only moves
///      `capturable` to `refundable`; a refund only lowers `refundable`; a void or a reclaim only
///      zeroes `capturable`; a payment is collected at most once.
abstract contract X402AuthCaptureEscrowBase {
    /// @notice A payment's terms (the commerce-payments struct, field for field).
    struct PaymentInfo {
        address operator;
        address payer;
        address receiver;
        address token;
        uint120 maxAmount;
        uint48 preApprovalExpiry;
        uint48 authorizationExpiry;
        uint48 refundExpiry;
        uint16 minFeeBps;
        uint16 maxFeeBps;
        address feeReceiver;
        uint256 salt;
    }

    struct PaymentState {
        bool hasCollectedPayment;
        uint120 capturableAmount;
        uint120 refundableAmount;
    }

    bytes32 public constant PAYMENT_INFO_TYPEHASH = _PAYMENT_INFO_TYPEHASH;

    uint16 internal constant _MAX_FEE_BPS = 10_000;

    /// @notice Each payment's state, by `getHash(paymentInfo)`.
    mapping(bytes32 paymentInfoHash => PaymentState) public paymentState;
    uint256 private _lock; // 2 while a guarded call runs

    event PaymentAuthorized(
        bytes32 indexed paymentInfoHash, PaymentInfo paymentInfo, uint256 amount, address tokenCollector
    );
    event PaymentVoided(bytes32 indexed paymentInfoHash, uint256 amount);
    event PaymentReclaimed(bytes32 indexed paymentInfoHash, uint256 amount);
    event PaymentRefunded(bytes32 indexed paymentInfoHash, uint256 amount, address tokenCollector);
    event TokenStoreCreated(address indexed operator, address tokenStore);

    error InvalidSender(address sender, address expected);
    error ZeroAmount();
    error AmountOverflow(uint256 amount, uint256 limit);
    error ExceedsMaxAmount(uint256 amount, uint256 maxAmount);
    error AfterPreApprovalExpiry(uint48 timestamp, uint48 expiry);
    error InvalidExpiries(uint48 preApproval, uint48 authorization, uint48 refund);
    error FeeBpsOverflow(uint16 feeBps);
    error InvalidFeeBpsRange(uint16 minFeeBps, uint16 maxFeeBps);
    error ZeroFeeReceiver();
    error InvalidFeeReceiver(address attempted, address expected);
    error InvalidCollectorForOperation();
    error TokenCollectionFailed();
    error PaymentAlreadyCollected(bytes32 paymentInfoHash);
    error AfterAuthorizationExpiry(uint48 timestamp, uint48 expiry);
    error InsufficientAuthorization(bytes32 paymentInfoHash, uint256 authorizedAmount, uint256 requestedAmount);
    error ZeroAuthorization(bytes32 paymentInfoHash);
    error BeforeAuthorizationExpiry(uint48 timestamp, uint48 expiry);
    error AfterRefundExpiry(uint48 timestamp, uint48 expiry);
    error RefundExceedsCapture(uint256 refund, uint256 captured);
    error Reentrancy();

    modifier nonReentrant() {
        if (_lock == 2) revert Reentrancy();
        _lock = 2;
        _;
        _lock = 1;
    }

    modifier onlySender(address sender) {
        if (msg.sender != sender) revert InvalidSender(msg.sender, sender);
        _;
    }

    modifier validAmount(uint256 amount) {
        if (amount == 0) revert ZeroAmount();
        if (amount > type(uint120).max) revert AmountOverflow(amount, type(uint120).max);
        _;
    }

    /// @notice The operator puts `amount` (at most `maxAmount`) of the payer's tokens on hold, pulled
    ///         by `tokenCollector` (a payment collector) with the payer's authorization in
    ///         `collectorData`. Before `preApprovalExpiry`; once per payment.
    function authorize(
        PaymentInfo calldata paymentInfo,
        uint256 amount,
        address tokenCollector,
        bytes calldata collectorData
    ) external nonReentrant onlySender(paymentInfo.operator) validAmount(amount) {
        _validatePayment(paymentInfo, amount);
        bytes32 paymentInfoHash = _startCollection(paymentInfo, uint120(amount), 0);
        emit PaymentAuthorized(paymentInfoHash, paymentInfo, amount, tokenCollector);
        _collectTokens(paymentInfo, amount, tokenCollector, collectorData, IX402AuthCaptureCollector.CollectorType.Payment);
    }

    /// @notice The operator returns everything still on hold to the payer, at any time; refused
    ///         when nothing is held (so a second void fails).
    function void(PaymentInfo calldata paymentInfo) external nonReentrant onlySender(paymentInfo.operator) {
        bytes32 paymentInfoHash = getHash(paymentInfo);
        uint256 held = _release(paymentInfoHash);
        emit PaymentVoided(paymentInfoHash, held);
        _sendTokens(paymentInfo.operator, paymentInfo.token, paymentInfo.payer, held);
    }

    /// @notice The payer takes back everything still on hold, from `authorizationExpiry` on.
    function reclaim(PaymentInfo calldata paymentInfo) external nonReentrant onlySender(paymentInfo.payer) {
        if (block.timestamp < paymentInfo.authorizationExpiry) {
            revert BeforeAuthorizationExpiry(uint48(block.timestamp), paymentInfo.authorizationExpiry);
        }
        bytes32 paymentInfoHash = getHash(paymentInfo);
        uint256 held = _release(paymentInfoHash);
        emit PaymentReclaimed(paymentInfoHash, held);
        _sendTokens(paymentInfo.operator, paymentInfo.token, paymentInfo.payer, held);
    }

    /// @notice The operator gives back `amount` (at most what was captured and not refunded yet) to
    ///         the payer before `refundExpiry`; the tokens come in through `tokenCollector` (a
    ///         refund collector, e.g. from the operator) and go out to the payer.
    function refund(
        PaymentInfo calldata paymentInfo,
        uint256 amount,
        address tokenCollector,
        bytes calldata collectorData
    ) external nonReentrant onlySender(paymentInfo.operator) validAmount(amount) {
        if (block.timestamp >= paymentInfo.refundExpiry) {
            revert AfterRefundExpiry(uint48(block.timestamp), paymentInfo.refundExpiry);
        }
        bytes32 paymentInfoHash = getHash(paymentInfo);
        uint120 captured = paymentState[paymentInfoHash].refundableAmount;
        if (amount > captured) revert RefundExceedsCapture(amount, captured);
        paymentState[paymentInfoHash].refundableAmount = captured - uint120(amount);
        emit PaymentRefunded(paymentInfoHash, amount, tokenCollector);
        _collectTokens(paymentInfo, amount, tokenCollector, collectorData, IX402AuthCaptureCollector.CollectorType.Refund);
        _sendTokens(paymentInfo.operator, paymentInfo.token, paymentInfo.payer, amount);
    }

    /// @notice The payment's identifier: `keccak256(abi.encode(chainId, this escrow,
    ///         keccak256(abi.encode(PAYMENT_INFO_TYPEHASH, paymentInfo))))`.
    function getHash(PaymentInfo memory paymentInfo) public view returns (bytes32) {
        return keccak256(abi.encode(block.chainid, address(this), keccak256(abi.encode(PAYMENT_INFO_TYPEHASH, paymentInfo))));
    }

    /// @notice Where `operator`'s escrowed tokens are held (created on its first payout).
    function getTokenStore(address operator) public view returns (address) {
        bytes32 codeHash = keccak256(type(X402AuthCaptureTokenStore).creationCode);
        return address(
            uint160(uint256(keccak256(abi.encodePacked(bytes1(0xff), address(this), _storeSalt(operator), codeHash))))
        );
    }

    // --- for the deployments ------------------------------------------------------------------------

    /// @dev Refuses a collected payment, records the new one's state, returns its hash.
    function _startCollection(PaymentInfo calldata paymentInfo, uint120 capturable, uint120 refundable)
        internal
        returns (bytes32 paymentInfoHash)
    {
        paymentInfoHash = getHash(paymentInfo);
        if (paymentState[paymentInfoHash].hasCollectedPayment) revert PaymentAlreadyCollected(paymentInfoHash);
        paymentState[paymentInfoHash] =
            PaymentState({hasCollectedPayment: true, capturableAmount: capturable, refundableAmount: refundable});
    }

    /// @dev Moves `amount` from the hold to what was captured; the caller pays it out.
    function _takeCapture(PaymentInfo calldata paymentInfo, uint256 amount) internal returns (bytes32 paymentInfoHash) {
        if (block.timestamp >= paymentInfo.authorizationExpiry) {
            revert AfterAuthorizationExpiry(uint48(block.timestamp), paymentInfo.authorizationExpiry);
        }
        paymentInfoHash = getHash(paymentInfo);
        PaymentState memory state = paymentState[paymentInfoHash];
        if (amount > state.capturableAmount) {
            revert InsufficientAuthorization(paymentInfoHash, state.capturableAmount, amount);
        }
        state.capturableAmount -= uint120(amount);
        state.refundableAmount += uint120(amount);
        paymentState[paymentInfoHash] = state;
    }

    /// @dev The fee receiver rules: a non-zero fee needs a receiver, and the payer's `feeReceiver`,
    ///      when set, is the only one.
    function _checkFeeReceiver(PaymentInfo calldata paymentInfo, bool feeCharged, address feeReceiver) internal pure {
        if (feeReceiver == address(0) && feeCharged) revert ZeroFeeReceiver();
        address fixedReceiver = paymentInfo.feeReceiver;
        if (fixedReceiver != address(0) && fixedReceiver != feeReceiver) {
            revert InvalidFeeReceiver(feeReceiver, fixedReceiver);
        }
    }

    /// @dev The checks of a payment's terms before its tokens are collected.
    function _validatePayment(PaymentInfo calldata paymentInfo, uint256 amount) internal view {
        if (amount > paymentInfo.maxAmount) revert ExceedsMaxAmount(amount, paymentInfo.maxAmount);
        uint48 preApproval = paymentInfo.preApprovalExpiry;
        uint48 authorization = paymentInfo.authorizationExpiry;
        uint48 refundBy = paymentInfo.refundExpiry;
        if (block.timestamp >= preApproval) revert AfterPreApprovalExpiry(uint48(block.timestamp), preApproval);
        if (preApproval > authorization || authorization > refundBy) {
            revert InvalidExpiries(preApproval, authorization, refundBy);
        }
        if (paymentInfo.maxFeeBps > _MAX_FEE_BPS) revert FeeBpsOverflow(paymentInfo.maxFeeBps);
        if (paymentInfo.minFeeBps > paymentInfo.maxFeeBps) {
            revert InvalidFeeBpsRange(paymentInfo.minFeeBps, paymentInfo.maxFeeBps);
        }
    }

    /// @dev Has `tokenCollector` (of the kind the operation needs) bring exactly `amount` into the
    ///      operator's token store.
    function _collectTokens(
        PaymentInfo calldata paymentInfo,
        uint256 amount,
        address tokenCollector,
        bytes calldata collectorData,
        IX402AuthCaptureCollector.CollectorType kind
    ) internal {
        if (tokenCollector.code.length == 0) revert InvalidCollectorForOperation();
        if (IX402AuthCaptureCollector(tokenCollector).collectorType() != kind) revert InvalidCollectorForOperation();
        address token = paymentInfo.token;
        address store = getTokenStore(paymentInfo.operator);
        uint256 before = IX402AuthCaptureToken(token).balanceOf(store);
        IX402AuthCaptureCollector(tokenCollector).collectTokens(paymentInfo, store, amount, collectorData);
        if (IX402AuthCaptureToken(token).balanceOf(store) != before + amount) revert TokenCollectionFailed();
    }

    /// @dev Pays `amount` less `feeAmount` to `receiver` and `feeAmount` to `feeReceiver` from the
    ///      sender's (the operator's) token store.
    function _distributeTokens(address token, address receiver, uint256 amount, uint256 feeAmount, address feeReceiver)
        internal
    {
        if (feeAmount > 0) _sendTokens(msg.sender, token, feeReceiver, feeAmount);
        if (amount > feeAmount) _sendTokens(msg.sender, token, receiver, amount - feeAmount);
    }

    function _sendTokens(address operator, address token, address recipient, uint256 amount) internal {
        address store = getTokenStore(operator);
        if (store.code.length == 0) {
            store = address(new X402AuthCaptureTokenStore{salt: _storeSalt(operator)}());
            emit TokenStoreCreated(operator, store);
        }
        X402AuthCaptureTokenStore(store).sendTokens(token, recipient, amount);
    }

    function _release(bytes32 paymentInfoHash) private returns (uint256 held) {
        held = paymentState[paymentInfoHash].capturableAmount;
        if (held == 0) revert ZeroAuthorization(paymentInfoHash);
        paymentState[paymentInfoHash].capturableAmount = 0;
    }

    function _storeSalt(address operator) private pure returns (bytes32) {
        return bytes32(bytes20(operator));
    }
}

/// @title X402AuthCaptureEscrow
/// @notice The auth-capture escrow of the commerce-payments v1.1 deployment: `charge` and `capture`
///         take the fee as an absolute `feeAmount`, which must lie within
///         `amount * minFeeBps / 10000 … amount * maxFeeBps / 10000`.
contract X402AuthCaptureEscrow is X402AuthCaptureEscrowBase {
    event PaymentCharged(
        bytes32 indexed paymentInfoHash,
        PaymentInfo paymentInfo,
        uint256 amount,
        address tokenCollector,
        uint256 feeAmount,
        address feeReceiver
    );
    event PaymentCaptured(bytes32 indexed paymentInfoHash, uint256 amount, uint256 feeAmount, address feeReceiver);

    error FeeAmountOutOfRange(uint256 feeAmount, uint256 minFeeAmount, uint256 maxFeeAmount);

    /// @notice Collects `amount` from the payer and pays it straight out (less `feeAmount`): a
    ///         payment that is captured as it is authorized, refundable until `refundExpiry`.
    function charge(
        PaymentInfo calldata paymentInfo,
        uint256 amount,
        address tokenCollector,
        bytes calldata collectorData,
        uint256 feeAmount,
        address feeReceiver
    ) external nonReentrant onlySender(paymentInfo.operator) validAmount(amount) {
        _validatePayment(paymentInfo, amount);
        _checkFee(paymentInfo, amount, feeAmount, feeReceiver);
        bytes32 paymentInfoHash = _startCollection(paymentInfo, 0, uint120(amount));
        emit PaymentCharged(paymentInfoHash, paymentInfo, amount, tokenCollector, feeAmount, feeReceiver);
        _collectTokens(paymentInfo, amount, tokenCollector, collectorData, IX402AuthCaptureCollector.CollectorType.Payment);
        _distributeTokens(paymentInfo.token, paymentInfo.receiver, amount, feeAmount, feeReceiver);
    }

    /// @notice Pays `amount` of the hold out (less `feeAmount`), before `authorizationExpiry`; may
    ///         be repeated up to the amount authorized.
    function capture(PaymentInfo calldata paymentInfo, uint256 amount, uint256 feeAmount, address feeReceiver)
        external
        nonReentrant
        onlySender(paymentInfo.operator)
        validAmount(amount)
    {
        _checkFee(paymentInfo, amount, feeAmount, feeReceiver);
        bytes32 paymentInfoHash = _takeCapture(paymentInfo, amount);
        emit PaymentCaptured(paymentInfoHash, amount, feeAmount, feeReceiver);
        _distributeTokens(paymentInfo.token, paymentInfo.receiver, amount, feeAmount, feeReceiver);
    }

    function _checkFee(PaymentInfo calldata paymentInfo, uint256 amount, uint256 feeAmount, address feeReceiver)
        private
        pure
    {
        uint256 minFee = amount * paymentInfo.minFeeBps / _MAX_FEE_BPS;
        uint256 maxFee = amount * paymentInfo.maxFeeBps / _MAX_FEE_BPS;
        if (feeAmount < minFee || feeAmount > maxFee || feeAmount > amount) {
            revert FeeAmountOutOfRange(feeAmount, minFee, maxFee);
        }
        _checkFeeReceiver(paymentInfo, feeAmount > 0, feeReceiver);
    }
}

/// @title X402AuthCaptureEscrowV1_0
/// @notice The auth-capture escrow of the commerce-payments v1.0 deployment: `charge` and `capture`
///         take the fee in basis points, `minFeeBps <= feeBps <= maxFeeBps`, the fee being
///         `amount * feeBps / 10000`.
contract X402AuthCaptureEscrowV1_0 is X402AuthCaptureEscrowBase {
    event PaymentCharged(
        bytes32 indexed paymentInfoHash,
        PaymentInfo paymentInfo,
        uint256 amount,
        address tokenCollector,
        uint16 feeBps,
        address feeReceiver
    );
    event PaymentCaptured(bytes32 indexed paymentInfoHash, uint256 amount, uint16 feeBps, address feeReceiver);

    error FeeBpsOutOfRange(uint16 feeBps, uint16 minFeeBps, uint16 maxFeeBps);

    /// @notice As v1.1's `charge`, the fee in basis points.
    function charge(
        PaymentInfo calldata paymentInfo,
        uint256 amount,
        address tokenCollector,
        bytes calldata collectorData,
        uint16 feeBps,
        address feeReceiver
    ) external nonReentrant onlySender(paymentInfo.operator) validAmount(amount) {
        _validatePayment(paymentInfo, amount);
        _checkFee(paymentInfo, feeBps, feeReceiver);
        bytes32 paymentInfoHash = _startCollection(paymentInfo, 0, uint120(amount));
        emit PaymentCharged(paymentInfoHash, paymentInfo, amount, tokenCollector, feeBps, feeReceiver);
        _collectTokens(paymentInfo, amount, tokenCollector, collectorData, IX402AuthCaptureCollector.CollectorType.Payment);
        _distributeTokens(paymentInfo.token, paymentInfo.receiver, amount, amount * feeBps / _MAX_FEE_BPS, feeReceiver);
    }

    /// @notice As v1.1's `capture`, the fee in basis points.
    function capture(PaymentInfo calldata paymentInfo, uint256 amount, uint16 feeBps, address feeReceiver)
        external
        nonReentrant
        onlySender(paymentInfo.operator)
        validAmount(amount)
    {
        _checkFee(paymentInfo, feeBps, feeReceiver);
        bytes32 paymentInfoHash = _takeCapture(paymentInfo, amount);
        emit PaymentCaptured(paymentInfoHash, amount, feeBps, feeReceiver);
        _distributeTokens(paymentInfo.token, paymentInfo.receiver, amount, amount * feeBps / _MAX_FEE_BPS, feeReceiver);
    }

    function _checkFee(PaymentInfo calldata paymentInfo, uint16 feeBps, address feeReceiver) private pure {
        if (feeBps < paymentInfo.minFeeBps || feeBps > paymentInfo.maxFeeBps) {
            revert FeeBpsOutOfRange(feeBps, paymentInfo.minFeeBps, paymentInfo.maxFeeBps);
        }
        _checkFeeReceiver(paymentInfo, feeBps > 0, feeReceiver);
    }
}

/// @title X402ERC6492Preparer
/// @notice Runs the preparation call of an ERC-6492 signature (typically a wallet factory's deploy)
///         for the payment collectors, so that the call comes from a sender with no tokens, no
///         allowances and no standing anywhere, never from a collector (a collector is the
///         spender of Permit2 permits and the payee of EIP-3009 authorizations). A failing call is
///         ignored: the signature check that follows decides.
/// @dev Placed at `0x4020649200000000000000000000000000006492` on the project's local chains.
contract X402ERC6492Preparer {
    function prepare(address target, bytes calldata data) external {
        (bool ok,) = target.call(data);
        ok;
    }
}

/// @title X402AuthCaptureCollector
/// @notice What the three token collectors share. Each is placed at the canonical address of its
///         deployment (v1.0 or v1.1) without a constructor, so it learns the escrow it serves from
///         its own address: the v1.0 collectors serve the v1.0 escrow, any other address the v1.1
///         escrow. Only that escrow may call `collectTokens`.
abstract contract X402AuthCaptureCollector is IX402AuthCaptureCollector {
    address internal constant _ESCROW_V1_0 = 0xBdEA0D1bcC5966192B070Fdf62aB4EF5b4420cff;
    address internal constant _ESCROW_V1_1 = 0xf96815976523E00e65Be8f34cA5e64b4f41EB19c;
    address internal constant _EIP3009_COLLECTOR_V1_0 = 0x0E3dF9510de65469C4518D7843919c0b8C7A7757;
    address internal constant _PERMIT2_COLLECTOR_V1_0 = 0x992476B9Ee81d52a5BdA0622C333938D0Af0aB26;
    address internal constant _REFUND_COLLECTOR_V1_0 = 0x934907bffd0901b6A21e398B9C53A4A38F02fa5d;
    address internal constant _ERC6492_PREPARER = 0x4020649200000000000000000000000000006492;
    bytes32 internal constant _ERC6492_SUFFIX = 0x6492649264926492649264926492649264926492649264926492649264926492;

    error OnlyAuthCaptureEscrow();

    /// @notice The escrow this collector serves.
    function authCaptureEscrow() public view returns (address) {
        address self = address(this);
        if (self == _EIP3009_COLLECTOR_V1_0 || self == _PERMIT2_COLLECTOR_V1_0 || self == _REFUND_COLLECTOR_V1_0) {
            return _ESCROW_V1_0;
        }
        return _ESCROW_V1_1;
    }

    function collectTokens(
        X402AuthCaptureEscrowBase.PaymentInfo calldata paymentInfo,
        address tokenStore,
        uint256 amount,
        bytes calldata collectorData
    ) external {
        if (msg.sender != authCaptureEscrow()) revert OnlyAuthCaptureEscrow();
        _collectTokens(paymentInfo, tokenStore, amount, collectorData);
    }

    function _collectTokens(
        X402AuthCaptureEscrowBase.PaymentInfo calldata paymentInfo,
        address tokenStore,
        uint256 amount,
        bytes calldata collectorData
    ) internal virtual;

    /// @dev The signature in `collectorData`: as it is, or, when it ends in the ERC-6492 suffix, the
    ///      inner signature of `abi.encode(address target, bytes data, bytes signature)` after the
    ///      preparer ran `target.call(data)` (deploying the payer's wallet).
    function _payerSignature(bytes calldata collectorData) internal returns (bytes memory) {
        uint256 n = collectorData.length;
        if (n < 32 || bytes32(collectorData[n - 32:]) != _ERC6492_SUFFIX) return collectorData;
        (address target, bytes memory data, bytes memory signature) =
            abi.decode(collectorData[:n - 32], (address, bytes, bytes));
        X402ERC6492Preparer(_ERC6492_PREPARER).prepare(target, data);
        return signature;
    }

    /// @dev The payment's hash with the payer left out (the zero address): the nonce the payer signs,
    ///      computed as the calling escrow's `getHash` computes it.
    function _payerAgnosticHash(X402AuthCaptureEscrowBase.PaymentInfo calldata paymentInfo)
        internal
        view
        returns (bytes32)
    {
        X402AuthCaptureEscrowBase.PaymentInfo memory info = paymentInfo;
        info.payer = address(0);
        return keccak256(abi.encode(block.chainid, msg.sender, keccak256(abi.encode(_PAYMENT_INFO_TYPEHASH, info))));
    }
}

/// @title X402ERC3009PaymentCollector
/// @notice Collects through EIP-3009 `receiveWithAuthorization`: the payer signed an authorization
///         of `maxAmount` to this collector, valid from 0 until `preApprovalExpiry`, whose nonce is
///         the payment's payer-agnostic hash; the collector takes it all, sends `amount` to the token
///         store and gives the rest back to the payer. `collectorData` is the signature (ECDSA,
///         EIP-1271, or ERC-6492 for a wallet not deployed yet).
contract X402ERC3009PaymentCollector is X402AuthCaptureCollector {
    function collectorType() external pure returns (CollectorType) {
        return CollectorType.Payment;
    }

    function _collectTokens(
        X402AuthCaptureEscrowBase.PaymentInfo calldata paymentInfo,
        address tokenStore,
        uint256 amount,
        bytes calldata collectorData
    ) internal override {
        address token = paymentInfo.token;
        uint256 maxAmount = paymentInfo.maxAmount;
        IX402AuthCaptureERC3009(token).receiveWithAuthorization(
            paymentInfo.payer,
            address(this),
            maxAmount,
            0,
            paymentInfo.preApprovalExpiry,
            _payerAgnosticHash(paymentInfo),
            _payerSignature(collectorData)
        );
        if (maxAmount > amount) X402AuthCaptureTransfers.safeTransfer(token, paymentInfo.payer, maxAmount - amount);
        X402AuthCaptureTransfers.safeTransfer(token, tokenStore, amount);
    }
}

/// @title X402Permit2PaymentCollector
/// @notice Collects through Permit2 `permitTransferFrom`: the payer signed a permit of `maxAmount`
///         of the token to this collector (the spender), with the payment's payer-agnostic hash as
///         its nonce and `preApprovalExpiry` as its deadline; Permit2 moves `amount` from the payer
///         straight to the token store. `collectorData` is the signature (ECDSA,
///         EIP-1271, or ERC-6492 for a wallet not deployed yet).
contract X402Permit2PaymentCollector is X402AuthCaptureCollector {
    /// @notice The canonical Permit2 address.
    IX402AuthCapturePermit2 public constant permit2 = IX402AuthCapturePermit2(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    function collectorType() external pure returns (CollectorType) {
        return CollectorType.Payment;
    }

    function _collectTokens(
        X402AuthCaptureEscrowBase.PaymentInfo calldata paymentInfo,
        address tokenStore,
        uint256 amount,
        bytes calldata collectorData
    ) internal override {
        permit2.permitTransferFrom(
            IX402AuthCapturePermit2.PermitTransferFrom({
                permitted: IX402AuthCapturePermit2.TokenPermissions({token: paymentInfo.token, amount: paymentInfo.maxAmount}),
                nonce: uint256(_payerAgnosticHash(paymentInfo)),
                deadline: paymentInfo.preApprovalExpiry
            }),
            IX402AuthCapturePermit2.SignatureTransferDetails({to: tokenStore, requestedAmount: amount}),
            paymentInfo.payer,
            _payerSignature(collectorData)
        );
    }
}

/// @title X402OperatorRefundCollector
/// @notice Collects refund liquidity from the payment's operator, which must have approved this
///         collector on the token (`transferFrom(operator, tokenStore, amount)`).
contract X402OperatorRefundCollector is X402AuthCaptureCollector {
    function collectorType() external pure returns (CollectorType) {
        return CollectorType.Refund;
    }

    function _collectTokens(
        X402AuthCaptureEscrowBase.PaymentInfo calldata paymentInfo,
        address tokenStore,
        uint256 amount,
        bytes calldata
    ) internal override {
        X402AuthCaptureTransfers.safeTransferFrom(paymentInfo.token, paymentInfo.operator, tokenStore, amount);
    }
}
