// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

interface ISignatureTransfer {
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

interface IERC2612 {
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external;
}

/// @title X402Permit2ProxyBase
/// @notice What the x402 Permit2 proxies share: they are the `spender` a payer names in a Permit2
///         witness permit, and the witness binds the payee (`to`) and the earliest settlement time
///         (`validAfter`), so whoever submits the permit cannot send the money elsewhere.
/// @dev Placed at fixed addresses without running a constructor (anvil_setCode, the dev chain's
///      genesis): no immutables, no constructor, no storage; Permit2 is a constant. The proxy never
///      holds tokens (Permit2 moves them from the payer to the payee directly) and keeps no state,
///      so a re-entrant call can only spend another signed, unused permit.
abstract contract X402Permit2ProxyBase {
    /// @notice The canonical Permit2 address (the same on every chain).
    ISignatureTransfer public constant PERMIT2 = ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    /// @notice An EIP-2612 permit letting Permit2 spend the payer's tokens (the
    ///         `eip2612GasSponsoring` extension), run before the transfer.
    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    event Settled();
    event SettledWithPermit();
    event EIP2612PermitFailedWithReason(address indexed token, address indexed owner, string reason);
    event EIP2612PermitFailedWithPanic(address indexed token, address indexed owner, uint256 errorCode);
    event EIP2612PermitFailedWithData(address indexed token, address indexed owner, bytes data);

    error InvalidDestination();
    error PaymentTooEarly();
    error InvalidOwner();
    error InvalidAmount();
    error Permit2612AmountMismatch();

    function _settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        address to,
        uint256 validAfter,
        bytes32 witnessHash,
        string memory witnessTypeString,
        bytes calldata signature
    ) internal {
        if (amount == 0) revert InvalidAmount();
        if (owner == address(0)) revert InvalidOwner();
        if (to == address(0)) revert InvalidDestination();
        if (block.timestamp < validAfter) revert PaymentTooEarly();
        PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: to, requestedAmount: amount}),
            owner,
            witnessHash,
            witnessTypeString,
            signature
        );
    }

    /// @dev Tries the EIP-2612 permit for Permit2; its failure is reported as an event, not a revert,
    ///      because the allowance may already be there (a replayed or front-run permit).
    function _permitPermit2(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner
    ) internal {
        if (permit2612.value != permit.permitted.amount) revert Permit2612AmountMismatch();
        address token = permit.permitted.token;
        try IERC2612(token).permit(
            owner, address(PERMIT2), permit2612.value, permit2612.deadline, permit2612.v, permit2612.r, permit2612.s
        ) {} catch Error(string memory reason) {
            emit EIP2612PermitFailedWithReason(token, owner, reason);
        } catch Panic(uint256 errorCode) {
            emit EIP2612PermitFailedWithPanic(token, owner, errorCode);
        } catch (bytes memory data) {
            emit EIP2612PermitFailedWithData(token, owner, data);
        }
    }
}

/// @title X402UptoPermit2Proxy
/// @notice The x402 `upto` scheme's Permit2 spender (canonical address
///         0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002): the payer signs a ceiling
///         (`permit.permitted.amount`) and the facilitator named in the witness settles the actual
///         `amount`, at most the ceiling. Only that facilitator may call: anyone else could spend the
///         permit's one nonce with a smaller amount (x402-foundation/x402 #2501).
contract X402UptoPermit2Proxy is X402Permit2ProxyBase {
    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    /// @notice What follows Permit2's "PermitWitnessTransferFrom(...,uint256 deadline," stub.
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH =
        keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    error UnauthorizedFacilitator();
    error AmountExceedsPermitted();

    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external {
        _settleUpto(permit, amount, owner, witness, signature);
        emit Settled();
    }

    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external {
        if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
        _permitPermit2(permit2612, permit, owner);
        _settleUpto(permit, amount, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _settleUpto(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
        if (amount > permit.permitted.amount) revert AmountExceedsPermitted();
        bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter));
        _settle(permit, amount, owner, witness.to, witness.validAfter, witnessHash, WITNESS_TYPE_STRING, signature);
    }
}

/// @title X402ExactPermit2Proxy
/// @notice The x402 `exact` scheme's Permit2 spender (canonical address
///         0x402085c248EeA27D92E8b30b2C58ed07f9E20001): settles exactly the permitted amount to
///         the witness's payee. Anyone may submit it: the amount and payee are fixed by the
///         signature, so a front-runner can only pay the payee sooner (x402-foundation/x402 #2501
///         notes it spends the nonce, which a facilitator must read as "settled by someone else").
contract X402ExactPermit2Proxy is X402Permit2ProxyBase {
    struct Witness {
        address to;
        uint256 validAfter;
    }

    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,uint256 validAfter)");

    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external {
        _settleExact(permit, owner, witness, signature);
        emit Settled();
    }

    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external {
        _permitPermit2(permit2612, permit, owner);
        _settleExact(permit, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _settleExact(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.validAfter));
        _settle(
            permit, permit.permitted.amount, owner, witness.to, witness.validAfter, witnessHash, WITNESS_TYPE_STRING, signature
        );
    }
}
