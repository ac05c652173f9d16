// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// @title X402Token
/// @notice An ERC-20 stablecoin stand-in for local chains: EIP-712 domain, EIP-3009 transfer,
///         receive and cancel authorizations in both the (v, r, s) and the bytes-signature forms,
///         EIP-2612 permit, and a single minter (the deployer). As in USDC v2.2, the bytes-signature
///         forms accept EIP-1271 signatures: a signer with code is asked `isValidSignature`. Revert
///         strings match what the x402mw platform maps to refusal reasons.
contract X402Token {
    bytes32 private constant _DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 public constant TRANSFER_WITH_AUTHORIZATION_TYPEHASH =
        keccak256("TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)");
    bytes32 public constant RECEIVE_WITH_AUTHORIZATION_TYPEHASH =
        keccak256("ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)");
    bytes32 public constant CANCEL_AUTHORIZATION_TYPEHASH =
        keccak256("CancelAuthorization(address authorizer,bytes32 nonce)");
    bytes32 public constant PERMIT_TYPEHASH =
        keccak256("Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)");

    // EIP-1271: what isValidSignature(bytes32,bytes) returns for a signature the contract accepts.
    bytes4 private constant _ERC1271_MAGIC = 0x1626ba7e;

    // Half the secp256k1 group order: a larger s is the malleable twin of a valid signature.
    uint256 private constant _HALF_ORDER = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    string public name;
    string public symbol;
    uint8 public immutable decimals;
    address public immutable minter;
    uint256 public totalSupply;

    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    string private _version;
    bytes32 private immutable _hashedName;
    bytes32 private immutable _hashedVersion;
    uint256 private immutable _cachedChainId;
    bytes32 private immutable _cachedDomainSeparator;
    mapping(address => mapping(bytes32 => bool)) private _authorizationStates;

    /// @notice EIP-2612: the next permit nonce of each owner.
    mapping(address => uint256) public nonces;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
    event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);

    constructor(string memory name_, string memory symbol_, string memory version_, uint8 decimals_) {
        name = name_;
        symbol = symbol_;
        _version = version_;
        decimals = decimals_;
        minter = msg.sender;
        _hashedName = keccak256(bytes(name_));
        _hashedVersion = keccak256(bytes(version_));
        _cachedChainId = block.chainid;
        _cachedDomainSeparator = _buildDomainSeparator();
    }


    /// @notice The EIP-712 domain version ("2" for USDC-compatible tokens).
    function version() external view returns (string memory) {
        return _version;
    }

    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        // Recomputed after a chain split so that signatures cannot be replayed across the fork.
        return block.chainid == _cachedChainId ? _cachedDomainSeparator : _buildDomainSeparator();
    }

    function _buildDomainSeparator() private view returns (bytes32) {
        return keccak256(abi.encode(_DOMAIN_TYPEHASH, _hashedName, _hashedVersion, block.chainid, address(this)));
    }


    function transfer(address to, uint256 value) external returns (bool) {
        _transfer(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        _approve(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        if (allowed != type(uint256).max) {
            require(allowed >= value, "insufficient allowance");
            unchecked {
                allowance[from][msg.sender] = allowed - value;
            }
        }
        _transfer(from, to, value);
        return true;
    }

    /// @notice EIP-2612: `owner` lets `spender` spend `value`, by a signature made before `deadline`.
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external
    {
        bytes32 digest = _permitDigest(owner, spender, value, deadline);
        require(_recover(digest, v, r, s) == owner, "invalid signature");
        _approve(owner, spender, value);
    }

    /// @notice EIP-2612 with a bytes signature: 65 bytes `r || s || v` from a key, or whatever the
    ///         owner's contract accepts through EIP-1271.
    function permit(address owner, address spender, uint256 value, uint256 deadline, bytes memory signature)
        external
    {
        bytes32 digest = _permitDigest(owner, spender, value, deadline);
        _requireSignature(owner, digest, signature);
        _approve(owner, spender, value);
    }

    /// @dev The digest of `owner`'s next permit; consumes its nonce (the caller reverts if the
    ///      signature does not match, which restores it).
    function _permitDigest(address owner, address spender, uint256 value, uint256 deadline)
        private
        returns (bytes32)
    {
        require(deadline >= block.timestamp, "permit is expired");
        uint256 nonce = nonces[owner];
        unchecked {
            nonces[owner] = nonce + 1;
        }
        return _digest(keccak256(abi.encode(PERMIT_TYPEHASH, owner, spender, value, nonce, deadline)));
    }

    function _approve(address owner, address spender, uint256 value) private {
        allowance[owner][spender] = value;
        emit Approval(owner, spender, value);
    }

    function mint(address to, uint256 value) external {
        require(msg.sender == minter, "caller is not the minter");
        require(to != address(0), "mint to the zero address");
        totalSupply += value;
        unchecked {
            balanceOf[to] += value;
        }
        emit Transfer(address(0), to, value);
    }

    function _transfer(address from, address to, uint256 value) private {
        require(to != address(0), "transfer to the zero address");
        uint256 held = balanceOf[from];
        require(held >= value, "insufficient balance");
        unchecked {
            balanceOf[from] = held - value;
            balanceOf[to] += value;
        }
        emit Transfer(from, to, value);
    }


    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool) {
        return _authorizationStates[authorizer][nonce];
    }

    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        bytes32 digest =
            _authorizationDigest(TRANSFER_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce);
        require(_recover(digest, v, r, s) == from, "invalid signature");
        _useAuthorization(from, to, value, nonce);
    }

    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        bytes32 digest =
            _authorizationDigest(TRANSFER_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce);
        _requireSignature(from, digest, signature);
        _useAuthorization(from, to, value, nonce);
    }

    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        require(to == msg.sender, "caller must be the payee");
        bytes32 digest =
            _authorizationDigest(RECEIVE_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce);
        require(_recover(digest, v, r, s) == from, "invalid signature");
        _useAuthorization(from, to, value, nonce);
    }

    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        require(to == msg.sender, "caller must be the payee");
        bytes32 digest =
            _authorizationDigest(RECEIVE_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce);
        _requireSignature(from, digest, signature);
        _useAuthorization(from, to, value, nonce);
    }

    function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s) external {
        bytes32 digest = _cancelDigest(authorizer, nonce);
        require(_recover(digest, v, r, s) == authorizer, "invalid signature");
        _cancel(authorizer, nonce);
    }

    function cancelAuthorization(address authorizer, bytes32 nonce, bytes memory signature) external {
        bytes32 digest = _cancelDigest(authorizer, nonce);
        _requireSignature(authorizer, digest, signature);
        _cancel(authorizer, nonce);
    }

    function _authorizationDigest(
        bytes32 typehash,
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce
    ) private view returns (bytes32) {
        require(block.timestamp > validAfter, "authorization is not yet valid");
        require(block.timestamp < validBefore, "authorization is expired");
        require(!_authorizationStates[from][nonce], "authorization is used or canceled");
        return _digest(keccak256(abi.encode(typehash, from, to, value, validAfter, validBefore, nonce)));
    }

    function _useAuthorization(address from, address to, uint256 value, bytes32 nonce) private {
        _authorizationStates[from][nonce] = true;
        emit AuthorizationUsed(from, nonce);
        _transfer(from, to, value);
    }

    function _cancelDigest(address authorizer, bytes32 nonce) private view returns (bytes32) {
        require(!_authorizationStates[authorizer][nonce], "authorization is used or canceled");
        return _digest(keccak256(abi.encode(CANCEL_AUTHORIZATION_TYPEHASH, authorizer, nonce)));
    }

    function _cancel(address authorizer, bytes32 nonce) private {
        _authorizationStates[authorizer][nonce] = true;
        emit AuthorizationCanceled(authorizer, nonce);
    }

    function _digest(bytes32 structHash) private view returns (bytes32) {
        return keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash));
    }

    /// @dev The signer of `digest`; reverts on malformed or malleable (high-s) signatures instead
    ///      of returning the zero address.
    function _recover(bytes32 digest, uint8 v, bytes32 r, bytes32 s) private pure returns (address) {
        require(uint256(s) <= _HALF_ORDER, "invalid signature");
        require(v == 27 || v == 28, "invalid signature");
        address signer = ecrecover(digest, v, r, s);
        require(signer != address(0), "invalid signature");
        return signer;
    }

    /// @dev Reverts with "invalid signature" unless `signature` is `signer`'s over `digest`: for a
    ///      signer with code, its EIP-1271 `isValidSignature(digest, signature)` must return the
    ///      magic value (a revert, out-of-gas or other answer is a refusal); for a key, the 65-byte
    ///      `r || s || v` must recover to it.
    function _requireSignature(address signer, bytes32 digest, bytes memory signature) private view {
        if (signer.code.length == 0) {
            (uint8 v, bytes32 r, bytes32 s) = _split(signature);
            require(_recover(digest, v, r, s) == signer, "invalid signature");
            return;
        }
        (bool ok, bytes memory answer) =
            signer.staticcall(abi.encodeWithSelector(_ERC1271_MAGIC, digest, signature));
        require(ok && answer.length >= 32 && bytes4(bytes32(answer)) == _ERC1271_MAGIC, "invalid signature");
    }

    function _split(bytes memory signature) private pure returns (uint8 v, bytes32 r, bytes32 s) {
        require(signature.length == 65, "invalid signature");
        assembly {
            r := mload(add(signature, 0x20))
            s := mload(add(signature, 0x40))
            v := byte(0, mload(add(signature, 0x60)))
        }
        if (v < 27) {
            v += 27;
        }
    }
}
