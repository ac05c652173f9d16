// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// @notice What the escrow asks of a deposit collector: move exactly `amount` of `token` from
///         `payer` to the escrow, for the channel `channelId`, with the authorization carried in
///         `collectorData` (its format is the collector's own).
interface IX402DepositCollector {
    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external;
}

interface IX402ERC20 {
    function balanceOf(address account) external view returns (uint256);
    function transfer(address to, uint256 value) external returns (bool);
}

interface IX402ERC1271 {
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4);
}

interface IX402ERC3009Receive {
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

interface IX402ERC2612 {
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external;
}

interface IX402SignatureTransfer {
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

    function permitWitnessTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external;
}

/// @dev Signature checks and a token transfer that the three contracts share.
library X402ChannelLib {
    bytes32 private constant _HIGH_S = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0;

    /// @dev The key that signed `digest`: `signature` is 65 bytes `r || s || v` (v 27 or 28, low s)
    ///      or 64 bytes EIP-2098 `r || vs`. Zero for anything else.
    function recover(bytes32 digest, bytes memory signature) internal pure returns (address) {
        bytes32 r;
        bytes32 s;
        uint8 v;
        if (signature.length == 65) {
            assembly {
                r := mload(add(signature, 0x20))
                s := mload(add(signature, 0x40))
                v := byte(0, mload(add(signature, 0x60)))
            }
        } else if (signature.length == 64) {
            bytes32 vs;
            assembly {
                r := mload(add(signature, 0x20))
                vs := mload(add(signature, 0x40))
            }
            s = vs & bytes32(uint256(type(uint256).max >> 1));
            v = uint8(uint256(vs) >> 255) + 27;
        } else {
            return address(0);
        }
        if (uint256(s) > uint256(_HIGH_S) || (v != 27 && v != 28)) return address(0);
        return ecrecover(digest, v, r, s);
    }

    /// @dev True when `signature` is `signer`'s over `digest`: a key's signature that recovers to
    ///      `signer`, or else, when `signer` has code, its EIP-1271 answer `0x1626ba7e` (a revert
    ///      or any other answer is false).
    function isValidSignatureNow(address signer, bytes32 digest, bytes memory signature)
        internal
        view
        returns (bool)
    {
        if (signer == address(0)) return false;
        if (recover(digest, signature) == signer) return true;
        if (signer.code.length == 0) return false;
        (bool ok, bytes memory answer) =
            signer.staticcall(abi.encodeWithSelector(IX402ERC1271.isValidSignature.selector, digest, signature));
        return ok && answer.length >= 32 && abi.decode(answer, (bytes32)) == bytes32(IX402ERC1271.isValidSignature.selector);
    }

    /// @dev ERC-20 transfer that accepts a token returning nothing, and refuses a false answer, a
    ///      revert or an address without code.
    function safeTransfer(address token, address to, uint256 amount) internal {
        (bool ok, bytes memory answer) = token.call(abi.encodeWithSelector(IX402ERC20.transfer.selector, to, amount));
        bool accepted = ok && (answer.length == 0 ? token.code.length > 0 : abi.decode(answer, (bool)));
        require(accepted, "TRANSFER_FAILED");
    }
}

/// @title X402BatchSettlement
/// @notice The escrow of the x402 `batch-settlement` scheme on EVM: unidirectional payment channels
///         funded by deposits, drawn on by cumulative vouchers the payer signs off-chain, claimed by
///         the receiver's side for many channels in one call and swept to the receiver in one
///         transfer per (receiver, token). The payer gets unclaimed funds back by a cooperative
///         refund (the receiver's side) or by a timed withdrawal (its own).
/// @dev Placed at its canonical address without running a constructor (anvil_setCode, the dev
///      chain's genesis): no constructor, no immutables; the EIP-712 domain separator is computed
///      from `block.chainid` and `address(this)` on every call. The re-entrancy lock lives in
///      ordinary storage (the project's contracts target `paris`: no transient storage).
///
///      Invariants: `totalClaimed <= balance` for every channel; a channel's `totalClaimed` only
///      grows and never beyond a voucher the payer (or its authorizer) signed; refunds and
///      withdrawals take only `balance - totalClaimed`; the escrow holds, per token, the sum of its
///      channels' balances less what `settle` has paid out.
contract X402BatchSettlement {
    // --- types (the x402 specification's) ------------------------------------------------------

    struct ChannelConfig {
        address payer;
        address payerAuthorizer;
        address receiver;
        address receiverAuthorizer;
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    struct ChannelState {
        uint128 balance;
        uint128 totalClaimed;
    }

    struct WithdrawalState {
        uint128 amount;
        uint40 initiatedAt;
    }

    struct ReceiverState {
        uint128 totalClaimed;
        uint128 totalSettled;
    }

    struct Voucher {
        ChannelConfig channel;
        uint128 maxClaimableAmount;
    }

    struct VoucherClaim {
        Voucher voucher;
        bytes signature;
        uint128 totalClaimed;
    }

    // --- constants --------------------------------------------------------------------------------

    uint40 public constant MIN_WITHDRAW_DELAY = 900;
    uint40 public constant MAX_WITHDRAW_DELAY = 2_592_000;

    bytes32 public constant CHANNEL_CONFIG_TYPEHASH = keccak256(
        "ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
    );
    bytes32 public constant VOUCHER_TYPEHASH = keccak256("Voucher(bytes32 channelId,uint128 maxClaimableAmount)");
    bytes32 public constant REFUND_TYPEHASH = keccak256("Refund(bytes32 channelId,uint256 nonce,uint128 amount)");
    bytes32 public constant CLAIM_ENTRY_TYPEHASH =
        keccak256("ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)");
    bytes32 public constant CLAIM_BATCH_TYPEHASH = keccak256(
        "ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
    );

    bytes32 private constant _DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 private constant _NAME_HASH = keccak256("x402 Batch Settlement");
    bytes32 private constant _VERSION_HASH = keccak256("1");

    // --- storage ------------------------------------------------------------------------------------

    mapping(bytes32 channelId => ChannelState) public channels;
    mapping(bytes32 channelId => uint256) public refundNonce;
    mapping(bytes32 channelId => WithdrawalState) public pendingWithdrawals;
    mapping(address receiver => mapping(address token => ReceiverState)) public receivers;
    uint256 private _lock; // 2 while a guarded call runs

    // --- events -------------------------------------------------------------------------------------

    event ChannelCreated(bytes32 indexed channelId, ChannelConfig config);
    event ChannelClosed(bytes32 indexed channelId, ChannelConfig config);
    event Deposited(bytes32 indexed channelId, address indexed sender, uint128 amount, uint128 newBalance);
    event Claimed(bytes32 indexed channelId, address indexed sender, uint128 claimAmount, uint128 newTotalClaimed);
    event Settled(address indexed receiver, address indexed token, address indexed sender, uint128 amount);
    event Refunded(bytes32 indexed channelId, address indexed sender, uint128 amount);
    event WithdrawInitiated(bytes32 indexed channelId, uint128 amount, uint40 finalizeAfter);
    event WithdrawFinalized(bytes32 indexed channelId, address indexed sender, uint128 amount);

    // --- errors -------------------------------------------------------------------------------------

    error InvalidChannel();
    error ZeroDeposit();
    error DepositOverflow();
    error InvalidSignature();
    error NotReceiverAuthorizer();
    error NotAuthorizedToClaim();
    error NotAuthorizedToRefund();
    error NotAuthorizedToWithdraw();
    error ClaimExceedsCeiling();
    error ClaimExceedsBalance();
    error WithdrawalAlreadyPending();
    error WithdrawalNotPending();
    error NotAuthorizedToFinalizeWithdraw();
    error WithdrawDelayNotElapsed();
    error NothingToWithdraw();
    error WithdrawAmountExceedsAvailable();
    error WithdrawDelayOutOfRange();
    error EmptyBatch();
    error DepositCollectionFailed();
    error InvalidCollector();
    error InvalidRefundNonce();
    error ZeroRefund();
    error Reentrancy();

    modifier nonReentrant() {
        if (_lock == 2) revert Reentrancy();
        _lock = 2;
        _;
        _lock = 1;
    }

    // --- deposits -----------------------------------------------------------------------------------

    /// @notice Adds `amount` of `config.token` to the channel of `config` (created by its first
    ///         deposit), pulled from `config.payer` by `collector` with the authorization in
    ///         `collectorData`. Anyone may call (the authorization is the payer's consent); the escrow's
    ///         own token balance must grow by exactly `amount`.
    function deposit(ChannelConfig calldata config, uint128 amount, address collector, bytes calldata collectorData)
        external
        nonReentrant
    {
        if (
            config.payer == address(0) || config.receiver == address(0) || config.receiverAuthorizer == address(0)
                || config.token == address(0)
        ) revert InvalidChannel();
        if (config.withdrawDelay < MIN_WITHDRAW_DELAY || config.withdrawDelay > MAX_WITHDRAW_DELAY) {
            revert WithdrawDelayOutOfRange();
        }
        if (amount == 0) revert ZeroDeposit();
        if (collector == address(0) || collector.code.length == 0) revert InvalidCollector();

        bytes32 channelId = _channelId(config, _domainSeparator());
        ChannelState storage ch = channels[channelId];
        uint128 before = ch.balance;
        if (amount > type(uint128).max - before) revert DepositOverflow();

        uint256 held = IX402ERC20(config.token).balanceOf(address(this));
        IX402DepositCollector(collector).collect(config.payer, config.token, amount, channelId, collectorData);
        if (IX402ERC20(config.token).balanceOf(address(this)) != held + amount) revert DepositCollectionFailed();

        uint128 newBalance = before + amount;
        ch.balance = newBalance;
        if (before == 0 && ch.totalClaimed == 0) emit ChannelCreated(channelId, config);
        emit Deposited(channelId, msg.sender, amount, newBalance);
    }

    // --- claims and settlement ----------------------------------------------------------------------

    /// @notice Records voucher claims of many channels; the caller must be the `receiver` or the
    ///         `receiverAuthorizer` of every row's channel. No token moves.
    function claim(VoucherClaim[] calldata voucherClaims) external nonReentrant {
        uint256 n = voucherClaims.length;
        if (n == 0) revert EmptyBatch();
        bytes32 separator = _domainSeparator();
        for (uint256 i = 0; i < n; ++i) {
            ChannelConfig calldata c = voucherClaims[i].voucher.channel;
            if (msg.sender != c.receiver && msg.sender != c.receiverAuthorizer) revert NotAuthorizedToClaim();
            _claim(voucherClaims[i], _channelId(c, separator), separator);
        }
    }

    /// @notice Records voucher claims of many channels that share one `receiverAuthorizer`, on its
    ///         EIP-712 `ClaimBatch` signature over the rows; anyone may submit it. No token moves.
    function claimWithSignature(VoucherClaim[] calldata voucherClaims, bytes calldata authorizerSignature)
        external
        nonReentrant
    {
        uint256 n = voucherClaims.length;
        if (n == 0) revert EmptyBatch();
        bytes32 separator = _domainSeparator();
        address authorizer = voucherClaims[0].voucher.channel.receiverAuthorizer;
        bytes32[] memory ids = new bytes32[](n);
        bytes32[] memory entries = new bytes32[](n);
        for (uint256 i = 0; i < n; ++i) {
            if (voucherClaims[i].voucher.channel.receiverAuthorizer != authorizer) revert NotReceiverAuthorizer();
            ids[i] = _channelId(voucherClaims[i].voucher.channel, separator);
            entries[i] = _claimEntryHash(ids[i], voucherClaims[i]);
        }
        bytes32 digest = _typedDigest(separator, keccak256(abi.encode(CLAIM_BATCH_TYPEHASH, _packedHash(entries))));
        if (!X402ChannelLib.isValidSignatureNow(authorizer, digest, authorizerSignature)) revert InvalidSignature();
        for (uint256 i = 0; i < n; ++i) {
            _claim(voucherClaims[i], ids[i], separator);
        }
    }

    /// @notice Pays `receiver` everything claimed for it in `token` and not paid yet, in one
    ///         transfer. Anyone may call; nothing to pay is a no-op.
    function settle(address receiver, address token) external nonReentrant {
        ReceiverState storage rs = receivers[receiver][token];
        uint128 amount = rs.totalClaimed - rs.totalSettled;
        if (amount == 0) return;
        rs.totalSettled = rs.totalClaimed;
        X402ChannelLib.safeTransfer(token, receiver, amount);
        emit Settled(receiver, token, msg.sender, amount);
    }

    // --- timed withdrawal -----------------------------------------------------------------------

    /// @notice The payer (or its authorizer) starts taking back `amount` of unclaimed escrow; it
    ///         can finish after the channel's `withdrawDelay`, during which claims still land.
    function initiateWithdraw(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        if (!_isPayerSide(msg.sender, config)) revert NotAuthorizedToWithdraw();
        if (amount == 0) revert NothingToWithdraw();
        bytes32 channelId = _channelId(config, _domainSeparator());
        WithdrawalState storage ws = pendingWithdrawals[channelId];
        if (ws.initiatedAt != 0) revert WithdrawalAlreadyPending();
        ChannelState storage ch = channels[channelId];
        if (amount > ch.balance - ch.totalClaimed) revert WithdrawAmountExceedsAvailable();
        uint40 now40 = uint40(block.timestamp);
        ws.amount = amount;
        ws.initiatedAt = now40;
        emit WithdrawInitiated(channelId, amount, now40 + config.withdrawDelay);
    }

    /// @notice Ends a pending withdrawal once its delay has passed: pays the payer the amount asked
    ///         for, or less if claims made since took part of it.
    function finalizeWithdraw(ChannelConfig calldata config) external nonReentrant {
        if (!_isPayerSide(msg.sender, config)) revert NotAuthorizedToFinalizeWithdraw();
        bytes32 channelId = _channelId(config, _domainSeparator());
        WithdrawalState storage ws = pendingWithdrawals[channelId];
        uint256 initiatedAt = ws.initiatedAt;
        if (initiatedAt == 0) revert WithdrawalNotPending();
        if (block.timestamp < initiatedAt + config.withdrawDelay) revert WithdrawDelayNotElapsed();
        ChannelState storage ch = channels[channelId];
        uint128 available = ch.balance - ch.totalClaimed;
        uint128 amount = ws.amount < available ? ws.amount : available;
        delete pendingWithdrawals[channelId];
        ch.balance -= amount;
        emit WithdrawFinalized(channelId, msg.sender, amount);
        if (ch.balance == 0 && ch.totalClaimed == 0) emit ChannelClosed(channelId, config);
        if (amount > 0) X402ChannelLib.safeTransfer(config.token, config.payer, amount);
    }

    // --- cooperative refund ---------------------------------------------------------------------

    /// @notice The receiver or its authorizer returns up to `amount` of unclaimed escrow to the
    ///         payer. Advances the channel's refund nonce even when nothing is left to return.
    function refund(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        if (msg.sender != config.receiver && msg.sender != config.receiverAuthorizer) revert NotAuthorizedToRefund();
        _refund(config, _channelId(config, _domainSeparator()), amount);
    }

    /// @notice `refund` on the `receiverAuthorizer`'s EIP-712 `Refund` signature of
    ///         `(channelId, nonce, amount)`; `nonce` must be the channel's current refund nonce.
    ///         Anyone may submit it.
    function refundWithSignature(
        ChannelConfig calldata config,
        uint128 amount,
        uint256 nonce,
        bytes calldata receiverAuthorizerSignature
    ) external nonReentrant {
        bytes32 separator = _domainSeparator();
        bytes32 channelId = _channelId(config, separator);
        if (nonce != refundNonce[channelId]) revert InvalidRefundNonce();
        bytes32 digest = _typedDigest(separator, keccak256(abi.encode(REFUND_TYPEHASH, channelId, nonce, amount)));
        if (!X402ChannelLib.isValidSignatureNow(config.receiverAuthorizer, digest, receiverAuthorizerSignature)) {
            revert InvalidSignature();
        }
        _refund(config, channelId, amount);
    }

    // --- batching -------------------------------------------------------------------------------

    /// @notice Runs each of `data` as a call of this contract by the same sender, in order; a
    ///         failing one reverts the whole with its own revert data.
    function multicall(bytes[] calldata data) external returns (bytes[] memory results) {
        results = new bytes[](data.length);
        for (uint256 i = 0; i < data.length; ++i) {
            (bool ok, bytes memory answer) = address(this).delegatecall(data[i]);
            if (!ok) {
                assembly {
                    revert(add(answer, 0x20), mload(answer))
                }
            }
            results[i] = answer;
        }
    }

    // --- views ----------------------------------------------------------------------------------

    /// @notice The EIP-712 domain separator: `x402 Batch Settlement`, version `1`, this chain, this address.
    function DOMAIN_SEPARATOR() external view returns (bytes32) {
        return _domainSeparator();
    }

    /// @notice The channel's id: the EIP-712 digest of `config` under this contract's domain.
    function getChannelId(ChannelConfig calldata config) external view returns (bytes32) {
        return _channelId(config, _domainSeparator());
    }

    /// @notice The EIP-712 digest a payer signs for a `Voucher`.
    function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) external view returns (bytes32) {
        return _voucherDigest(_domainSeparator(), channelId, maxClaimableAmount);
    }

    /// @notice The EIP-712 digest a receiver authorizer signs for a `Refund`.
    function getRefundDigest(bytes32 channelId, uint256 nonce, uint128 amount) external view returns (bytes32) {
        return _typedDigest(_domainSeparator(), keccak256(abi.encode(REFUND_TYPEHASH, channelId, nonce, amount)));
    }

    /// @notice The EIP-712 digest a receiver authorizer signs for a `ClaimBatch` of these rows.
    function getClaimBatchDigest(VoucherClaim[] calldata voucherClaims) external view returns (bytes32) {
        bytes32 separator = _domainSeparator();
        bytes32[] memory entries = new bytes32[](voucherClaims.length);
        for (uint256 i = 0; i < voucherClaims.length; ++i) {
            entries[i] = _claimEntryHash(_channelId(voucherClaims[i].voucher.channel, separator), voucherClaims[i]);
        }
        return _typedDigest(separator, keccak256(abi.encode(CLAIM_BATCH_TYPEHASH, _packedHash(entries))));
    }

    // --- internals ------------------------------------------------------------------------------

    function _claim(VoucherClaim calldata vc, bytes32 channelId, bytes32 separator) private {
        ChannelState storage ch = channels[channelId];
        uint128 claimed = ch.totalClaimed;
        uint128 target = vc.totalClaimed;
        if (target <= claimed) return; // already claimed this far: a replayed row changes nothing
        if (target > vc.voucher.maxClaimableAmount) revert ClaimExceedsCeiling();
        if (target > ch.balance) revert ClaimExceedsBalance();
        ChannelConfig calldata c = vc.voucher.channel;
        bytes32 digest = _voucherDigest(separator, channelId, vc.voucher.maxClaimableAmount);
        bool valid = c.payerAuthorizer != address(0)
            ? X402ChannelLib.recover(digest, vc.signature) == c.payerAuthorizer
            : X402ChannelLib.isValidSignatureNow(c.payer, digest, vc.signature);
        if (!valid) revert InvalidSignature();
        uint128 delta = target - claimed;
        ch.totalClaimed = target;
        receivers[c.receiver][c.token].totalClaimed += delta;
        emit Claimed(channelId, msg.sender, delta, target);
    }

    function _refund(ChannelConfig calldata config, bytes32 channelId, uint128 amount) private {
        if (amount == 0) revert ZeroRefund();
        unchecked {
            refundNonce[channelId] += 1;
        }
        ChannelState storage ch = channels[channelId];
        uint128 available = ch.balance - ch.totalClaimed;
        uint128 paid = amount < available ? amount : available;
        if (paid == 0) return;
        ch.balance -= paid;
        WithdrawalState storage ws = pendingWithdrawals[channelId];
        if (ws.initiatedAt != 0) {
            if (paid >= ws.amount) delete pendingWithdrawals[channelId];
            else ws.amount -= paid;
        }
        emit Refunded(channelId, msg.sender, paid);
        if (ch.balance == 0 && ch.totalClaimed == 0) emit ChannelClosed(channelId, config);
        X402ChannelLib.safeTransfer(config.token, config.payer, paid);
    }

    function _isPayerSide(address sender, ChannelConfig calldata config) private pure returns (bool) {
        return sender == config.payer || (config.payerAuthorizer != address(0) && sender == config.payerAuthorizer);
    }

    function _domainSeparator() private view returns (bytes32) {
        return keccak256(abi.encode(_DOMAIN_TYPEHASH, _NAME_HASH, _VERSION_HASH, block.chainid, address(this)));
    }

    function _typedDigest(bytes32 separator, bytes32 structHash) private pure returns (bytes32) {
        return keccak256(abi.encodePacked("\x19\x01", separator, structHash));
    }

    function _channelId(ChannelConfig calldata config, bytes32 separator) private pure returns (bytes32) {
        return _typedDigest(separator, keccak256(abi.encode(CHANNEL_CONFIG_TYPEHASH, config)));
    }

    function _voucherDigest(bytes32 separator, bytes32 channelId, uint128 maxClaimableAmount)
        private
        pure
        returns (bytes32)
    {
        return _typedDigest(separator, keccak256(abi.encode(VOUCHER_TYPEHASH, channelId, maxClaimableAmount)));
    }

    function _claimEntryHash(bytes32 channelId, VoucherClaim calldata vc) private pure returns (bytes32) {
        return keccak256(abi.encode(CLAIM_ENTRY_TYPEHASH, channelId, vc.voucher.maxClaimableAmount, vc.totalClaimed));
    }

    function _packedHash(bytes32[] memory words) private pure returns (bytes32 h) {
        assembly {
            h := keccak256(add(words, 0x20), mul(mload(words), 0x20))
        }
    }
}

/// @title X402ERC3009DepositCollector
/// @notice Deposits through EIP-3009 `receiveWithAuthorization`: the payer signs an authorization
///         to this collector whose nonce is `keccak256(abi.encode(channelId, salt))`, so it pays
///         into that channel and no other; the collector takes the tokens and hands them to the escrow.
/// @dev `collectorData` = `abi.encode(uint256 validAfter, uint256 validBefore, uint256 salt, bytes signature)`.
///      Only the escrow may call: anyone else could otherwise spend a payer's authorization
///      without crediting the channel. Placed without a constructor; holds no tokens between calls.
contract X402ERC3009DepositCollector is IX402DepositCollector {
    /// @notice The escrow this collector serves (its canonical address).
    address public constant BATCH_SETTLEMENT = 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003;

    error OnlyBatchSettlement();

    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external
    {
        if (msg.sender != BATCH_SETTLEMENT) revert OnlyBatchSettlement();
        (uint256 validAfter, uint256 validBefore, uint256 salt, bytes memory signature) =
            abi.decode(collectorData, (uint256, uint256, uint256, bytes));
        bytes32 nonce = keccak256(abi.encode(channelId, salt));
        IX402ERC3009Receive(token).receiveWithAuthorization(
            payer, address(this), amount, validAfter, validBefore, nonce, signature
        );
        X402ChannelLib.safeTransfer(token, msg.sender, amount);
    }
}

/// @title X402Permit2DepositCollector
/// @notice Deposits through Permit2 `permitWitnessTransferFrom`: the payer signs a witness permit
///         naming this collector as spender and the witness `DepositWitness(bytes32 channelId)`;
///         Permit2 moves the tokens from the payer to the escrow directly. An optional EIP-2612
///         permit for Permit2 runs first (its failure is ignored: the transfer then fails if
///         Permit2 has no allowance).
/// @dev `collectorData` = `abi.encode(uint256 nonce, uint256 deadline, bytes permit2Signature, bytes eip2612Permit)`,
///      `eip2612Permit` empty or `abi.encode(uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)`.
///      Only the escrow may call. Placed without a constructor.
contract X402Permit2DepositCollector is IX402DepositCollector {
    /// @notice The escrow this collector serves (its canonical address).
    address public constant BATCH_SETTLEMENT = 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003;
    /// @notice The canonical Permit2 address.
    IX402SignatureTransfer public constant PERMIT2 = IX402SignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    bytes32 public constant DEPOSIT_WITNESS_TYPEHASH = keccak256("DepositWitness(bytes32 channelId)");
    string public constant WITNESS_TYPE_STRING =
        "DepositWitness witness)DepositWitness(bytes32 channelId)TokenPermissions(address token,uint256 amount)";

    error OnlyBatchSettlement();

    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external
    {
        if (msg.sender != BATCH_SETTLEMENT) revert OnlyBatchSettlement();
        (uint256 nonce, uint256 deadline, bytes memory signature, bytes memory eip2612) =
            abi.decode(collectorData, (uint256, uint256, bytes, bytes));
        if (eip2612.length > 0) _permitPermit2(token, payer, eip2612);
        PERMIT2.permitWitnessTransferFrom(
            IX402SignatureTransfer.PermitTransferFrom({
                permitted: IX402SignatureTransfer.TokenPermissions({token: token, amount: amount}),
                nonce: nonce,
                deadline: deadline
            }),
            IX402SignatureTransfer.SignatureTransferDetails({to: msg.sender, requestedAmount: amount}),
            payer,
            keccak256(abi.encode(DEPOSIT_WITNESS_TYPEHASH, channelId)),
            WITNESS_TYPE_STRING,
            signature
        );
    }

    function _permitPermit2(address token, address payer, bytes memory eip2612) private {
        (uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s) =
            abi.decode(eip2612, (uint256, uint256, uint8, bytes32, bytes32));
        try IX402ERC2612(token).permit(payer, address(PERMIT2), value, deadline, v, r, s) {} catch {}
    }
}
