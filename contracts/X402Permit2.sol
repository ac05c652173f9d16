// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

interface IERC1271 {
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4);
}

/// @title X402Permit2
/// @notice The signature-transfer half of Uniswap's Permit2, written for x402mw's local chains: a
///         token owner approves this contract once (ERC-20 `approve`) and then signs EIP-712
///         permits that let a named spender pull up to an amount, once, before a deadline.
///         It keeps the canonical contract's interface, EIP-712 domain (name "Permit2", chainId,
///         verifyingContract), type strings, unordered nonces and custom errors, so that what a
///         client signs for the canonical Permit2 verifies here unchanged.
/// @dev The runtime code is placed at the canonical address
///      0x000000000022D473030F116dDEE9F6B43aC78BA3 (anvil_setCode, or the dev chain's genesis)
///      without running a constructor, so nothing here is an immutable or set at construction:
///      the domain separator is computed from block.chainid and address(this) on every call.
contract X402Permit2 {
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

    bytes32 private constant _DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,uint256 chainId,address verifyingContract)");
    bytes32 private constant _HASHED_NAME = keccak256("Permit2");

    bytes32 public constant _TOKEN_PERMISSIONS_TYPEHASH = keccak256("TokenPermissions(address token,uint256 amount)");
    bytes32 public constant _PERMIT_TRANSFER_FROM_TYPEHASH = keccak256(
        "PermitTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline)TokenPermissions(address token,uint256 amount)"
    );
    /// @notice A witness permit's type string is this stub followed by the caller's witness type
    ///         string (e.g. "Witness witness)TokenPermissions(...)Witness(...)").
    string public constant _PERMIT_TRANSFER_FROM_WITNESS_TYPEHASH_STUB =
        "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,";

    bytes32 private constant _UPPER_BIT_MASK = 0x7fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff;

    /// @notice owner => word position => bitmap of used nonces (nonce = wordPos << 8 | bitPos).
    mapping(address => mapping(uint256 => uint256)) public nonceBitmap;

    event UnorderedNonceInvalidation(address indexed owner, uint256 word, uint256 mask);

    error SignatureExpired(uint256 signatureDeadline);
    error InvalidNonce();
    error InvalidAmount(uint256 maxAmount);
    error InvalidSignatureLength();
    error InvalidSignature();
    error InvalidSigner();
    error InvalidContractSignature();

    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(abi.encode(_DOMAIN_TYPEHASH, _HASHED_NAME, block.chainid, address(this)));
    }

    /// @notice Moves `transferDetails.requestedAmount` (at most the permitted amount) of
    ///         `permit.permitted.token` from `owner` to `transferDetails.to`; the caller must be the
    ///         spender `owner` signed for.
    function permitTransferFrom(
        PermitTransferFrom memory permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes calldata signature
    ) external {
        bytes32 structHash = keccak256(
            abi.encode(
                _PERMIT_TRANSFER_FROM_TYPEHASH,
                _hashPermissions(permit.permitted),
                msg.sender,
                permit.nonce,
                permit.deadline
            )
        );
        _transferWithPermit(permit, transferDetails, owner, structHash, signature);
    }

    /// @notice As `permitTransferFrom`, with extra signed data: `witness` is the EIP-712 hash of the
    ///         witness struct and `witnessTypeString` completes the permit's type string.
    function permitWitnessTransferFrom(
        PermitTransferFrom memory permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external {
        bytes32 typehash = keccak256(abi.encodePacked(_PERMIT_TRANSFER_FROM_WITNESS_TYPEHASH_STUB, witnessTypeString));
        bytes32 structHash = keccak256(
            abi.encode(typehash, _hashPermissions(permit.permitted), msg.sender, permit.nonce, permit.deadline, witness)
        );
        _transferWithPermit(permit, transferDetails, owner, structHash, signature);
    }

    /// @notice Marks the nonces of `mask` in word `wordPos` of the caller's bitmap used.
    function invalidateUnorderedNonces(uint256 wordPos, uint256 mask) external {
        nonceBitmap[msg.sender][wordPos] |= mask;
        emit UnorderedNonceInvalidation(msg.sender, wordPos, mask);
    }

    function _transferWithPermit(
        PermitTransferFrom memory permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 structHash,
        bytes calldata signature
    ) private {
        uint256 requested = transferDetails.requestedAmount;
        if (block.timestamp > permit.deadline) revert SignatureExpired(permit.deadline);
        if (requested > permit.permitted.amount) revert InvalidAmount(permit.permitted.amount);
        _useUnorderedNonce(owner, permit.nonce);
        _verify(signature, keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash)), owner);
        _safeTransferFrom(permit.permitted.token, owner, transferDetails.to, requested);
    }

    function _hashPermissions(TokenPermissions memory permitted) private pure returns (bytes32) {
        return keccak256(abi.encode(_TOKEN_PERMISSIONS_TYPEHASH, permitted.token, permitted.amount));
    }

    function _useUnorderedNonce(address owner, uint256 nonce) private {
        uint256 bit = 1 << uint8(nonce);
        uint256 flipped = nonceBitmap[owner][nonce >> 8] ^= bit;
        if (flipped & bit == 0) revert InvalidNonce();
    }

    /// @dev A key's signature is 65 bytes `r || s || v` or 64 bytes EIP-2098 `r || vs`; a
    ///      contract's goes to its EIP-1271 `isValidSignature` as it is.
    function _verify(bytes calldata signature, bytes32 digest, address claimedSigner) private view {
        if (claimedSigner.code.length > 0) {
            bytes4 magic = IERC1271(claimedSigner).isValidSignature(digest, signature);
            if (magic != IERC1271.isValidSignature.selector) revert InvalidContractSignature();
            return;
        }
        bytes32 r;
        bytes32 s;
        uint8 v;
        if (signature.length == 65) {
            (r, s) = abi.decode(signature, (bytes32, bytes32));
            v = uint8(signature[64]);
        } else if (signature.length == 64) {
            bytes32 vs;
            (r, vs) = abi.decode(signature, (bytes32, bytes32));
            s = vs & _UPPER_BIT_MASK;
            v = uint8(uint256(vs >> 255)) + 27;
        } else {
            revert InvalidSignatureLength();
        }
        address signer = ecrecover(digest, v, r, s);
        if (signer == address(0)) revert InvalidSignature();
        if (signer != claimedSigner) revert InvalidSigner();
    }

    /// @dev ERC-20 transferFrom that accepts tokens returning nothing and refuses a false answer or a
    ///      token without code, reverting with "TRANSFER_FROM_FAILED" as the canonical contract does.
    function _safeTransferFrom(address token, address from, address to, uint256 amount) private {
        (bool ok, bytes memory answer) =
            token.call(abi.encodeWithSelector(0x23b872dd, from, to, amount));
        bool accepted = ok && (answer.length == 0 ? token.code.length > 0 : abi.decode(answer, (bool)));
        require(accepted, "TRANSFER_FROM_FAILED");
    }
}
